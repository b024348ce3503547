"""Memory-bound kernel latency (norms, activations, residuals, softmax, optimizer): efficiency against bandwidth."""

from __future__ import annotations

from typing import Any, ClassVar

from sklearn.linear_model import Ridge
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import SplineTransformer

from costmodel.predictors._base import OperatorPredictor
from costmodel.predictors._features import FAMILIES
from costmodel.predictors._settings import REGRESSOR_SETTINGS

_SETTINGS = REGRESSOR_SETTINGS["memory"]


class MemoryPredictor(OperatorPredictor):
    """Latency of one kind of memory-bound kernel (one ``kind`` and ``phase`` of a ``memory`` table).

    ``X`` has one column, ``elements`` (the op's ``shape[0]`` in
    ``costmodel.ops``). The roofline is ``elements x bytes_per_element /
    bandwidth``. Feature: log elements (the roofline is a fixed multiple of
    the elements). Regressor: a cubic spline of the log efficiency with ridge
    weights and constant extrapolation: a profile holds tens of rows per
    kernel kind, along one axis, where a smooth curve interpolates better than
    trees' steps; the ridge penalty (the intercept is free) keeps the curve
    from chasing the noise of a handful of rows, and outside the sampled range
    the efficiency stays at the edge's value.

    Parameters
    ----------
    bytes_per_element : float
        Bytes the measured kernel reads plus writes per element (e.g. 4 for a
        bf16 norm forward: read x, write y; 28 for an fp32 AdamW step).
    hbm_bandwidth_bytes_per_s : float
        Main-memory bandwidth of the device (default: H100-SXM, 3350 GB/s).
    n_knots : int
        Spline knots over the sampled range of each feature.
    alpha : float
        Ridge penalty on the spline weights (defaults, and why: ``_settings.REGRESSOR_SETTINGS``).
    random_state : int, RandomState or None
        Unused (the fit is deterministic); kept for the common contract.
    """

    kind: ClassVar[str] = "memory"
    shape_columns: ClassVar[tuple[str, ...]] = FAMILIES["memory"].shape_columns

    def __init__(self, bytes_per_element: float = 4.0, hbm_bandwidth_bytes_per_s: float = 3350e9,
                 n_knots: int = _SETTINGS["n_knots"], alpha: float = _SETTINGS["alpha"],
                 random_state: Any = None) -> None:
        self.bytes_per_element = bytes_per_element
        self.hbm_bandwidth_bytes_per_s = hbm_bandwidth_bytes_per_s
        self.n_knots = n_knots
        self.alpha = alpha
        self.random_state = random_state

    def _make_regressor(self) -> Pipeline:
        return make_pipeline(SplineTransformer(n_knots=self.n_knots, degree=3, extrapolation="constant"),
                             Ridge(alpha=self.alpha))
