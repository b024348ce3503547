"""Small search problems and an analytic-only timer, so search tests need no fitted profile."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from costmodel.specs import get_gpu, get_model
from costmodel.timing import OperatorTimer
from search import Evaluator, SearchProblem


def small_problem(num_gpus: int = 16, **kwargs: object) -> SearchProblem:
    """llama3.1-8b on H100s, batch 64 x 4096."""
    args: dict[str, object] = {"model": get_model("llama3.1-8b"), "gpu": get_gpu("h100-sxm5-80gb"),
                               "num_gpus": num_gpus, "global_batch_size": 64, "seq_length": 4096}
    args.update(kwargs)
    return SearchProblem(**args)  # type: ignore[arg-type]


def analytic_timer(problem: SearchProblem) -> OperatorTimer:
    """Roofline and analytic models only: deterministic and instant (no profile fitting)."""
    return OperatorTimer(problem.gpu, None)


def analytic_evaluator(problem: SearchProblem) -> Evaluator:
    return Evaluator(problem, timer=analytic_timer(problem))


@pytest.fixture
def problem() -> SearchProblem:
    return small_problem()


@pytest.fixture
def evaluator(problem: SearchProblem) -> Evaluator:
    return analytic_evaluator(problem)


@pytest.fixture
def analytic_search_timer(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make every search (CLI included) use the analytic timer."""
    import search.objective
    import search.result

    def timer(gpu: object, profile_dir: object = None) -> OperatorTimer:
        return OperatorTimer(gpu, None)  # type: ignore[arg-type]

    monkeypatch.setattr(search.objective, "search_timer", timer)
    monkeypatch.setattr(search.result, "search_timer", timer)
    yield
