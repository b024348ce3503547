"""Context-parallel communication of one attention layer, per ``Strategy.cp_comm_type``.

Transformer Engine's context parallelism (``cp_comm_type``, github.com/NVIDIA/TransformerEngine
@d0067d0d transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py), as
Megatron-Core passes it (``--cp-comm-type``):

- ``p2p`` (``AttnFuncWithCPAndKVP2P``): K/V circulate in a ring of ``cp`` steps. Causal load
  balancing gives each rank chunks ``r`` and ``2cp-1-r`` of the ``2cp`` sequence chunks, so every
  step after the diagonal one is a non-causal attention of two ``s/(2cp)`` chunks, and the
  diagonal step a causal attention of ``s/cp``. Forward: step ``i < cp-1`` sends the K/V the
  next step needs while it computes; the last step computes alone. Backward: step 0 sends K/V,
  middle steps K/V and the running dK/dV, the last step dK/dV only, each under that step's
  attention backward. Each step waits for its transfer, so a transfer longer than the step's
  attention shows, and the attention, split in steps, runs at the smaller chunk's efficiency.
- ``all_gather`` (``AttnFuncWithCPAndKVAllGather``, the Llama 3 variant, Dubey et al. 2024
  Sec. 3.3.2): K and V all-gathered before the forward, again in the backward, and dK/dV
  reduce-scattered after it; nothing hides them. Rank r runs one kernel per local chunk c in
  {r, 2cp-1-r}, s/(2cp) queries against the (c+1) chunks before them: the thread blocks of
  s/(2cp) queries, each looping over the longer key range, which the stage books
  (``costmodel.llm.decompose._gathered_attention_chunks``), not the whole sequence's. Around them TE
  reorders and accumulates the gathered tensors on the compute stream (sbhd, Megatron's layout):
  forward, ``torch.index_select`` of the gathered K and V into sequence order and each step's
  output copied into the rank's output; backward, the same reorder, ``torch.zeros`` dK/dV of the
  gathered size, each step's dK/dV ``add_`` into its slice of them (the two slices cover
  (2cp+1)/(2cp) of the sequence), ``index_select`` back to rank order before the reduce-scatter,
  and each step's dQ copied out (``all_gather_layout_seconds``).
- ``a2a`` (``AttnFuncWithCPAndQKVOA2A``, DeepSpeed-Ulysses, Jacobs et al. 2023): all-to-all of
  Q, K, V from sequence- to head-sharding before the attention and of the output back after it;
  the backward all-to-alls dO and dQ, dK, dV. Each rank then runs full-sequence attention on
  ``heads / (tp * cp)`` heads. TE requires the per-rank query and KV heads divisible by cp. Around
  each all-to-all TE copies the tensor into and out of its exchange layout
  (``flash_attn_a2a_communicate``: ``movedim(-3, 0).contiguous()`` before it, then
  ``reorder_seq_chunks_for_a2a_*``' ``movedim(...).contiguous()`` and ``index_select``; the same
  three the other way after the attention): ``A2A_LAYOUT_COPIES`` streaming copies on the GPU.

Exposed time is everything beyond the attention the stage already books
(``costmodel.llm.decompose``): for ``p2p`` the stage books the ring's own step kernels, each at
its chunk's efficiency, so what shows is the transfers' excess over the steps beside them and the
merges; ``all_gather`` books its per-chunk kernels, and ``a2a`` the whole-sequence causal kernel
over ``1/cp`` of the work (its own kernel's difference is added here). Compute beside an NCCL
kernel is slowed by ``NCCL_COMPUTE_SLOWDOWN``. The attention core stays bf16 under FP8 recipes,
so K/V travel in bf16. Sliding-window layers are priced like full layers (TE runs them only
with ``all_gather`` or ``a2a``).
"""

from __future__ import annotations

from collections.abc import Callable
from costmodel.analytic import shape_curve_device
from costmodel.llm.decompose import ring_step_kernels
from costmodel.llm.messages import BF16, rank_tokens
from costmodel.ops import Op, memory_op
from costmodel.llm.recompute import attention_recompute_fraction, recompute_policy
from costmodel.llm.sharding import NCCL_COMPUTE_SLOWDOWN, overlapped_seconds
from costmodel.specs.runspec import RunSpec
from costmodel.specs.strategy import CP_COMM_TYPES
from costmodel.timing import OperatorTimer

__all__ = ["CP_COMM_TYPES", "all_gather_layout_seconds", "cp_layer_exposed_s", "kv_chunk_bytes", "p2p_ring_seconds", "ring_merge_seconds"]

# Share of a rank's chunk a ring step's merge touches, averaged over ranks: under causal load
# balancing a step i <= rank covers all of the rank's queries against the first half of the
# received K/V, a later step the second half of its queries against all of it (TE
# AttnFuncWithCPAndKVP2P), so half the steps merge the whole output and dK/dV halves, and the
# others the reverse: 3/4 of both on average.
RING_MERGE_SHARE = 0.75
# Bytes per merged element: read the step's partial, read and write the running result.
RING_MERGE_TOUCHES = 3
# Copies (each a read and a write) of every tensor TE's Ulysses all-to-all exchanges (module docstring).
A2A_LAYOUT_COPIES = 3

