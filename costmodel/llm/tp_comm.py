"""Tensor-parallel communication of one transformer layer, as Transformer Engine issues it.

Per layer and micro-batch, with sequence parallelism, the two column-parallel GEMMs (``qkv``,
``fc1``) all-gather their input and the two row-parallel GEMMs (``proj``, ``fc2``) reduce-scatter
their output. In the backward the row-parallel GEMMs all-gather the output gradient before
their dgrad, and the column-parallel GEMMs re-gather their (sharded, saved) input for the wgrad
and reduce-scatter the dgrad (github.com/NVIDIA/TransformerEngine @d0067d0d
transformer_engine/pytorch/module/layernorm_linear.py backward: ``gather_along_first_dim(ln_out,
async_op=True)`` under the dgrad GEMM, ``reduce_scatter_along_first_dim(dgrad, async_op=True)``
under the wgrad GEMM; base.py ``grad_output_preprocess`` gathers the row-parallel output
gradient before both). Without sequence parallelism the row-parallel outputs and the
column-parallel input gradients are all-reduced instead (the latter under the wgrad GEMM).

Without userbuffers those two backward collectives still overlap their independent GEMM on
NCCL's stream (a *bulk* overlap, compute slowed by ``NCCL_COMPUTE_SLOWDOWN``); the rest is
exposed. With ``tp_comm_overlap`` each GEMM runs with the userbuffers method TE assigns it
(``UB_METHODS``): *ring exchange* splits the gathered GEMM into ``tp`` chunks, each computed
while the next chunk arrives (the local chunk first, so only per-step excess shows);
*pipeline* splits a GEMM into ``num_splits`` chunks whose reduce-scatter runs under the next
chunk's GEMM (the last chunk's reduce-scatter is the drain); *bulk* runs a whole collective
beside an independent GEMM. A chunk GEMM is timed at its own shape (a smaller GEMM runs
less efficiently); the exposed time is everything beyond the un-split GEMMs the stage already
books. The userbuffer kernels occupy ``num_sm`` SMs, which the GEMM beside them loses: for the
GEMM's whole length where TE launches it with an SM margin (``Framework.tp_comm_sm_margin``,
``set_sm_margin``: TE >= 2.0 for pipeline and bulk), otherwise only while the comm kernel runs
(TE 1.x: no margin, the GEMM takes every SM and shares them with the comm kernel while it is
resident).

FP8 recipes all-gather FP8 activations and output gradients (1 byte) and reduce-scatter in
bf16: TE quantises before ``gather_along_first_dim(..., quantizer=...)`` in layernorm_linear.py
forward and backward and base.py ``grad_output_preprocess``; the reduce-scatters of linear.py
and layernorm_linear.py act on the bf16 GEMM output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from costmodel.llm.messages import BF16, activation_bytes, activation_wire_bytes, rank_tokens
from costmodel.ops import Op, gemm
from costmodel.llm.recompute import layer_recompute_fraction, recompute_policy
from costmodel.llm.sharding import NCCL_COMPUTE_SLOWDOWN, overlapped_seconds, slowed_compute_seconds
from costmodel.specs.runspec import RunSpec
from costmodel.timing import OperatorTimer

__all__ = ["UB_METHODS", "UbMethod", "activation_wire_bytes", "bulk_seconds", "pipelined_scatter_seconds",
           "ring_gather_seconds", "sm_share_slowdown", "tp_layer_exposed_s"]

Collective = Callable[[str, float], float]
"""``(op, message_bytes) -> seconds`` on the tensor-parallel group."""


@dataclass(frozen=True)
class UbMethod:
    """One GEMM's userbuffers overlap: ``ring_exchange``, ``pipeline`` or ``bulk``, its SMs and splits."""

    method: str
    num_sm: int
    num_splits: int  # 0: tp chunks (ring exchange)


