"""GEMM latency: efficiency against the roofline, with tile and wave quantisation."""

from __future__ import annotations

from typing import Any, ClassVar

from sklearn.ensemble import HistGradientBoostingRegressor

from costmodel.predictors._base import OperatorPredictor
from costmodel.predictors._features import FAMILIES
from costmodel.predictors._settings import REGRESSOR_SETTINGS

_SETTINGS = REGRESSOR_SETTINGS["gemm"]


class GemmPredictor(OperatorPredictor):
    """Latency of ``Y[m, n] = X[m, k] @ W[n, k]^T`` (a Linear layer, m = tokens).

    Features: log m, n, k, FLOPs, bytes, arithmetic intensity, the roofline
    time and its compute/memory ratio, and for each tile shape the log wave
    count, the last-wave quantisation loss and the m and n tile fill. The
    regressor is a histogram gradient-boosting model of the log efficiency
    (chosen over extra trees and gradient boosting by held-out accuracy on
    the A100 and H100 tables at equal or better speed; see
    ``benchmarks/predictors.py``).

    Parameters
    ----------
    peak_flops : float
        Dense tensor-core FLOP/s of the GEMM's dtype. The defaults are the
        H100-SXM figures of ``costmodel/catalog/gpus.yaml`` (989.4 TFLOP/s bf16,
        3350 GB/s, 132 SMs); pass the device's.
    hbm_bandwidth_bytes_per_s : float
        HBM bandwidth.
    num_sms : int
        Streaming multiprocessors (waves are counted against them).
    bytes_per_element : float
        Input element size: 2 for bf16/fp16, 1 for fp8.
    max_iter, learning_rate, max_leaf_nodes : int, float, int
        Passed to ``HistGradientBoostingRegressor`` (defaults, and why:
        ``_settings.REGRESSOR_SETTINGS``).
    random_state : int, RandomState or None
        Passed to the regressor.
    """

    kind: ClassVar[str] = "gemm"
    shape_columns: ClassVar[tuple[str, ...]] = FAMILIES["gemm"].shape_columns

    def __init__(self, peak_flops: float = 989.4e12, hbm_bandwidth_bytes_per_s: float = 3350e9,
                 num_sms: int = 132, bytes_per_element: float = 2.0,
                 max_iter: int = _SETTINGS["max_iter"], learning_rate: float = _SETTINGS["learning_rate"],
                 max_leaf_nodes: int = _SETTINGS["max_leaf_nodes"], random_state: Any = None) -> None:
        self.peak_flops = peak_flops
        self.hbm_bandwidth_bytes_per_s = hbm_bandwidth_bytes_per_s
        self.num_sms = num_sms
        self.bytes_per_element = bytes_per_element
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.random_state = random_state

    def _make_regressor(self) -> HistGradientBoostingRegressor:
        return HistGradientBoostingRegressor(max_iter=self.max_iter, learning_rate=self.learning_rate,
                                             max_leaf_nodes=self.max_leaf_nodes, early_stopping=False,
                                             random_state=self.random_state)
