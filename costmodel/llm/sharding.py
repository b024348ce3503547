"""ZeRO-3 / FSDP and ZeRO-2 gradient sharding, timed as the implementations issue their collectives.

One micro-batch of a ZeRO-3 stage is replayed layer by layer on two resources: the compute
stream and one communication channel. Every layer's parameters are all-gathered before its
forward (and again before its backward when they were resharded after the forward, or when
full recomputation re-enters the forward); its gradients are reduce-scattered after its
backward. The all-gather of a layer may start only once the compute front is within the
implementation's prefetch window of it; all collectives of one process group run one after
another in the order the host issued them, because "when AG and RS share a NCCL
communicator, the communicator enforces the host-side launch order even if the operations
use independent CUDA streams" (Megatron-LM, megatron/core/distributed/fsdp/src/docs/
runtime_schedule.md, commit d98e8a6). So the first gather and the last reduce-scatter are
never hidden, a layer waits for a gather that did not fit in the window, and when traffic
exceeds compute the step is paced by the channel (the comm-bound floor).

Compute that runs while an NCCL kernel is in flight is slowed (NCCL takes SMs and HBM
bandwidth): by ``NCCL_COMPUTE_SLOWDOWN``.

Collective seconds come from :mod:`costmodel.comm` (its latency grows with the group size);
this module only schedules them.

HSDP (``Strategy.hsdp_shard_size``) shards within a group of data-parallel ranks and
replicates across groups: gathers and reduce-scatters run over the shard group, and each
reduce-scatter is followed, on the same channel, by an all-reduce of the gradient shard over
the replicate group (FSDP2's HSDP post-backward: reduce-scatter, then all-reduce of the
shard; torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce).

FSDP2 under ``torch.distributed.pipelining`` (torchtitan and NeMo Automodel with ``pp`` > 1) does
not gather and reduce per micro-batch: before every micro-batch's backward the stage calls
``set_requires_gradient_sync(False)`` and ``set_reshard_after_backward(False)``, and after the
stage's last backward of the schedule step it runs every parameter group's ``post_backward`` (the
reduce-scatter of the accumulated gradients, then the reshard) and
``_root_post_backward_final_callback``, which makes the compute stream wait for those
reduce-scatters (torch/distributed/pipelining/stage.py ``backward_maybe_with_nosync`` and
``perform_reduce_grad``, PyTorch 2.9-2.13; NeMo Automodel @01926a5c
nemo_automodel/components/moe/fsdp_mixin.py ``patched_backward_maybe_with_nosync`` does the
same for its fully_shard-ed model parts). So per schedule step a layer is gathered by the
first forward that touches it and stays gathered (``reshard_after_forward`` off), or is
resharded after each forward and gathered again by each backward (on); its gradients are
reduce-scattered once, after the stage's last backward, exposed (``pipelined_fsdp2``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Final

from constraints.memory import fsdp_grad_sync_deferred
from costmodel.llm.recompute import layer_recompute_fraction

__all__ = [
    "DEEPSPEED_ZERO3",
    "FSDP2",
    "MEGATRON_FSDP",
    "NCCL_COMPUTE_SLOWDOWN",
    "ShardingSettings",
    "backward_gathers",
    "bucketed_reduce_exposed_s",
    "gradient_sync_seconds",
    "overlapped_seconds",
    "pipelined_fsdp2",
    "prefetch_layers",
    "sharded_pass_seconds",
    "sharding_settings",
    "slowed_compute_seconds",
    "zero3_microbatch_seconds",
]

# Mean slowdown of compute kernels overlapped with communication against the same kernels
# alone: 18.9% (maximum 40.0%) over GPT and LLaMA training on 4 x A100, H100, MI250 and MI210.
# Source: Lee et al., "Characterizing Compute-Communication Overlap in GPU-Accelerated
# Distributed Deep Learning: Performance and Power Implications", arXiv 2507.03114 (2025), abstract.
NCCL_COMPUTE_SLOWDOWN: Final = 0.189


@dataclass(frozen=True, kw_only=True)
class ShardingSettings:
    """How one ZeRO-3 implementation issues and overlaps its collectives.

    Attributes
    ----------
    prefetch_layers : float
        Layers whose all-gather may be in flight ahead of the one computing (0: on demand).
        Used when ``prefetch_params`` is None.
    prefetch_params : float or None
        Prefetch window in parameter elements instead of layers.
    prefetch_whole_units : bool
        With ``prefetch_params``: the window is filled with whole layers (rounded up), as
        Megatron-FSDP adds buckets until the window is reached; otherwise it is fractional
        (DeepSpeed fetches sub-modules, a part of a layer).
    reshard_after_forward : bool or None
        Free the gathered parameters after the forward, so the backward gathers them again;
        None: the torchtitan default, ``not pp_enabled``.
    reduce_bytes : int
        Bytes per gradient element in the reduce-scatter (the reduce dtype).
    gather_bytes : int
        Bytes per parameter element in the all-gather (the parameter dtype).
    copy_out_bytes : int
        HBM bytes per parameter element copied on the compute stream after each all-gather, from
        the gathered buffer into the parameters (0: the parameters are views of that buffer).
    """

    prefetch_layers: float = 1.0
    prefetch_params: float | None = None
    prefetch_whole_units: bool = True
    reshard_after_forward: bool | None = None
    reduce_bytes: int = 4
    gather_bytes: int = 2
    copy_out_bytes: int = 0


# FSDP2 (fully_shard) as torchtitan runs it. Forward: implicit prefetching, the next layer's
# all-gather overlaps the current layer's compute ("The 1st all-gather will not be able to
# overlap with anything", docs.pytorch.org/docs/stable/notes/fsdp.html, FSDP Prefetch
# Nuances); backward: explicit prefetch of one module in reverse post-forward order
# (pytorch/pytorch PR #128884). reshard_after_forward = not pp_enabled and reduce in fp32:
# torchtitan torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy and
# torchtitan/config/configs.py mixed_precision_reduce="float32" (commit b5bcd76).
# After each all-gather FSDP2 copies the gathered bf16 buffer into every parameter's unsharded
# tensor on the compute stream (read 2 + write 2 bytes per element): _fsdp_collectives.py
# foreach_all_gather_copy_out waits with current_stream().wait_event(all_gather_event), then
# split_with_sizes_copy (torch/distributed/fsdp/_fully_shard, PyTorch 2.4+).
FSDP2: Final = ShardingSettings(copy_out_bytes=4)

# Megatron-FSDP (parameters are views of its bucket buffers, gathered in place):
# suggested_AG_prefetch_size = max(1e9, 2 x mean unit size) // 2 elements, buckets added until it is reached (megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py
# and param_and_grad_buffer.py all_gather_params, commit d98e8a6); gradients reduced in fp32
# (Megatron DDP config grad_reduce_in_fp32 off, main grads fp32: kept at the FSDP2 figure).
MEGATRON_FSDP: Final = ShardingSettings(prefetch_params=5e8, prefetch_whole_units=True,
                                        reshard_after_forward=True)

# DeepSpeed ZeRO-3: stage3_prefetch_bucket_size = 5e7 elements fetched ahead of use, per
# sub-module (deepspeed/runtime/zero/config.py prefetch_bucket_size; partitioned_param_coordinator.py
# fetch_sub_module), into a flat buffer the parameters then view (partition_parameters.py
# param.data = narrow of the gathered tensor); released after each sub-module's forward; gradients
# reduced in the model dtype, bf16 (deepspeed/runtime/engine.py communication_data_type), commit edaa722.
DEEPSPEED_ZERO3: Final = ShardingSettings(prefetch_params=5e7, prefetch_whole_units=False,
                                          reshard_after_forward=True, reduce_bytes=2)


# The framework file's ``fsdp_reshard_after_forward`` as ``ShardingSettings.reshard_after_forward``.
_RESHARD_POLICY: Final = {"always": True, "never": False, "not_pp": None}


def sharding_settings(run: Any) -> ShardingSettings:
    """The ZeRO-3 settings of ``run``'s framework (``costmodel.specs.framework.Framework``).

    The implementation (``fsdp_implementation``) picks the prefetch mechanism: Megatron-FSDP and
    DeepSpeed bound theirs by parameter elements (above, read from their code), FSDP2 and GSPMD
    by layers (``fsdp_prefetch_layers``). The reduce dtype is the framework's ``grad_reduce_bytes``.
    Without a framework: FSDP2.
    """
    framework = getattr(run, "framework", None)
    if framework is None:
        return FSDP2
    return _settings_of(framework)


@lru_cache(maxsize=64)  # frozen: a search asks of one framework for every strategy
def _settings_of(framework: Any) -> ShardingSettings:
    by_layers = replace(FSDP2, prefetch_layers=float(framework.fsdp_prefetch_layers))
    if framework.fsdp_implementation != "fsdp2":  # GSPMD: XLA gathers into the buffer the layer reads
        by_layers = replace(by_layers, copy_out_bytes=0)
    by_layers = replace(by_layers, reshard_after_forward=_RESHARD_POLICY[framework.fsdp_reshard_after_forward])
    base = {"megatron-fsdp": MEGATRON_FSDP, "deepspeed-zero3": DEEPSPEED_ZERO3}.get(
        framework.fsdp_implementation, by_layers)
    return replace(base, reduce_bytes=framework.grad_reduce_bytes)



def pipelined_fsdp2(run: Any) -> bool:
    """Whether ``run``'s ZeRO-3 is FSDP2 driven by torch.distributed.pipelining (sync once per schedule step).

    True for ``pp`` > 1 with the ``fsdp2`` implementation (the default without a framework); see
    the module docstring for the mechanism and its source. Also at ``pp`` = 1 where the framework
    defers the sync the same way (``Framework.fsdp_defer_grad_sync``).
    """
    return fsdp_grad_sync_deferred(run)  # one predicate for the time and the memory it costs


def prefetch_layers(settings: ShardingSettings, layer_params: float) -> float:
    """Layers of all-gather the implementation keeps in flight ahead of compute."""
    if settings.prefetch_params is None:
        return settings.prefetch_layers
    units = settings.prefetch_params / max(layer_params, 1.0)
    return float(math.ceil(units)) if settings.prefetch_whole_units else units


def backward_gathers(settings: ShardingSettings, pp: int, recompute: str, pipelined: bool = False) -> float:
    """All-gathers of one layer in its backward: 1 after a reshard, else the share of layers recomputed whole.

    ``recompute`` is the run's recomputation policy (``costmodel.llm.recompute``).

    With ``reshard_after_forward`` off, full recomputation still re-gathers: FSDP2's
    post-backward reshard is unconditional, so the recomputed forward finds the parameters
    sharded and all-gathers them (github.com/Robbyant/lingbot-vla pull 50, profiler analysis).
    Under ``pipelined`` FSDP2 (``pipelined_fsdp2``) the stage turns the post-backward reshard
    off, so a layer kept gathered after its forward is not gathered again, recomputed or not.
    """
    reshard = settings.reshard_after_forward
    if reshard is None:
        reshard = pp == 1
    if reshard:
        return 1.0
    return 0.0 if pipelined else layer_recompute_fraction(recompute)


def _finish(start: float, work: float, busy: list[tuple[float, float]], first: int,
            slowdown: float) -> tuple[float, int]:
    """When ``work`` seconds of compute started at ``start`` end, slowed inside the ``busy`` comm intervals.

    ``busy`` is sorted and disjoint; returns the end and the first interval still open after it.
    """
    t, left, i, n = start, work, first, len(busy)
    while i < n and busy[i][1] <= t:
        i += 1
    stretch = 1 + slowdown
    while left > 0 and i < n:
        begin, end = busy[i]
        if begin > t:
            gap = begin - t
            if gap >= left:  # done before this collective starts
                return t + left, i
            t, left = t + gap, left - gap
        if t > begin:  # t + gap may round past begin
            begin = t
        slowed = end - begin
        if left * stretch <= slowed:
            return begin + left * stretch, i
        t, left = end, left - slowed / stretch
        i += 1
    return t + max(left, 0.0), i


@lru_cache(maxsize=4096)  # a search sees few (layers, window) pairs
def _gather_schedule(layers: int, prefetch: float) -> tuple[tuple[tuple[int, int], ...], tuple[float, ...]]:
    """Which all-gathers a pass over ``layers`` layers issues when, for a window of ``prefetch`` layers.

    Gather ``j`` may be issued once the compute front reaches layer ``p = j - prefetch``: at
    once for ``p <= 0``; for a whole ``p``, when layer ``p - 1`` ends; otherwise ``p - floor(p)``
    of a layer's compute after layer ``floor(p)`` starts. The host issues them in ``j`` order,
    so a gather whose trigger is known waits for every earlier one.

    Returns, per layer, how many gathers are issued by its start and by part-way through it,
    and per gather the fraction of the layer's compute (``p - floor(p)``) that triggers it.
    """
    moments: list[int] = []  # 2i: known once layer i - 1 has ended; 2i + 1: part-way through layer i
    parts: list[float] = []
    for j in range(layers):
        p = j - prefetch
        if p <= 0:
            moments.append(-1)
            parts.append(0.0)
            continue
        k = math.floor(p)
        moments.append(2 * k if p == k else 2 * k + 1)
        parts.append(p - k)
    counts: list[tuple[int, int]] = []
    known = 0  # moments never decrease with j, so the gathers known at any moment are a prefix
    for i in range(layers):
        while known < layers and moments[known] <= 2 * i:
            known += 1
        by_start = known
        while known < layers and moments[known] <= 2 * i + 1:
            known += 1
        counts.append((by_start, known))
    return tuple(counts), tuple(parts)


@lru_cache(maxsize=65536)  # a pure function of numbers: a search replays the same passes for many strategies
def sharded_pass_seconds(layers: int, compute_s: float, gather_s: float, scatter_s: float,
                         prefetch: float, slowdown: float = NCCL_COMPUTE_SLOWDOWN) -> float:
    """Seconds of one pass (forward or backward) over ``layers`` equal layers of a sharded stage.

    Parameters
    ----------
    layers : int
        Layers in the pass, in execution order.
    compute_s : float
        Compute of one layer alone.
    gather_s, scatter_s : float
        One layer's all-gather before its compute and reduce-scatter after it (0: none).
    prefetch : float
        Layers ahead of the computing one whose gather may already be issued.
    slowdown : float
        Fractional slowdown of compute while a collective is in flight.

    Returns
    -------
    float
        Time from the first issue to the end of the last compute or collective.
    """
    if layers <= 0:
        return 0.0
    # A search calls this tens of thousands of times: one flat loop, the window's shape precomputed, and
    # the channel's issue step (start at max(trigger, channel free), then hold it) written out at each
    # of its three places, as a call per collective cost more than the rest of the loop.
    counts, parts = _gather_schedule(layers, prefetch)
    busy: list[tuple[float, float]] = []  # comm intervals, in channel order
    done: list[float] = []  # when each issued gather completes
    gathers = gather_s > 0
    comm_free, first, end, issued = 0.0, 0, 0.0, 0
    for i, (by_start, by_part) in enumerate(counts):
        # Known by this layer's start and not before: a whole window edge, triggered by the previous
        # layer's end (the gathers due at once: before the first layer, while end is still 0).
        while issued < by_start:
            begin = end if end >= comm_free else comm_free  # max(): one channel, host issue order
            comm_free = begin + gather_s
            if gathers:
                busy.append((begin, comm_free))
            done.append(comm_free)
            issued += 1
        start = end if end >= done[i] else done[i]
        while issued < by_part:  # a fractional window issues part-way through this layer
            at = start + parts[issued] * compute_s
            begin = at if at >= comm_free else comm_free
            comm_free = begin + gather_s
            if gathers:
                busy.append((begin, comm_free))
            done.append(comm_free)
            issued += 1
        end, first = _finish(start, compute_s, busy, first, slowdown)
        if scatter_s > 0:
            begin = end if end >= comm_free else comm_free
            comm_free = begin + scatter_s
            busy.append((begin, comm_free))
    return max(end, comm_free)


def zero3_microbatch_seconds(layers: int, forward_s: float, backward_s: float, gather_s: float,
                             scatter_s: float, prefetch: float, bwd_gathers: float,
                             slowdown: float = NCCL_COMPUTE_SLOWDOWN, fwd_gathers: float = 1.0) -> float:
    """Forward and backward of one micro-batch of a ZeRO-3 stage (stage totals in, seconds out).

    ``forward_s`` / ``backward_s`` are the stage's compute alone (backward includes any
    recomputation); the reduce-scatter of the last backward layer ends the micro-batch
    (``scatter_s`` 0: the gradients are reduced later, as pipelined FSDP2 does).
    ``fwd_gathers`` / ``bwd_gathers``: all-gathers of one layer per forward / backward.
    """
    n = max(layers, 1)
    fwd = sharded_pass_seconds(n, forward_s / n, gather_s * fwd_gathers, 0.0, prefetch, slowdown)
    bwd = sharded_pass_seconds(n, backward_s / n, gather_s * bwd_gathers, scatter_s, prefetch, slowdown)
    return fwd + bwd


def gradient_sync_seconds(op: str, grad_bytes: float, shard: Any, replicate: Any | None,
                          collective: Callable[[str, float, Any], float]) -> float:
    """Seconds to reduce ``grad_bytes`` of gradients over the shard group, then over the replicas.

    ``op`` runs over ``shard`` (``reduce_scatter`` for ZeRO >= 1, ``all_reduce`` for ZeRO-0);
    with HSDP (``replicate`` of size > 1) the reduced shard, ``grad_bytes / shard.size`` after a
    reduce-scatter, is all-reduced over ``replicate`` after it. ``collective(op, bytes, group)``
    times one collective.
    """
    seconds = collective(op, grad_bytes, shard)
    if replicate is not None and replicate.size > 1:
        left = grad_bytes / shard.size if op == "reduce_scatter" else grad_bytes
        seconds += collective("all_reduce", left, replicate)
    return seconds


def bucketed_reduce_exposed_s(backward_s: float, sync_s: float, bucket_s: float, overlap: bool,
                              slowdown: float = NCCL_COMPUTE_SLOWDOWN) -> float:
    """Exposed seconds of a gradient reduction issued bucket by bucket during a backward.

    Overlapped, the buckets run under the backward (which they slow down) and the last bucket
    always trails it; otherwise the whole reduction follows the backward.
    """
    if not overlap:
        return sync_s
    return max(bucket_s, overlapped_seconds(backward_s, sync_s, slowdown) - backward_s)


def slowed_compute_seconds(compute_s: float, comm_s: float, slowdown: float = NCCL_COMPUTE_SLOWDOWN) -> float:
    """When compute started with a collective ends: it runs ``1 + slowdown`` slower while they overlap."""
    return compute_s + min(comm_s, compute_s * (1 + slowdown)) * slowdown / (1 + slowdown)


def overlapped_seconds(compute_s: float, comm_s: float, slowdown: float = NCCL_COMPUTE_SLOWDOWN) -> float:
    """Compute and one collective started together: compute runs ``1 + slowdown`` slower while it overlaps."""
    return max(comm_s, slowed_compute_seconds(compute_s, comm_s, slowdown))
