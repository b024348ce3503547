"""The incremental group-decomposed search space gives TPE exactly the trials Optuna's own gives."""

from __future__ import annotations

import optuna
import pytest
from optuna.search_space.group_decomposed import _GroupDecomposedSearchSpace

from search.samplers import TPESearcher
from search.samplers import _optuna as optuna_glue
from search.samplers._optuna import IncrementalGroupSearchSpace
from search.space import build_space
from tests.search.conftest import analytic_evaluator, small_problem


def _proposals(n_trials: int) -> list[object]:
    problem = small_problem(64)
    evaluations = TPESearcher(seed=3).search(build_space(problem), analytic_evaluator(problem), n_trials=n_trials)
    return [e.strategy for e in evaluations]


def test_tpe_trials_equal_optunas_group_space(monkeypatch: pytest.MonkeyPatch) -> None:
    ours = _proposals(60)
    monkeypatch.setattr(optuna_glue, "IncrementalGroupSearchSpace", lambda: _GroupDecomposedSearchSpace(True))
    theirs = _proposals(60)
    assert ours == theirs
    assert len(set(ours)) > 20  # TPE ran past its random start-up on a varied space


def test_groups_match_optunas_as_trials_arrive_and_for_another_study() -> None:
    study = optuna.create_study()
    ours, stock = IncrementalGroupSearchSpace(), _GroupDecomposedSearchSpace(True)
    for number in range(30):  # conditional parameters: the groups split as trials add and drop knobs
        trial = study.ask()
        trial.suggest_categorical("a", [1, 2])
        if number % 3:
            trial.suggest_categorical("b", [1, 2, 3])
        if number % 4 == 0:
            trial.suggest_categorical("c", ["x", "y"])
        study.tell(trial, float(number))
        if number % 3 == 2:  # several new trials between calls, as when a stored study is resumed
            assert ours.calculate(study).search_spaces == stock.calculate(study).search_spaces
    other = optuna.create_study()
    trial = other.ask()
    trial.suggest_categorical("z", [0, 1])
    other.tell(trial, 0.0)
    assert ours.calculate(other).search_spaces == _GroupDecomposedSearchSpace(True).calculate(other).search_spaces
