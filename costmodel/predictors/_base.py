"""The contract every operator predictor keeps."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Final

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import ThreadpoolController

from costmodel.predictors._features import FAMILIES, design, log_roofline_s

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

    Implementations provide ``kind``, a family of ``_features.FAMILIES``
    (its shape columns, its feature function and the device figures it takes,
    which must be constructor parameters of the same names; sklearn-free, so
    that a compiled predictor computes the same features), and
    ``_make_regressor``.
    """

    kind: ClassVar[str] = ""
    shape_columns: ClassVar[tuple[str, ...]] = ()

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
        return np.exp(log_roofline_s(self.kind, self.physics_params(), np.asarray(X, dtype=np.float64)))

    def physics_params(self) -> dict[str, Any]:
        """The device figures the family's features take (``FAMILIES[kind].params``), by name."""
        return {name: getattr(self, name) for name in FAMILIES[self.kind].params}

    def _design(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Regressor input and the log of the efficiency's reference time."""
        return design(self.kind, self.physics_params(), self.overhead_s_, X)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        # Latencies are positive and the target is log-efficiency: R^2 on the
        # synthetic signed targets of scikit-learn's checks is meaningless.
        tags.regressor_tags.poor_score = True
        return tags

