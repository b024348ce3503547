"""Intra-node collective latency: efficiency against an alpha-beta ring model."""

from __future__ import annotations

from typing import Any, ClassVar

from sklearn.ensemble import ExtraTreesRegressor

from costmodel.predictors._base import OperatorPredictor
from costmodel.predictors._features import FAMILIES
from costmodel.predictors._settings import REGRESSOR_SETTINGS

_SETTINGS = REGRESSOR_SETTINGS["collective"]


class CollectivePredictor(OperatorPredictor):
    """Latency of one NCCL collective within a node (nccl-tests conventions).

    ``X`` columns: num_gpus, message_bytes (nccl-tests "size": the per-rank
    buffer for all_reduce, the whole buffer for all_gather, reduce_scatter and
    all_to_all). The roofline is the ring alpha-beta time
    ``steps x link_latency_s + bus_factor x bytes / link_bandwidth``.
    Features: log bytes, log GPUs, log roofline and the log ratio of its
    bandwidth and latency terms (which protocol regime a message is in).
    Regressor: extra trees of the log efficiency, which beat gradient
    boosting and Gaussian processes on the 20-25-point samples of the 63-row
    per-op tables.

    Parameters
    ----------
    op : str
        all_reduce, all_gather, reduce_scatter or all_to_all.
    link_bandwidth_bytes_per_s : float
        Per-GPU scale-up bandwidth, one direction. The defaults are the
        H100-SXM figures of ``costmodel/catalog/gpus.yaml`` (450 GB/s, 3.4 us).
    link_latency_s : float
        Latency of one ring step.
    n_estimators : int
        Trees (default, and why: ``_settings.REGRESSOR_SETTINGS``).
    random_state : int, RandomState or None
        Passed to the regressor.
    """

    kind: ClassVar[str] = "collective"
    shape_columns: ClassVar[tuple[str, ...]] = FAMILIES["collective"].shape_columns

    def __init__(self, op: str = "all_reduce", link_bandwidth_bytes_per_s: float = 450e9,
                 link_latency_s: float = 3.4e-6, n_estimators: int = _SETTINGS["n_estimators"],
                 random_state: Any = None) -> None:
        self.op = op
        self.link_bandwidth_bytes_per_s = link_bandwidth_bytes_per_s
        self.link_latency_s = link_latency_s
        self.n_estimators = n_estimators
        self.random_state = random_state

    def _make_regressor(self) -> ExtraTreesRegressor:
        return ExtraTreesRegressor(n_estimators=self.n_estimators, random_state=self.random_state)
