"""Step time of one training run on a whole cluster: compute, communication, schedule, overlap.

For every pipeline rank the micro-batch forward and backward times are its timed
operators (``costmodel.llm.compute``) plus the communication its parallelism adds and
does not hide: TP all-reduce (or all-gather + reduce-scatter with sequence
parallelism) beyond the GEMMs Transformer Engine overlaps them with
(``costmodel.llm.tp_comm``); the context-parallel exchange beyond the attention it
overlaps (``costmodel.llm.cp_comm``); the expert-parallel all-to-all; ZeRO-3 gathers beyond the
layer compute they are prefetched under. A pipeline schedule turns those into a
flush; after it, the gradient sync (overlapped with the last micro-batch's
backward when ``overlap_grad_reduce``), the optimizer step on the local shard and
the ZeRO parameter all-gather finish the step. Stages that finish their last
backward earlier hide part of that tail behind the pipeline drain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from constraints.memory import params_on_gpu
from costmodel.calibration import compute_scale as calibrated_scale
from costmodel.comm import collective_seconds, group_placement, pipeline_placements
from costmodel.factored_timing import collective_factor_for
from costmodel.llm import dp_buckets, moe
from costmodel.llm.compute import StageCompute, layer_ops_key, pipeline_compute
from costmodel.llm.cp_comm import cp_layer_exposed_s
from costmodel.llm.decompose import layer_shape, shared_expert_ops
from costmodel.llm.flops import model_flops_per_step
from costmodel.llm.messages import BF16, activation_bytes, grad_reduce_bytes, param_gather_bytes
from costmodel.llm.overheads import layer_launch_exposed_s, straggler_fraction
from costmodel.llm.recompute import recompute_policy
from costmodel.llm.schedule import SCHEDULES, PipelineTime, schedule_name
from costmodel.llm.sharding import (
    backward_gathers,
    bucketed_reduce_exposed_s,
    gradient_sync_seconds,
    pipelined_fsdp2,
    prefetch_layers,
    sharded_pass_seconds,
    sharding_settings,
    zero3_microbatch_seconds,
)
from costmodel.llm.tp_comm import tp_layer_exposed_s
from costmodel.ops import memory_op
from costmodel.specs.layout import stage_layer_counts
from costmodel.specs.runspec import RunSpec
from costmodel.timing import OperatorTimer

BREAKDOWN_KEYS = ("compute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "pp_bubble_s",
                  "dp_comm_exposed_s", "optimizer_s", "other_s")


@dataclass(frozen=True)
class StageTimes:
    """Per-micro-batch seconds of one pipeline rank, split by cause."""

    compute: StageCompute
    tp_s: float
    cp_s: float
    ep_s: float
    zero3_s: float
    overhead_s: float = 0.0  # per micro-batch: exposed kernel launch + the global calibration factor's share

    @property
    def exposed_comm_s(self) -> float:
        return self.tp_s + self.cp_s + self.ep_s + self.zero3_s

    @property
    def forward_s(self) -> float:
        """Forward compute; exposed communication is booked on the backward (schedules use f + b)."""
        return self.compute.forward_s

    @property
    def backward_s(self) -> float:
        return self.compute.backward_s + self.exposed_comm_s + self.overhead_s


_GatherPlan = tuple[tuple[bool, float], ...]
"""Per shard group (``_param_gather_plan``): bucketed and its exposed seconds, or not and its whole all-gather."""


class _StageEnds(NamedTuple):
    """What one pipeline rank adds before its first forward and after its last backward of a step."""

    dp_tail_s: float  # _dp_tail
    first_gathers_s: float  # pipelined FSDP2's first gathers (_zero3_step_exposed)
    gather_plan: _GatherPlan  # the overlapped ZeRO-1/2 parameter all-gather (_param_gather_plan)


@dataclass(frozen=True)
class StepPrediction:
    """Time of one optimizer step; ``breakdown`` parts add up to ``step_time_s``."""

    step_time_s: float
    breakdown: dict[str, float]
    schedule: str
    notes: tuple[str, ...] = field(default=())
    # Per pipeline rank, in stage order (middle ranks share one object).
    stage_computes: tuple[StageCompute, ...] = field(default=())


_COMM_MEMO: dict[int, tuple[OperatorTimer, dict[tuple[Any, ...], float]]] = {}


def _collective(timer: OperatorTimer, op: str, message_bytes: float, placement: Any, gpu: Any) -> float:
    """``collective_seconds`` memoised per timer (a search asks for the same few messages thousands of times)."""
    entry = _COMM_MEMO.get(id(timer))
    if entry is None or entry[0] is not timer:
        entry = _COMM_MEMO[id(timer)] = (timer, {})
    key = (op, float(message_bytes), placement, gpu)
    hit = entry[1].get(key)
    if hit is None:
        hit = entry[1][key] = float(collective_seconds(op, message_bytes, placement, gpu, _intra(timer))) \
            * collective_factor_for(timer, placement)
    return hit


def _intra(timer: OperatorTimer) -> Callable[[str, Any, Any], tuple[np.ndarray, np.ndarray]] | None:
    """The profile's measured intra-node collective predictor (memoised by the timer), if it has one."""
    return timer.intra_collective if timer.has_collectives else None


