"""SplitMemoTPESampler's categorical path proposes, bit for bit, what Optuna's stock TPESampler proposes."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator, _ParzenEstimatorParameters
from optuna.samplers._tpe.sampler import default_weights
from optuna.trial import TrialState

from search.samplers._categorical_tpe import CategoricalParzenEstimator
from search.samplers._memo_tpe import SplitMemoTPESampler

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _bits(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float64).view(np.int64)


def _estimators(n_observations: int, prior_weight: float = 1.0) -> tuple[_ParzenEstimator, CategoricalParzenEstimator]:
    """Optuna's estimator and ours over the same random observations of 1 to 6 categorical parameters."""
    data = np.random.RandomState(n_observations)
    n_choices = [2, 3, 5, 9, 4, 7][: 1 + n_observations % 6]
    space = {f"p{i}": CategoricalDistribution(list(range(n))) for i, n in enumerate(n_choices)}
    observed = np.array([[data.randint(n) for n in n_choices] for _ in range(n_observations)], dtype=np.int64)
    observed = observed.reshape(n_observations, len(n_choices))
    parameters = _ParzenEstimatorParameters(prior_weight, True, False, default_weights, True)
    stock = _ParzenEstimator({name: observed[:, i] for i, name in enumerate(space)}, space, parameters)
    return stock, CategoricalParzenEstimator.fit(observed.T, n_choices, prior_weight)


_SIZES = [0, 1, 2, 7, 24, 25, 26, 31, 80, 199]


@pytest.mark.parametrize("n_observations", _SIZES)
@pytest.mark.parametrize("prior_weight", [1.0, 0.3])
def test_estimator_samples_and_densities_are_optunas_bit_for_bit(n_observations: int, prior_weight: float) -> None:
    stock, ours = _estimators(n_observations, prior_weight)
    mixture = stock._mixture_distribution
    assert np.array_equal(_bits(ours.weights), _bits(mixture.weights))
    for i, distribution in enumerate(mixture.distributions):  # every kernel row, as Optuna's matrix holds it
        rows = np.cumsum(distribution.weights, axis=-1)
        rows[:, -1] = 1
        assert np.array_equal(_bits(ours.kernels[i].cumulative[ours.components[i]]), _bits(rows))

    stock_rng, our_rng = np.random.RandomState(3), np.random.RandomState(3)
    theirs = stock.sample(stock_rng, 24)
    picked = ours.sample(our_rng, 24)
    assert all(np.array_equal(column, picked[i]) for i, column in enumerate(theirs.values()))
    assert stock_rng.randint(2**31) == our_rng.randint(2**31)  # the generators drew alike
    # Densities at every choice combination, not only the sampled ones.
    n_choices = [kernel.cumulative.shape[1] for kernel in ours.kernels]
    grid = np.array(np.meshgrid(*[np.arange(n) for n in n_choices])).reshape(len(n_choices), -1).T
    assert np.array_equal(_bits(ours.log_pdf(grid.T)),
                          _bits(stock.log_pdf({name: grid[:, i].astype(float) for i, name in enumerate(theirs)})))


class _RecordingGenerator:
    """A RandomState's ``choice`` and ``rand``, each call recorded; ``rand`` may instead return ``quantiles``."""

    def __init__(self, quantiles: np.ndarray | None = None) -> None:
        self._rng, self._quantiles, self.calls = np.random.RandomState(8), quantiles, []

    def choice(self, *args: Any, **kwargs: Any) -> np.ndarray:
        self.calls.append(("choice", args, {k: _bits(np.asarray(v)).tolist() for k, v in kwargs.items()}))
        return self._rng.choice(*args, **kwargs)

    def rand(self, *args: int) -> np.ndarray:
        self.calls.append(("rand", args, {}))
        return self._rng.rand(*args) if self._quantiles is None else np.resize(self._quantiles, args)


@pytest.mark.parametrize("n_observations", _SIZES)
def test_estimator_calls_the_generator_as_optuna_does(n_observations: int) -> None:
    stock, ours = _estimators(n_observations)
    # Quantiles exactly on the kernels' cumulative probabilities: a choice at its boundary is Optuna's too.
    boundaries = np.unique(np.concatenate([np.cumsum(d.weights, axis=-1).ravel()
                                           for d in stock._mixture_distribution.distributions]))
    for quantiles in (None, boundaries):
        stock_rng, our_rng = _RecordingGenerator(quantiles), _RecordingGenerator(quantiles)
        theirs = stock.sample(stock_rng, 24)  # type: ignore[arg-type]
        picked = ours.sample(our_rng, 24)  # type: ignore[arg-type]
        assert our_rng.calls == stock_rng.calls
        assert all(np.array_equal(column, picked[i]) for i, column in enumerate(theirs.values()))


def _sampler(kind: type[optuna.samplers.TPESampler], seed: int, **kwargs: Any) -> optuna.samplers.TPESampler:
    with warnings.catch_warnings():  # group=True is experimental in Optuna 5
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return kind(seed=seed, n_startup_trials=10, multivariate=True, group=True, **kwargs)


