"""Causal flash-attention forward latency: efficiency against the roofline."""

from __future__ import annotations

from typing import Any, ClassVar, Final

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor

from costmodel.predictors._base import OperatorPredictor, log_waves

# Query-block sizes of FlashAttention-2/3 forward kernels: one thread block per
# (batch, head, query block), so b * h * ceil(s / block) blocks fill the SMs in waves.
_QUERY_BLOCKS: Final = (64, 128)


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
        Passed to ``HistGradientBoostingRegressor``.
    random_state : int, RandomState or None
        Passed to the regressor.
    """

    shape_columns: ClassVar[tuple[str, ...]] = ("batch", "seq", "heads", "kv_heads", "head_dim")

    def __init__(self, peak_flops: float = 989.4e12, hbm_bandwidth_bytes_per_s: float = 3350e9,
                 num_sms: int = 132, max_iter: int = 200, learning_rate: float = 0.1,
                 max_leaf_nodes: int = 31, random_state: Any = None) -> None:
        self.peak_flops = peak_flops
        self.hbm_bandwidth_bytes_per_s = hbm_bandwidth_bytes_per_s
        self.num_sms = num_sms
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.random_state = random_state

    def _physics(self, shapes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        batch, seq, heads, kv_heads, head_dim = shapes.T
        log_flops = (np.log(2.0) + np.log(batch) + np.log(heads) + 2.0 * np.log(seq) + np.log(head_dim))
        log_bytes = np.log(2.0 * batch * seq * head_dim * (2.0 * heads + 2.0 * kv_heads))
        log_compute = log_flops - np.log(self.peak_flops)
        log_memory = log_bytes - np.log(self.hbm_bandwidth_bytes_per_s)
        log_roofline = np.maximum(log_compute, log_memory)
        columns = [np.log(batch), np.log(seq), np.log(heads), np.log(kv_heads), np.log(head_dim),
                   np.log(heads) - np.log(kv_heads), np.log(batch) + np.log(seq), log_flops, log_bytes,
                   log_flops - log_bytes, log_roofline]
        for block in _QUERY_BLOCKS:
            blocks = np.ceil(seq / block)
            columns.extend(log_waves(batch * heads * blocks, self.num_sms))
            columns.append(seq / (blocks * block))
        return np.column_stack(columns), log_roofline

    def _make_regressor(self) -> HistGradientBoostingRegressor:
        return HistGradientBoostingRegressor(max_iter=self.max_iter, learning_rate=self.learning_rate,
                                             max_leaf_nodes=self.max_leaf_nodes, early_stopping=False,
                                             random_state=self.random_state)