def _on_group(timer: OperatorTimer, placement: Any, gpu: Any) -> Callable[[str, float], float]:
    """``(op, bytes) -> seconds`` of one collective on ``placement`` (memoised ``_collective``)."""
    return lambda op, nbytes: _collective(timer, op, nbytes, placement, gpu)


def _memo(timer: OperatorTimer, key: tuple[Any, ...], compute: Callable[[], float]) -> float:
    """``compute()`` memoised on ``timer`` under ``key`` (which holds every input it reads)."""
    hit = timer.stage_memo.get(key)
    if hit is None:
        hit = timer.stage_memo[key] = compute()
    return hit


def _layer_comm(run: RunSpec, timer: OperatorTimer, stage: StageCompute, layers: float,
                moe_layers: float, pp_rank: int | None = None) -> tuple[float, float, float, float]:
    """(tp, cp, ep, zero3) exposed seconds per micro-batch on one rank (forward + backward)."""
    s, cluster, gpu = run.strategy, run.cluster, run.cluster.gpu
    tp = cp = ep = z3 = 0.0
    if s.tp > 1 or s.cp > 1:
        layer_key = layer_ops_key(run)
    if s.tp > 1:
        g = group_placement("tp", s, cluster, stage=pp_rank)
        # memoised per layer shape, TP-overlap settings and group: the same for thousands of strategies
        tp_key = ("tp_layer", layer_key, s.tp_comm_overlap, run.framework.tp_comm_sm_margin, g, gpu)
        tp = (layers - moe_layers) * _memo(timer, tp_key + (False,),
                                           lambda: tp_layer_exposed_s(run, timer, _on_group(timer, g, gpu)))
        if moe_layers:  # the routed experts' SP gather/scatter is the dispatcher's (ep below)
            tp += moe_layers * _memo(timer, tp_key + (True,),
                                     lambda: tp_layer_exposed_s(run, timer, _on_group(timer, g, gpu), moe=True))
    if s.cp > 1:
        g = group_placement("cp", s, cluster, stage=pp_rank)
        cp = layers * _memo(timer, ("cp_layer", layer_key, g, gpu),
                            lambda: cp_layer_exposed_s(run, timer, _on_group(timer, g, gpu)))
    if moe_layers:
        ep = _ep_exposed(run, timer, stage, layers, moe_layers, pp_rank)
    if s.dp * s.cp > 1 and s.zero_stage == 3:
        z3 = _zero3_exposed(run, timer, stage, int(layers), int(moe_layers), pp_rank)
    elif s.dp * s.cp > 1 and s.zero_stage == 2:
        z3 = _zero2_exposed(run, timer, stage, pp_rank)
    return tp, cp, ep, z3


