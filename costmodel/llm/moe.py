"""Mixture-of-experts layers as Megatron-Core runs them: token dispatch, expert load, overlap.

Read from github.com/NVIDIA/Megatron-LM @d98e8a64, megatron/core/transformer/moe/token_dispatcher.py.
Under sequence parallelism a rank enters the MoE layer with its ``1/tp`` share of the
micro-batch's tokens (``[S/TP * B, H]``); what it then communicates depends on the dispatcher:

- ``allgather`` (``MoEAllGatherTokenDispatcher``): all-gathers hidden states, probs and the
  routing map over the ``tp_ep`` group (expert-TP x EP ranks); the combine reduce-scatters.
- ``alltoall`` (``MoEAlltoAllTokenDispatcher``): permutes its tokens ``top_k`` times, all-to-all
  over EP (tokens, then probs), then all-gathers within the expert-TP group; the combine
  reduce-scatters within expert TP and all-to-alls back.
- ``flex`` with DeepEP (``_DeepepManager``): one fused all-to-all over ``tp_ep`` sending a token
  once to every rank that holds one of its experts (no duplicate per expert of one rank).
- ``hybridep`` (flex, ``--moe-flex-dispatcher-backend hybridep``): as DeepEP inside an NVLink
  domain; across domains a token crosses the network once per destination domain and is
  forwarded over NVLink there.

Expert parallelism follows Megatron-Core parallel folding: the expert layers lay
``etp * ep * edp`` over the same ``tp * cp * dp`` ranks of a pipeline stage, expert TP innermost
(``parallel_state.py``, expert rank order ``tp-ep-dp-pp``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from costmodel.comm import group_placement
from costmodel.comm.placement import GroupPlacement
from costmodel.llm.sharding import overlapped_seconds
from costmodel.specs.model import ModelSpec
from costmodel.specs.runspec import RunSpec
from costmodel.specs.strategy import Strategy

BF16 = 2
PROBS_BYTES = 4  # router probs travel in fp32 (HybridEP requires --moe-router-dtype=fp32, token_dispatcher.py)
ROUTING_MAP_BYTES = 1  # the allgather dispatcher also gathers the boolean routing map

# Balanced routing unless a measured max/mean expert load is given. Why: DeepSeek-V3's
# auxiliary-loss-free balancing "maintains balanced expert load during training" (DeepSeek-AI,
# arXiv 2412.19437, section 2.1.2), recipes train with an aux loss, and published Megatron-Core
# MoE benchmarks are often force-balanced (--moe-router-force-load-balancing). Real routing
# costs more: Megatron-LM issue 6757 (NVIDIA/Megatron-LM, 2026-09-18) measures a 1.35x spread of
# MoE forward+backward time over skewed workloads (1.3-3.1x for the dispatch alone).
DEFAULT_LOAD_IMBALANCE = 1.0
NOTE_BALANCED = ("MoE routing assumed balanced (moe_load_imbalance: balanced); real routing can be slower: "
                 "Megatron-LM issue 6757 measures up to 1.35x on MoE forward+backward")

Collective = Callable[[str, float, GroupPlacement], float]


@dataclass(frozen=True)
class Transfer:
    """One collective of a dispatch: its NCCL name, message bytes (``costmodel.comm`` convention), group."""

    op: str
    message_bytes: float
    group: GroupPlacement


# -- knobs: the strategy's value, else the framework's default ---------------------------------
def dispatcher(run: RunSpec) -> str:
    """The token dispatcher: ``strategy.moe_token_dispatcher``, else the framework file's default."""
    return run.strategy.moe_token_dispatcher or run.framework.moe_token_dispatcher


def load_imbalance(strategy: Strategy) -> float:
    """Max/mean expert load of the busiest EP rank (1.0: balanced)."""
    value = strategy.moe_load_imbalance
    return DEFAULT_LOAD_IMBALANCE if value in (None, "balanced") else float(value)  # type: ignore[arg-type]


def load_factor(strategy: Strategy) -> float:
    """Rows the busiest rank's experts process over the balanced rows.

    Drop-less: the load imbalance. With a capacity factor every expert's input is padded to its
    capacity, ``factor x`` the balanced rows (``moe_pad_expert_input_to_capacity``), and tokens
    beyond it are dropped, so imbalance no longer sets the pace.
    """
    factor = strategy.moe_capacity_factor
    return float(factor) if factor is not None else load_imbalance(strategy)


def shared_expert_overlap(run: RunSpec) -> bool:
    """Shared experts run under the dispatch/combine (alltoall or flex dispatchers only)."""
    value = run.strategy.moe_shared_expert_overlap
    on = run.framework.moe_shared_expert_overlap if value is None else value
    return bool(on) and dispatcher(run) != "allgather" and not a2a_overlap(run)


