"""``search.run``: the lazy memory-friendly order equals the sorted space, and an infeasible problem's
whole-space sweep answers ``first_fitting`` for it (both change no explanation, only its cost)."""

from __future__ import annotations

import pytest

from costmodel.specs import get_gpu, get_model
from costmodel.specs.framework import get_framework
from search import SearchProblem, build_space, explain_infeasible, run_search
from search import run as search_run
from search.run import _memory_friendly_first, _memory_friendly_pairs, first_fitting
from tests.search.conftest import analytic_evaluator


def _problem(model: str, num_gpus: int, gpu: str = "h100-sxm5-80gb", **kwargs: object) -> SearchProblem:
    args: dict[str, object] = {"model": get_model(model), "gpu": get_gpu(gpu), "num_gpus": num_gpus,
                               "global_batch_size": 32, "seq_length": 4096}
    args.update(kwargs)
    return SearchProblem(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize("problem", [
    _problem("llama3.1-8b", 16),
    _problem("llama3.1-70b", 64, gpu="a100-sxm4-40gb"),
    # MoE on Megatron-Core: settings that conflict with a layout (full recompute under a2a overlap) are skipped
    _problem("mixtral-8x7b", 16, max_cp=1, max_vpp=2, max_micro_batch_size=1,
             framework=get_framework("megatron-core")),
    # a framework without ZeRO 2/3 under pipelining: zero stages conflict with pp > 1
    _problem("llama3.1-8b", 16, framework=get_framework("torchtitan")),
], ids=["dense-8b", "dense-70b-a100", "moe-megatron-core", "torchtitan"])
def test_lazy_order_is_the_sorted_space(problem: SearchProblem) -> None:
    space = build_space(problem)
    make = space.strategy_maker()
    lazy = [make(*pair) for pair in _memory_friendly_pairs(space)]
    assert lazy == sorted(space, key=_memory_friendly_first)
    assert len(lazy) == space.size > 100


def test_infeasible_sweep_answers_first_fitting_without_another_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = _problem("llama3.1-70b", 16, gpu="a100-sxm4-40gb", global_batch_size=64)  # nothing fits
    search_run._FIRST_FITTING.clear()
    result = run_search(problem, n_trials=10, evaluator=analytic_evaluator(problem))
    why = explain_infeasible(result, limit=64)
    assert why.closest is not None and not why.closest.feasible
    assert search_run._FIRST_FITTING[problem] is None
    search_run._FIRST_FITTING.pop(problem)
    assert first_fitting(problem) is None  # the plain scan agrees
    search_run._FIRST_FITTING.clear()


def test_a_problem_whose_search_missed_a_fit_is_not_remembered_as_fitting_nothing() -> None:
    problem = _problem("llama3.1-8b", 8, max_cp=1, max_vpp=1, max_micro_batch_size=1)  # a small space
    search_run._FIRST_FITTING.clear()
    result = run_search(problem, n_trials=5, evaluator=analytic_evaluator(problem))
    missed = type(result)(problem=problem, evaluations=tuple(e for e in result.evaluations if not e.feasible),
                          sampler="tpe", objective="time", elapsed_s=0.0, evaluator=result.evaluator)
    why = explain_infeasible(missed, limit=16)  # as if TPE had found nothing that fits
    assert why.closest is not None and why.closest.feasible
    assert problem not in search_run._FIRST_FITTING
    search_run._FIRST_FITTING.clear()


@pytest.mark.parametrize("problem", [
    _problem("llama3.1-70b", 16, gpu="a100-sxm4-40gb", global_batch_size=64),  # nothing fits
    _problem("llama3.1-8b", 8, max_cp=1, max_vpp=1, max_micro_batch_size=1),  # something fits
], ids=["infeasible", "feasible"])
def test_closest_to_fitting_is_the_least_violating_evaluation_of_the_space(problem: SearchProblem) -> None:
    """The table of the space's pairs gives what evaluating every strategy gives: the first of the least
    (violation, peak memory), with its time where it fits."""
    result = run_search(problem, n_trials=5, evaluator=analytic_evaluator(problem))
    every = analytic_evaluator(problem).evaluate_many(build_space(problem))
    want = min(every, key=lambda e: (e.violation, e.peak_memory_gib))
    assert result.closest_to_fitting() == want
