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
  once to every rank that holds one of its experts (no duplicate per expert of one rank). Across
  NVLink domains DeepEP's normal kernels are two-tier ("Normal kernels with NVLink and RDMA
  forwarding", github.com/deepseek-ai/DeepEP docs/legacy.md; DeepSeek-V3, arXiv 2412.19437,
  section 3.2.2): a token crosses the network once per destination domain, to the GPU of the
  same in-domain index, which forwards it over NVLink to the ranks there; the two tiers are
  pipelined, so the slower one sets the time ("communications via IB and NVLink are fully
  overlapped", ibid.).
- ``hybridep`` (flex, ``--moe-flex-dispatcher-backend hybridep``): the same two-tier path.

How many ranks and domains a token's ``top_k`` copies reach depends on the routing
(``strategy.moe_routing``): ``uniform`` (a trained balanced router, or Megatron-Core's
``--moe-router-force-load-balancing``, which routes on random logits) or ``round_robin``
(NeMo Automodel's ``FakeBalancedGate``, the benchmarks' "fake balanced gate": token ``i`` to
experts ``k*i ... k*i+k-1 mod E``, nemo_automodel/components/moe/layers.py @01926a5c), whose
``k`` consecutive experts sit on one or two neighbouring ranks.

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
from costmodel.llm.recompute import layer_recompute_fraction, recompute_policy
from costmodel.llm.sharding import overlapped_seconds
from costmodel.specs.model import ModelSpec
# The token counts are shared with the memory model; re-exported here for the time side (decompose.py).
from costmodel.specs.moe_tokens import dispatcher, expert_rows, load_factor, load_imbalance, local_tokens  # noqa: F401
from costmodel.specs.runspec import RunSpec
from costmodel.specs.strategy import Strategy

BF16 = 2
PROBS_BYTES = 4  # router probs travel in fp32 (HybridEP requires --moe-router-dtype=fp32, token_dispatcher.py)
ROUTING_MAP_BYTES = 1  # the allgather dispatcher also gathers the boolean routing map

NOTE_BALANCED = ("MoE routing assumed balanced (moe_load_imbalance: balanced); real routing can be slower: "
                 "Megatron-LM issue 6757 measures up to 1.35x on MoE forward+backward")

# DeepEP's network leg, as a share of the NIC line rate, by the number of NVLink domains (nodes) the EP
# group spans. Source: github.com/deepseek-ai/DeepEP docs/legacy.md, normal kernels on H800 with CX7
# 400 Gb/s (~50 GB/s), dispatch "bottleneck bandwidth (RDMA)": EP16 (2 nodes) 43, EP32 (4) 58, EP64 (8)
# 51 GB/s. The benchmark counts every destination node of a token including its own
# (tests/test_internode.py num_rdma_token_sent), top-4 nodes: a share 1 - 1/n of it crosses the wire,
# so 21.5, 43.5 and 44.6 GB/s, i.e. 0.43, 0.87 and 0.89 of the line rate. Interpolated between the rows,
# held beyond them (fewer than 2 domains never reach the network leg). HybridEP: assumed alike.
DEEPEP_NIC_GBPS = 50.0
DEEPEP_NORMAL_RDMA_GBPS = {2: 43.0, 4: 58.0, 8: 51.0}


def two_tier_network_efficiency(domains: int) -> float:
    """Share of the NIC line rate DeepEP's network leg reaches across ``domains`` NVLink domains."""
    rows = sorted((n, gbps * (1 - 1 / n) / DEEPEP_NIC_GBPS) for n, gbps in DEEPEP_NORMAL_RDMA_GBPS.items())
    if domains <= rows[0][0]:
        return rows[0][1]
    for (n0, e0), (n1, e1) in zip(rows, rows[1:]):
        if domains <= n1:
            return e0 + (e1 - e0) * (domains - n0) / (n1 - n0)
    return rows[-1][1]


NETWORK_LEG = "network_all_to_all"  # the two-tier dispatch's network leg, timed here, not as an NCCL call

Collective = Callable[[str, float, GroupPlacement], float]


@dataclass(frozen=True)
class Transfer:
    """One collective of a dispatch: its NCCL name, message bytes (``costmodel.comm`` convention), group.

    ``pipelined``: it runs concurrently with the transfer before it (a two-tier dispatch forwards
    over NVLink while the network delivers), so the pair costs the slower of the two.
    """

    op: str
    message_bytes: float
    group: GroupPlacement
    pipelined: bool = False


# -- knobs: the strategy's value, else the framework's default ---------------------------------
def shared_expert_overlap(run: RunSpec) -> bool:
    """Shared experts run under the dispatch/combine (alltoall or flex dispatchers only)."""
    value = run.strategy.moe_shared_expert_overlap
    on = run.framework.moe_shared_expert_overlap if value is None else value
    return bool(on) and dispatcher(run) != "allgather" and not a2a_overlap(run)


def a2a_overlap(run: RunSpec) -> bool:
    """The all-to-all of one micro-batch runs under another's compute (``--overlap-moe-expert-parallel-comm``).

    DualPipe always does: it pairs a forward and a backward chunk so that each one's all-to-all
    runs under the other's compute (arXiv 2412.19437, section 3.2.1, ``costmodel.llm.dualpipe``).
    """
    value = run.strategy.moe_a2a_overlap
    on = run.framework.moe_a2a_overlap if value is None else value
    on = on or (value is None and run.strategy.pipeline_schedule == "dualpipe")
    return bool(on) and dispatcher(run) != "allgather" and recompute_policy(run) != "full"


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
    # routing: the eager down bias's probs gradient exists only under a trained router (decompose._eager_expert_ops)
    return (s.expert_tensor_parallel_size, s.moe_capacity_factor, load_factor(s), run.framework.moe_expert_fusion,
            routing(s))


# -- token counts: costmodel.specs.moe_tokens (shared with the memory model) --------------------
def distinct_holders(num_experts: int, holders: int, top_k: int) -> float:
    """Expected number of ``holders`` (ranks or domains, ``num_experts / holders`` experts each)
    that a token routed to ``top_k`` distinct experts chosen uniformly reaches."""
    if holders <= 1:
        return float(holders)
    # a holder is missed when all top_k experts fall among the others' (math.comb is 0 when none can)
    miss = math.comb(num_experts - num_experts // holders, top_k) / math.comb(num_experts, top_k)
    return holders * (1.0 - miss)


def round_robin_holders(num_experts: int, holders: int, top_k: int) -> float:
    """Mean number of ``holders`` (``num_experts / holders`` consecutive experts each) that the
    ``top_k`` consecutive experts ``k*i ... k*i+k-1 mod E`` of token ``i`` span, over a period of tokens."""
    if holders <= 1:
        return float(holders)
    per = num_experts // holders
    period = num_experts // math.gcd(top_k, num_experts)  # token i and i + period start alike
    spans = [len({((top_k * i + j) % num_experts) // per for j in range(top_k)}) for i in range(period)]
    return sum(spans) / period


def routing(strategy: Strategy) -> str:
    """Which experts a token's top-k lands on: ``strategy.moe_routing``, else ``uniform``."""
    return strategy.moe_routing or "uniform"


def holders_reached(model: ModelSpec, strategy: Strategy, holders: int) -> float:
    """Expected ranks or domains (of ``holders``, each with an equal block of experts) a token reaches."""
    rule = round_robin_holders if routing(strategy) == "round_robin" else distinct_holders
    return rule(model.num_experts, holders, model.moe_router_topk)


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
    """DeepEP: a token sent once to each expert-TP rank of each EP rank it reaches; two-tier across domains."""
    m, s = run.model, run.strategy
    g = expert_group("tp_ep", run, stage)
    if g.crosses_nodes:
        return two_tier_transfers(run, g)
    ranks = holders_reached(m, s, s.ep) * s.expert_tensor_parallel_size
    nbytes = local_tokens(s, run.seq_length) * ranks * load_factor(s) * _row_bytes(m)
    return [Transfer("all_to_all", nbytes, g)]


def _row_bytes(model: ModelSpec) -> float:
    """One dispatched token: its bf16 hidden state and its fp32 routing prob."""
    return model.hidden_size * BF16 + PROBS_BYTES


def two_tier_transfers(run: RunSpec, g: GroupPlacement) -> list[Transfer]:
    """A token over the network once per destination domain, then over NVLink to the ranks there.

    The network leg is an all-to-all among the GPUs of one in-domain index (one per domain, one
    NIC each); the NVLink leg forwards each arriving copy to the ranks of that domain it reaches,
    pipelined with the network leg.
    """
    m, s = run.model, run.strategy
    row = local_tokens(s, run.seq_length) * load_factor(s) * _row_bytes(m)
    domains = holders_reached(m, s, g.num_domains)
    across = GroupPlacement(kind="tp_ep_domains", size=g.num_domains, gpus_per_node=1, num_domains=g.num_domains,
                            crosses_nodes=True)
    in_domain = holders_reached(m, s, s.ep) / domains * s.expert_tensor_parallel_size
    return [Transfer(NETWORK_LEG, row * domains, across),
            Transfer("all_to_all", row * domains * in_domain, GroupPlacement.single_domain(g.gpus_per_node, "tp_ep"),
                     pipelined=True)]


def hybridep_transfers(run: RunSpec, stage: int | None = None) -> list[Transfer]:
    """HybridEP: DeepEP's path, two-tier across domains (``two_tier_transfers``)."""
    return flex_transfers(run, stage)


DISPATCH_TRANSFERS: dict[str, Callable[[RunSpec, int | None], list[Transfer]]] = {
    "allgather": allgather_transfers,
    "alltoall": alltoall_transfers,
    "flex": flex_transfers,
    "hybridep": hybridep_transfers,
}
_COMBINE_OP = {"all_gather": "reduce_scatter", "all_to_all": "all_to_all", NETWORK_LEG: NETWORK_LEG}


def network_leg_seconds(run: RunSpec, t: Transfer) -> float:
    """The network leg of a two-tier dispatch: each GPU's copies bound for other domains over its own NIC.

    Destination domains are equally likely, so ``(k - 1) / k`` of the ``k`` domains' copies leave.
    """
    k = t.group.num_domains
    gpu = run.cluster.gpu
    remote = t.message_bytes * (k - 1) / k
    rate = gpu.inter_node_bandwidth_bytes_per_s * two_tier_network_efficiency(k)
    return gpu.inter_node_latency_s + remote / rate


def dispatch_transfers(run: RunSpec, stage: int | None = None) -> list[Transfer]:
    """The collectives of one token dispatch of ``run``'s dispatcher on pipeline rank ``stage``."""
    return DISPATCH_TRANSFERS[dispatcher(run)](run, stage)


def layer_comm_seconds(run: RunSpec, collective: Collective, stage: int | None = None) -> float:
    """Dispatch plus combine of one MoE layer's forward on pipeline rank ``stage`` (the backward repeats it)."""
    total = 0.0
    for combine in (False, True):
        last = 0.0
        for t in dispatch_transfers(run, stage):
            if t.op == NETWORK_LEG:
                seconds = network_leg_seconds(run, t)
            else:
                seconds = collective(_COMBINE_OP[t.op] if combine else t.op, t.message_bytes, t.group)
            if t.pipelined:  # runs beside the previous leg: only its excess over that leg adds
                seconds, last = max(0.0, seconds - last), max(seconds, last)
            else:
                last = seconds
            total += seconds
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
    # A layer whose whole forward is re-run re-dispatches (full, torchtitan's "layer"); the attention-core
    # and op-level policies leave the MoE layer's saved tensors alone.
    recompute = comm * layer_recompute_fraction(recompute_policy(run))
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
