"""Data-parallel gradient and parameter buckets (ZeRO-0/1/2): how big, which overlap, and how far.

Each framework's data-parallel implementation is named by ``Framework.dp_bucket_scheme``
(``DP_BUCKET_SCHEMES``); this module holds what each one does.

``megatron-core``: ``DistributedDataParallel`` lays a model chunk's parameters into buckets of about
``max(40M, 1M x dp)`` elements, filling them in reverse parameter order and closing one once it
reaches the bucket size, so the last bucket (the first layers and the embedding) is the remainder;
under the distributed optimizer a shared (tied, pp > 1) embedding gets a bucket of its own
(megatron/core/distributed/param_and_grad_buffer.py @core_r0.8.0 L296-345
``_does_param_require_new_bucket``). Bucketing is turned off "if we are on a pipeline stage that is
not the first (since data-parallel communication on these stages is not on the critical path)" and
for model chunks after the first of an interleaved schedule (distributed_data_parallel.py
``__init__``; training.py ``disable_bucketing=(model_chunk_idx > 0)``; github.com/NVIDIA/Megatron-LM
@f2e5db40, unchanged @d98e8a64): such a chunk is one bucket, reduced after the stage's last
backward. With ``--overlap-param-gather`` the distributed optimizer all-gathers the updated
parameters in the next step's first forward, one bucket ahead: bucket 0's all-gather is dispatched
at ``zero_grad`` and "the all-gather for the next bucket will be launched in the forward pre-hook
when this all-gather finishes" (megatron/core/optimizer/distrib_optimizer.py @f2e5db40
``zero_grad``, ``_finish_param_sync_helper``). So the bucket the forward needs first is never
hidden, and a bucket whose gather is longer than the previous bucket's forward stalls the forward
(``param_gather_exposed_s``). A stage without buckets gathers all its parameters at once, from
``zero_grad`` until its first forward, which on pipeline rank ``i`` waits for ``i`` upstream
forwards anyway.

``deepspeed``: 5e8-element buckets. Without pipelining, ZeRO-1/2 reduce them from backward hooks
as they fill (``overlap_comm``; stage_1_and_2.py ``reduce_independent_p_g_buckets_and_remove_grads``);
ZeRO-0 all-reduces after the backward (engine.py ``_backward_epilogue`` -> ``allreduce_gradients``
-> ``buffered_allreduce_fallback(elements_per_buffer=500000000)``), and so does every stage of the
pipeline engine, after its last backward (pipe/engine.py ``_exec_reduce_grads``; stage_1_and_2.py
``reduce_gradients``: "with PP we must create ipg buffer, since backward is handled outside zero").
The updated parameters are all-gathered inside the optimizer step ("Gather the updated weights from
everyone", stage_1_and_2.py ``step`` ``all_gather_dp_groups``), never under the next forward
(github.com/deepspeedai/DeepSpeed @edaa7221).

``apex``: apex ``DistributedFusedAdam`` (NeMo 1): buckets of ``bucket_cap_mb`` = 100 MiB of the
gradient-sync dtype, reduced as they fill (``overlap_grad_sync`` = True); with ``overlap_param_sync``
(default False, "experimental") the parameters are gathered bucket by bucket from forward pre-hooks,
the bucket holding the first parameter launched in the optimizer step (github.com/NVIDIA/apex
@f3f04924 apex/contrib/optimizers/distributed_fused_adam.py L558-561, L710-712, L2380-2425), as one
bucket ahead here. NeMo 1 hands the optimizer's ``grad_sync_func`` to Megatron-Core's schedule,
which then enables the overlapped reduce in the last backward "only ... in first pipeline stage.
Other pipeline stages do grad reduction during pipeline bubble" (Megatron-LM @f2e5db40
megatron/core/pipeline_parallel/schedules.py L1434-1459): so pipeline ranks > 0 reduce after their
last backward here too, through the schedule rather than Megatron-Core's DDP.

``per-layer``: one bucket per transformer block on every stage (torchtitan: ``fully_shard`` per
block, also for plain data parallelism since github.com/pytorch/torchtitan 00b7f569, 2026-04-09;
MaxText: XLA schedules the scanned layers' reductions); no ZeRO-1/2, so no parameter gather.

Which schemes gather under the next forward is ``Framework.supports_param_gather_overlap``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from costmodel.llm.sharding import NCCL_COMPUTE_SLOWDOWN, overlapped_seconds

__all__ = ["DEEPSPEED_BUCKET_PARAMS", "MIN_BUCKET_PARAMS", "bucket_params", "bucket_sizes", "bucketed",
           "megatron_bucket_params", "overlaps_grad_reduce", "param_gather_exposed_s"]

# megatron/core/distributed/distributed_data_parallel.py @f2e5db40 (and @d98e8a64):
# bucket_size = max(40000000, 1000000 * data_parallel_world_size) when --ddp-bucket-size is unset.
MIN_BUCKET_PARAMS: Final = 40_000_000
PARAMS_PER_DP_RANK: Final = 1_000_000
# DeepSpeed reduce_bucket_size = allgather_bucket_size = 5e8 elements (deepspeed/runtime/zero/config.py
# @edaa7221); engine.py MEMORY_OPT_ALLREDUCE_SIZE = 500000000 for ZeRO-0.
DEEPSPEED_BUCKET_PARAMS: Final = 500_000_000
# apex DistributedFusedAdam bucket_cap_mb = 100.0: bucket_size = 1024 * 1024 * bucket_cap_mb / dtype_size
# of grad_sync_dtype (distributed_fused_adam.py @f3f04924 L560, L710-712).
APEX_BUCKET_BYTES: Final = 100 * 1024 * 1024


def megatron_bucket_params(dp: int) -> int:
    """Megatron-Core's default DDP bucket, in parameter elements, at data-parallel size ``dp``."""
    return max(MIN_BUCKET_PARAMS, PARAMS_PER_DP_RANK * dp)