def _tell(study: optuna.Study, trial: optuna.Trial, value: float, violation: float) -> None:
    """Complete ``trial`` as our objective does: a constraint, and ``inf`` when infeasible."""
    trial.storage.set_trial_system_attr(trial._trial_id, "constraints:violation", violation)
    study.tell(trial, math.inf if violation > 0 else value)


def _layout_space(trial: optuna.Trial) -> tuple[float, float]:
    """Conditional knobs of mixed types (several groups), failed, pruned and infeasible trials."""
    tp = trial.suggest_categorical("tp", [1, 2, 4, 8])
    pp = trial.suggest_categorical("pp", [1, 2, 4])
    recompute = trial.suggest_categorical("recompute", ["none", "selective", "full"])
    overlap = trial.suggest_categorical("overlap", [True, False])
    value = tp * 0.7 + 3.0 / pp + {"none": 2.0, "selective": 1.0, "full": 1.5}[recompute] - 0.5 * overlap
    if pp > 1:
        vpp = trial.suggest_categorical("vpp", [None, 2, 4])
        value -= 0.3 if vpp is None else 0.1 * vpp
    if tp > 1:
        value += 0.2 * trial.suggest_categorical("sequence_parallel", [False, True])
        value += 0.1 * trial.suggest_categorical("cp_comm_type", ["p2p", "a2a", "allgather"]).__len__()
    trial.suggest_categorical("fixed", ["only"])  # one choice: Optuna never samples it
    return value, float(tp * pp > 16)


