"""Causal flash-attention forward latency: efficiency against the roofline."""

from __future__ import annotations

from typing import Any, ClassVar

from sklearn.ensemble import HistGradientBoostingRegressor

from costmodel.predictors._base import OperatorPredictor
from costmodel.predictors._features import FAMILIES
from costmodel.predictors._settings import REGRESSOR_SETTINGS

_SETTINGS = REGRESSOR_SETTINGS["attention"]


class AttentionPredictor(OperatorPredictor):
    """Latency of causal self-attention forward (no cached prefix), bf16.

    ``X`` columns: batch, seq (query and key length), heads, kv_heads (GQA/MQA
    groups), head_dim. Features: their logs, the GQA ratio, tokens, FLOPs
    (``2 b h s^2 d``, causal), bytes (Q, K, V, O once), arithmetic intensity,
    roofline time, and per query-block size the log wave count, last-wave loss
    and sequence fill. Regressor: histogram gradient boosting of the log
    efficiency.

    Parameters
    ----------
    peak_flops, hbm_bandwidth_bytes_per_s, num_sms : float, float, int
        Device physics (defaults: H100-SXM, as in ``GemmPredictor``).
    max_iter, learning_rate, max_leaf_nodes : int, float, int
        Passed to ``HistGradientBoostingRegressor`` (defaults: ``_settings.REGRESSOR_SETTINGS``).
    random_state : int, RandomState or None
        Passed to the regressor.
    """

    kind: ClassVar[str] = "attention"
    shape_columns: ClassVar[tuple[str, ...]] = FAMILIES["attention"].shape_columns

    def __init__(self, peak_flops: float = 989.4e12, hbm_bandwidth_bytes_per_s: float = 3350e9,
                 num_sms: int = 132, max_iter: int = _SETTINGS["max_iter"],
                 learning_rate: float = _SETTINGS["learning_rate"], max_leaf_nodes: int = _SETTINGS["max_leaf_nodes"],
                 random_state: Any = None) -> None:
        self.peak_flops = peak_flops
        self.hbm_bandwidth_bytes_per_s = hbm_bandwidth_bytes_per_s
        self.num_sms = num_sms
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.random_state = random_state

    def _make_regressor(self) -> HistGradientBoostingRegressor:
        return HistGradientBoostingRegressor(max_iter=self.max_iter, learning_rate=self.learning_rate,
                                             max_leaf_nodes=self.max_leaf_nodes, early_stopping=False,
                                             random_state=self.random_state)
