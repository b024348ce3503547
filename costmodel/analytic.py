"""Analytic operator-time models: the roofline and the memory-bound kernel fits.

They serve (a) GPUs or operator families with no sampled profile and (b) shapes
outside a profile's sampled range. Every figure carries its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from costmodel.ops import Op
from costmodel.specs.gpu import GPUSpec

# Fraction of dense peak a large GEMM reaches when nothing was measured: torchao's roofline
# model uses 78% on H100 (pytorch/ao roofline utilities), in the 73-87% band of measured
# maximum-achievable matmul FLOP/s across A100..GB200 (ml-engineering accelerator table);
# docs/hardware_and_formulas.md section 2.
GEMM_PEAK_FRACTION = 0.78
# Flash-attention forward reaches ~50% of dense peak on A100 (median over 4071 shapes, 156 of
# 312 TFLOP/s non-causal) -- derived from Zhang et al. 2025 (arXiv 2509.22832) measurements,
# estimate-train-time repository, Perlmutter/operator/..._flash_atten_fp16.csv.
ATTENTION_PEAK_FRACTION = 0.50
# A kernel never takes less than a launch: 2 us floor (torchao roofline model, as collected in
# hardware_and_formulas.md section 3e).
KERNEL_FLOOR_S = 2e-6


# Backward GEMMs (the data gradient dX = dY W, an NN-layout GEMM, and the weight gradient
# dW = dY^T X, TN layout) against the forward-layout (NT, Y = X W^T) tables. Derived from Zhang
# et al. 2025 (arXiv 2509.22832) A100 measurements, estimate-train-time
# Perlmutter/operator/NVIDIAA100-SXM4-80GB_linear{2,3,4,_final}_fp16.csv (bias-free nn.Linear,
# 5616 rows; linear1's backward adds a bias-gradient reduction): the median over rows of
# (measured backward / predicted dgrad + wgrad) divided by (measured forward / predicted
# forward), all predicted from the a100-sxm4-80gb profile, is 0.932
# (0.930 on GEMMs of >= 300 GFLOP): the backward pair runs ~7% faster per FLOP than the forward
# table says, relative to the same profile's forward error (measured backward/forward time
# 1.84-1.88 per op, predicted 2.00). Out-of-sample check on the GH200 measurements
# (Vista/operator/NVIDIAGH200120GB_linear{2,3,4,_final}_fp16.csv, 7020 rows, predicted with the
# h100-sxm5-80gb profile; benchmarks/training_kernels.py --system vista): the same statistic is
# 0.925 on the 4256 rows of >= 300 GFLOP, where the backward span holds the two kernels alone
# (1.04 below 300 GFLOP, where a launch gap of tens of microseconds between the two kernels sits
# inside the profiler span; 0.95 over all rows). On those large GH200 GEMMs the factor takes the
# backward MAPE from 12-18% to 6-10% per operator. Applied to 16-bit GEMMs timed from a table.
BACKWARD_GEMM_TIME_FACTOR = 0.93

# FlashAttention-2 runs one kernel per head dimension rounded up to a multiple of 32
# (HEADDIM_SWITCH in Dao-AILab/flash-attention csrc/flash_attn/src/static_switch.h: 32, 64, 96,
# 128, 160, 192, 224, 256), padding the rest; a head dimension that is not the kernel's own runs
# the predicated (not Is_even_K) path. Efficiency (FLOP/s over the real head dim) relative to
# head dim 128, per kernel head dim: medians of the non-causal forward TFLOP/s over shapes of
# >= 1 TFLOP in Zhang et al. 2025 A100 measurements (estimate-train-time
# Perlmutter/operator/NVIDIAA100-SXM4-80GB_flash_atten_fp16.csv, head dims equal to a kernel's),
# and the median loss of the padded head dims against (d / kernel dim) x their kernel's
# efficiency. Out-of-sample checks: on the GH200 measurements of the same FlashAttention-2 call
# (Vista/.../NVIDIAGH200120GB_flash_atten_fp16.csv) these factors give each head dim's TFLOP/s
# relative to head dim 128 within 5.4% on average over the 21 head dims 32-256 (2.8% on A100,
# in-sample); the FlashAttention-2 README's A100 fwd+bwd head-dim 64 / 128 time ratio is
# 0.556-0.575 (hardware_and_formulas.md 4b), these factors give 0.554.
FA2_HEAD_DIM_EFFICIENCY = {32: 0.64, 64: 0.90, 96: 0.96, 128: 1.0, 160: 0.90, 192: 0.86, 224: 0.81, 256: 0.89}
FA2_PADDED_HEAD_DIM_LOSS = 0.82


def attention_head_dim_efficiency(head_dim: float) -> float:
    """FlashAttention-2 FLOP efficiency at ``head_dim`` relative to head dim 128 (see above).

    Head dims above 256 (no FlashAttention-2 kernel) keep the 256 kernel's efficiency.
    """
    d = float(max(head_dim, 1))
    kernel = min(256, 32 * int(np.ceil(d / 32)))
    if d > 256:
        return FA2_HEAD_DIM_EFFICIENCY[256]
    efficiency = FA2_HEAD_DIM_EFFICIENCY[kernel] * d / kernel
    return efficiency if d == kernel else efficiency * FA2_PADDED_HEAD_DIM_LOSS


def attention_head_dim_time_factor(head_dim: float, reference_head_dim: float) -> float:
    """Attention time at ``head_dim`` over its time at ``reference_head_dim``, all else equal.

    FLOPs scale with the head dim and FLOP/s with ``attention_head_dim_efficiency``.
    """
    return ((head_dim / attention_head_dim_efficiency(head_dim))
            / (reference_head_dim / attention_head_dim_efficiency(reference_head_dim)))


# FlashAttention-2's backward kernels have their own per-head-dim efficiency. Backward / forward
# time ratio at each kernel head dim relative to head dim 128, all else equal: medians over rows of
# (measured backward / forward) / (2.90 + 615 / seq) in Zhang et al. 2025's A100 measurements
# (estimate-train-time Perlmutter/operator/NVIDIAA100-SXM4-80GB_flash_atten_fp16.csv, 4071 rows),
# head dims equal to a kernel's; a padded head dim (not a multiple of 32) runs its kernel's ratio
# x 0.897, the median over the 13 padded head dims (0.82-1.01) of their ratio against their
# kernel's. With these the backward/forward ratio is within 3.4% of the measured one on average
# over the 4071 rows (7.8% with the sequence term alone).
FA2_BWD_HEAD_DIM_RATIO = {32: 0.900, 64: 0.976, 96: 1.081, 128: 1.0, 160: 1.182, 192: 1.052, 224: 1.078,
                          256: 1.175}
FA2_PADDED_BWD_RATIO = 0.897


def attention_backward_ratio(seq: int, head_dim: float = 128) -> float:
    """Flash-attention backward / forward time for sequence length ``seq`` and ``head_dim``.

    Sequence term 2.90 + 615 / seq: a least-squares fit to the median ratios by sequence
    length of Zhang et al. 2025's A100 measurements (estimate-train-time, Perlmutter
    flash_atten: 3.50 at 1024, 3.19 at 2048, 3.03 at >= 4096), each row first divided by
    its head dim's ``FA2_BWD_HEAD_DIM_RATIO``. The FLOP ratio alone is 2.5 (FlashAttention
    benchmark convention); the rest is the backward kernel's lower efficiency. Head dims
    above 256 keep the 256 kernel's ratio.
    """
    d = float(max(head_dim, 1))
    kernel = min(256, 32 * int(np.ceil(d / 32)))
    by_head_dim = FA2_BWD_HEAD_DIM_RATIO[kernel] * (1.0 if d == kernel or d > 256 else FA2_PADDED_BWD_RATIO)
    return (2.90 + 615.0 / max(seq, 1)) * by_head_dim


# Causal / non-causal FlashAttention-2 fwd+bwd TFLOP/s on A100 80GB, head_dim 128, by sequence length
# (FlashAttention README benchmark figures, hardware_and_formulas.md section 4b).
_FA2_A100_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
_FA2_A100_CAUSAL = (99, 133, 155, 173, 182, 189)
_FA2_A100_FULL = (151, 173, 187, 196, 201, 203)


# The same pair of curves for the kernel the H100 built-in table is brought to (``FA2_LEVEL_DEVICES``):
# cuDNN fused attention's causal and non-causal forward TFLOP/s on H100, head dim 128, 16 heads, batch
# 16k / seq -- the FA2 README's constant-token design -- from the FlashAttention-3 paper (arXiv 2407.08608,
# Fig. 5; docs/hardware_and_formulas.md section 4c). Forward figures: the paper has no cuDNN backward.
_CUDNN_H100_FULL = (497, 574, 617, 609, 600, 595)
ATTENTION_SHAPE_CURVES: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {
    "h100-sxm5-80gb": (_FA2_A100_SEQ, (315, 410, 484, 518, 529, 539), _CUDNN_H100_FULL),
}
"""Per GPU, (sequence lengths, causal, non-causal forward TFLOP/s) of its training kernel at a constant 16k
tokens: the causal / non-causal and key-length shape factors below read the run's GPU's curves for its
forward kernels. Backward kernels, and every GPU not listed, take FlashAttention-2's A100 README curves
(``_FA2_A100_*``, forward + backward figures): no backward curve of cuDNN is published in these sources."""


def shape_curve_device(gpu: str | None, family: str) -> str | None:
    """Whose ``ATTENTION_SHAPE_CURVES`` an attention kernel of ``family`` reads: ``gpu``'s for a forward
    kernel (the curves are forward figures), the default ones (None) for a backward kernel."""
    return gpu if family == "attention_fwd" else None


def _shape_curves(device: str | None) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    return ATTENTION_SHAPE_CURVES.get(device or "", (_FA2_A100_SEQ, _FA2_A100_CAUSAL, _FA2_A100_FULL))


@lru_cache(maxsize=4096)  # pure, and asked again for every strategy whose stage decomposes anew
def noncausal_time_factor(seq: int, device: str | None = None) -> float:
    """Non-causal / causal attention time at the same shape: twice the FLOPs at a higher efficiency
    (the ratio of ``device``'s published curves, ``ATTENTION_SHAPE_CURVES``)."""
    seqs, causal, full = _shape_curves(device)
    x = np.log2(np.clip(seq, seqs[0], seqs[-1]))
    ratio = np.interp(x, np.log2(seqs), np.array(causal) / np.array(full))
    return float(2.0 * ratio)


@lru_cache(maxsize=4096)  # pure, and asked again for every strategy whose stage decomposes anew
def key_length_time_factor(queries: int, keys: int, device: str | None = None) -> float:
    """Time of a non-causal attention kernel of ``queries`` x ``keys`` against ``keys / queries`` square
    ``queries`` x ``queries`` kernels of the same batch and heads (1 for ``keys <= queries``).

    Both launch the same thread blocks (one per query tile and head); the longer kernel loops each
    over more keys, so its per-block fixed work (loading the query tile, the output's final scaling
    and store) is amortised over more. The published non-causal figures isolate that: batch x seq
    is held at 16k tokens, so every sequence length runs the same number of blocks and only the
    keys per block change. The factor is the ratio of those throughputs, held beyond 16k: on A100
    (FlashAttention-2: 151 TFLOP/s at 512 keys, 196 at 4k, 203 at 16k) longer loops gain up to 26%;
    on H100 (cuDNN, ``ATTENTION_SHAPE_CURVES``: 497, 617 at 2k, 595 at 16k) they gain up to 2k keys
    and lose 4% beyond it.
    """
    if keys <= queries:
        return 1.0
    seqs, _, full = _shape_curves(device)
    x = np.log2(np.clip([queries, keys], seqs[0], seqs[-1]))
    tflops = np.interp(x, np.log2(seqs), full)
    return float(tflops[0] / tflops[1])


# The built-in A100 attention table (aiconfigurator-core, SGLang 0.5.10 "flash_attention" causal
# prefill) matches FlashAttention-2's published causal throughput at long sequences (the table
# predictor's forward TFLOP/s at the README's configuration -- batch 16384 / seq, 16 heads of 128 --
# is 186 and 190 at 8k and 16k against the README's 182 and 189) but falls behind at short ones
# (135 against 155 at 2k, 102 against 133 at 1k, 63 against 99 at 512): the prefill path carries
# costs the training kernel does not. FA2_LEVEL_DEVICES names the built-in profiles whose attention
# times are brought to the FlashAttention-2 level by the ratio of the table's predicted causal
# throughput to the README's at that configuration, interpolated in sequence length (see
# OperatorTimer). Derived from published figures and the table alone; checked out of sample on Zhang
# et al. 2025's A100 FlashAttention-2 measurements (benchmarks/training_kernels.py, 4071 non-causal
# rows): forward MAPE 23.2% -> 12.8% and median error +17% -> +6% against the same pipeline without
# it. H100 is brought to cuDNN's level (below); newer tables hold FlashInfer or TRT-LLM kernels, for
# which no published training-kernel figures are used here.
FA2_LEVEL_DEVICES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "a100-sxm4-80gb": (_FA2_A100_SEQ, _FA2_A100_CAUSAL),
}
# The built-in H100 table (aiconfigurator-core prefill kernels) runs at FlashAttention-3's level: its
# causal forward at the configuration below is 580-620 TFLOP/s at 16k, FA3's published 616. Training
# frameworks on H100 do not run FA3: Transformer Engine (Megatron-Core, NeMo, Megatron-Bridge) picks
# cuDNN fused attention on Hopper ("Disabling FlashAttention to give FusedAttention preference on
# Hopper+ for performance reasons", github.com/NVIDIA/TransformerEngine
# transformer_engine/pytorch/attention/dot_product_attention/utils.py get_attention_backend), and
# PyTorch SDPA (torchtitan, FSDP scripts) runs FlashAttention-2, slower still. The H100 table is
# therefore brought to cuDNN's published causal forward throughput, head dim 128, batch 16k / seq,
# 16 heads (FlashAttention-3 paper, arXiv 2407.08608, Fig. 5 as Dao-AILab/flash-attention
# assets/flash3_fp16_fwd.png; docs/hardware_and_formulas.md section 4c): the faster of the two
# training kernels, so runs on SDPA stay a lower bound.
FA2_LEVEL_DEVICES["h100-sxm5-80gb"] = ATTENTION_SHAPE_CURVES["h100-sxm5-80gb"][:2]
FA2_LEVEL_HEADS = 16
FA2_LEVEL_HEAD_DIM = 128
FA2_LEVEL_TOKENS = 16384
# The same table loses more throughput than FlashAttention-2's training kernel when few (batch x
# head) pairs share the GPU: against Zhang et al. 2025's A100 measurements the level-corrected
# table over-predicted by a median +29% at batch x heads < 12, +17% at 12-23 and +6% at 24-47,
# and by under 3% from 48 up, at every sequence length and head dim. FA2_LEVEL_DEVICES' times are
# therefore also scaled by 1 / (1 + FA2_PARALLELISM_PAIRS / (batch x heads)) (see
# fa2_parallelism_factor), the level factors being taken at the README's own batch x heads so that
# the README configurations keep their published throughput. FA2_PARALLELISM_PAIRS = 4 minimises
# the forward MAPE over those 4071 rows among 2, 2.5, ..., 5 (in-sample: derived from the rows
# benchmarks/training_kernels.py scores).
FA2_PARALLELISM_PAIRS = 4.0


