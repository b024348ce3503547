"""Budgets: GPU-count ranges, days and cost per count, the cheapest count meeting a deadline."""

from __future__ import annotations

import pytest

from costmodel.specs import Strategy
from costmodel.specs.errors import SpecError
from search import Budget, Evaluation, SearchResult, gpu_counts, plan_counts
from tests.search.conftest import small_problem


def test_gpu_counts_are_powers_of_two_in_whole_nodes() -> None:
    assert gpu_counts(1024, 8) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert gpu_counts(768, 8)[-2:] == [512, 768]
    assert gpu_counts(64, 8, min_gpus=16) == [16, 32, 64]


def test_deadline_needs_a_token_count() -> None:
    with pytest.raises(SpecError, match="tokens"):
        Budget(deadline_days=30)


def _fake_search(step_time_by_count: dict[int, float | None]):  # type: ignore[no-untyped-def]
    """A search that returns one evaluation with a chosen step time per GPU count."""
    def search(problem):  # type: ignore[no-untyped-def]
        t = step_time_by_count[problem.num_gpus]
        s = Strategy(dp=problem.num_gpus, global_batch_size=problem.global_batch_size)
        e = Evaluation(s, (), 10.0, 70.0, t, 1.0, 0.4) if t is not None else \
            Evaluation(s, ("needs 99.0 GiB per GPU on pipeline stage 0, 70.0 GiB usable on x",), 99.0, 70.0)
        return SearchResult(problem=problem, evaluations=(e,), sampler="fake", objective="time", elapsed_s=0.0)
    return search


def test_days_and_cost_follow_the_step_time() -> None:
    problem = small_problem(8)  # 64 x 4096 = 262144 tokens per step
    budget = Budget(tokens=262144 * 86400, price_per_gpu_hour=2.0)  # one step per second -> one day
    plan = plan_counts(problem, [8], budget, _fake_search({8: 1.0}))
    row = plan.rows[0]
    assert row.days == pytest.approx(1.0)
    assert row.cost == pytest.approx(24 * 8 * 2.0)
    assert row.gpu_hours_per_million_tokens == pytest.approx(8 / 262144 * 1e6 / 3600)


def test_deadline_picks_the_cheapest_count_that_meets_it() -> None:
    problem = small_problem(8)
    tokens = 262144 * 86400 * 10  # 10 days at one step per second
    times = {8: 3.5, 16: 1.9, 32: 1.0, 64: 0.6}  # 35, 19, 10 and 6 days
    plan = plan_counts(problem, list(times), Budget(tokens=tokens, deadline_days=20, price_per_gpu_hour=1.0),
                       _fake_search(times))
    assert plan.fastest is not None and plan.fastest.num_gpus == 64
    assert plan.cheapest is not None and plan.cheapest.num_gpus == 8  # 8 x 3.5 is the fewest GPU-seconds per step
    within = plan.cheapest_within_deadline
    assert within is not None and within.num_gpus == 16  # 16 x 1.9 < 32 x 1.0 < 64 x 0.6
    assert plan.recommended().num_gpus == 16  # type: ignore[union-attr]
    assert [r.meets_deadline for r in plan.rows] == [False, True, True, True]


def test_counts_where_nothing_fits_are_listed_as_such() -> None:
    plan = plan_counts(small_problem(8), [8, 16], Budget(), _fake_search({8: None, 16: 2.0}))
    assert [r.step_time_s for r in plan.rows] == [None, 2.0]
    assert plan.to_json()["counts"][0]["feasible"] is False
    assert plan.fastest is not None and plan.fastest.num_gpus == 16
