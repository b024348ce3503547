"""Operators: the unit of work a predictor times.

An ``Op`` is a frozen, hashable record of one kernel (or one fused group of
kernels) that one GPU runs per micro-batch: its family (which predictor times
it), its shape, its FLOPs and the bytes it moves. ``count`` multiplies an op
that runs several times with the same shape (e.g. grouped expert GEMMs) and may
be fractional (context-parallel attention, averaged over ranks).
"""

from __future__ import annotations

from dataclasses import dataclass

FAMILIES = ("gemm", "attention_fwd", "attention_bwd", "memory", "optimizer")
PHASES = ("fwd", "bwd", "recompute", "step")


@dataclass(frozen=True)
class Op:
    """One operator on one GPU.

    Parameters
    ----------
    name : str
        What it is, e.g. ``"qkv_proj.wgrad"``.
    family : str
        Predictor family: ``gemm``, ``attention_fwd``, ``attention_bwd``, ``memory``, ``optimizer``.
    phase : str
        ``fwd``, ``bwd``, ``recompute`` (forward re-run before backward) or ``step``.
    shape : tuple of int
        gemm: (m, n, k); attention: (batch, seq, heads, kv_heads, head_dim, causal);
        memory / optimizer: (elements,).
    flops : float
        Floating-point operations of one execution (FMA = 2).
    bytes : float
        HBM bytes read plus written by one execution (roofline memory term).
    dtype : str
        Compute dtype (``bf16``, ``fp16``, ``fp8``, ``fp32``).
    count : float
        Executions per micro-batch.
    """

    name: str
    family: str
    phase: str
    shape: tuple[int, ...]
    flops: float
    bytes: float
    dtype: str = "bf16"
    count: float = 1.0

    @property
    def total_flops(self) -> float:
        return self.flops * self.count


def gemm(name: str, phase: str, m: int, n: int, k: int, dtype: str, count: float = 1.0,
         bytes_per_element: float = 2.0) -> Op:
    """A matrix multiply producing an (m, n) output with reduction length k."""
    flops = 2.0 * m * n * k
    moved = bytes_per_element * (m * k + k * n) + 2.0 * m * n
    return Op(name, "gemm", phase, (int(m), int(n), int(k)), flops, moved, dtype, count)


def memory_op(name: str, phase: str, elements: float, bytes_moved: float, flops: float = 0.0,
              count: float = 1.0) -> Op:
    """A memory-bound kernel (norm, activation, residual, dropout, rotary, copy, loss)."""
    return Op(name, "memory", phase, (int(elements),), flops, bytes_moved, "bf16", count)
