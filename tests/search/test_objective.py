"""The objective rejects infeasible strategies before timing them and records why (Optuna FixedTrial)."""

from __future__ import annotations

import math

import optuna
import pytest

from costmodel.specs import Strategy, get_model
from costmodel.timing import OperatorTimer
from search import Evaluator, build_space
from search.objective import CONSTRAINT, optuna_objective
from tests.search.conftest import analytic_timer, small_problem


class _NoTiming(OperatorTimer):
    def time_ops(self, ops):  # type: ignore[no-untyped-def]
        raise AssertionError("time predicted for an infeasible strategy")


def _params(space, strategy: Strategy) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {k: getattr(strategy, k) for k, v in space.choices.items() if len(v) > 1}


def test_infeasible_is_rejected_with_its_reason_and_never_timed() -> None:
    problem = small_problem(8, model=get_model("llama3.1-70b"), fixed={"tp": 1, "pp": 1, "cp": 1})
    space = build_space(problem)
    evaluator = Evaluator(problem, timer=_NoTiming(problem.gpu, None))
    strategy = next(iter(space))
    trial = optuna.trial.FixedTrial(_params(space, strategy))
    value = optuna_objective(evaluator, space)(trial)
    assert math.isinf(value)
    assert trial.user_attrs["feasible"] is False
    assert trial.user_attrs["reason"].startswith("needs ")
    assert "GiB usable on h100-sxm5-80gb" in trial.user_attrs["reason"]
    assert trial.constraints[CONSTRAINT] > 100  # GiB over the budget
    assert trial.user_attrs["strategy"]["tp"] == 1


def test_feasible_returns_the_step_time_and_records_it(problem, evaluator) -> None:  # type: ignore[no-untyped-def]
    space = build_space(problem)
    strategy = Strategy(tp=2, pp=1, cp=1, dp=8, micro_batch_size=1, global_batch_size=64, recompute="selective")
    trial = optuna.trial.FixedTrial(_params(space, strategy))
    value = optuna_objective(evaluator, space)(trial)
    assert value == pytest.approx(trial.user_attrs["step_time_s"])
    assert trial.user_attrs["feasible"] is True and trial.user_attrs["reason"] == ""
    assert trial.constraints[CONSTRAINT] <= 0


def test_pareto_objective_returns_time_and_memory(problem, evaluator) -> None:  # type: ignore[no-untyped-def]
    space = build_space(problem)
    trial = optuna.trial.FixedTrial(_params(space, next(iter(space))))
    time_s, memory = optuna_objective(evaluator, space, "pareto")(trial)
    assert memory == pytest.approx(trial.user_attrs["peak_memory_gib"])


def test_evaluations_are_memoised_by_strategy(problem) -> None:  # type: ignore[no-untyped-def]
    calls = []

    class Counting(OperatorTimer):
        def time_ops(self, ops):  # type: ignore[no-untyped-def]
            calls.append(1)
            return super().time_ops(ops)

    evaluator = Evaluator(problem, timer=Counting(problem.gpu, None))
    strategy = Strategy(tp=2, dp=8, global_batch_size=64)
    first = evaluator.evaluate(strategy)
    n = len(calls)
    assert evaluator.evaluate(Strategy(tp=2, dp=8, global_batch_size=64)) is first
    assert len(calls) == n


def test_batched_evaluation_matches_one_by_one(problem) -> None:  # type: ignore[no-untyped-def]
    strategies = list(build_space(problem))[:300]
    batched = Evaluator(problem, timer=analytic_timer(problem)).evaluate_many(strategies)
    single = [Evaluator(problem, timer=analytic_timer(problem)).evaluate(s) for s in strategies]
    assert batched == single