def fa2_parallelism_factor(batch_heads: Any) -> np.ndarray:
    """Time factor of an ``FA2_LEVEL_DEVICES`` table at ``batch x heads`` pairs: ``1 / (1 + 4 / pairs)``."""
    pairs = np.maximum(np.asarray(batch_heads, dtype=float), 1.0)
    return 1.0 / (1.0 + FA2_PARALLELISM_PAIRS / pairs)


# Devices whose level factors carry ``fa2_parallelism_factor``: it was derived against
# FlashAttention-2 measurements on A100 alone (above); the H100 cuDNN level is applied without it.
FA2_PARALLELISM_DEVICES = frozenset({"a100-sxm4-80gb"})


def level_parallelism_factor(device: str, batch_heads: Any) -> np.ndarray:
    """``fa2_parallelism_factor`` on ``FA2_PARALLELISM_DEVICES``, 1 elsewhere."""
    if device in FA2_PARALLELISM_DEVICES:
        return fa2_parallelism_factor(batch_heads)
    return np.ones_like(np.asarray(batch_heads, dtype=float))


def fa2_level_factors(device: str, causal_seconds: Any) -> np.ndarray | None:
    """Per README sequence length, FlashAttention-2 time / (table time x parallelism factor); None without figures.

    Parameters
    ----------
    device : str
        Profile device name (a key of ``FA2_LEVEL_DEVICES``).
    causal_seconds : callable
        ``causal_seconds(batch, seq, heads, kv_heads, head_dim) -> seconds`` (arrays): the table's
        causal forward prediction.
    """
    if device not in FA2_LEVEL_DEVICES:
        return None
    seqs, causal_tflops = (np.asarray(v, dtype=float) for v in FA2_LEVEL_DEVICES[device])
    batch = FA2_LEVEL_TOKENS / seqs
    heads = np.full_like(seqs, FA2_LEVEL_HEADS)
    table = np.asarray(causal_seconds(batch, seqs, heads, heads, np.full_like(seqs, FA2_LEVEL_HEAD_DIM)), float)
    flops = 2.0 * batch * seqs * seqs * FA2_LEVEL_HEADS * FA2_LEVEL_HEAD_DIM  # causal forward
    return flops / (causal_tflops * 1e12) / (table * level_parallelism_factor(device, batch * heads))


