"""The contract every operator predictor keeps."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Final

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import ThreadpoolController

# Shapes are clipped into [1, 1e12] so that products of three of them (FLOPs) stay finite;
# no operator of a real model comes near either bound.
_MIN_SIZE: Final = 1.0
_MAX_SIZE: Final = 1e12
# Latencies below this (seconds) are treated as this, so that any target is finite.
_MIN_LATENCY_S: Final = 1e-12
# The fixed per-call cost is estimated as this quantile of the training latencies.
_OVERHEAD_QUANTILE: Final = 0.01
# Fits run on one OpenMP thread: a light sample (a few thousand rows) gains little from more,
# and on a shared, busy machine OpenMP's spinning threads made a 0.45 s histogram-boosting fit
# take 4-15 s (2 cores, load 5-8). The controller is created on first use (it scans the
# loaded libraries once, ~10 ms; each limit then costs ~25 us).
_THREADS: list[ThreadpoolController] = []


def _one_thread() -> Any:
    if not _THREADS:
        _THREADS.append(ThreadpoolController())
    return _THREADS[0].limit(limits=1, user_api="openmp")


class OperatorPredictor(RegressorMixin, BaseEstimator, ABC):
    """Predict one operator family's latency from its shape, as an efficiency against physics.

    Contract (every implementation keeps it; the shared conformance suite in
    ``tests/costmodel/test_predictors.py`` checks it):

    - ``X`` holds the raw shape columns named by ``shape_columns`` in that
      order (e.g. ``m, n, k``); ``y`` the measured latency in seconds.
    - ``__init__`` only stores its arguments: the device's physics (peak
      FLOP/s, bandwidths, SM count), the regressor's settings and
      ``random_state``, the only source of randomness.
    - ``fit`` validates its input, sets trailing-underscore attributes and
      returns ``self``; ``predict`` checks that it is fitted and returns
      positive seconds.
    - The regressed quantity is the log *efficiency*
      ``log((roofline + overhead_s_) / latency)``: a bounded target whose
      value outside the sampled range stays near the edge's efficiency, where
      a raw-latency regressor would stay at the edge's latency. ``overhead_s_``
      is the fixed per-call cost (launch and synchronisation) the roofline
      lacks, read off the fastest training samples.
    - Any finite input is accepted: shapes are made positive and clipped to
      ``[1, 1e12]`` and latencies to at least ``1e-12`` s. Missing trailing
      shape columns count as 1 and columns after the shape columns reach the
      regressor unchanged, so that the class is a well-behaved scikit-learn
      estimator on any 2-D input; ``FittedProfile`` always passes exactly the
      shape columns.

    Implementations provide ``shape_columns``, ``_physics`` (features and log
    roofline time of clipped shapes) and ``_make_regressor``.
    """

    shape_columns: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def _physics(self, shapes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Physics features and the natural log of the roofline time (s).

        Parameters
        ----------
        shapes : ndarray of shape (n_samples, len(shape_columns))
            Positive shape columns, clipped to ``[1, 1e12]``.

        Returns
        -------
        features : ndarray of shape (n_samples, n_physics_features)
        log_roofline_s : ndarray of shape (n_samples,)
        """

    @abstractmethod
    def _make_regressor(self) -> Any:
        """An unfitted scikit-learn regressor for the log efficiency."""

    def fit(self, X: ArrayLike, y: ArrayLike) -> OperatorPredictor:
        """Fit the efficiency regressor on measured latencies.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Shape columns (``shape_columns``).
        y : array-like of shape (n_samples,)
            Measured latency in seconds.

        Returns
        -------
        self
        """
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        X, y = np.asarray(X), np.asarray(y)
        latency = np.maximum(np.abs(y), _MIN_LATENCY_S)
        self.overhead_s_ = float(np.quantile(latency, _OVERHEAD_QUANTILE))
        features, log_base = self._design(X)
        with _one_thread():
            self.regressor_ = self._make_regressor().fit(features, log_base - np.log(latency))
        if hasattr(self.regressor_, "n_iter_"):
            self.n_iter_ = int(self.regressor_.n_iter_)  # estimators with max_iter report n_iter_
        return self

    def predict(self, X: ArrayLike) -> np.ndarray:
        """Predicted latency in seconds.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Shape columns, as in ``fit``.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        X = np.asarray(validate_data(self, X, dtype=np.float64, reset=False))
        features, log_base = self._design(X)
        return np.exp(log_base - self.regressor_.predict(features))

    def roofline_s(self, X: ArrayLike) -> np.ndarray:
        """Roofline time (s) of the shapes in ``X``, without the fixed overhead."""
        _, log_roofline = self._physics(self._shapes(np.asarray(X, dtype=np.float64)))
        return np.exp(log_roofline)

    def _design(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Regressor input and the log of the efficiency's reference time."""
        features, log_roofline = self._physics(self._shapes(X))
        log_base = np.logaddexp(log_roofline, np.log(self.overhead_s_))
        extra = X[:, len(self.shape_columns):]
        return np.column_stack([features, log_base, extra]), log_base

    def _shapes(self, X: np.ndarray) -> np.ndarray:
        count = len(self.shape_columns)
        shapes = np.ones((X.shape[0], count))
        width = min(count, X.shape[1])
        shapes[:, :width] = X[:, :width]
        return np.clip(np.abs(shapes), _MIN_SIZE, _MAX_SIZE)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        # Latencies are positive and the target is log-efficiency: R^2 on the
        # synthetic signed targets of scikit-learn's checks is meaningless.
        tags.regressor_tags.poor_score = True
        return tags


def log_waves(work_items: np.ndarray, num_sms: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Wave quantisation of ``work_items`` thread blocks on ``num_sms`` SMs.

    Returns
    -------
    log_waves : ndarray
        Natural log of ``work_items / num_sms``.
    quantisation : ndarray
        ``ceil(waves) / waves`` (>= 1): the time lost to the partly filled last wave.
    last_wave_fill : ndarray
        Fraction of SMs busy in the last wave, in (0, 1].
    """
    waves = work_items / max(float(num_sms), 1.0)
    full = np.ceil(waves)
    fill = 1.0 - (full - waves)
    return np.log(waves), full / waves, fill