# Transformer Engine's default userbuffers configuration (github.com/NVIDIA/TransformerEngine
# @d0067d0d transformer_engine/pytorch/module/base.py initialize_ub: ``methods`` and
# ``get_default_config``: num_sm 1 for ring_exchange (copy engine, no SM margin), 16 otherwise;
# num_splits tp for ring_exchange, 4 for pipeline). Megatron-Core passes no ub_cfgs unless
# --tp-comm-overlap-cfg is given, so these defaults are what --tp-comm-overlap runs. TE v1.7's
# defaults are the same splits and 16 SMs for pipeline and bulk (add_ub(num_sm=16, ...)); its ring
# exchange also names 16 but moves data by copy engine (use_ce = 1 in csrc/comm_gemm_overlap.h
# UbufP2PCommOverlap), so 1 stands for it there too. Only the SM margin differs (tp_comm_sm_margin).
UB_METHODS: Final[dict[str, UbMethod]] = {
    "qkv_fprop": UbMethod("ring_exchange", 1, 0),
    "fc1_fprop": UbMethod("ring_exchange", 1, 0),
    "proj_dgrad": UbMethod("ring_exchange", 1, 0),
    "fc2_dgrad": UbMethod("ring_exchange", 1, 0),
    "proj_fprop": UbMethod("pipeline", 16, 4),
    "fc2_fprop": UbMethod("pipeline", 16, 4),
    "qkv_dgrad": UbMethod("bulk", 16, 0),  # all-gather of the saved input under the dgrad GEMM
    "qkv_wgrad": UbMethod("bulk", 16, 0),  # reduce-scatter of the dgrad under the wgrad GEMM
    "fc1_dgrad": UbMethod("bulk", 16, 0),
    "fc1_wgrad": UbMethod("bulk", 16, 0),
}


def sm_share_slowdown(num_sm: int, num_sms: int) -> float:
    """Fractional slowdown of a compute-bound GEMM that gives ``num_sm`` of ``num_sms`` SMs to a comm kernel."""
    return num_sm / max(num_sms - num_sm, 1)


def ring_gather_seconds(chunk_gemm_s: float, chunk_p2p_s: float, chunks: int, slowdown: float) -> float:
    """All-gather GEMM by ring exchange: chunk ``i`` computes while chunk ``i + 1`` arrives.

    The local chunk needs no transfer, so only a transfer longer than its chunk GEMM shows;
    the last chunk computes alone.
    """
    if chunks <= 1:
        return chunk_gemm_s
    return (chunks - 1) * overlapped_seconds(chunk_gemm_s, chunk_p2p_s, slowdown) + chunk_gemm_s


def pipelined_scatter_seconds(chunk_gemm_s: float, chunk_rs_s: float, chunks: int, slowdown: float,
                              margin: bool = True) -> float:
    """GEMM split in ``chunks`` whose reduce-scatters follow each chunk on one comm channel.

    ``margin``: the GEMM runs on the SMs the comm kernel leaves (``slowdown``) throughout;
    otherwise a chunk is slowed only while an earlier chunk's reduce-scatter is in flight. The
    first chunk's GEMM (fill) and the last chunk's reduce-scatter (drain) are never hidden.
    """
    gemm_end = comm_end = 0.0
    for _ in range(max(chunks, 1)):
        if margin:
            gemm_end += chunk_gemm_s * (1 + slowdown)
        else:
            gemm_end += slowed_compute_seconds(chunk_gemm_s, max(0.0, comm_end - gemm_end), slowdown)
        comm_end = max(comm_end, gemm_end) + chunk_rs_s
    return comm_end


def bulk_seconds(gemm_s: float, comm_s: float, slowdown: float, margin: bool) -> float:
    """A whole collective beside an independent GEMM.

    ``margin``: the GEMM runs on fewer SMs for its whole length (userbuffers ``set_sm_margin``);
    otherwise it is slowed only while the collective runs (NCCL on its own stream).
    """
    if margin:
        return max(gemm_s * (1 + slowdown), comm_s)
    return overlapped_seconds(gemm_s, comm_s, slowdown)