def bucket_params(scheme: str, dp: int, grad_bytes: int, layer_params: float) -> float:
    """Elements per bucket under ``scheme`` (``grad_bytes``: the gradient-sync dtype's size;
    ``layer_params``: one transformer layer's parameters on the GPU, the ``per-layer`` bucket)."""
    if scheme == "megatron-core":
        return float(megatron_bucket_params(dp))
    if scheme == "deepspeed":
        return float(DEEPSPEED_BUCKET_PARAMS)
    if scheme == "apex":
        return APEX_BUCKET_BYTES / grad_bytes
    return max(layer_params, 1.0)


def bucketed(scheme: str, pp_rank: int) -> bool:
    """Whether the stage on ``pp_rank`` reduces and gathers bucket by bucket under its last backward.

    Megatron-Core's DDP and apex under Megatron-Core's schedule do only on pipeline rank 0 (with
    ``vpp`` > 1 only its first model chunk does, not modelled apart: that rank is taken as
    bucketed); ``per-layer`` reduces each block as its backward ends on every rank. DeepSpeed's
    pipeline stages reduce after the backward (``overlaps_grad_reduce``).
    """
    return pp_rank == 0 if scheme in ("megatron-core", "apex") else True


def overlaps_grad_reduce(scheme: str, zero_stage: int, pp: int) -> bool:
    """Whether ``overlap_grad_reduce`` can hide the reduce under the backward at all (DeepSpeed:
    only ZeRO-1/2 without pipelining; ZeRO-0 and the pipeline engine reduce after the backward)."""
    return not (scheme == "deepspeed" and (zero_stage == 0 or pp > 1))


def bucket_sizes(params: float, bucket: float, own_bucket: float = 0.0) -> list[float]:
    """Bucket sizes in forward order (the first is gathered first and reduced last).

    Buckets fill in reverse parameter order, so all are full but the one holding the first
    layers, which takes the remainder. ``own_bucket``: first parameters that sit alone in a bucket
    before it (Megatron-Core's shared embedding under the distributed optimizer).
    """
    rest = max(params - own_bucket, 0.0)
    n = max(1, math.ceil(rest / bucket)) if rest > 0 else 0
    sizes = [rest - (n - 1) * bucket] + [bucket] * (n - 1) if n else []
    return ([own_bucket] if own_bucket > 0 else []) + sizes


def param_gather_exposed_s(bucket_gather_s: Sequence[float], bucket_forward_s: Sequence[float], gather_s: float,
                           is_bucketed: bool, upstream_forward_s: float = 0.0,
                           slowdown: float = NCCL_COMPUTE_SLOWDOWN) -> float:
    """Seconds the first forward of a step waits for the overlapped parameter all-gather.

    Parameters
    ----------
    bucket_gather_s, bucket_forward_s : sequence of float
        Per bucket in forward order (``bucket_sizes``): its all-gather, and the forward of its layers.
    gather_s : float
        All-gather of all the stage's parameters at once.
    is_bucketed : bool
        The stage gathers bucket by bucket (``bucketed``), else all at once.
    upstream_forward_s : float
        Without buckets: how long the stage's first forward waits for its input anyway.
    """
    if not is_bucketed:
        return max(0.0, gather_s - upstream_forward_s)
    exposed = bucket_gather_s[0]
    # bucket k + 1 gathers while bucket k computes (slowed by the NCCL kernel beside it); most buckets
    # are full, so a term is computed once per run of equal (forward, gather) pairs and added per bucket
    pair, term = None, 0.0
    for forward_and_next in zip(bucket_forward_s, bucket_gather_s[1:]):
        if forward_and_next != pair:
            pair = forward_and_next
            forward, nxt = pair
            term = max(0.0, overlapped_seconds(forward, nxt, slowdown) - forward)
        exposed += term
    return exposed