def _wide_space(trial: optuna.Trial) -> tuple[float, float]:
    """Many choices per parameter, ties in the objective."""
    a = trial.suggest_categorical("a", list(range(12)))
    b = trial.suggest_categorical("b", [0.5, 1.5, 2.5, "auto", None])
    c = trial.suggest_categorical("c", list(range(7))) if a % 3 else 0
    return float((a - 5) ** 2 // 4 + (b is None) + c % 2), 0.0


# Parameters of the trials each space's study enqueues now and then: some wait in the storage while others run.
_ENQUEUED = {_layout_space: [{"tp": 2}, {"tp": 4, "pp": 2}], _wide_space: [{"a": 3}, {"a": 11}]}


def _run(sampler: optuna.samplers.BaseSampler, space: Callable[[optuna.Trial], tuple[float, float]],
         n_trials: int) -> list[tuple[TrialState, dict[str, Any]]]:
    study = optuna.create_study(sampler=sampler)
    for number in range(n_trials):
        if number % 31 == 3:
            for params in _ENQUEUED[space]:
                study.enqueue_trial(params)
        trial = study.ask()
        value, violation = space(trial)
        if number % 23 == 7:
            study.tell(trial, state=TrialState.FAIL)
        elif number % 17 == 5:
            trial.report(value, step=number % 4)
            study.tell(trial, state=TrialState.PRUNED)
        else:
            _tell(study, trial, value, violation)
    return [(t.state, t.params) for t in study.trials]


@pytest.mark.parametrize("space", [_layout_space, _wide_space])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_categorical_path_proposes_what_stock_tpe_proposes(space: Callable[..., Any], seed: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    theirs_sampler = _sampler(optuna.samplers.TPESampler, seed)
    theirs = _run(theirs_sampler, space, 200)

    def refuse(*args: object) -> None:
        raise AssertionError("Optuna's _sample ran: the categorical path was not taken")

    monkeypatch.setattr(optuna.samplers.TPESampler, "_sample", refuse)
    ours_sampler = _sampler(SplitMemoTPESampler, seed)
    ours = _run(ours_sampler, space, 200)
    assert ours == theirs
    assert len({str(params) for _, params in theirs}) > 40  # TPE proposed a variety, not one point
    # The generator ends in the same state: every draw was Optuna's.
    assert str(ours_sampler._rng.rng.get_state()) == str(theirs_sampler._rng.rng.get_state())


def test_independent_tpe_takes_the_categorical_path_and_matches_stock(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without multivariate, sample_independent asks TPESampler._sample for one parameter at a time.
    theirs = _run(optuna.samplers.TPESampler(seed=9, multivariate=False), _layout_space, 120)
    monkeypatch.setattr(optuna.samplers.TPESampler, "_sample", lambda *args: pytest.fail("Optuna's _sample ran"))
    assert _run(SplitMemoTPESampler(seed=9, multivariate=False), _layout_space, 120) == theirs


def _mixed_space(trial: optuna.Trial) -> tuple[float, float]:
    a = trial.suggest_categorical("a", [1, 2, 4, 8])
    x = trial.suggest_float("x", 0.0, 10.0) if a > 1 else 0.0
    n = trial.suggest_int("n", 0, 4)
    return a + (x - 3.0) ** 2 + n, 0.0


_ENQUEUED[_mixed_space] = [{"a": 2}, {"a": 8}]


def test_numerical_group_falls_back_to_optuna_and_matches_stock(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"stock": 0}
    sample = optuna.samplers.TPESampler._sample

    def counted(self: optuna.samplers.TPESampler, *args: object) -> object:
        calls["stock"] += 1
        return sample(self, *args)

    theirs = _run(_sampler(optuna.samplers.TPESampler, 4), _mixed_space, 80)
    monkeypatch.setattr(optuna.samplers.TPESampler, "_sample", counted)
    calls["stock"] = 0
    ours = _run(_sampler(SplitMemoTPESampler, 4), _mixed_space, 80)
    assert ours == theirs
    assert calls["stock"] > 0  # the groups with x or n went to Optuna


def _multi_objective_run(sampler: optuna.samplers.BaseSampler) -> list[dict[str, Any]]:
    study = optuna.create_study(sampler=sampler, directions=["minimize", "minimize"])
    for _ in range(80):
        trial = study.ask()
        a = trial.suggest_categorical("a", [1, 2, 4, 8])
        b = trial.suggest_categorical("b", ["x", "y", "z"])
        study.tell(trial, (a + len(b), 8 / a))
    return [t.params for t in study.trials]


def test_multi_objective_study_is_left_to_optuna() -> None:
    # Optuna weighs the below trials alike there; with more than 25 below (gamma) its default weights do not.
    with warnings.catch_warnings():  # gamma is deprecated, multivariate with several objectives warns
        warnings.simplefilter("ignore")
        assert (_multi_objective_run(_sampler(SplitMemoTPESampler, 5, gamma=_half))
                == _multi_objective_run(_sampler(optuna.samplers.TPESampler, 5, gamma=_half)))


def _half(n: int) -> int:
    return n // 2


def _liar_run(sampler: optuna.samplers.BaseSampler) -> list[dict[str, Any]]:
    """Two trials running at once every third step: constant liar puts the other one above the split.

    The second fails, so the next trial's finished trials are the numbers the second saw, one of them
    no longer running: a split memoised with a running trial would be served stale.
    """
    study = optuna.create_study(sampler=sampler)
    for step in range(60):
        first = study.ask()
        first_value, _ = _layout_space(first)
        if step % 3 == 0:
            second = study.ask()  # sampled while ``first`` runs
            _layout_space(second)
            study.tell(second, state=TrialState.FAIL)
        _tell(study, first, first_value, 0.0)
    return [t.params for t in study.trials]


@pytest.mark.parametrize("constant_liar", [True, False])
def test_running_trials_get_optunas_proposals(constant_liar: bool) -> None:
    ours = _liar_run(_sampler(SplitMemoTPESampler, 6, constant_liar=constant_liar))
    assert ours == _liar_run(_sampler(optuna.samplers.TPESampler, 6, constant_liar=constant_liar))


def _interleaved_run(sampler: optuna.samplers.BaseSampler) -> list[dict[str, Any]]:
    """Ask/tell interleaved: a trial suggests, another starts and finishes, the first suggests again."""
    study = optuna.create_study(sampler=sampler)
    for _ in range(50):
        first = study.ask()
        tp = first.suggest_categorical("tp", [1, 2, 4, 8])
        second = study.ask()
        _tell(study, second, *_layout_space(second))
        pp = first.suggest_categorical("pp", [1, 2, 4])  # the trials now include ``second``
        _tell(study, first, tp * 0.7 + 3.0 / pp, 0.0)
    return [t.params for t in study.trials]


def test_a_trial_finished_between_two_samplings_of_another_is_seen() -> None:
    # Independent TPE asks TPESampler._sample at each suggest, so ``first`` is sampled before and after
    # ``second`` finishes (constant liar, Optuna's default: ``second`` runs while ``first`` does not sample).
    ours = _interleaved_run(SplitMemoTPESampler(seed=2, multivariate=False, n_startup_trials=5))
    assert ours == _interleaved_run(optuna.samplers.TPESampler(seed=2, multivariate=False, n_startup_trials=5))


def test_a_memoised_infeasibility_score_is_served_only_for_its_trial() -> None:
    from optuna.samplers._tpe import sampler as tpe_module

    from search.samplers._memo_tpe import _memoised_infeasibility

    def finished(violation: float) -> optuna.trial.FrozenTrial:  # numbered alike, as in two studies
        return optuna.trial.create_trial(value=1.0, system_attrs={"constraints:violation": violation})

    score = tpe_module._get_infeasible_trial_score
    infeasible, feasible = finished(2.0), finished(0.0)
    assert infeasible.number == feasible.number
    with _memoised_infeasibility({}):
        memoised = tpe_module._get_infeasible_trial_score
        assert [memoised(infeasible), memoised(feasible), memoised(infeasible)] == [2.0, 0, 2.0]
    assert tpe_module._get_infeasible_trial_score is score