def fa2_level_factor(device: str, factors: np.ndarray, seq: float) -> float:
    """``fa2_level_factors`` interpolated at ``seq`` (log scale, constant beyond the published range)."""
    seqs = np.asarray(FA2_LEVEL_DEVICES[device][0], dtype=float)
    return float(np.interp(np.log(np.clip(seq, seqs[0], seqs[-1])), np.log(seqs), factors))


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
    # Megatron's fused causal softmax kernel (scaled_upper_triang_masked_softmax), same byte convention
    ("masked_softmax", "fwd"): MemoryKernelFit(27.4e-6, 0.850, _ETT.format("ScaledUpperTriangMaskedSoftmax")),
    ("masked_softmax", "bwd"): MemoryKernelFit(40.3e-6, 0.896, _ETT.format("ScaledUpperTriangMaskedSoftmax")),
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
    # Megatron-Core's fused RoPE (Transformer Engine fused_apply_rotary_pos_emb) is one kernel
    # reading q and k once and writing them: a streaming kernel like res_add. "rope" is the
    # eager multi-kernel RoPE the A100 measurements timed.
    "rope_fused": "residual",
    "rope": "rope", "attn_residual": "residual", "mlp_residual": "residual",
    "attn_dropout": "residual", "mlp_dropout": "residual",  # fused bias-dropout-add, a streaming kernel
    # unfused attention's dropout on the probabilities (torch native_dropout), a streaming kernel too
    "attention_probs_dropout": "residual", "attention_window_probs_dropout": "residual",
    "attention_masked_softmax": "masked_softmax", "attention_window_masked_softmax": "masked_softmax",
    "mlp": "activation", "moe": "activation", "attention": "softmax",
    "embedding": "gather", "cross_entropy": "cross_entropy", "adam": "optimizer",
}