def _ep_exposed(run: RunSpec, timer: OperatorTimer, stage: StageCompute, layers: float, moe_layers: float,
                pp_rank: int | None = None) -> float:
    """Exposed MoE dispatch/combine seconds per micro-batch (``costmodel.llm.moe``)."""
    shared = timer.time_ops(shared_expert_ops(layer_shape(run.model, run.strategy, run.seq_length), run.model)) \
        if run.model.num_shared_experts else None
    return moe.ep_exposed_seconds(
        run, lambda op, nbytes, g: _collective(timer, op, nbytes, g, run.cluster.gpu), moe_layers,
        (stage.forward_s + stage.backward_s) / max(layers, 1e-9),
        shared.total(("fwd",)) if shared else 0.0, shared.total(("bwd",)) if shared else 0.0, pp_rank)


def _shard_groups(run: RunSpec, stage: StageCompute,
                  pp_rank: int | None = None) -> list[tuple[float, Any, Any | None]]:
    """(parameters, shard placement, HSDP replicate placement or None) of the dense (``dp_cp``, or
    its ``dp_shard`` part under HSDP) and expert (``edp``) shards of ``stage``, if sharded."""
    s = run.strategy
    dense, expert = params_on_gpu(run, stage.stage)
    hsdp = s.shard_replicas > 1
    groups = []
    for params, kind in ((dense, "dp_shard" if hsdp else "dp_cp"), (expert, "edp")):
        g = group_placement(kind, s, run.cluster, stage=pp_rank)
        replicate = group_placement("dp_replicate", s, run.cluster, stage=pp_rank) if hsdp and kind != "edp" else None
        if params > 0 and (g.size > 1 or replicate is not None):
            groups.append((params, g, replicate))
    return groups


def _sync(timer: OperatorTimer, op: str, grad_bytes: float, g: Any, replicate: Any | None, gpu: Any) -> float:
    """Gradient reduction over the shard group and, under HSDP, the replicas (``gradient_sync_seconds``)."""
    return gradient_sync_seconds(op, grad_bytes, g, replicate, lambda o, b, p: _collective(timer, o, b, p, gpu))


@dataclass(frozen=True)
class _Zero3Layer:
    """One layer's ZeRO-3 collectives on one rank (expert ones spread over all layers) and how they overlap."""

    gather_s: float
    scatter_s: float
    prefetch: float
    copy_s: float  # post-gather copy-out on the compute stream, per gather


def _zero3_layer(run: RunSpec, timer: OperatorTimer, stage: StageCompute, layers: int, moe_layers: int,
                 pp_rank: int | None = None) -> _Zero3Layer:
    settings = sharding_settings(run)
    n = max(layers, 1)
    gather = scatter = total_params = 0.0
    for params, g, replicate in _shard_groups(run, stage, pp_rank):
        # expert parameters live in the MoE layers only: time one such layer's collective, spread over all
        holders = moe_layers if g.kind == "edp" else n
        share = max(holders, 1) / n
        per_layer = params / max(holders, 1)
        gather += share * _collective(timer, "all_gather", per_layer * settings.gather_bytes, g, run.cluster.gpu)
        scatter += share * _sync(timer, "reduce_scatter", per_layer * settings.reduce_bytes, g, replicate,
                                 run.cluster.gpu)
        total_params += params
    return _Zero3Layer(gather, scatter, prefetch_layers(settings, total_params / n),
                       _copy_out_seconds(timer, total_params / n, settings.copy_out_bytes))


