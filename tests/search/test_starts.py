"""A search from a run spec tries the run's own strategy first, and says when nothing beats it."""

from __future__ import annotations

from search.run import run_search
from search.space import build_space
from tests.search.conftest import analytic_evaluator, small_problem


def _slowest_legal(problem):  # a strategy TPE would not reach in a few trials
    evaluator = analytic_evaluator(problem)
    fitting = [e for e in evaluator.evaluate_many(list(build_space(problem))[:400]) if e.feasible]
    return max(fitting, key=lambda e: e.step_time_s).strategy, evaluator


def test_tpe_tries_the_start_first() -> None:
    problem = small_problem()
    start, evaluator = _slowest_legal(problem)
    result = run_search(problem, n_trials=12, seed=3, evaluator=evaluator, starts=(start,))
    assert result.evaluations[0].strategy == start
    assert len(result.evaluations) == 12  # the start counts among the trials
    without = run_search(problem, n_trials=12, seed=3, evaluator=evaluator)
    assert without.evaluations[0].strategy != start


def test_a_start_outside_the_space_is_ignored() -> None:
    problem = small_problem()
    start, evaluator = _slowest_legal(problem)
    other = small_problem(num_gpus=32)  # the start's layout spans 16 GPUs: not in this space
    result = run_search(other, n_trials=8, seed=3, starts=(start,), evaluator=analytic_evaluator(other))
    assert start not in {e.strategy for e in result.evaluations}
    assert len(result.evaluations) == 8


def test_best_is_never_slower_than_a_start_in_the_space() -> None:
    problem = small_problem()
    evaluator = analytic_evaluator(problem)
    fitting = [e for e in evaluator.evaluate_many(list(build_space(problem))[:400]) if e.feasible]
    good = min(fitting, key=lambda e: e.step_time_s)
    result = run_search(problem, n_trials=6, seed=3, evaluator=evaluator, starts=(good.strategy,))
    assert result.best.step_time_s <= good.step_time_s
    assert good.strategy in {e.strategy for e in result.evaluations}


def test_baseline_line_says_keep_it_when_nothing_found_is_faster() -> None:
    from parplan.cli_search import _baseline_line

    slower = {"label": "tp1 dp8", "step_time_s": 1.0, "speedup": 0.8, "violations": []}
    faster = {**slower, "speedup": 1.25}
    assert "keep it" in _baseline_line(slower) and "1.25x as fast as the best" in _baseline_line(slower)
    assert "the best is 1.25x as fast" in _baseline_line(faster) and "keep it" not in _baseline_line(faster)
