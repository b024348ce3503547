"""``search.run.first_fitting``: the plain scan's answer, memoised per problem."""

from __future__ import annotations

import pytest

from constraints import check
from costmodel.specs import get_gpu, get_model
from search import SearchProblem, build_space
from search import run as search_run
from search.run import _memory_friendly_first, first_fitting


def _problem(model: str, gpu: str, num_gpus: int, batch: int = 64, margin: float = 0.0) -> SearchProblem:
    return SearchProblem(model=get_model(model), gpu=get_gpu(gpu), num_gpus=num_gpus, global_batch_size=batch,
                         seq_length=4096, memory_margin=margin)


def _reference(problem: SearchProblem) -> object:
    """The plain scan: every strategy through ``check`` in the memory-friendly order."""
    for strategy in sorted(build_space(problem), key=_memory_friendly_first):
        if check(problem.run(strategy), problem.memory_margin).fits:
            return strategy
    return None


@pytest.mark.parametrize(("model", "gpu", "num_gpus", "margin"), [
    ("llama3.1-70b", "a100-sxm4-40gb", 16, 0.0),   # nothing fits: every strategy screened
    ("llama3.1-70b", "a100-sxm4-40gb", 64, 0.0),   # fits: the first of the order
    ("llama3.1-8b", "h100-sxm5-80gb", 8, 0.3),     # a margin moves the budget
])
def test_first_fitting_is_the_plain_scans_answer(model: str, gpu: str, num_gpus: int, margin: float) -> None:
    problem = _problem(model, gpu, num_gpus, margin=margin)
    search_run._FIRST_FITTING.clear()
    found = first_fitting(problem)
    expected = _reference(problem)
    assert (found.strategy if found is not None else None) == expected
    if found is not None:
        verdict = check(problem.run(found.strategy), margin)
        assert found.peak_memory_gib == verdict.peak_memory_gib and found.feasible


def test_first_fitting_is_memoised_per_problem() -> None:
    problem = _problem("llama3.1-70b", "a100-sxm4-40gb", 16)
    search_run._FIRST_FITTING.clear()
    first_fitting(problem)
    assert problem in search_run._FIRST_FITTING
    search_run._FIRST_FITTING[problem] = "remembered"  # type: ignore[assignment]
    assert first_fitting(problem) == "remembered"
    search_run._FIRST_FITTING.clear()