def _zero3_exposed(run: RunSpec, timer: OperatorTimer, stage: StageCompute, layers: int, moe_layers: int,
                   pp_rank: int | None = None) -> float:
    """ZeRO-3 seconds per micro-batch beyond the stage's compute: its layers' gathers and reduce-scatters replayed.

    Pipelined FSDP2 (``pipelined_fsdp2``) reduces once per step (``_zero3_step_exposed``) and gathers
    per micro-batch only in the backward, after a reshard.
    """
    n = max(layers, 1)
    z = _zero3_layer(run, timer, stage, layers, moe_layers, pp_rank)
    pipelined = pipelined_fsdp2(run)
    gathers = backward_gathers(sharding_settings(run), run.strategy.pp, recompute_policy(run), pipelined)
    fwd_gathers = 0.0 if pipelined else 1.0
    forward, backward = stage.forward_s + n * fwd_gathers * z.copy_s, stage.backward_s + n * gathers * z.copy_s
    total = zero3_microbatch_seconds(n, forward, backward, z.gather_s, 0.0 if pipelined else z.scatter_s,
                                     z.prefetch, gathers, fwd_gathers=fwd_gathers)
    return max(0.0, total - stage.forward_s - stage.backward_s)


def _zero3_step_exposed(run: RunSpec, timer: OperatorTimer, stage: StageCompute,
                        pp_rank: int | None = None) -> tuple[float, float]:
    """(first gathers, reduce-scatters) of pipelined FSDP2, once per step: exposed seconds of ``stage``.

    The first forward of the step gathers each layer under the implementation's prefetch; after
    the stage's last backward every layer's reduce-scatter runs, the compute stream waiting on them
    (``costmodel.llm.sharding`` module docstring).
    """
    if not (run.strategy.dp * run.strategy.cp > 1 and run.strategy.zero_stage == 3 and pipelined_fsdp2(run)):
        return 0.0, 0.0
    dense_layers, moe_layers = stage_layer_counts(run.model, run.strategy, stage.stage)
    n = max(int(dense_layers + moe_layers), 1)
    z = _zero3_layer(run, timer, stage, n, int(moe_layers), pp_rank)
    layer_forward = stage.forward_s / n + z.copy_s
    head = sharded_pass_seconds(n, layer_forward, z.gather_s, 0.0, z.prefetch) - n * layer_forward
    return max(head, 0.0), n * z.scatter_s


def _copy_out_seconds(timer: OperatorTimer, layer_params: float, bytes_per_param: int) -> float:
    """One layer's post-all-gather copy into its parameters, a streaming memory-bound kernel (0: none)."""
    if bytes_per_param <= 0 or layer_params <= 0:
        return 0.0
    op = memory_op("fsdp_copy_out.fwd", "fwd", layer_params, layer_params * bytes_per_param)
    return float(timer.time_ops([op]).seconds[0])


def _zero2_exposed(run: RunSpec, timer: OperatorTimer, stage: StageCompute, pp_rank: int | None = None) -> float:
    """ZeRO-2 gradient reduce-scatter of every micro-batch's backward (DeepSpeed stage 2), exposed part."""
    s, gpu = run.strategy, run.cluster.gpu
    wire = grad_reduce_bytes(run)
    exposed = 0.0
    for params, g, replicate in _shard_groups(run, stage, pp_rank):
        sync = _sync(timer, "reduce_scatter", params * wire, g, replicate, gpu)
        bucket = _sync(timer, "reduce_scatter", _buckets(run, stage, params, g)[0] * wire, g, replicate, gpu)
        exposed += bucketed_reduce_exposed_s(stage.backward_s, sync, bucket, s.overlap_grad_reduce)
    return exposed


def _buckets(run: RunSpec, stage: StageCompute, params: float, g: Any) -> list[float]:
    """Bucket sizes, in forward order, of one shard group's ``params`` on ``stage``
    under the framework's ``dp_bucket_scheme`` (``costmodel.llm.dp_buckets``)."""
    s = run.strategy
    layers = max(sum(stage_layer_counts(run.model, s, stage.stage)), 1)
    size = dp_buckets.bucket_params(run.framework.dp_bucket_scheme, s.dp, grad_reduce_bytes(run), params / layers)
    return dp_buckets.bucket_sizes(params, size, _own_bucket(run, stage, params, g))


