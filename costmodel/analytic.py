"""Analytic operator-time models: the roofline and the memory-bound kernel fits.

They serve (a) GPUs or operator families with no sampled profile and (b) shapes
outside a profile's sampled range. Every figure carries its source.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.ops import Op
from costmodel.specs.gpu import GPUSpec

# Fraction of dense peak a large GEMM reaches when nothing was measured: torchao's roofline
# model uses 78% on H100 (pytorch/ao roofline utilities), in the 73-87% band of measured
# maximum-achievable matmul FLOP/s across A100..GB200 (ml-engineering accelerator table);
# shared/research/hardware_and_formulas.md section 2.
GEMM_PEAK_FRACTION = 0.78
# Flash-attention forward reaches ~50% of dense peak on A100 (median over 4071 shapes, 156 of
# 312 TFLOP/s non-causal) -- derived from Zhang et al. 2025 (arXiv 2509.22832) measurements,
# estimate-train-time repository, Perlmutter/operator/..._flash_atten_fp16.csv.
ATTENTION_PEAK_FRACTION = 0.50
# A kernel never takes less than a launch: 2 us floor (torchao roofline model, as collected in
# hardware_and_formulas.md section 3e).
KERNEL_FLOOR_S = 2e-6


def attention_backward_ratio(seq: int) -> float:
    """Flash-attention backward / forward time for sequence length ``seq``.

    Fitted as 2.88 + 614 / seq to the median ratios by sequence length of the A100
    measurements of Zhang et al. 2025 (estimate-train-time, Perlmutter flash_atten:
    3.48 at 1024, 3.17 at 2048, 3.03 at >= 4096). The FLOP ratio alone is 2.5
    (FlashAttention benchmark convention); the rest is the backward kernel's lower
    efficiency.
    """
    return 2.88 + 614.0 / max(seq, 1)


# Causal / non-causal FlashAttention-2 fwd+bwd TFLOP/s on A100 80GB, head_dim 128, by sequence length
# (FlashAttention README benchmark figures, hardware_and_formulas.md section 4b).
_FA2_A100_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
_FA2_A100_CAUSAL = (99, 133, 155, 173, 182, 189)
_FA2_A100_FULL = (151, 173, 187, 196, 201, 203)


def noncausal_time_factor(seq: int) -> float:
    """Non-causal / causal attention time at the same shape: twice the FLOPs at a higher efficiency."""
    x = np.log2(np.clip(seq, _FA2_A100_SEQ[0], _FA2_A100_SEQ[-1]))
    ratio = np.interp(x, np.log2(_FA2_A100_SEQ), np.array(_FA2_A100_CAUSAL) / np.array(_FA2_A100_FULL))
    return float(2.0 * ratio)


@dataclass(frozen=True)
class MemoryKernelFit:
    """``t = t0 + bytes / (efficiency x HBM bandwidth)`` for one kind of memory-bound kernel."""

    t0_s: float
    efficiency: float
    source: str

    def seconds(self, nbytes: float, bandwidth: float) -> float:
        return self.t0_s + nbytes / (self.efficiency * bandwidth)


_ETT = ("Zhang et al. 2025 (arXiv 2509.22832) A100 measurements, estimate-train-time "
        "Perlmutter/operator/NVIDIAA100-SXM4-80GB_{}_fp16.csv; additive least-squares fit over all rows")

# (kind, phase) -> fit. Bytes follow the same ideal single-pass convention as the fits.
MEMORY_KERNEL_FITS: dict[tuple[str, str], MemoryKernelFit] = {
    ("norm", "fwd"): MemoryKernelFit(10.4e-6, 0.553, _ETT.format("layernorm")),
    ("norm", "bwd"): MemoryKernelFit(17.9e-6, 0.256, _ETT.format("layernorm")),
    ("activation", "fwd"): MemoryKernelFit(3.1e-6, 0.708, _ETT.format("gelu")),
    ("activation", "bwd"): MemoryKernelFit(4.2e-6, 0.792, _ETT.format("gelu")),
    ("residual", "fwd"): MemoryKernelFit(0.0, 0.829, _ETT.format("res_add")),
    ("residual", "bwd"): MemoryKernelFit(0.0, 0.829, _ETT.format("res_add")),
    ("rope", "fwd"): MemoryKernelFit(171.7e-6, 0.224, _ETT.format("RoPE")),
    ("rope", "bwd"): MemoryKernelFit(268.4e-6, 0.088, _ETT.format("RoPE")),
    ("softmax", "fwd"): MemoryKernelFit(0.0, 0.468, _ETT.format("softmax")),
    ("softmax", "bwd"): MemoryKernelFit(8.4e-6, 0.409, _ETT.format("softmax")),
    ("gather", "fwd"): MemoryKernelFit(38.0e-6, 0.169, _ETT.format("embedding")),
    ("gather", "bwd"): MemoryKernelFit(147.0e-6, 0.201, _ETT.format("embedding")),
    ("cross_entropy", "fwd"): MemoryKernelFit(240.5e-6, 0.124, _ETT.format("parallel_cross_entropy_128")),
    ("cross_entropy", "bwd"): MemoryKernelFit(153.3e-6, 0.413, _ETT.format("parallel_cross_entropy_128")),
    # Adam over fp32 master weights and moments: the measured FusedAdam time (19.2 ps/param on
    # A100, same files' *_optimizer_fp16.csv) is 0.71 of HBM peak when counted as 28-30 B/param.
    ("optimizer", "step"): MemoryKernelFit(44e-6, 0.71, _ETT.format("optimizer")),
}

# Which fit an op uses, by the first part of its name.
KIND_BY_NAME = {
    "input_norm": "norm", "post_attn_norm": "norm", "final_norm": "norm",
    "rope": "rope", "attn_residual": "residual", "mlp_residual": "residual",
    "attn_dropout": "residual", "mlp_dropout": "residual",  # fused bias-dropout-add, a streaming kernel
    "mlp": "activation", "moe": "activation", "attention": "softmax",
    "embedding": "gather", "cross_entropy": "cross_entropy", "adam": "optimizer",
}


def memory_kind(op: Op) -> str:
    """The memory-bound kernel kind of ``op`` (permutations use the gather fit)."""
    if ".permute" in op.name or ".unpermute" in op.name:
        return "gather"
    return KIND_BY_NAME.get(op.name.split(".")[0], "residual")


def memory_op_seconds(op: Op, gpu: GPUSpec) -> float:
    """Time of one execution of a memory-bound or optimizer op."""
    phase = "fwd" if op.phase == "recompute" else op.phase
    fit = MEMORY_KERNEL_FITS[(memory_kind(op), phase)]
    return max(KERNEL_FLOOR_S, fit.seconds(op.bytes, gpu.hbm_bandwidth_bytes_per_s))


def roofline_seconds(flops: float, nbytes: float, gpu: GPUSpec, dtype: str, fraction: float) -> float:
    """``max(FLOPs / (fraction x peak), bytes / bandwidth)``, at least one kernel launch."""
    peak = gpu.peak("bf16" if dtype == "fp32" else dtype)
    return max(KERNEL_FLOOR_S, flops / (fraction * peak), nbytes / gpu.hbm_bandwidth_bytes_per_s)


def gemm_roofline_seconds(op: Op, gpu: GPUSpec) -> float:
    return roofline_seconds(op.flops, op.bytes, gpu, op.dtype, GEMM_PEAK_FRACTION)


def attention_roofline_seconds(op: Op, gpu: GPUSpec) -> float:
    """Forward attention at the measured fraction of peak; backward x the measured ratio."""
    fwd_flops = op.flops if op.family == "attention_fwd" else op.flops / 2
    if len(op.shape) > 5 and op.shape[5] == 0:  # non-causal: measured fraction applies to the causal kernel
        fwd_flops /= 2
    fwd = roofline_seconds(fwd_flops, op.bytes, gpu, "bf16", ATTENTION_PEAK_FRACTION)
    if len(op.shape) > 5 and op.shape[5] == 0:
        fwd *= noncausal_time_factor(op.shape[1])
    return fwd if op.family == "attention_fwd" else fwd * attention_backward_ratio(op.shape[1])