def a2a_overlap(run: RunSpec) -> bool:
    """The all-to-all of one micro-batch runs under another's compute (``--overlap-moe-expert-parallel-comm``)."""
    value = run.strategy.moe_a2a_overlap
    on = run.framework.moe_a2a_overlap if value is None else value
    return bool(on) and dispatcher(run) != "allgather" and run.strategy.recompute != "full"


def moe_notes(run: RunSpec) -> tuple[str, ...]:
    """What the prediction assumed about routing (listed in the output's warnings)."""
    if not run.model.is_moe:
        return ()
    if run.strategy.moe_load_imbalance in (None, "balanced"):
        return (NOTE_BALANCED,)
    return (f"MoE routing: busiest EP rank at {load_imbalance(run.strategy):g}x the mean expert load "
            "(moe_load_imbalance)",)


def ops_key(run: RunSpec) -> tuple[object, ...]:
    """The strategy fields that shape the MoE operators (for ``costmodel.llm.compute.stage_ops_key``)."""
    s = run.strategy
    return (s.expert_tensor_parallel_size, s.moe_capacity_factor, load_factor(s))


# -- token counts ---------------------------------------------------------------------------------
def local_tokens(strategy: Strategy, seq_length: int) -> float:
    """Tokens one rank enters the MoE layer with: its ``1/tp`` share under sequence parallelism."""
    s = strategy
    tokens = s.micro_batch_size * seq_length / s.cp
    return tokens / s.tp if s.sequence_parallel and s.tp > 1 else tokens


def expert_rows(model: ModelSpec, strategy: Strategy, seq_length: int) -> float:
    """Token rows the experts of the busiest rank process per micro-batch (all its local experts).

    Balanced, a rank receives as many of the ``top_k`` copies as it sent, then all-gathers them
    within its expert-TP group; the load factor scales that for the busiest rank.
    """
    return local_tokens(strategy, seq_length) * model.moe_router_topk * strategy.expert_tensor_parallel_size \
        * load_factor(strategy)