def _own_bucket(run: RunSpec, stage: StageCompute, params: float, g: Any) -> float:
    """Parameters of ``stage`` alone in the first bucket: under Megatron-Core's distributed optimizer a
    tied embedding shared across pipeline stages (param_and_grad_buffer.py @core_r0.8.0
    ``_does_param_require_new_bucket``, the ``shared_embedding`` that pp > 1 sets); else 0."""
    s, model = run.strategy, run.model
    if run.framework.dp_bucket_scheme != "megatron-core" or s.zero_stage < 1 or s.pp == 1 \
            or not model.tie_embeddings or stage.stage != 0 or g.kind == "edp":
        return 0.0
    return min(model.vocab_size * model.hidden_size / s.tp, params)


def _dp_tail(run: RunSpec, timer: OperatorTimer, stage: StageCompute, pp_rank: int | None = None) -> float:
    """Exposed gradient sync and parameter all-gather after the last backward of ``stage``.

    ZeRO-3 and ZeRO-2 reduce their gradients inside every micro-batch (``_layer_comm``), except
    pipelined FSDP2, which reduce-scatters after the stage's last backward (``_zero3_step_exposed``);
    ZeRO-0/1 reduce once, bucket by bucket under the last backward on the pipeline rank that
    buckets, in one piece after it elsewhere (``costmodel.llm.dp_buckets``). The overlapped
    parameter all-gather belongs to the next step's first forward (``_param_gather_head``).
    """
    s, gpu = run.strategy, run.cluster.gpu
    if s.dp * s.cp == 1:
        return 0.0
    if s.zero_stage == 3:
        return _zero3_step_exposed(run, timer, stage, pp_rank)[1]
    wire, scheme = grad_reduce_bytes(run), run.framework.dp_bucket_scheme
    overlap = s.overlap_grad_reduce and dp_buckets.bucketed(scheme, pp_rank or 0) \
        and dp_buckets.overlaps_grad_reduce(scheme, s.zero_stage, s.pp)
    total = 0.0
    for params, g, replicate in _shard_groups(run, stage, pp_rank):
        if s.zero_stage < 2:
            op = "all_reduce" if s.zero_stage == 0 else "reduce_scatter"
            sync = _sync(timer, op, params * wire, g, replicate, gpu)
            # the bucket reduced last, trailing the backward, holds the first layers
            bucket = _sync(timer, op, _buckets(run, stage, params, g)[0] * wire, g, replicate, gpu)
            total += bucketed_reduce_exposed_s(stage.backward_s, sync, bucket, overlap)
        if s.zero_stage in (1, 2) and not _gather_overlapped(run):
            total += _collective(timer, "all_gather", params * param_gather_bytes(run), g, gpu)
    return total


def _gather_overlapped(run: RunSpec) -> bool:
    """ZeRO-1/2's parameter all-gather runs under the next forward: asked, and the framework does it
    (DeepSpeed gathers inside the optimizer step: ``Framework.supports_param_gather_overlap``)."""
    return run.strategy.overlap_param_gather and run.framework.supports_param_gather_overlap


def _param_gather_plan(run: RunSpec, timer: OperatorTimer, stage: StageCompute, pp_rank: int) -> _GatherPlan:
    """Per shard group of ``stage``, the overlapped ZeRO-1/2 parameter all-gather as far as it does not
    depend on the upstream forwards: (True, exposed seconds) where the stage gathers bucket by bucket
    (``dp_buckets.param_gather_exposed_s``), else (False, the whole all-gather); empty where it does not apply."""
    s, gpu = run.strategy, run.cluster.gpu
    if s.dp * s.cp == 1 or s.zero_stage not in (1, 2) or not _gather_overlapped(run):
        return ()
    wire = param_gather_bytes(run)
    plan = []
    for params, g, _ in _shard_groups(run, stage, pp_rank):
        sizes, own = _buckets(run, stage, params, g), _own_bucket(run, stage, params, g)
        layer_params = max(params - own, 1e-9)
        whole = _collective(timer, "all_gather", params * wire, g, gpu)
        if dp_buckets.bucketed(run.framework.dp_bucket_scheme, pp_rank):  # exposed whatever runs upstream
            # each bucket's forward in proportion to its parameters; an embedding alone in a bucket is a lookup
            distinct = set(sizes)  # 1-3 sizes
            gathers = {b: _collective(timer, "all_gather", b * wire, g, gpu) for b in distinct}
            forward = {b: stage.forward_s * b / layer_params for b in distinct}
            forwards = [0.0 if i == 0 and own else forward[b] for i, b in enumerate(sizes)]
            plan.append((True, dp_buckets.param_gather_exposed_s([gathers[b] for b in sizes], forwards, whole, True)))
        else:
            plan.append((False, whole))
    return tuple(plan)


