"""A fitted predictor as plain numbers: the family's physics, its overhead and the regressor's arrays.

``compile_predictor`` turns a fitted ``OperatorPredictor`` into a
``CompiledPredictor`` that predicts the same seconds (bit for bit for the tree
families, to rounding for the spline family) with numpy alone, so that
predicting neither imports scikit-learn nor pays its per-call overhead. It
round-trips through numeric arrays and JSON metadata (``to_arrays`` /
``from_arrays``), which is how the private cache stores fitted profiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from numpy.typing import ArrayLike

from costmodel.predictors._features import FAMILIES, design, log_roofline_s
from costmodel.predictors._physics import check_op
from costmodel.predictors._splines import SplineRidge, from_spline_ridge
from costmodel.predictors._trees import TreeEnsemble, from_extra_trees, from_hist_gradient_boosting

__all__ = ["CompiledPredictor", "compile_predictor"]

_REGRESSORS: Final = {"trees": TreeEnsemble, "spline_ridge": SplineRidge}
# scikit-learn regressor class -> exporter; read by class name so that this module never imports scikit-learn.
_EXPORTERS: Final = {"HistGradientBoostingRegressor": from_hist_gradient_boosting,
                     "ExtraTreesRegressor": from_extra_trees,
                     "Pipeline": from_spline_ridge}


@dataclass(frozen=True, eq=False)
class CompiledPredictor:
    """Latency of one operator family from its shape columns, without scikit-learn.

    Keeps the ``predict`` / ``roofline_s`` half of the ``OperatorPredictor``
    contract: ``X`` holds the family's shape columns (``shape_columns``).

    Attributes
    ----------
    kind : str
        The family's entry in ``_features.FAMILIES`` (gemm, attention, collective, memory).
    physics : dict
        The device figures its features take, by name.
    overhead_s : float
        The fitted fixed per-call cost (``OperatorPredictor.overhead_s_``).
    regressor : TreeEnsemble or SplineRidge
        The fitted model of the log efficiency.
    """

    kind: str
    physics: dict[str, Any] = field(repr=False)
    overhead_s: float
    regressor: TreeEnsemble | SplineRidge = field(repr=False)

    @property
    def shape_columns(self) -> tuple[str, ...]:
        """The columns ``X`` holds, in order."""
        return FAMILIES[self.kind].shape_columns

    def predict(self, X: ArrayLike) -> np.ndarray:
        """Predicted latency in seconds of each row of shape columns ``X``.

        Raises
        ------
        ValueError
            If ``X`` is not 2-D with at least the family's shape columns, or holds
            a NaN or infinity (scikit-learn's estimators refuse them too).
        """
        X = self._shape_rows(X)
        if X.shape[0] == 0:
            return np.empty(0)
        features, log_base = design(self.kind, self.physics, self.overhead_s, X)
        return np.exp(log_base - self.regressor.predict(features))

    def roofline_s(self, X: ArrayLike) -> np.ndarray:
        """Roofline time (s) of the shapes in ``X``, without the fixed overhead (``X`` checked as in ``predict``)."""
        X = self._shape_rows(X)
        if X.shape[0] == 0:
            return np.empty(0)
        return np.exp(log_roofline_s(self.kind, self.physics, X))

    def _shape_rows(self, X: ArrayLike) -> np.ndarray:
        """``X`` as float64 rows, checked as the scikit-learn estimator's ``validate_data`` would."""
        X = np.asarray(X, dtype=np.float64)
        columns = self.shape_columns
        if X.ndim != 2 or X.shape[1] < len(columns):
            raise ValueError(f"The 'X' parameter must be a 2-D array with a row per operator and at least the "
                             f"{len(columns)} shape columns ({', '.join(columns)}). Got shape {X.shape} instead.")
        finite = np.isfinite(X)
        if not finite.all():
            row, column = np.argwhere(~finite)[0]
            raise ValueError(f"The 'X' parameter must hold finite shapes. Got {X[row, column]} in row {row}, "
                             f"column {column} instead ({int((~finite).sum())} non-finite value(s)).")
        return X

    def to_arrays(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """``(arrays, meta)``: numeric arrays and JSON-able metadata that :meth:`from_arrays` reads back."""
        regressor = next(name for name, cls in _REGRESSORS.items() if isinstance(self.regressor, cls))
        meta = {"kind": self.kind, "physics": self.physics, "regressor": regressor}
        arrays = {"overhead_s": np.array([self.overhead_s]), **self.regressor.to_arrays()}
        return arrays, meta

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> CompiledPredictor:
        """The predictor :meth:`to_arrays` wrote.

        Raises
        ------
        KeyError, ValueError
            If the data is not a predictor this version writes: an unknown family
            or regressor, a device figure or overhead that is not a finite number,
            or regressor arrays out of range or reading more columns than the
            family's features give.
        """
        kind, physics = str(meta["kind"]), dict(meta["physics"])
        if kind not in FAMILIES or set(physics) != set(FAMILIES[kind].params):
            raise ValueError(f"not a compiled predictor of a known family: {kind!r}")
        for name, value in physics.items():
            if name == "op":
                check_op(value)
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise ValueError(f"device figure {name} = {str(value)[:80]!r} is not a finite number")
        overhead = np.asarray(arrays["overhead_s"], dtype=np.float64)
        if overhead.shape != (1,) or not np.isfinite(overhead[0]) or overhead[0] < 0:
            raise ValueError(f"overhead_s {str(overhead)[:80]} is not one finite number >= 0")
        regressor = _REGRESSORS[meta["regressor"]].from_arrays(arrays)
        predictor = cls(kind, physics, float(overhead[0]), regressor)
        # One probe row: the features must be finite and give every column the regressor reads.
        features, _ = design(kind, physics, predictor.overhead_s, np.ones((1, len(predictor.shape_columns))))
        if not np.isfinite(features).all() or regressor.min_features > features.shape[1]:
            raise ValueError(f"the {kind} regressor reads {regressor.min_features} columns; its features give "
                             f"{features.shape[1]} (finite: {bool(np.isfinite(features).all())})")
        return predictor


def compile_predictor(estimator: Any) -> CompiledPredictor:
    """The numpy form of a fitted ``OperatorPredictor``.

    Raises
    ------
    ValueError
        If its regressor is of a kind that has no exporter.
    """
    name = type(estimator.regressor_).__name__
    if name not in _EXPORTERS:
        raise ValueError(f"no numpy exporter for a {name} regressor (known: {', '.join(_EXPORTERS)})")
    return CompiledPredictor(estimator.kind, _plain(estimator.physics_params()), float(estimator.overhead_s_),
                             _EXPORTERS[name](estimator.regressor_))


def _plain(physics: dict[str, Any]) -> dict[str, Any]:
    """Device figures as JSON-able Python numbers and strings (numpy scalars would not round-trip)."""
    return {name: value if isinstance(value, str) else float(value) for name, value in physics.items()}
