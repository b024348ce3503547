"""Shapes beyond a table's range, timed as equal pieces that lie inside it.

A GEMM's output blocks are independent, so ``Y[m, n]`` with ``m`` (or ``n``) past
the table splits into GEMMs of at most the table's largest ``m`` rows that run
one after the other; a ``k`` past the table splits the same way into partial
products that are added (split-K; the extra pass over the fp32 partial sums is
left out). Attention heads and sequences of a batch are independent in the same
way. The op's time is the piece's time x the op's work / the piece's work (its
``scale``, e.g. 2.6 for an ``n`` of 2.6 x the table's largest): each piece is at
least half the table's largest size in the split dimension, so it fills the GPU
and time grows with work. Sequence length is never split: attention's work
grows with its square.

Used by ``costmodel.timing`` before it falls back to the roofline; the op's
notes say when a time was composed this way. A dimension counts as inside the
table as the predictors' own range check has it (``RANGE_MARGIN``: a quarter
beyond the sampled edges); only dimensions past that are split.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from costmodel.predictors._range import RANGE_MARGIN

Range = Mapping[str, tuple[float, float]]

GEMM_COLUMNS = ("m", "n", "k")


def gemm_pieces(shape: Sequence[int], ranges: Range) -> tuple[float, tuple[int, int, int]] | None:
    """``(scale, piece shape)`` of an ``(m, n, k)`` GEMM whose dimensions exceed ``ranges``.

    ``ranges`` maps ``m``, ``n``, ``k`` to the table's sampled ``(min, max)``. None
    when nothing exceeds a maximum, or a dimension lies below its minimum (a
    smaller piece would not help).
    """
    counts = []
    for value, name in zip(shape, GEMM_COLUMNS, strict=True):
        low, high = ranges[name]
        if value < low / RANGE_MARGIN:
            return None
        counts.append(1 if value <= high * RANGE_MARGIN else math.ceil(value / high))
    if counts == [1, 1, 1]:
        return None
    piece = tuple(math.ceil(value / count) for value, count in zip(shape, counts, strict=True))
    return math.prod(shape) / math.prod(piece), piece  # type: ignore[return-value]


def attention_pieces(shape: Sequence[int], ranges: Range) -> tuple[float, tuple[int, ...]] | None:
    """``(scale, piece shape)`` of an attention op split over its batch and heads.

    ``shape`` is ``(batch, seq, heads, kv_heads, head_dim, ...)``; ``ranges`` holds
    the table's ``batch``, ``seq_len``, ``num_heads``, ``num_kv_heads`` and
    ``tokens`` (batch x seq) ranges. Heads split in groups that keep the
    query/key-value ratio (rounded up). None when the sequence is outside the table or
    nothing exceeds a maximum.
    """
    batch, seq, heads, kv_heads = (int(v) for v in shape[:4])
    low_seq, high_seq = ranges["seq_len"]
    if not low_seq / RANGE_MARGIN <= seq <= high_seq * RANGE_MARGIN:
        return None

    def pieces(value: float, name: str) -> int:
        high = ranges[name][1]
        return 1 if value <= high * RANGE_MARGIN else math.ceil(value / high)

    batch_pieces = max(pieces(batch, "batch"), pieces(batch * seq, "tokens"))
    head_pieces = max(pieces(heads, "num_heads"), pieces(kv_heads, "num_kv_heads"))
    if batch_pieces == head_pieces == 1:
        return None
    piece = (math.ceil(batch / batch_pieces), seq, math.ceil(heads / head_pieces),
             max(1, math.ceil(kv_heads / head_pieces)), *shape[4:])
    return batch * heads / (piece[0] * piece[2]), piece


def attention_long_sequence(shape: Sequence[int], ranges: Range) -> tuple[float, tuple[int, ...]] | None:
    """``(scale, piece shape)`` of a causal attention op whose sequence exceeds the table.

    The piece is the op at the table's in-range sequence edge (``max seq_len x RANGE_MARGIN``),
    its batch and heads split further by ``attention_pieces`` where they too exceed the table;
    ``scale`` is the op's work over the piece's (``s^2`` per (batch, head) pair). That holds the
    kernel's FLOP efficiency at the edge: a flash-attention kernel at long sequences is
    compute-bound with its efficiency flat in sequence length (FlashAttention-2 README, A100 causal
    fwd+bwd 182 -> 189 TFLOP/s from 8k to 16k, a rise of 4% per doubling; so holding it is a lower
    bound on the efficiency), and the time is continuous at the table's edge. None when the
    sequence is inside the table.
    """
    seq = int(shape[1])
    edge = int(ranges["seq_len"][1] * RANGE_MARGIN)
    if seq <= edge:
        return None
    clipped = (int(shape[0]), edge, *(int(v) for v in shape[2:]))
    split = attention_pieces(clipped, ranges)
    scale, piece = split if split is not None else (1.0, clipped)
    return scale * (seq / edge) ** 2, piece