def memory_kind(op: Op) -> str:
    """The memory-bound kernel kind of ``op`` (MoE permutations stream like a residual add)."""
    # A token permutation copies whole rows of hidden_size x 2 bytes (>= 4 KiB each): it streams at
    # HBM bandwidth like the measured res_add kernel, not like the small-row embedding gather fit.
    if ".permute" in op.name or ".unpermute" in op.name:
        return "residual"
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
    return fwd if op.family == "attention_fwd" else fwd * attention_backward_ratio(op.shape[1], op.shape[4])


def what_if_time_ratio(op: Op, gpu: GPUSpec, reference: GPUSpec) -> float:
    """Time of ``op`` on ``gpu`` over its time on ``reference``, by the analytic model of its family.

    Converts a time measured on ``reference`` (the catalog GPU a profile was measured on) to
    ``gpu``, the same GPU with run-spec overrides of its figures: GEMM and attention kernels by
    the ratio of their rooflines (the peak FLOP/s of their dtype where compute-bound, HBM
    bandwidth where memory-bound), memory-bound kernels and the optimizer step by the ratio of
    their bandwidth fits (the fixed launch cost ``t0`` unscaled). A measured time at or above
    its roofline on ``reference`` stays at or above its roofline on ``gpu``.
    """
    if op.family == "gemm":
        timing = gemm_roofline_seconds
    elif op.family in ("attention_fwd", "attention_bwd"):
        timing = attention_roofline_seconds
    else:
        timing = memory_op_seconds
    return timing(op, gpu) / timing(op, reference)
