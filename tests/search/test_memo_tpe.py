"""The split-memoised TPE sampler proposes exactly what Optuna's stock TPESampler proposes."""

from __future__ import annotations

import gc
import warnings
import weakref

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from search.samplers import TPESearcher, _tpe
from search.samplers._memo_tpe import _MEMOS, SplitMemoTPESampler
from search.samplers._optuna import HistorySeededSampler
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


def _conditional_study(sampler: optuna.samplers.BaseSampler, n_trials: int = 40) -> list[dict[str, object]]:
    """A study with conditional parameters (several groups), infeasible trials and a pruned one."""
    study = optuna.create_study(sampler=sampler)
    for number in range(n_trials):
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


def test_split_runs_once_per_trial_not_once_per_group(monkeypatch: pytest.MonkeyPatch) -> None:
    from optuna.samplers._tpe import sampler as tpe_module

    calls = {"split": 0, "sample": 0}
    split, sample = tpe_module._split_trials, SplitMemoTPESampler._sample

    def counted_split(*args: object) -> object:
        calls["split"] += 1
        return split(*args)

    def counted_sample(self: object, *args: object) -> object:
        calls["sample"] += 1
        return sample(self, *args)

    monkeypatch.setattr(tpe_module, "_split_trials", counted_split)
    monkeypatch.setattr(SplitMemoTPESampler, "_sample", counted_sample)
    kwargs = {"seed": 11, "n_startup_trials": 5, "multivariate": True, "group": True}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        _conditional_study(SplitMemoTPESampler(**kwargs))
    assert tpe_module._split_trials is counted_split  # restored after every sampling
    assert 0 < calls["split"] < calls["sample"]  # several groups per trial share one split


def _tpe_kwargs(seed: int) -> dict[str, object]:
    return {"seed": seed, "n_startup_trials": 5, "multivariate": True, "group": True}


def test_fresh_sampler_per_trial_equals_stock_over_many_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    # HistorySeededSampler without a reseed makes a new inner sampler for every trial: the cache must outlive it.
    rows: list[tuple[object, ...]] = []
    internal_row = SplitMemoTPESampler._internal_row

    def counted_row(self: SplitMemoTPESampler, trial: optuna.trial.FrozenTrial, space: dict[str, object],
                    study: object) -> object:
        rows.append((tuple(space.items()), trial.number))
        return internal_row(self, trial, space, study)

    monkeypatch.setattr(SplitMemoTPESampler, "_internal_row", counted_row)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        ours = _conditional_study(HistorySeededSampler(lambda s: SplitMemoTPESampler(**_tpe_kwargs(s)), 3), 150)
        theirs = _conditional_study(HistorySeededSampler(lambda s: optuna.samplers.TPESampler(**_tpe_kwargs(s)), 3),
                                    150)
    assert ours == theirs
    assert len(set(map(str, ours))) > 20  # TPE proposed a variety, not one point
    # Each finished trial's representation was computed once per search space, not once per trial sampled.
    assert len(rows) == len(set(rows))
    assert len({number for _, number in rows}) > 100


def _assert_same_arrays(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> None:
    assert list(ours) == list(theirs)
    for name in theirs:
        assert ours[name].dtype == theirs[name].dtype, name
        assert ours[name].shape == theirs[name].shape, name
        assert np.array_equal(ours[name], theirs[name]), name


def _fixed_study(a: list[int], x: list[float]) -> optuna.Study:
    """Complete trials numbered alike in every such study; trial 1 lacks ``x`` (Optuna leaves it out)."""
    study = optuna.create_study()
    for number, (a_i, x_i) in enumerate(zip(a, x)):
        params: dict[str, object] = {"a": a_i, "n": number % 3}
        distributions: dict[str, object] = {"a": CategoricalDistribution([1, 2, 4, 8]),
                                            "n": IntDistribution(0, 2)}
        if number != 1:
            params["x"], distributions["x"] = x_i, FloatDistribution(0.0, 10.0)
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=float(number)))
    return study


def test_cached_representation_is_never_served_for_another_study_or_distribution() -> None:
    sampler = SplitMemoTPESampler(seed=0)
    stock = optuna.samplers.TPESampler._get_internal_repr
    space = {"a": CategoricalDistribution([1, 2, 4, 8]), "x": FloatDistribution(0.0, 10.0),
             "n": IntDistribution(0, 2)}
    first = _fixed_study([1, 2, 4, 8], [0.5, 1.5, 2.5, 3.5])
    other = _fixed_study([8, 4, 2, 1], [9.5, 8.5, 7.5, 6.5])  # the same trial numbers and distributions
    for study in (first, other, first):
        trials = study.get_trials(deepcopy=False)
        _assert_same_arrays(sampler._get_internal_repr(trials, space, study), stock(sampler, trials, space, study))
        # Another subset of the same trials, as the below/above splits pass.
        _assert_same_arrays(sampler._get_internal_repr(trials[::-2], space, study),
                            stock(sampler, trials[::-2], space, study))
    ours = sampler._get_internal_repr(other.get_trials(deepcopy=False), space, other)
    assert ours["a"].tolist() == [3, 1, 0] and ours["a"].dtype == np.int64  # trial 1, without x, left out
    # The same parameter under other choices (another search space) has other internal values.
    reordered = dict(space, a=CategoricalDistribution([8, 4, 2, 1]))
    trials = first.get_trials(deepcopy=False)
    _assert_same_arrays(sampler._get_internal_repr(trials, reordered, first), stock(sampler, trials, reordered, first))
    assert sampler._get_internal_repr(trials, space, first)["a"].tolist() == [0, 2, 3]
    assert sampler._get_internal_repr(trials, reordered, first)["a"].tolist() == [3, 1, 0]


def test_running_trial_is_not_cached_and_memo_goes_with_its_study() -> None:
    sampler = SplitMemoTPESampler(seed=0)
    stock = optuna.samplers.TPESampler._get_internal_repr
    study = _fixed_study([1, 2, 4], [0.5, 1.5, 2.5])
    running = study.ask()
    running.suggest_categorical("a", [1, 2, 4, 8])
    space = {"a": CategoricalDistribution([1, 2, 4, 8]), "n": IntDistribution(0, 2)}
    for _ in range(2):  # the running trial lacks n at first (left out), then has it
        trials = study.get_trials(deepcopy=False)
        _assert_same_arrays(sampler._get_internal_repr(trials, space, study), stock(sampler, trials, space, study))
        running.suggest_int("n", 0, 2)
    assert len(sampler._get_internal_repr(study.get_trials(deepcopy=False), space, study)["a"]) == 4
    # The memo holds its study weakly: nothing of it outlives the study.
    gone = weakref.ref(study)
    assert study in _MEMOS
    del study, running, trials
    gc.collect()
    assert gone() is None
