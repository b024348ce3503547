"""Roofline times and the counts behind them, shared by predictors and benchmarks.

All functions are vectorised over numpy arrays and return seconds (or FLOPs,
bytes). They are the physics the predictors' features are built from and the
roofline baseline of ``benchmarks/predictors.py``; a profile-free fall-back for
the cost model lives in ``costmodel.analytic``.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import ArrayLike

from costmodel.profiles.profile import COLLECTIVE_OPS

__all__ = [
    "COLLECTIVE_OPS",
    "attention_bytes",
    "attention_flops",
    "attention_roofline_s",
    "bus_factor",
    "check_op",
    "collective_roofline_s",
    "gemm_bytes",
    "gemm_roofline_s",
    "ring_steps",
]

# Output of every profiled GEMM is bf16 (aiconfigurator collectors; fp8 GEMMs dequantise to bf16).
_OUTPUT_BYTES: Final = 2.0
# Attention tables hold bf16 Q, K, V and output.
_ATTENTION_BYTES: Final = 2.0


def gemm_bytes(m: ArrayLike, n: ArrayLike, k: ArrayLike, bytes_per_element: float = 2.0) -> np.ndarray:
    """HBM bytes of ``Y[m, n] = X[m, k] @ W[n, k]^T``: both inputs read once, output written once."""
    m, n, k = (np.asarray(a, dtype=np.float64) for a in (m, n, k))
    return bytes_per_element * (m * k + n * k) + _OUTPUT_BYTES * m * n


def gemm_roofline_s(m: ArrayLike, n: ArrayLike, k: ArrayLike, peak_flops: float,
                    hbm_bandwidth_bytes_per_s: float, bytes_per_element: float = 2.0) -> np.ndarray:
    """Roofline time of a GEMM: ``max(2mnk / peak, bytes / bandwidth)`` seconds."""
    m, n, k = (np.asarray(a, dtype=np.float64) for a in (m, n, k))
    compute = 2.0 * m * n * k / peak_flops
    memory = gemm_bytes(m, n, k, bytes_per_element) / hbm_bandwidth_bytes_per_s
    return np.maximum(compute, memory)


def attention_flops(batch: ArrayLike, seq: ArrayLike, heads: ArrayLike, head_dim: ArrayLike,
                    causal: bool = True) -> np.ndarray:
    """Forward FLOPs of ``softmax(Q K^T) V`` (two GEMMs of ``2 b h s^2 d``), halved when causal."""
    b, s, h, d = (np.asarray(a, dtype=np.float64) for a in (batch, seq, heads, head_dim))
    full = 4.0 * b * h * s * s * d
    return full / 2.0 if causal else full


def attention_bytes(batch: ArrayLike, seq: ArrayLike, heads: ArrayLike, kv_heads: ArrayLike,
                    head_dim: ArrayLike) -> np.ndarray:
    """HBM bytes of fused (flash) attention forward: read Q, K, V and write O once."""
    b, s, h, kv, d = (np.asarray(a, dtype=np.float64) for a in (batch, seq, heads, kv_heads, head_dim))
    return _ATTENTION_BYTES * b * s * d * (2.0 * h + 2.0 * kv)


def attention_roofline_s(batch: ArrayLike, seq: ArrayLike, heads: ArrayLike, kv_heads: ArrayLike,
                         head_dim: ArrayLike, peak_flops: float, hbm_bandwidth_bytes_per_s: float,
                         causal: bool = True) -> np.ndarray:
    """Roofline time of causal (or full) flash attention forward, seconds."""
    compute = attention_flops(batch, seq, heads, head_dim, causal) / peak_flops
    memory = attention_bytes(batch, seq, heads, kv_heads, head_dim) / hbm_bandwidth_bytes_per_s
    return np.maximum(compute, memory)


def bus_factor(op: str, num_gpus: ArrayLike) -> np.ndarray:
    """nccl-tests bus-bandwidth factor: link bytes per GPU = factor x message bytes.

    all_reduce ``2(n-1)/n`` of the per-rank buffer; all_gather, reduce_scatter
    and all_to_all ``(n-1)/n`` of the total buffer (source: nccl-tests
    ``doc/PERFORMANCE.md``, "Bus bandwidth"); send_recv 1 (every byte of the
    one send crosses the link).
    """
    check_op(op)
    n = np.asarray(num_gpus, dtype=np.float64)
    if op == "send_recv":
        return np.ones_like(n)
    return (n - 1.0) / n * (2.0 if op == "all_reduce" else 1.0)


def ring_steps(op: str, num_gpus: ArrayLike) -> np.ndarray:
    """Sequential message steps of the ring algorithm: ``2(n-1)`` for all_reduce, 1 for send_recv, else ``n-1``."""
    check_op(op)
    n = np.asarray(num_gpus, dtype=np.float64)
    if op == "send_recv":
        return np.ones_like(n)
    return (n - 1.0) * (2.0 if op == "all_reduce" else 1.0)


def check_op(op: str) -> str:
    """Return ``op`` if it is a collective the profiles know."""
    if op not in COLLECTIVE_OPS:
        raise ValueError(f"The 'op' parameter must be one of {', '.join(COLLECTIVE_OPS)}. Got {op!r} instead.")
    return op


def collective_roofline_s(op: str, num_gpus: ArrayLike, message_bytes: ArrayLike,
                          link_bandwidth_bytes_per_s: float, link_latency_s: float) -> np.ndarray:
    """Alpha-beta time of a ring collective: ``steps x latency + factor x bytes / bandwidth``."""
    size = np.asarray(message_bytes, dtype=np.float64)
    return (ring_steps(op, num_gpus) * link_latency_s
            + bus_factor(op, num_gpus) * size / link_bandwidth_bytes_per_s)