def distinct_holders(num_experts: int, holders: int, top_k: int) -> float:
    """Expected number of ``holders`` (ranks or domains, ``num_experts / holders`` experts each)
    that a token routed to ``top_k`` distinct experts chosen uniformly reaches."""
    if holders <= 1:
        return float(holders)
    # a holder is missed when all top_k experts fall among the others' (math.comb is 0 when none can)
    miss = math.comb(num_experts - num_experts // holders, top_k) / math.comb(num_experts, top_k)
    return holders * (1.0 - miss)


# -- placements of the folded expert groups -----------------------------------------------------
def expert_group(kind: str, run: RunSpec, stage: int | None = None) -> GroupPlacement:
    """Placement of an expert-layer group (``etp``, ``ep``, ``tp_ep`` or ``edp``) of pipeline rank ``stage``.

    Cut from Megatron-Core's expert rank grid on the job's rack-aware layout
    (``costmodel.comm.placement.group_placement``); ``stage=None`` gives the worst group of the job.
    """
    return group_placement(kind, run.strategy, run.cluster, stage=stage)


# -- what each dispatcher communicates (one dispatch; the combine mirrors it) ---------------------
def allgather_transfers(run: RunSpec, stage: int | None = None) -> list[Transfer]:
    """All-gather of hidden states, probs and routing map over ``tp_ep`` (imbalance moves no bytes)."""
    m, g = run.model, expert_group("tp_ep", run, stage)
    per_token = m.hidden_size * BF16 + m.num_experts * (PROBS_BYTES + ROUTING_MAP_BYTES)
    return [Transfer("all_gather", local_tokens(run.strategy, run.seq_length) * g.size * per_token, g)]


def alltoall_transfers(run: RunSpec, stage: int | None = None) -> list[Transfer]:
    """All-to-all of the ``top_k`` permuted tokens and their probs over EP, then all-gather in expert TP."""
    m, s = run.model, run.strategy
    rows = local_tokens(run.strategy, run.seq_length) * m.moe_router_topk * load_factor(run.strategy)
    out = []
    if s.ep > 1:
        ep = expert_group("ep", run, stage)
        out += [Transfer("all_to_all", rows * m.hidden_size * BF16, ep),
                Transfer("all_to_all", rows * PROBS_BYTES, ep)]
    etp = s.expert_tensor_parallel_size
    if etp > 1:
        gathered = rows * etp * (m.hidden_size * BF16 + PROBS_BYTES)
        out.append(Transfer("all_gather", gathered, expert_group("etp", run, stage)))
    return out


def flex_transfers(run: RunSpec, stage: int | None = None) -> list[Transfer]:
    """DeepEP: one all-to-all over ``tp_ep``, a token sent once to each expert-TP rank of each EP rank it reaches."""
    m, s = run.model, run.strategy
    ranks = distinct_holders(m.num_experts, s.ep, m.moe_router_topk) * s.expert_tensor_parallel_size
    row_bytes = m.hidden_size * BF16 + PROBS_BYTES
    nbytes = local_tokens(s, run.seq_length) * ranks * load_factor(s) * row_bytes
    return [Transfer("all_to_all", nbytes, expert_group("tp_ep", run, stage))]


def hybridep_transfers(run: RunSpec, stage: int | None = None) -> list[Transfer]:
    """HybridEP: as DeepEP inside one domain; across domains once per destination domain, then NVLink."""
    g = expert_group("tp_ep", run, stage)
    if not g.crosses_nodes:
        return flex_transfers(run, stage)
    m, s = run.model, run.strategy
    row = local_tokens(run.strategy, run.seq_length) * load_factor(run.strategy) * (m.hidden_size * BF16 + PROBS_BYTES)
    domains = distinct_holders(m.num_experts, g.num_domains, m.moe_router_topk)
    across = GroupPlacement(kind="tp_ep_domains", size=g.num_domains, gpus_per_node=1, num_domains=g.num_domains,
                            crosses_nodes=True)
    in_domain = distinct_holders(m.num_experts, s.ep, m.moe_router_topk) / g.num_domains \
        * s.expert_tensor_parallel_size
    return [Transfer("all_to_all", row * domains, across),
            Transfer("all_to_all", row * domains * in_domain, GroupPlacement.single_domain(g.gpus_per_node, "tp_ep"))]


DISPATCH_TRANSFERS: dict[str, Callable[[RunSpec, int | None], list[Transfer]]] = {
    "allgather": allgather_transfers,
    "alltoall": alltoall_transfers,
    "flex": flex_transfers,
    "hybridep": hybridep_transfers,
}
_COMBINE_OP = {"all_gather": "reduce_scatter", "all_to_all": "all_to_all"}


def dispatch_transfers(run: RunSpec, stage: int | None = None) -> list[Transfer]:
    """The collectives of one token dispatch of ``run``'s dispatcher on pipeline rank ``stage``."""
    return DISPATCH_TRANSFERS[dispatcher(run)](run, stage)


def layer_comm_seconds(run: RunSpec, collective: Collective, stage: int | None = None) -> float:
    """Dispatch plus combine of one MoE layer's forward on pipeline rank ``stage`` (the backward repeats it)."""
    total = 0.0
    for t in dispatch_transfers(run, stage):
        total += collective(t.op, t.message_bytes, t.group) + collective(_COMBINE_OP[t.op], t.message_bytes, t.group)
    return total


def exposed_under(comm_s: float, compute_s: float) -> float:
    """Seconds of ``comm_s`` left exposed when it runs beside ``compute_s`` of independent compute
    (slowed by NCCL's SM and bandwidth use, ``costmodel.llm.sharding``); never more than ``comm_s``."""
    if compute_s <= 0:
        return comm_s
    return min(comm_s, max(0.0, overlapped_seconds(compute_s, comm_s) - compute_s))


def ep_exposed_seconds(run: RunSpec, collective: Collective, moe_layers: float, layer_compute_s: float,
                       shared_fwd_s: float, shared_bwd_s: float, stage: int | None = None) -> float:
    """Exposed dispatch/combine seconds per micro-batch on one rank of a stage with ``moe_layers``.

    Parameters
    ----------
    layer_compute_s : float
        Forward + backward compute of one of the stage's layers (what 1F1B all-to-all overlap
        hides a micro-batch's communication under: the other micro-batch's layer).
    shared_fwd_s, shared_bwd_s : float
        One layer's shared-expert compute (what shared-expert overlap hides it under).
    stage : int, optional
        Pipeline rank whose expert groups carry the dispatch (default: the job's worst group).
    """
    s = run.strategy
    if not moe_layers or (s.ep == 1 and s.expert_tensor_parallel_size == 1):
        return 0.0
    comm = layer_comm_seconds(run, collective, stage)  # forward; the backward repeats it
    recompute = comm if s.recompute == "full" else 0.0  # Megatron's selective recompute skips the MoE layer
    plain = 2 * comm + recompute
    if a2a_overlap(run):
        m = s.num_microbatches
        steady = exposed_under(2 * comm, layer_compute_s)
        per_layer = (plain + (m - 1) * steady) / m  # the first forward and the last backward stay exposed
    elif shared_expert_overlap(run):
        per_layer = exposed_under(comm, shared_fwd_s) + exposed_under(comm, shared_bwd_s) + recompute
    else:
        per_layer = plain
    return moe_layers * min(per_layer, plain)
