"""Each family's physics features and roofline, in numpy only: used to fit (the estimators) and to predict (compiled).

A family's feature function takes clipped shapes and the device figures named
in its ``FamilyPhysics.params`` and returns ``(features, log_roofline_s)``.
:func:`design` adds the fixed per-call overhead and builds the regressor's
input. Both the scikit-learn estimators (``_gemm.py`` ...) and the compiled
predictors (``_compiled.py``) call these, so that a feature is written once and
predicting never imports scikit-learn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from costmodel.predictors._physics import attention_bytes, bus_factor, check_op, gemm_bytes, ring_steps

__all__ = ["FAMILIES", "FamilyPhysics", "clip_shapes", "design", "log_roofline_s", "log_waves"]

# Shapes are clipped into [1, 1e12] so that products of three of them (FLOPs) stay finite;
# no operator of a real model comes near either bound.
_MIN_SIZE: Final = 1.0
_MAX_SIZE: Final = 1e12
# Output tiles (rows x columns of Y) that cuBLAS/CUTLASS kernels on Ampere-to-Blackwell GPUs
# use for large GEMMs; each tile is one thread block, so ceil(m/tm)*ceil(n/tn) blocks fill the
# SMs in waves. Several are offered because which one a kernel picks depends on the shape.
_TILES: Final = ((128, 128), (128, 256), (256, 128), (64, 128))
# Query-block sizes of FlashAttention-2/3 forward kernels: one thread block per
# (batch, head, query block), so b * h * ceil(s / block) blocks fill the SMs in waves.
_QUERY_BLOCKS: Final = (64, 128)


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


def gemm_features(shapes: np.ndarray, peak_flops: float, hbm_bandwidth_bytes_per_s: float, num_sms: float,
                  bytes_per_element: float) -> tuple[np.ndarray, np.ndarray]:
    """Columns m, n, k: log sizes, FLOPs, bytes, intensity, roofline, and per tile the waves and fill."""
    m, n, k = shapes.T
    log_flops = np.log(2.0) + np.log(m) + np.log(n) + np.log(k)
    log_bytes = np.log(gemm_bytes(m, n, k, bytes_per_element))
    log_compute = log_flops - np.log(peak_flops)
    log_memory = log_bytes - np.log(hbm_bandwidth_bytes_per_s)
    log_roofline = np.maximum(log_compute, log_memory)
    columns = [np.log(m), np.log(n), np.log(k), log_flops, log_bytes, log_flops - log_bytes,
               log_roofline, log_compute - log_memory]
    for tile_m, tile_n in _TILES:
        blocks_m, blocks_n = np.ceil(m / tile_m), np.ceil(n / tile_n)
        columns.extend(log_waves(blocks_m * blocks_n, num_sms))
        columns.extend((m / (blocks_m * tile_m), n / (blocks_n * tile_n)))
    return np.column_stack(columns), log_roofline


def attention_features(shapes: np.ndarray, peak_flops: float, hbm_bandwidth_bytes_per_s: float,
                       num_sms: float) -> tuple[np.ndarray, np.ndarray]:
    """Columns batch, seq, heads, kv_heads, head_dim: logs, GQA ratio, FLOPs, bytes, roofline, waves."""
    batch, seq, heads, kv_heads, head_dim = shapes.T
    log_flops = (np.log(2.0) + np.log(batch) + np.log(heads) + 2.0 * np.log(seq) + np.log(head_dim))
    log_bytes = np.log(attention_bytes(batch, seq, heads, kv_heads, head_dim))
    log_compute = log_flops - np.log(peak_flops)
    log_memory = log_bytes - np.log(hbm_bandwidth_bytes_per_s)
    log_roofline = np.maximum(log_compute, log_memory)
    columns = [np.log(batch), np.log(seq), np.log(heads), np.log(kv_heads), np.log(head_dim),
               np.log(heads) - np.log(kv_heads), np.log(batch) + np.log(seq), log_flops, log_bytes,
               log_flops - log_bytes, log_roofline]
    for block in _QUERY_BLOCKS:
        blocks = np.ceil(seq / block)
        columns.extend(log_waves(batch * heads * blocks, num_sms))
        columns.append(seq / (blocks * block))
    return np.column_stack(columns), log_roofline


def collective_features(shapes: np.ndarray, op: str, link_bandwidth_bytes_per_s: float,
                        link_latency_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Columns num_gpus, message_bytes: log bytes, log GPUs, log ring time and its bandwidth/latency ratio."""
    op = check_op(op)
    # One GPU moves nothing; counting it as two keeps every logarithm finite.
    num_gpus = np.maximum(shapes[:, 0], 2.0)
    size = shapes[:, 1]
    # A zero link latency would make the regime ratio infinite; a picosecond floor keeps it finite.
    latency_term = np.maximum(ring_steps(op, num_gpus) * link_latency_s, 1e-12)
    bandwidth_term = bus_factor(op, num_gpus) * size / link_bandwidth_bytes_per_s
    log_roofline = np.log(latency_term + bandwidth_term)
    columns = [np.log(size), np.log(num_gpus), log_roofline, np.log(bandwidth_term) - np.log(latency_term)]
    return np.column_stack(columns), log_roofline


