"""``SearchProblem.memory_margin`` / ``parplan search --memory-margin``: a pick must leave that much memory free."""

from __future__ import annotations

import argparse
import json

import pytest

from constraints.oom import default_memory_margin
from costmodel.specs.errors import SpecError
from parplan import cli_search
from search import build_space
from search.objective import Evaluation
from studies.problems import expand
from studies.spec import study_from_mapping
from tests.search.conftest import analytic_evaluator, small_problem
from tests.studies.conftest import TINY


def _feasible() -> list[Evaluation]:
    evaluator = analytic_evaluator(small_problem(num_gpus=8))
    return [e for e in evaluator.evaluate_many(build_space(evaluator.problem)) if e.feasible]


def _near_the_limit() -> tuple[Evaluation, float]:
    """A legal strategy of the small problem that fits with less than 10% of usable memory free."""
    for e in _feasible():
        share = e.headroom_gib / e.usable_memory_gib
        if 0.01 < share < 0.10:
            return e, share
    raise AssertionError("no strategy of the small problem fits with 1-10% headroom")


def test_a_larger_margin_removes_a_near_the_limit_strategy() -> None:
    near, share = _near_the_limit()
    strict = analytic_evaluator(small_problem(num_gpus=8, memory_margin=share + 0.02)).evaluate(near.strategy)
    assert not strict.feasible
    assert strict.reason.startswith("needs ") and "memory margin" in strict.reason
    assert strict.violation > 0  # Optuna must rank it infeasible although it is under the usable memory
    assert strict.headroom_gib == pytest.approx(near.headroom_gib)
    loose = analytic_evaluator(small_problem(num_gpus=8, memory_margin=share - 0.005)).evaluate(near.strategy)
    assert loose.feasible


def test_oom_probability_falls_with_headroom() -> None:
    near, _ = _near_the_limit()
    roomy = max(_feasible(), key=lambda e: e.headroom_gib)
    assert roomy.headroom_gib > near.headroom_gib
    assert 0.0 <= roomy.oom_probability < near.oom_probability < 0.5
    row = near.to_dict()
    assert row["headroom_gib"] == pytest.approx(near.headroom_gib)
    assert row["oom_probability"] == pytest.approx(near.oom_probability)


@pytest.mark.parametrize("margin", [-0.1, 0.95, float("nan"), "0.1"])
def test_a_bad_margin_is_a_spec_error(margin: object) -> None:
    with pytest.raises(SpecError, match="memory_margin"):
        small_problem(memory_margin=margin)


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="parplan")
    cli_search.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["search", *argv])
    return int(args.func(args))


SMALL = ["--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--global-batch-size", "64",
         "--seq-length", "4096", "--trials", "30"]


def test_cli_default_margin_and_json_headroom(analytic_search_timer,  # type: ignore[no-untyped-def]
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert _run([*SMALL, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["problem"]["memory_margin"] == pytest.approx(default_memory_margin())
    for row in out["top"]:
        assert row["headroom_gib"] >= default_memory_margin() * row["usable_memory_gib"] - 1e-9
        assert 0.0 <= row["oom_probability"] < 0.5
    assert "oom_probability" in out["best"]["prediction"]


def test_cli_margin_keeps_every_pick_that_far_from_the_limit(analytic_search_timer,  # type: ignore[no-untyped-def]
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert _run([*SMALL, "--memory-margin", "0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["top"] and all(r["headroom_gib"] >= 0.5 * r["usable_memory_gib"] for r in out["top"])


def test_cli_human_table_shows_headroom(analytic_search_timer,  # type: ignore[no-untyped-def]
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert _run([*SMALL, "--memory-margin", "0.1"]) == 0
    text = capsys.readouterr().out
    assert "headroom GiB" in text and "P(OOM)" in text and "at least 10.0% of usable memory" in text


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "x"])
def test_cli_bad_margin_exits_2(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _run([*SMALL, "--memory-margin", value])
    assert exc.value.code == 2
    assert "--memory-margin" in capsys.readouterr().err


def test_study_search_memory_margin_reaches_each_problem() -> None:
    spec = study_from_mapping({**TINY, "search": {**TINY["search"], "memory_margin": 0.25}})
    assert spec.search.memory_margin == 0.25
    assert all(p.search_problem().memory_margin == 0.25 for p in expand(spec, check_profile=False))
    plain = study_from_mapping(TINY)
    assert "memory_margin" not in plain.search.to_dict()  # stored keys of older studies do not change
    with pytest.raises(SpecError, match="search.memory_margin"):
        study_from_mapping({**TINY, "search": {**TINY["search"], "memory_margin": 2}})