def _gather_head(plan: _GatherPlan, upstream_forward_s: float) -> float:
    """Seconds the first forward waits for the parameter all-gathers of ``plan`` (``_param_gather_plan``)."""
    head = 0.0
    for is_bucketed, seconds in plan:
        head += seconds if is_bucketed else dp_buckets.param_gather_exposed_s((), (), seconds, False,
                                                                              upstream_forward_s)
    return head


def _param_gather_head(run: RunSpec, timer: OperatorTimer, stage: StageCompute, pp_rank: int,
                       upstream_forward_s: float) -> float:
    """Seconds the first forward of ``stage`` waits for the overlapped ZeRO-1/2 parameter all-gather
    (``costmodel.llm.dp_buckets.param_gather_exposed_s``); ``upstream_forward_s``: the forwards of
    the ranks before it, which its first forward waits for anyway."""
    return _gather_head(_param_gather_plan(run, timer, stage, pp_rank), upstream_forward_s)


def _p2p_seconds(run: RunSpec, timer: OperatorTimer) -> float:
    s = run.strategy
    if s.pp == 1:
        return 0.0
    nbytes = activation_bytes(run, BF16) / (s.tp if s.sequence_parallel else 1)
    return _collective(timer, "send_recv", nbytes, group_placement("pp", s, run.cluster), run.cluster.gpu)


_DENSE_KINDS = ("tp", "cp", "dp_cp", "dp_shard", "dp_replicate")
_MOE_KINDS = _DENSE_KINDS + ("ep", "edp", "etp", "tp_ep")


def _stage_placements(run: RunSpec) -> tuple[tuple[Any, ...], ...]:
    """Per pipeline rank, the placements of its groups (stages alike in compute may differ here)."""
    return pipeline_placements(_MOE_KINDS if run.model.is_moe else _DENSE_KINDS, run.strategy, run.cluster)


