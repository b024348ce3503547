"""Megatron-Core DDP's gradient and parameter buckets (ZeRO-0/1): which overlap, and how far.

Megatron-Core's ``DistributedDataParallel`` lays a model chunk's parameters into buckets of about
``max(40M, 1M x dp)`` elements (``bucket_params``), in reverse order so that backward fills them
one after another. Bucketing is turned off "if we are on a pipeline stage that is not the first
(since data-parallel communication on these stages is not on the critical path)" and for model
chunks after the first of an interleaved schedule (github.com/NVIDIA/Megatron-LM @f2e5db40
megatron/core/distributed/distributed_data_parallel.py ``__init__``; training.py
``disable_bucketing=(model_chunk_idx > 0)``; unchanged @d98e8a64): such a chunk is one bucket,
reduced only when its last gradient is ready, after the stage's last backward (``bucketed``).

With ``--overlap-param-gather`` the distributed optimizer all-gathers the updated parameters in
the next step's first forward, one bucket ahead: bucket 0's all-gather is dispatched at
``zero_grad`` and "the all-gather for the next bucket will be launched in the forward pre-hook
when this all-gather finishes (to ensure that the communication kernels don't head-of-line block
the compute kernels since we run with CUDA_DEVICE_MAX_CONNECTIONS=1)" (megatron/core/optimizer/
distrib_optimizer.py @f2e5db40 ``zero_grad``, ``_finish_param_sync_helper``). So bucket ``k + 1``
travels while bucket ``k``'s layers compute, the first bucket is never hidden, and a bucket
whose gather is longer than the previous bucket's forward stalls the forward
(``param_gather_exposed_s``). A stage without buckets gathers all its parameters at once, from
``zero_grad`` until its first forward, which on pipeline rank ``i`` waits for ``i`` upstream
forwards anyway.
"""

from __future__ import annotations

import math
from typing import Final

from costmodel.llm.sharding import NCCL_COMPUTE_SLOWDOWN, overlapped_seconds

__all__ = ["MIN_BUCKET_PARAMS", "bucket_count", "bucket_params", "bucketed", "param_gather_exposed_s"]

# megatron/core/distributed/distributed_data_parallel.py @f2e5db40 (and @d98e8a64):
# bucket_size = max(40000000, 1000000 * data_parallel_world_size) when --ddp-bucket-size is unset.
MIN_BUCKET_PARAMS: Final = 40_000_000
PARAMS_PER_DP_RANK: Final = 1_000_000


def bucket_params(dp: int) -> int:
    """Megatron-Core's default DDP bucket, in parameter elements, at data-parallel size ``dp``."""
    return max(MIN_BUCKET_PARAMS, PARAMS_PER_DP_RANK * dp)


def bucketed(pp_rank: int) -> bool:
    """Whether the stage on ``pp_rank`` reduces and gathers bucket by bucket.

    Only pipeline rank 0 buckets; with ``vpp`` > 1 only its first model chunk does, which is
    not modelled apart: that rank is taken as bucketed, the others as one bucket each.
    """
    return pp_rank == 0


def bucket_count(params: float, dp: int) -> int:
    """Buckets of ``params`` elements at Megatron-Core's default bucket size (at least one)."""
    return max(1, math.ceil(params / bucket_params(dp)))


def param_gather_exposed_s(buckets: int, forward_s: float, bucket_gather_s: float, gather_s: float,
                           is_bucketed: bool, upstream_forward_s: float = 0.0,
                           slowdown: float = NCCL_COMPUTE_SLOWDOWN) -> float:
    """Seconds the first forward of a step waits for the overlapped parameter all-gather.

    Parameters
    ----------
    buckets : int
        Buckets of the stage (``bucket_count``); each holds ``1 / buckets`` of its forward.
    forward_s : float
        The stage's forward of one micro-batch (the first one covers the gathers).
    bucket_gather_s, gather_s : float
        All-gather of one bucket, and of all the stage's parameters at once.
    is_bucketed : bool
        The stage gathers bucket by bucket (``bucketed``), else all at once.
    upstream_forward_s : float
        Without buckets: how long the stage's first forward waits for its input anyway.
    """
    if not is_bucketed:
        return max(0.0, gather_s - upstream_forward_s)
    if buckets <= 1:
        return bucket_gather_s
    per_bucket = forward_s / buckets
    # bucket k + 1 gathers while bucket k computes (slowed by the NCCL kernel beside it)
    stall = overlapped_seconds(per_bucket, bucket_gather_s, slowdown) - per_bucket
    return bucket_gather_s + (buckets - 1) * max(0.0, stall)