def memory_features(shapes: np.ndarray, bytes_per_element: float,
                    hbm_bandwidth_bytes_per_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Column elements: log elements (the roofline is a fixed multiple of them)."""
    log_elements = np.log(shapes[:, 0])
    log_roofline = log_elements + np.log(bytes_per_element) - np.log(hbm_bandwidth_bytes_per_s)
    return log_elements[:, None], log_roofline


@dataclass(frozen=True)
class FamilyPhysics:
    """A family's shape columns, the device figures its features take, and its feature function."""

    shape_columns: tuple[str, ...]
    params: tuple[str, ...]
    features: Callable[..., tuple[np.ndarray, np.ndarray]]


FAMILIES: Final = {
    "gemm": FamilyPhysics(("m", "n", "k"), ("peak_flops", "hbm_bandwidth_bytes_per_s", "num_sms",
                                            "bytes_per_element"), gemm_features),
    "attention": FamilyPhysics(("batch", "seq", "heads", "kv_heads", "head_dim"),
                               ("peak_flops", "hbm_bandwidth_bytes_per_s", "num_sms"), attention_features),
    "collective": FamilyPhysics(("num_gpus", "message_bytes"),
                                ("op", "link_bandwidth_bytes_per_s", "link_latency_s"), collective_features),
    "memory": FamilyPhysics(("elements",), ("bytes_per_element", "hbm_bandwidth_bytes_per_s"), memory_features),
}


def clip_shapes(X: np.ndarray, count: int) -> np.ndarray:
    """The first ``count`` columns of ``X`` made positive and clipped to ``[1, 1e12]``; missing ones count as 1."""
    shapes = np.ones((X.shape[0], count))
    width = min(count, X.shape[1])
    shapes[:, :width] = X[:, :width]
    return np.clip(np.abs(shapes), _MIN_SIZE, _MAX_SIZE)


def log_roofline_s(kind: str, physics: Mapping[str, Any], X: np.ndarray) -> np.ndarray:
    """Natural log of the roofline time (s) of the raw shape rows ``X`` of family ``kind``."""
    family = FAMILIES[kind]
    return family.features(clip_shapes(X, len(family.shape_columns)), **physics)[1]


def design(kind: str, physics: Mapping[str, Any], overhead_s: float,
           X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Regressor input of raw shape rows ``X`` and the log of the efficiency's reference time.

    The reference is ``roofline + overhead_s``; columns after the shape
    columns reach the regressor unchanged (the estimator contract in ``_base.py``).
    """
    family = FAMILIES[kind]
    count = len(family.shape_columns)
    features, log_roofline = family.features(clip_shapes(X, count), **physics)
    log_base = np.logaddexp(log_roofline, np.log(overhead_s))
    return np.column_stack([features, log_base, X[:, count:]]), log_base
