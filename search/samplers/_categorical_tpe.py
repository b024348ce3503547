"""Optuna's categorical Parzen estimator as tables: its distinct kernel rows made once, candidates drawn and
densities taken by looking rows up, bit for bit as Optuna's ``_ParzenEstimator`` over categorical parameters.

``search.samplers._memo_tpe`` samples with it where that is Optuna's arithmetic (its module docstring says
when, and why the values are the same).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from optuna.samplers._tpe import sampler as _tpe
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False  # shared by every later sampling: never changed in place
    return array


class _KernelRows(NamedTuple):
    """One categorical parameter's distinct kernel rows, as Optuna's estimator would hold them.

    Row ``c < n_choices`` is an observation of choice ``c``, row ``n_choices`` the prior; with no
    observations the one row is Optuna's uniform kernel.
    """

    cumulative: np.ndarray  # cumsum along the choices, last column 1, as _MixtureOfProductDistribution.sample
    log_by_choice: np.ndarray  # log of the rows, as _MixtureOfProductDistribution.log_pdf takes them, transposed


@functools.lru_cache(maxsize=4096)
def _categorical_kernels(n_observations: int, n_choices: int, prior_weight: float) -> _KernelRows:
    """The kernel rows of ``_ParzenEstimator._calculate_categorical_distributions``, made with its operations.

    Each of Optuna's rows is ``prior_weight / n_kernels`` plus 1 at the observed choice (none for the
    prior), divided by its sum along the choices: the same values in a row of the same length give the
    same sum, so a row here equals, bit for bit, every row of Optuna's matrix with that choice.
    """
    if n_observations == 0:
        rows = np.full((1, n_choices), fill_value=1.0 / n_choices)
    else:
        n_kernels = n_observations + 1  # +1 for the prior, as Optuna counts them
        rows = np.full((n_choices + 1, n_choices), fill_value=prior_weight / n_kernels)
        rows[np.arange(n_choices), np.arange(n_choices)] += 1
        row_sums = rows.sum(axis=1, keepdims=True)
        rows /= np.where(row_sums == 0, 1, row_sums)
    # A cumsum runs along each row on its own, and log is elementwise: a row's results are its own.
    cumulative = np.cumsum(rows, axis=-1)
    assert np.isclose(cumulative[:, -1], 1).all()  # Optuna's check when it samples
    cumulative[:, -1] = 1  # Optuna's guard against rounding
    return _KernelRows(_frozen(cumulative), _frozen(np.ascontiguousarray(np.log(rows).T)))


@functools.lru_cache(maxsize=1024)
def _mixture_weights(n_observations: int, prior_weight: float) -> tuple[np.ndarray, np.ndarray]:
    """``_ParzenEstimator.__init__``'s component weights for ``n_observations`` (``default_weights``, then
    the prior), and ``np.log`` of them as ``_MixtureOfProductDistribution.log_pdf`` adds them."""
    if n_observations == 0:
        weights = np.array([1.0])
    else:
        weights = _ParzenEstimator._call_weights_func(_tpe.default_weights, n_observations)  # noqa: SLF001
        weights = np.append(weights, [prior_weight])
    weights /= weights.sum()
    return _frozen(weights), _frozen(np.log(weights[np.newaxis]))


class CategoricalParzenEstimator(NamedTuple):
    """Optuna's ``_ParzenEstimator`` over categorical parameters only, its kernels looked up by row.

    ``components[i, k]`` is the row of ``kernels[i]`` that mixture component ``k`` uses for parameter
    ``i``: an observation's choice index, or the prior's row last. Candidates are choice indices, a row
    per parameter (Optuna's are a column per parameter: the values are the same).
    """

    weights: np.ndarray
    log_weights: np.ndarray
    kernels: list[_KernelRows]
    components: np.ndarray

    @classmethod
    def fit(cls, observed: np.ndarray, n_choices: Sequence[int], prior_weight: float) -> CategoricalParzenEstimator:
        """From ``observed``: the kept trials' choice indices, a column each in Optuna's order of the trials."""
        n_observations = observed.shape[1]
        components = np.zeros((len(n_choices), n_observations + 1), dtype=np.int64)  # one kernel if none
        if n_observations:
            components[:, :-1] = observed
            components[:, -1] = n_choices
        kernels = [_categorical_kernels(n_observations, n, prior_weight) for n in n_choices]
        return cls(*_mixture_weights(n_observations, prior_weight), kernels, components)

    def sample(self, rng: np.random.RandomState, size: int) -> np.ndarray:
        """``size`` candidates, drawing from ``rng`` exactly as ``_MixtureOfProductDistribution.sample``."""
        active = self.components.take(rng.choice(len(self.weights), p=self.weights, size=size), axis=1)
        picked = np.empty((len(self.kernels), size), dtype=np.int64)
        for i, kernel in enumerate(self.kernels):
            quantile = rng.rand(size)
            picked[i] = (kernel.cumulative.take(active[i], axis=0) < quantile[:, np.newaxis]).sum(axis=-1)
        return picked

    def log_pdf(self, picked: np.ndarray) -> np.ndarray:
        """The mixture's log density at each candidate, as ``_MixtureOfProductDistribution.log_pdf``.

        Optuna's (candidate, component) sums are the same elementwise additions in the same order: from
        0, a parameter at a time, then the log weights; starting from the first parameter's terms is the
        same, as ``0.0 + x == x`` for every ``x`` but -0.0, and no log of a probability below 1 is -0.0.
        Optuna's guards against a component maximum of -inf (and a warning for log(0)) never act here:
        with ``prior_weight > 0`` every kernel probability and mixture weight is positive, so every term
        and maximum is finite and every sum of exponentials at least 1. The reductions along a row are
        Optuna's, on arrays of the same shape and layout.
        """
        terms = (kernel.log_by_choice.take(row, axis=0).take(components, axis=1)
                 for kernel, row, components in zip(self.kernels, picked, self.components))
        weighted_log_pdf = next(terms)  # a new array: the sums go into it
        for term in terms:
            weighted_log_pdf += term
        weighted_log_pdf += self.log_weights
        max_ = weighted_log_pdf.max(axis=1)
        return np.log(np.exp(weighted_log_pdf - max_[:, None]).sum(axis=1)) + max_
