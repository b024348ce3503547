"""Attention run through FlashAttention-2 where the device's attention table stands at a faster kernel.

PyTorch's ``scaled_dot_product_attention`` (torchtitan, IBM fms-fsdp) picks its CUDA backend by
a priority list (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`` ``priority_order``):
flash (FlashAttention-2 built into PyTorch), efficient, math, with cuDNN last, on every release
except two windows that put cuDNN first on H100:

- 2.5.0 only: the ``cudnn_order`` for sm90 with cuDNN >= 9 (pytorch/pytorch#125343, not in 2.4:
  its revert #128539 and drisspg on #128350, 2024-06-27); 2.5.1 made cuDNN opt-in again, lowest
  priority (#138522, 2024-10-22, cherry-picked onto release/2.5; #142132: a 2.6 nightly's SDPA
  runs 329 TFLOP/s where cuDNN runs 631 on H100).
- 2.9 onwards: ``check_prefer_cudnn_attention`` on sm90/sm100 (#162073, 2025-09), gated on the
  bundled cuDNN (> 9.15 in the current source), which the wheels reach at 2.11
  (huggingface/transformers#48163).

So an SDPA run of 2024 to mid-2025 on H100 runs FlashAttention-2, while the built-in H100 table is
brought to cuDNN fused attention's level (``costmodel.analytic``, Transformer Engine's choice).
``Framework.attention_kernel: fa2`` times the attention cores at FlashAttention-2's published
share of that level, by the kernel's own sequence length:

- forward: FA2 / cuDNN causal forward TFLOP/s, head dim 128, from the FA3 paper's figure
  (``fa2_share_of_table``, the one place that figure lives; FlexAttention's shares are of it too);
- backward: FA2's backward TFLOP/s implied by its published fwd+bwd and fwd throughputs
  (bwd = 2.5 / (3.5 / fwd_bwd - 1 / fwd), the FlashAttention benchmark's 2.5x / 3.5x FLOP
  convention; fwd+bwd from the FlashAttention README's H100 figure, docs/hardware_and_formulas.md
  4b [FA-README-H100], fwd from 4c [FA3-FIG]: two figures of different software versions, so
  approximate) against the table's backward at the level (2.5 x level / the backward/forward
  time ratio, ``costmodel.analytic.attention_backward_ratio``). Checked against the FA3 paper's
  backward figure (arXiv 2407.08608 Fig. 6, head dim 128, H100 SXM5): FA2 backward 310 / 322
  TFLOP/s at 4k / 16k there, against 285 / 325 derived here for the causal kernel.

On devices whose table is at FlashAttention-2's level (A100) both shares are 1.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from costmodel.analytic import FA2_LEVEL_DEVICES, FA2_LEVEL_HEAD_DIM, attention_backward_ratio
from costmodel.ops import Op

__all__ = ["FA2_BELOW_TABLE_LEVEL", "FA2_FWD_BWD_TFLOPS", "fa2_attention_ops", "fa2_backward_share_of_table",
           "fa2_share_of_table", "slower"]

# FlashAttention-2's causal forward TFLOP/s where a device's built-in attention table stands at another
# kernel's level (``costmodel.analytic.FA2_LEVEL_DEVICES``), at that level's sequence lengths. H100 SXM5:
# the FA3 paper's figure that gives the table's cuDNN level, head dim 128, causal (arXiv 2407.08608
# Fig. 5, Dao-AILab/flash-attention assets/flash3_fp16_fwd.png; docs/hardware_and_formulas.md 4c):
# FA2 191 260 298 319 333 335 against cuDNN 315 410 484 518 529 539 at 512 ... 16k, i.e. 0.61-0.63.
FA2_BELOW_TABLE_LEVEL: dict[str, tuple[int, ...]] = {"h100-sxm5-80gb": (191, 260, 298, 319, 333, 335)}


def _at_sequence(seqs: tuple[int, ...], share: np.ndarray, seq_length: int) -> float:
    """``share`` (one value per level sequence length ``seqs``) at ``seq_length``: log-interpolated, held outside."""
    x = math.log2(min(max(seq_length, seqs[0]), seqs[-1]))
    return float(np.interp(x, np.log2(seqs), share))


def fa2_share_of_table(device: str, seq_length: int) -> float:
    """FlashAttention-2's throughput as a share of ``device``'s built-in attention table at ``seq_length``.

    1 where the table stands at FlashAttention-2's level (A100) or no figure says otherwise;
    interpolated in log sequence length and held beyond the figure's range. This is the forward's
    share; the backward has its own (``fa2_backward_share_of_table``).
    """
    fa2 = FA2_BELOW_TABLE_LEVEL.get(device)
    if fa2 is None:
        return 1.0
    seqs, level = FA2_LEVEL_DEVICES[device]
    return _at_sequence(seqs, np.array(fa2, dtype=float) / np.array(level, dtype=float), seq_length)


def slower(op: Op, efficiency: float) -> Op:
    """``op`` run at ``efficiency`` of the rate it is timed at: the same FLOPs, timed as 1 / efficiency executions."""
    return replace(op, count=op.count / efficiency)


# FlashAttention-2 causal fwd+bwd TFLOP/s, head dim 128, batch 16k / seq, at the table level's sequence
# lengths (512 ... 16k). H100 SXM5: FlashAttention README benchmark figure (Dao-AILab/flash-attention
# assets/flash2_h100_fwd_bwd_benchmark.png; docs/hardware_and_formulas.md 4b).
FA2_FWD_BWD_TFLOPS: dict[str, tuple[int, ...]] = {"h100-sxm5-80gb": (163, 221, 265, 294, 308, 328)}


def fa2_backward_share_of_table(device: str, seq_length: int) -> float:
    """FlashAttention-2's backward throughput as a share of ``device``'s table backward at ``seq_length``.

    1 where no figure says otherwise (FA2-level tables); interpolated in log sequence length and
    held beyond the figures' range (module docstring for the derivation).
    """
    fwd_bwd = FA2_FWD_BWD_TFLOPS.get(device)
    fwd = FA2_BELOW_TABLE_LEVEL.get(device)
    if fwd_bwd is None or fwd is None:
        return 1.0
    seqs, level = FA2_LEVEL_DEVICES[device]
    fa2_bwd = 2.5 / (3.5 / np.array(fwd_bwd, dtype=float) - 1.0 / np.array(fwd, dtype=float))
    ratio = np.array([attention_backward_ratio(s, FA2_LEVEL_HEAD_DIM) for s in seqs])
    return _at_sequence(seqs, fa2_bwd / (2.5 * np.array(level, dtype=float) / ratio), seq_length)


def fa2_attention_ops(ops: list[Op], device: str) -> list[Op]:
    """``ops`` (one layer's attention cores, timed by ``device``'s table) as FlashAttention-2 runs them.

    Each kernel is slowed by the share at its own sequence length (``shape[1]``: a context-parallel
    ring step's chunk, not the whole sequence); ops of other families pass unchanged.
    """
    out = []
    for op in ops:
        if op.family == "attention_fwd":
            share = fa2_share_of_table(device, int(op.shape[1]))
        elif op.family == "attention_bwd":
            share = fa2_backward_share_of_table(device, int(op.shape[1]))
        else:
            out.append(op)
            continue
        out.append(slower(op, share))
    return out
