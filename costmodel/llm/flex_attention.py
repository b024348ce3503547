"""Attention run through PyTorch FlexAttention instead of a FlashAttention kernel.

A framework that runs FlexAttention (``Framework.attention_kernel: flex``; NeMo Automodel's GPT-OSS
recipes, ``backend.attn: flex``) differs from the FlashAttention the attention tables time in three
ways, each a mechanism of its own:

- **Kernel throughput.** "FlexAttention achieves 90% of FlashAttention2's performance in the forward
  pass and 85% in the backward pass" (PyTorch blog "FlexAttention: The Flexibility of PyTorch with the
  Performance of FlashAttention", 2024-08-07, causal attention on A100, Performance section). Against
  the FlashAttention-3-class kernels of an H100 table the gap is likely larger; the blog's figures are
  the sourced lower bound. The share is of FlashAttention-2, so where a device's built-in table is
  brought to a faster kernel's level (H100: cuDNN fused attention, ``costmodel.analytic``) the flex
  time is taken from FlashAttention-2's own level there, each direction from its own figure at the
  kernel's sequence length: the forward from ``fa2_share_of_table``, the backward from
  ``fa2_backward_share_of_table`` (the blog's 85% is of FA2's backward, whose share of the table's
  backward differs from the forward's: 0.67 against 0.62 on H100 at 4k).
- **Block-sparse masks.** FlexAttention skips only whole ``BLOCK_SIZE`` x ``BLOCK_SIZE`` blocks of the
  score matrix (``create_block_mask``, default ``BLOCK_SIZE`` 128, same blog, "BlockMask" and FAQ)
  and computes every partly masked block whole. A sliding window of ``w`` keys is a diagonal band:
  each query block touches ``1 + ceil((w - 1) / 128)`` key blocks, 2 for GPT-OSS's ``w = 128``
  (Automodel's mask keeps ``kv <= q and q - kv < w``, nemo_automodel/components/attention/
  flex_attention.py @01926a5c), so it computes 256 keys a query where the window needs 128.
- **Attention sinks.** GPT-OSS's per-head sink is applied outside the kernel: the output is rescaled
  by ``sigmoid(lse - sink)`` and cast back (``out * scale`` in fp32, then ``.to(q.dtype)``, ibid.),
  two streaming element-wise kernels over the output and their backward.
- **Layout copies.** Automodel's flex path hands the kernel ``(batch, heads, seq, dim)`` tensors:
  ``q.transpose(1, 2).contiguous()`` for q, k and v, and the output back by
  ``x.transpose(1, 2).contiguous()`` (nemo_automodel/components/attention/utils.py @01926a5c
  ``preprocess_args_and_kwargs_for_attn`` / ``postprocess_output_for_attn``, ``attn_impl == "flex"``):
  four forward copies, each reading and writing its tensor once. Their backward is a transposed view
  the neighbouring element-wise and GEMM kernels read strided, so no backward copy is counted (a
  lower bound).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from costmodel.llm.fa2_attention import (FA2_BELOW_TABLE_LEVEL, fa2_backward_share_of_table, fa2_share_of_table,
                                         slower)
from costmodel.ops import Op, memory_op

__all__ = ["FA2_BELOW_TABLE_LEVEL", "FLEX_BACKWARD_EFFICIENCY", "FLEX_BLOCK_SIZE", "FLEX_FORWARD_EFFICIENCY",
           "LAYOUT_COPY_BYTES", "fa2_backward_share_of_table", "fa2_share_of_table", "flex_attention_ops",
           "window_keys_computed"]

FLEX_FORWARD_EFFICIENCY = 0.90  # of FlashAttention-2, PyTorch blog 2024-08-07 (module docstring)
FLEX_BACKWARD_EFFICIENCY = 0.85  # ibid.
FLEX_BLOCK_SIZE = 128  # torch.nn.attention.flex_attention.create_block_mask default BLOCK_SIZE


# Bytes per output element of the sink rescale: forward reads the bf16 output and writes the fp32
# product (2 + 4), the cast reads it and writes bf16 (4 + 2); backward: the cast's grad (2 + 4), the
# product's grad to the output (4 + 2) and the rows' sum of grad x output for the sink (4 + 2).
SINK_FORWARD_BYTES = 12
SINK_BACKWARD_BYTES = 18
# Bytes per element of one ``transpose(1, 2).contiguous()`` copy of a bf16 tensor: read 2, write 2.
LAYOUT_COPY_BYTES = 4


def window_keys_computed(window: int, block: int = FLEX_BLOCK_SIZE) -> int:
    """Keys a query's block computes under a causal sliding window of ``window`` keys (whole blocks)."""
    return block * (1 + math.ceil((window - 1) / block))


def flex_attention_ops(ops: list[Op], window: int | None, sinks: bool, output_elements: float,
                       device: str | None = None, layout_copies: Mapping[str, float] | None = None) -> list[Op]:
    """``ops`` (one layer's attention cores, FlashAttention-timed) as FlexAttention runs them.

    Parameters
    ----------
    ops : list of Op
        The layer's attention-core ops (``attention*`` families ``attention_fwd`` / ``attention_bwd``);
        other ops pass through unchanged.
    window : int or None
        The sliding window of the ``attention_window`` ops (their block-sparse overcompute), if any.
    sinks : bool
        Whether the model has attention sinks (rescaled outside the kernel).
    output_elements : float
        Elements of the attention output on this GPU (tokens x heads x value head dim), for the sinks.
    device : str or None
        The GPU whose attention table times ``ops``: each kernel runs at the blog's share of
        FlashAttention-2's forward (``fa2_share_of_table``) or backward (``fa2_backward_share_of_table``)
        share of that table, at the kernel's own sequence length (``shape[1]``); None: the table is
        taken at FlashAttention-2's level.
    layout_copies : mapping of str to float, optional
        Elements on this GPU of each tensor (q, k, v, output) copied once to or from the kernel's
        layout in the forward, one kernel each (module docstring); None: no copies.
    """
    out = []
    for op in ops:
        if op.family not in ("attention_fwd", "attention_bwd"):
            out.append(op)
            continue
        if window and op.name.startswith("attention_window"):
            op = replace(op, count=op.count * window_keys_computed(window) / window)
        seq = int(op.shape[1])
        if op.family == "attention_fwd":
            share = FLEX_FORWARD_EFFICIENCY * (fa2_share_of_table(device, seq) if device else 1.0)
        else:
            share = FLEX_BACKWARD_EFFICIENCY * (fa2_backward_share_of_table(device, seq) if device else 1.0)
        out.append(slower(op, share))
    if sinks:
        out += [memory_op("attention_sink_rescale.fwd", "fwd", output_elements, output_elements * SINK_FORWARD_BYTES),
                memory_op("attention_sink_rescale.bwd", "bwd", output_elements, output_elements * SINK_BACKWARD_BYTES)]
    for tensor, elements in (layout_copies or {}).items():
        out.append(memory_op(f"attention_layout_copy.{tensor}.fwd", "fwd", elements, elements * LAYOUT_COPY_BYTES))
    return out
