"""``--sampler auto`` (``parplan search``'s default): the exhaustive sweep where the space is small, TPE beyond."""

from __future__ import annotations

import json

import pytest

from costmodel.specs import get_gpu, get_model
from costmodel.specs.errors import SpecError
from parplan.cli import main
from search import SearchProblem, build_space, run_search
from search.run import make_searcher, resolve_sampler

SMALL = ["--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--global-batch-size", "32",
         "--seq-length", "4096"]


def _space(num_gpus: int = 8, batch: int = 32):
    problem = SearchProblem(model=get_model("llama3.1-8b"), gpu=get_gpu("h100-sxm5-80gb"), num_gpus=num_gpus,
                            global_batch_size=batch, seq_length=4096)
    return problem, build_space(problem)


def test_auto_sweeps_a_space_within_the_limit_and_searches_a_larger_one() -> None:
    _, space = _space()
    size = space.size
    assert resolve_sampler("auto", space, exhaustive_limit=size) == \
        ("exhaustive", f"auto: the space holds {size:,} strategies (at most {size:,} are swept)")
    sampler, reason = resolve_sampler("auto", space, exhaustive_limit=size - 1)
    assert sampler == "tpe" and "more than" in reason
    assert resolve_sampler("auto", space, "pareto", exhaustive_limit=size - 1)[0] == "nsga2"
    assert resolve_sampler("auto", space, "pareto", exhaustive_limit=size)[0] == "exhaustive"
    sampler, reason = resolve_sampler("auto", space, n_trials=size - 1, exhaustive_limit=size)
    assert sampler == "tpe" and f"a budget of {size - 1} trials" in reason  # a trial budget below the space is kept
    assert resolve_sampler("tpe", space, exhaustive_limit=10**9) == ("tpe", "")  # a named sampler is kept
    assert space.size_at_most(100) > 100 and space.size_at_most(100) < size  # counting stops early


def test_auto_is_resolved_before_a_searcher_is_made() -> None:
    with pytest.raises(SpecError, match="resolved against the space"):
        make_searcher("auto")
    _, space = _space()
    for bad in (-1, 2.5, "9", True):  # the library call gets the CLI's one-line error
        with pytest.raises(SpecError, match="exhaustive_limit"):
            resolve_sampler("auto", space, exhaustive_limit=bad)  # type: ignore[arg-type]
    problem, _ = _space()
    with pytest.raises(SpecError, match="objective"):  # before the space is built, as for a named sampler
        run_search(problem, sampler="auto", objective="speed")


def test_auto_finds_the_exact_optimum_of_a_small_space() -> None:
    problem, space = _space()
    auto = run_search(problem, sampler="auto")
    swept = run_search(problem, sampler="exhaustive")
    assert auto.sampler == "exhaustive" and auto.sampler_reason.startswith("auto: the space holds")
    assert len(auto.distinct) == space.size
    assert auto.best == swept.best


def test_cli_default_reports_the_sampler_it_chose(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", *SMALL, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    _, space = _space()
    assert out["sampler"] == "exhaustive" and out["strategies_evaluated"] == space.size
    assert out["sampler_reason"].startswith("auto: the space holds")
    assert main(["search", *SMALL, "--exhaustive-limit", "100", "--trials", "20"]) == 0
    printed = capsys.readouterr().out
    assert "tpe (auto: the space holds more than 100 strategies, the exhaustive limit)" in printed


def test_exhaustive_limit_refuses_a_negative_count(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["search", *SMALL, "--exhaustive-limit", "-3"])
    assert exit_info.value.code == 2
    assert "--exhaustive-limit" in capsys.readouterr().err


def test_a_sweep_reports_progress_chunk_by_chunk() -> None:
    problem, space = _space()
    seen: list[tuple[int, int | None]] = []
    run_search(problem, sampler="exhaustive", on_trial=lambda done, total: seen.append((done, total)))
    assert len(seen) > 1 and seen[-1] == (space.size, space.size)
    assert all(a[0] < b[0] for a, b in zip(seen, seen[1:]))  # it only moves forward