def predict_step(run: RunSpec, timer: OperatorTimer,
                 compute_scale: float | None = None) -> StepPrediction:
    """Seconds of one optimizer step of ``run`` and where they go.

    ``other_s`` holds the named overheads of ``costmodel.llm.overheads`` (exposed kernel
    launch, data-parallel stragglers) and the one global calibration factor's share;
    ``compute_scale`` overrides that factor (used when fitting it).
    """
    s = run.strategy
    m = s.num_microbatches
    computes = pipeline_compute(run, timer)
    stages: list[StageTimes] = []
    ends: list[_StageEnds] = []
    cache: dict[tuple[Any, ...], tuple[StageTimes, _StageEnds]] = {}
    scale = calibrated_scale() if compute_scale is None else compute_scale
    placements = _stage_placements(run)
    for st in range(s.pp):
        c = computes[st]
        # middle stages share one StageCompute, layer count and (mostly) placements; rank 0 alone may
        # reduce and gather bucket by bucket (dp_buckets.bucketed)
        key = (id(c), id(placements[st]), st == 0)
        if key not in cache:
            dense_layers, moe_layers = stage_layer_counts(run.model, s, st)
            layers = dense_layers + moe_layers
            overhead = (scale - 1.0) * (c.forward_s + c.backward_s) \
                + layer_launch_exposed_s(run, timer, dense_layers, moe_layers)
            times = StageTimes(c, *_layer_comm(run, timer, c, layers, moe_layers, st), overhead_s=overhead)
            cache[key] = times, _StageEnds(_dp_tail(run, timer, c, st), _zero3_step_exposed(run, timer, c, st)[0],
                                           _param_gather_plan(run, timer, c, st))
        stages.append(cache[key][0])
        ends.append(cache[key][1])
    name = schedule_name(s.pp, s.vpp, s.pipeline_schedule)
    # PyTorch pipelining steps the schedule once per local batch (strategy.pipeline_flushes): each flush
    # fills and drains, and its last backward runs the gradient sync (torch stage.py
    # backward_maybe_with_nosync; Automodel's patch keeps that for FSDP-wrapped stages), so both repeat.
    flushes = s.pipeline_flushes if s.pp > 1 else 1
    flush: PipelineTime = SCHEDULES[name]([t.forward_s for t in stages], [t.backward_s for t in stages],
                                          max(1, m // flushes), s.vpp, _p2p_seconds(run, timer),
                                          wgrad=[t.compute.wgrad_s for t in stages])
    # After the flush: stage i finished its last backward sum(backward of ranks < i) earlier.
    tails = []
    slack = 0.0
    for t, end in zip(stages, ends):
        tails.append((end.dp_tail_s + t.compute.optimizer_s - slack, end.dp_tail_s, t.compute.optimizer_s))
        slack += t.backward_s
    tail, dp_exposed, optimizer = max(tails)
    tail = max(tail, 0.0)
    # the step's first gathers (pipelined FSDP2's, or ZeRO-1/2's overlapped parameter all-gather)
    # delay the first forward of their stage, and behind it the whole pipeline: the slowest stage's.
    # Rank i's first forward waits for the first model chunk's forward on every rank before it.
    head, upstream = 0.0, 0.0  # upstream: the forwards of the ranks before this one, added in rank order
    for t, end in zip(stages, ends):
        head = max(head, end.first_gathers_s + _gather_head(end.gather_plan, upstream / s.vpp))
        upstream += t.forward_s
    optimizer = min(optimizer, tail)
    k = stages[flush.bottleneck]
    c = k.compute
    breakdown = {
        "compute_s": m * (c.forward_s + c.backward_s),
        "tp_comm_s": m * k.tp_s,
        "cp_comm_s": m * k.cp_s,
        "ep_comm_s": m * k.ep_s,
        "pp_comm_s": flushes * flush.p2p_s,
        "pp_bubble_s": flushes * flush.bubble_s,
        "dp_comm_exposed_s": m * k.zero3_s + flushes * (tail - optimizer + head),
        "optimizer_s": optimizer,
        "other_s": m * k.overhead_s,
    }
    # every replica waits at the gradient sync for the slowest one (costmodel.llm.overheads)
    breakdown["other_s"] += straggler_fraction(s.dp * s.cp) * sum(breakdown.values())
    notes = tuple(sorted({n for t, _ in cache.values() for n in t.compute.notes} | set(moe.moe_notes(run))))
    return StepPrediction(step_time_s=sum(breakdown.values()), breakdown=breakdown, schedule=name, notes=notes,
                          stage_computes=tuple(t.compute for t in stages))


def throughput(run: RunSpec, step_time_s: float) -> dict[str, float]:
    """Tokens/s, model TFLOP/s per GPU and MFU per the contract's definitions."""
    tokens = run.tokens_per_step
    flops = model_flops_per_step(run.model, run.seq_length, run.strategy.global_batch_size)
    n = run.cluster.num_gpus
    peak = run.cluster.gpu.peak(run.strategy.precision) if run.cluster.gpu.supports(run.strategy.precision) \
        else run.cluster.gpu.peak("bf16")
    return {
        "tokens_per_s": tokens / step_time_s,
        "tokens_per_s_per_gpu": tokens / step_time_s / n,
        "model_tflops_per_gpu": flops / step_time_s / n / 1e12,
        "mfu": flops / step_time_s / n / peak,
    }
