"""``parplan search --explain``: the best strategy's one-knob alternatives, checked against exhaustive sweeps."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from parplan import cli_search
from search import SearchResult, build_space, run_search
from search.explain import ILLEGAL, searched_knobs
from search.space import KNOBS, LAYOUT_KNOBS, SPLIT_KNOB
from tests.search.conftest import analytic_evaluator, small_problem

EXAMPLE_RUN = Path(__file__).resolve().parents[2] / "studies" / "examples" / "llama3.1-8b-8xh100.yaml"


def _problem():  # type: ignore[no-untyped-def]
    """8B on 8 H100s, small enough to sweep: bf16, at most vpp 2 and micro-batch 4, ZeRO 0 or 1."""
    return small_problem(8, fixed={"precision": "bf16"}, allowed={"zero_stage": (0, 1)}, max_vpp=2,
                         max_micro_batch_size=4)


@cache
def _exhaustive() -> SearchResult:
    problem = _problem()
    return run_search(problem, sampler="exhaustive", evaluator=analytic_evaluator(problem), n_jobs=1)


def test_each_knobs_fastest_alternative_is_the_sweeps_best_with_the_others_held() -> None:
    result = _exhaustive()
    best = result.best
    assert best is not None
    space = build_space(result.problem)
    held = space.knobs_of(best.strategy)
    checked = 0
    for k in result.knob_alternatives():
        # the sweep of this knob: every legal strategy (the exhaustive search evaluated them all) that
        # differs from the best only in it (dp re-derived; sequence parallelism drops with tp = 1)
        sweep = []
        for e in result.feasible:
            knobs = space.knobs_of(e.strategy)
            # etp follows tp on a dense model; dp is derived
            differ = {name for name in knobs if name not in ("dp", "etp") and knobs[name] != held[name]}
            if k.knob == "tp" and knobs["tp"] == 1:
                differ.discard("sequence_parallel")
            if differ == {k.knob}:
                sweep.append(e)
        fastest = min(sweep, key=lambda e: (e.step_time_s, e.peak_memory_gib), default=None)
        if fastest is None:
            assert k.fastest is None, k.knob
            continue
        checked += 1
        assert k.fastest is not None, k.knob
        assert k.fastest.value == space.knobs_of(fastest.strategy)[k.knob]
        assert k.fastest.evaluation.step_time_s == pytest.approx(fastest.step_time_s)  # type: ignore[union-attr]
        assert k.fastest.evaluation.step_time_s >= best.step_time_s  # type: ignore[union-attr,operator]
    assert checked >= 4  # tp, pp, cp, micro_batch_size, recompute, zero_stage... vary on this problem


def test_rejected_values_give_their_reason_and_single_values_say_so() -> None:
    result = _exhaustive()
    lines = result.explain()
    knobs = result.knob_alternatives()
    assert [k.knob for k in knobs] == searched_knobs(result.problem, build_space(result.problem))
    order = [k for k in KNOBS if k in LAYOUT_KNOBS] + [SPLIT_KNOB] + [k for k in KNOBS if k not in LAYOUT_KNOBS]
    assert [k.knob for k in knobs] == sorted((k.knob for k in knobs), key=order.index)
    text = "\n".join(lines)
    for k in knobs:
        for a in k.legal:
            if not a.feasible:
                assert f"{k.knob}={a.value} rejected: {a.reason}".lower() in text.lower()
    assert "precision: bf16 is the only legal value here because it is fixed" in text
    assert "ep: 1 is the only legal value here because the model has no experts" in text
    assert "dp:" not in text  # derived, never a knob of its own


def test_a_faster_alternative_the_search_missed_is_named() -> None:
    full = _exhaustive()
    best = full.best
    assert best is not None
    # a search that only saw a strategy one recompute change away from the true optimum
    near = next(e for e in full.feasible if e.strategy.recompute != best.strategy.recompute
                and e.strategy == replace(best.strategy, recompute=e.strategy.recompute))
    missed = SearchResult(problem=full.problem, evaluations=(near,), sampler="tpe", objective="time", elapsed_s=0.0,
                          evaluator=full.evaluator)
    line = next(line for line in missed.explain() if line.startswith("  recompute:"))
    assert f"next best recompute={best.strategy.recompute}" in line and "the search missed it" in line


@pytest.mark.parametrize("sampler, objective", [("tpe", "time"), ("nsga2", "pareto"), ("exhaustive", "time")])
def test_every_sampler_explains(sampler: str, objective: str) -> None:
    problem = small_problem(8, fixed={"precision": "bf16", "zero_stage": 1, "tp": 1}, max_vpp=1,
                            max_micro_batch_size=2)
    result = run_search(problem, sampler=sampler, objective=objective, n_trials=12,
                        evaluator=analytic_evaluator(problem), n_jobs=1)
    lines = result.explain()
    assert lines[0].startswith("explain:")
    assert any(line.startswith("  recompute:") for line in lines)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="parplan")
    cli_search.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["search", *argv])
    return int(args.func(args))


SMALL = ["--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--global-batch-size", "64",
         "--seq-length", "4096", "--trials", "12", "--fix", "precision=bf16", "--max-vpp", "1",
         "--max-micro-batch-size", "2"]


def test_json_explain_shape_and_default_json_unchanged(analytic_search_timer,  # type: ignore[no-untyped-def]
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli([*SMALL, "--json"]) == 0
    assert "explain" not in json.loads(capsys.readouterr().out)
    assert _cli([*SMALL, "--json", "--explain"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["explain"] and out["why_not"] is not None
    best = out["best"]["strategy"]
    for item in out["explain"]:
        assert {"knob", "best_value", "alternatives"} <= set(item)
        if item["knob"] in best:
            assert item["best_value"] == best[item["knob"]]
        for alt in item["alternatives"]:
            assert set(alt) == {"value", "step_time_s", "peak_memory_gib", "feasible", "reason"}
            assert alt["value"] != item["best_value"]
            assert alt["feasible"] == (alt["reason"] == "")
            assert (alt["step_time_s"] is None) == (alt["reason"] == ILLEGAL or not alt["feasible"])
    assert [i["knob"] for i in out["explain"]][:3] == ["tp", "pp", "cp"]


def test_text_explain_replaces_the_short_why_not_lines(analytic_search_timer,  # type: ignore[no-untyped-def]
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli([*SMALL, "--explain"]) == 0
    text = capsys.readouterr().out
    assert "explain: each knob changed alone" in text and "\n  tp: " in text and "why not" not in text


@pytest.mark.skipif(not EXAMPLE_RUN.exists(), reason="example run spec absent")
def test_explain_from_a_run_spec(analytic_search_timer,  # type: ignore[no-untyped-def]
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli([str(EXAMPLE_RUN), "--trials", "10", "--explain", "--fix", "precision=bf16", "--max-vpp", "1"]) == 0
    text = capsys.readouterr().out
    assert "explain: each knob changed alone" in text and "vs the run spec's strategy" in text


def test_help_mentions_explain(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _cli(["--help"])
    assert "--explain" in capsys.readouterr().out


def test_a_plan_over_gpu_counts_explains_the_chosen_count(analytic_search_timer,  # type: ignore[no-untyped-def]
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a for a in SMALL if a not in ("--gpus", "8")] + ["--gpus", "8,16", "--trials", "8"]
    assert _cli([*argv, "--json", "--explain"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"] and [i["knob"] for i in out["explain"]][:2] == ["tp", "pp"]