Collective = Callable[[str, float], float]
"""``(op, message_bytes) -> seconds`` on the context-parallel group."""


def _attention(family: str, batch: int, seq: int, heads: int, kv_heads: int, head_dim: int, v_head_dim: int,
               causal: bool, count: float = 1.0) -> Op:
    """One flash-attention kernel, with ``costmodel.llm.decompose``'s FLOP and byte counts."""
    fwd = 2.0 * batch * seq * seq * heads * (head_dim + v_head_dim) * (0.5 if causal else 1.0)
    moved = BF16 * batch * seq * (heads * head_dim + heads * v_head_dim + kv_heads * (head_dim + v_head_dim))
    scale = 1 if family == "attention_fwd" else 2
    return Op(f"cp_chunk.{family}", family, "fwd" if scale == 1 else "bwd",
              (batch, seq, heads, kv_heads, head_dim, int(causal)), scale * fwd, scale * moved, "bf16", count)


def _heads(run: RunSpec, divisor: int) -> tuple[int, int]:
    """(query heads, KV heads) per GPU when heads are split ``divisor`` ways (KV replicated below one)."""
    m = run.model
    return max(1, m.num_attention_heads // divisor), max(1, m.num_query_groups // divisor)  # type: ignore[operator]


def kv_chunk_bytes(run: RunSpec) -> float:
    """Bytes of the K and V one rank holds (``s/cp`` tokens of its KV heads), in bf16."""
    s, m = run.strategy, run.model
    _, kv = _heads(run, s.tp)
    return 2.0 * rank_tokens(run) * kv * m.head_dim * BF16  # type: ignore[operator]


def _seconds(timer: OperatorTimer, op: Op) -> float:
    return float(timer.time_ops([op]).seconds[0]) * op.count


def _booked(run: RunSpec, timer: OperatorTimer, family: str) -> float:
    """Attention a stage books per layer outside the ``p2p`` ring: the whole-sequence causal kernel x 1/cp."""
    s, m = run.strategy, run.model
    heads, kv = _heads(run, s.tp)
    return _seconds(timer, _attention(family, s.micro_batch_size, run.seq_length, heads, kv, m.head_dim,  # type: ignore[arg-type]
                                      m.v_head_dim, True, 1.0 / s.cp))  # type: ignore[arg-type]


def p2p_ring_seconds(step_s: list[float], comm_s: list[float], slowdown: float = NCCL_COMPUTE_SLOWDOWN) -> float:
    """A ring of attention steps, each waiting for the transfer issued beside it (0: none)."""
    return sum(overlapped_seconds(a, c, slowdown) if c > 0 else a for a, c in zip(step_s, comm_s))


def ring_merge_seconds(run: RunSpec, timer: OperatorTimer, forward: bool) -> float:
    """One layer's merges of a ``p2p`` ring pass: ``cp - 1`` forward output corrections, or ``cp``
    backward dQ and dK/dV accumulations, each a streaming kernel on the compute stream."""
    s, m = run.strategy, run.model
    heads, _ = _heads(run, s.tp)
    out_bytes = rank_tokens(run) * heads * m.v_head_dim * BF16  # type: ignore[operator]
    if forward:
        merged, steps = out_bytes, s.cp - 1
    else:
        q_bytes = rank_tokens(run) * heads * m.head_dim * BF16  # type: ignore[operator]
        merged, steps = q_bytes + kv_chunk_bytes(run), s.cp
    touched = RING_MERGE_SHARE * merged
    op = memory_op("cp_ring_merge." + ("fwd" if forward else "bwd"), "fwd" if forward else "bwd",
                   touched / BF16, RING_MERGE_TOUCHES * touched, count=steps)
    return _seconds(timer, op) if steps > 0 else 0.0


def _p2p_exposed(run: RunSpec, timer: OperatorTimer, collective: Collective, forward_passes: float) -> float:
    s, m = run.strategy, run.model
    cp, b = s.cp, s.micro_batch_size
    heads, kv = _heads(run, s.tp)
    half = run.seq_length // (2 * cp)
    hd, vhd = m.head_dim, m.v_head_dim
    send = collective("send_recv", kv_chunk_bytes(run))
    total = 0.0
    for family, forward in (("attention_fwd", True), ("attention_bwd", False)):
        diagonal = _seconds(timer, _attention(family, b, 2 * half, heads, kv, hd, vhd, True))  # type: ignore[arg-type]
        off = sum(kernels * _seconds(timer, _attention(family, multiple * b, half, heads, kv, hd, vhd, False))  # type: ignore[arg-type]
                  for multiple, kernels in ring_step_kernels(half, shape_curve_device(run.cluster.gpu.name, family)))
        steps = [diagonal] + [off] * (cp - 1)
        if forward:
            comms = [send] * (cp - 1) + [0.0]
        else:  # K/V out, then K/V and the running dK/dV, then dK/dV back
            comms = [send] + [2 * send] * (cp - 2) + [send]
        # The transfers' excess over the steps they run beside.
        # The stage already books these step kernels (costmodel.llm.decompose._ring_attention_chunks).
        ring = p2p_ring_seconds(steps, comms) - sum(steps) + ring_merge_seconds(run, timer, forward)
        total += (forward_passes if forward else 1) * ring
    return total


def all_gather_layout_seconds(run: RunSpec, timer: OperatorTimer, forward: bool) -> float:
    """One layer's streaming copies around TE's ``all_gather`` attention, forward or backward (module docstring).

    Bytes moved, with G the gathered K and V: forward 2G (reorder) + 2 x the rank's output (copy-out);
    backward 2G (reorder) + G (zeroed dK/dV) + 3G (2cp+1)/(2cp) (read, add, write the slices) + 2G
    (reorder back) + 2 x the rank's dQ (copy-out).
    """
    s, m = run.strategy, run.model
    heads, _ = _heads(run, s.tp)
    gathered = kv_chunk_bytes(run) * s.cp
    if forward:
        per_rank = rank_tokens(run) * heads * m.v_head_dim * BF16  # type: ignore[operator]
        moved = 2 * gathered + 2 * per_rank
    else:
        per_rank = rank_tokens(run) * heads * m.head_dim * BF16  # type: ignore[operator]
        slices = (2 * s.cp + 1) / (2 * s.cp)
        moved = (2 + 1 + 3 * slices + 2) * gathered + 2 * per_rank
    name = "cp_ag_layout." + ("fwd" if forward else "bwd")
    return _seconds(timer, memory_op(name, "fwd" if forward else "bwd", moved / (2 * BF16), moved))


def _all_gather_exposed(run: RunSpec, timer: OperatorTimer, collective: Collective, forward_passes: float) -> float:
    gathered = kv_chunk_bytes(run) * run.strategy.cp
    ag, rs = collective("all_gather", gathered), collective("reduce_scatter", gathered)
    forward = ag + all_gather_layout_seconds(run, timer, True)
    return forward_passes * forward + ag + rs + all_gather_layout_seconds(run, timer, False)


def _a2a_layout_seconds(timer: OperatorTimer, exchanged_bytes: float) -> float:
    """TE's layout copies around one Ulysses all-to-all of ``exchanged_bytes`` (``A2A_LAYOUT_COPIES``)."""
    op = memory_op("cp_a2a_layout.fwd", "fwd", exchanged_bytes / BF16, 2 * exchanged_bytes, count=A2A_LAYOUT_COPIES)
    return _seconds(timer, op)


def _a2a_exposed(run: RunSpec, timer: OperatorTimer, collective: Collective, forward_passes: float) -> float:
    s, m = run.strategy, run.model
    tokens = rank_tokens(run)
    heads, kv = _heads(run, s.tp)
    qkv_bytes = tokens * (heads + 2 * kv) * m.head_dim * BF16  # type: ignore[operator]
    out_bytes = tokens * heads * m.v_head_dim * BF16  # type: ignore[operator]
    qkv = collective("all_to_all", qkv_bytes) + _a2a_layout_seconds(timer, qkv_bytes)
    out = collective("all_to_all", out_bytes) + _a2a_layout_seconds(timer, out_bytes)
    sharded_heads, sharded_kv = _heads(run, s.tp * s.cp)
    total = forward_passes * (qkv + out) + out + qkv
    for family, passes in (("attention_fwd", forward_passes), ("attention_bwd", 1)):
        whole = _seconds(timer, _attention(family, s.micro_batch_size, run.seq_length, sharded_heads, sharded_kv,
                                           m.head_dim, m.v_head_dim, True))  # type: ignore[arg-type]
        total += passes * (whole - _booked(run, timer, family))
    return total


def cp_layer_exposed_s(run: RunSpec, timer: OperatorTimer, collective: Collective) -> float:
    """Exposed CP seconds of one layer per micro-batch: forward (with its recompute) and backward.

    Recomputation that re-runs the attention core re-runs the CP exchange with it (Megatron-Core's
    selective recompute module is ``core_attn``; ``costmodel.llm.recompute``).
    """
    s = run.strategy
    if s.cp == 1:
        return 0.0
    forward_passes = 1 + attention_recompute_fraction(recompute_policy(run))
    kind = s.cp_comm_type
    if kind == "all_gather":
        exposed = _all_gather_exposed(run, timer, collective, forward_passes)
    elif kind == "a2a":
        exposed = _a2a_exposed(run, timer, collective, forward_passes)
    else:
        exposed = _p2p_exposed(run, timer, collective, forward_passes)
    return max(0.0, exposed)