@dataclass(frozen=True)
class _Linear:
    """One TP linear of a layer: ``name``, ``n`` outputs and ``k`` inputs per GPU, column or row parallel."""

    name: str
    n: int
    k: int
    column: bool


def _layer_linears(run: RunSpec, moe: bool = False) -> tuple[_Linear, ...]:
    """The TP-split linears of a layer (MLA's projections are priced as the qkv GEMM).

    A dense layer has four. In an MoE layer the routed experts take their tokens from the token
    dispatcher, which does the MLP side's sequence-parallel gather and scatter itself (over the
    expert groups, ``costmodel.llm.moe``): Megatron-Core's ``MoELayer`` calls no TP collective
    around the experts (megatron/core/transformer/moe/moe_layer.py @d98e8a64). Only the shared
    experts, a TP MLP on the dense group, gather and reduce-scatter
    (shared_experts.py: ``gather_from_sequence_parallel_region`` /
    ``reduce_scatter_to_sequence_parallel_region`` over ``tp_group``).
    """
    model, tp = run.model, run.strategy.tp
    heads = max(1, model.num_attention_heads // tp)
    kv = max(1, model.num_query_groups // tp)  # type: ignore[operator]
    qkv = heads * model.head_dim + 2 * kv * model.head_dim  # type: ignore[operator]
    out = heads * model.v_head_dim  # type: ignore[operator]
    h = model.hidden_size
    attention = (_Linear("qkv", qkv, h, True), _Linear("proj", h, out, False))
    if moe and not model.num_shared_experts:
        return attention
    ffn = model.moe_ffn_hidden_size * model.num_shared_experts if moe else model.ffn_hidden_size
    inner = ffn // tp  # type: ignore[operator]
    up = (2 if model.activation == "swiglu" else 1) * inner
    return attention + (_Linear("fc1", up, h, True), _Linear("fc2", h, inner, False))


GemmSeconds = Callable[[str, int, int, int], float]
"""``(role, m, n, k) -> seconds`` of one GEMM in the run's precision (``_gemm_op``)."""


def _gemm_op(role: str, m: int, n: int, k: int, precision: str) -> Op:
    """One GEMM ``(m, n, k)`` in the run's precision, as ``costmodel.llm.decompose`` builds the linears."""
    return gemm(f"tp_chunk.{role}", "fwd" if role == "fwd" else "bwd", max(m, 1), n, k, precision, 1.0,
                1.0 if precision == "fp8" else 2.0)


def _forward_exposed(run: RunSpec, gemm_s: GemmSeconds, collective: Collective, lin: _Linear) -> float:
    s = run.strategy
    tokens = rank_tokens(run)
    precision, tp = s.precision, s.tp
    full = gemm_s("fwd", tokens, lin.n, lin.k)
    gathered = activation_bytes(run, activation_wire_bytes(precision))
    reduced = activation_bytes(run, BF16)
    if not s.sequence_parallel:
        return 0.0 if lin.column else collective("all_reduce", reduced)
    if not s.tp_comm_overlap:
        return collective("all_gather", gathered) if lin.column else collective("reduce_scatter", reduced)
    cfg = UB_METHODS[f"{lin.name}_fprop"]
    slow = sm_share_slowdown(cfg.num_sm, run.cluster.gpu.num_sms)
    if lin.column:  # ring exchange over tp chunks of the gathered input
        chunk = gemm_s("fwd", tokens // tp, lin.n, lin.k)
        return ring_gather_seconds(chunk, collective("send_recv", gathered / tp), tp, slow) - full
    splits = cfg.num_splits
    chunk = gemm_s("fwd", tokens // splits, lin.n, lin.k)
    return pipelined_scatter_seconds(chunk, collective("reduce_scatter", reduced / splits), splits, slow,
                                     run.framework.tp_comm_sm_margin) - full


def _backward_exposed(run: RunSpec, gemm_s: GemmSeconds, collective: Collective, lin: _Linear) -> float:
    s = run.strategy
    tokens = rank_tokens(run)
    precision, tp = s.precision, s.tp
    dgrad = gemm_s("dgrad", tokens, lin.k, lin.n)
    wgrad = gemm_s("wgrad", lin.n, lin.k, tokens)
    gathered = activation_bytes(run, activation_wire_bytes(precision))
    reduced = activation_bytes(run, BF16)
    if not s.sequence_parallel:  # input-gradient all-reduce of column linears under their wgrad
        if not lin.column:
            return 0.0
        return bulk_seconds(wgrad, collective("all_reduce", reduced), NCCL_COMPUTE_SLOWDOWN, False) - wgrad
    if not s.tp_comm_overlap:
        if not lin.column:  # output-gradient all-gather before dgrad and wgrad
            return collective("all_gather", gathered)
        return (bulk_seconds(dgrad, collective("all_gather", gathered), NCCL_COMPUTE_SLOWDOWN, False) - dgrad
                + bulk_seconds(wgrad, collective("reduce_scatter", reduced), NCCL_COMPUTE_SLOWDOWN, False) - wgrad)
    num_sms = run.cluster.gpu.num_sms
    if not lin.column:  # ring exchange of the output gradient over tp dgrad chunks
        cfg = UB_METHODS[f"{lin.name}_dgrad"]
        chunk = gemm_s("dgrad", tokens // tp, lin.k, lin.n)
        slow = sm_share_slowdown(cfg.num_sm, num_sms)
        return ring_gather_seconds(chunk, collective("send_recv", gathered / tp), tp, slow) - dgrad
    ag, rs = UB_METHODS[f"{lin.name}_dgrad"], UB_METHODS[f"{lin.name}_wgrad"]
    margin = run.framework.tp_comm_sm_margin
    return (bulk_seconds(dgrad, collective("all_gather", gathered), sm_share_slowdown(ag.num_sm, num_sms), margin)
            - dgrad
            + bulk_seconds(wgrad, collective("reduce_scatter", reduced), sm_share_slowdown(rs.num_sm, num_sms),
                           margin) - wgrad)


def tp_layer_exposed_s(run: RunSpec, timer: OperatorTimer, collective: Collective, moe: bool = False) -> float:
    """Exposed TP seconds of one layer per micro-batch: forward (again where whole layers are recomputed) and backward.

    ``collective(op, bytes)`` times one collective on the run's tensor-parallel group; ``moe``:
    an MoE layer, whose routed experts' communication is the dispatcher's (``costmodel.llm.moe``).
    """
    s = run.strategy
    if s.tp == 1:
        return 0.0
    forward_passes = 1 + layer_recompute_fraction(recompute_policy(run))
    linears, precision = _layer_linears(run, moe), s.precision
    # A dry run lists the layer's GEMM shapes so that the timer predicts them in one call (a predictor
    # call costs ~0.2 ms whatever its rows); the real run below then finds each one timed.
    shapes: list[Op] = []

    def listed(role: str, m: int, n: int, k: int) -> float:
        shapes.append(_gemm_op(role, m, n, k, precision))
        return 1.0

    for lin in linears:
        for exposed in (_forward_exposed, _backward_exposed):
            exposed(run, listed, _no_wire, lin)
    timer.time_ops(shapes)

    def gemm_s(role: str, m: int, n: int, k: int) -> float:
        return float(timer.time_ops([_gemm_op(role, m, n, k, precision)]).seconds[0])

    total = 0.0
    for lin in linears:
        # a chunk GEMM timed faster than its share of the whole is table noise, not hidden time
        total += forward_passes * max(0.0, _forward_exposed(run, gemm_s, collective, lin))
        total += max(0.0, _backward_exposed(run, gemm_s, collective, lin))
    return total


def _no_wire(op: str, message_bytes: float) -> float:
    """A collective that takes no time (``tp_layer_exposed_s``'s dry run)."""
    return 0.0
