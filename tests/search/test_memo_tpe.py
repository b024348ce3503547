"""The split-memoised TPE sampler proposes exactly what Optuna's stock TPESampler proposes."""

from __future__ import annotations

import warnings

import optuna
import pytest

from search.samplers import TPESearcher, _tpe
from search.samplers._memo_tpe import SplitMemoTPESampler
from search.space import build_space
from tests.search.conftest import analytic_evaluator, small_problem


def _proposals(n_trials: int, num_gpus: int = 64) -> list[object]:
    problem = small_problem(num_gpus)
    evaluations = TPESearcher(seed=5).search(build_space(problem), analytic_evaluator(problem), n_trials=n_trials)
    return [e.strategy for e in evaluations]


def test_search_proposals_equal_stock_tpe(monkeypatch: pytest.MonkeyPatch) -> None:
    ours = _proposals(80)
    monkeypatch.setattr(_tpe, "SplitMemoTPESampler", optuna.samplers.TPESampler)
    theirs = _proposals(80)
    assert ours == theirs
    assert len(set(ours)) > 25  # TPE ran past its start-up on a space with several parameter groups


def _conditional_study(sampler: optuna.samplers.BaseSampler) -> list[dict[str, object]]:
    """A study with conditional parameters (several groups), infeasible trials and a pruned one."""
    study = optuna.create_study(sampler=sampler)
    for number in range(40):
        trial = study.ask()
        a = trial.suggest_categorical("a", [1, 2, 4, 8])
        b = trial.suggest_categorical("b", ["x", "y", "z"]) if a > 1 else "x"
        c = trial.suggest_categorical("c", [0, 1]) if number % 3 else 0
        trial.set_user_attr("violation", float(a == 8))
        trial.storage.set_trial_system_attr(trial._trial_id, "constraints:violation", float(a == 8))
        if number == 17:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        study.tell(trial, a + {"x": 0.5, "y": 0.0, "z": 1.0}[b] + c)
    return [t.params for t in study.trials]


def test_sampler_equals_stock_on_conditional_pruned_and_infeasible_trials() -> None:
    kwargs = {"seed": 11, "n_startup_trials": 5, "multivariate": True, "group": True}
    with warnings.catch_warnings():  # group=True is experimental in Optuna 5
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        ours = _conditional_study(SplitMemoTPESampler(**kwargs))
        theirs = _conditional_study(optuna.samplers.TPESampler(**kwargs))
    assert ours == theirs


def test_constant_liar_is_refused() -> None:
    with pytest.raises(ValueError, match="constant_liar"):
        SplitMemoTPESampler(constant_liar=True)


def test_split_runs_once_per_trial_not_once_per_group(monkeypatch: pytest.MonkeyPatch) -> None:
    from optuna.samplers._tpe import sampler as tpe_module

    calls = {"split": 0, "sample": 0}
    split, sample = tpe_module._split_trials, optuna.samplers.TPESampler._sample

    def counted_split(*args: object) -> object:
        calls["split"] += 1
        return split(*args)

    def counted_sample(self: object, *args: object) -> object:
        calls["sample"] += 1
        return sample(self, *args)

    monkeypatch.setattr(tpe_module, "_split_trials", counted_split)
    monkeypatch.setattr(optuna.samplers.TPESampler, "_sample", counted_sample)
    kwargs = {"seed": 11, "n_startup_trials": 5, "multivariate": True, "group": True}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        _conditional_study(SplitMemoTPESampler(**kwargs))
    assert tpe_module._split_trials is counted_split  # restored after every sampling
    assert 0 < calls["split"] < calls["sample"]  # several groups per trial share one split
