"""Host work of the sharded embedding modules that neither the collectives nor the lookups count.

Around each all-to-all a rank packs its send buffers and unpacks what it received, shard by shard
(TorchRec: ``KJTAllToAll``'s bucketising and splitting, ``PooledEmbeddingsAllToAll``'s packing and, for
row-wise shards, the sum of the partial outputs). On a GPU these are a few kernels each and the
collective model's latency covers them; on a CPU (the miniatures of ``benchmarks/sharding.py``) they are
operator dispatches and memory passes that grow with the shards a table is cut into. ``HostCosts``
holds their unit costs, measured on the machine (``benchmarks/_sharding_hardware.cpu_host_costs``);
:func:`host_seconds` counts the units a plan gives each rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.recsys.plan import ShardingPlan
from costmodel.specs.recsys import DLRMSpec

ROW_SPLIT = ("row_wise", "table_row_wise")


@dataclass(frozen=True)
class HostCosts:
    """Seconds per unit of the host work around the embedding all-to-alls (all 0: not modelled).

    ``per_shard_call_s``: the operator calls of packing or unpacking one shard for one peer;
    ``per_packed_id_s``: an id (or length) copied into a send buffer or out of a receive buffer;
    ``per_bucketised_id_s``: an id compared against one row-wise shard's row block (one pass per shard);
    ``per_pooled_element_s``: a pooled-output or gradient element packed, unpacked or summed.
    """

    per_shard_call_s: float = 0.0
    per_packed_id_s: float = 0.0
    per_bucketised_id_s: float = 0.0
    per_pooled_element_s: float = 0.0


@dataclass(frozen=True)
class HostCounts:
    """Per rank, the units of :class:`HostCosts` in the forward (input and output distribution) and the
    backward (the gradients' unpacking)."""

    shard_calls_fwd: np.ndarray
    packed_ids: np.ndarray
    bucketised_ids: np.ndarray
    pooled_fwd: np.ndarray
    shard_calls_bwd: np.ndarray
    pooled_bwd: np.ndarray


def host_counts(spec: DLRMSpec, plan: ShardingPlan) -> HostCounts:
    """What each rank packs and unpacks in one step under ``plan`` (data-parallel tables: none)."""
    world = plan.world_size
    local = spec.batch_size / world
    zeros = [np.zeros(world) for _ in range(6)]
    calls_fwd, packed, bucketised, pooled_fwd, calls_bwd, pooled_bwd = zeros
    for table in spec.tables:
        sharding = plan[table.name]
        kind, ranks = sharding.sharding_type, sharding.ranks
        if kind == "data_parallel":
            continue
        k = len(ranks)
        bags = local * table.num_features
        ids = bags * table.pooling_mean
        dim = table.dim / k if kind == "column_wise" else table.dim
        # as a source, every rank packs the table's ids and lengths for each shard ...
        # (column-wise: every shard all the ids; row-wise: each id to one shard, every shard all the lengths)
        packed += (ids + bags) * k if kind == "column_wise" else ids + bags * k
        if kind in ROW_SPLIT:
            bucketised += ids * k
        calls_fwd += k
        # ... and receives each shard's slice of its bags (row-wise: one partial sum per shard, summed)
        pooled_fwd += bags * dim * k
        pooled_bwd += bags * dim * k
        calls_bwd += k
        for rank in ranks:  # as a destination: every source's ids split out and joined, its outputs packed
            share = 1.0 / k if kind in ROW_SPLIT else 1.0
            packed[rank] += world * ids * share + world * bags
            calls_fwd[rank] += world
            calls_bwd[rank] += world
            pooled_fwd[rank] += world * bags * dim
            pooled_bwd[rank] += world * bags * dim
    return HostCounts(calls_fwd, packed, bucketised, pooled_fwd, calls_bwd, pooled_bwd)


def host_seconds(spec: DLRMSpec, plan: ShardingPlan, costs: HostCosts) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, the host seconds of the forward and of the backward (:func:`host_counts` x ``costs``)."""
    n = host_counts(spec, plan)
    fwd = (n.shard_calls_fwd * costs.per_shard_call_s + n.packed_ids * costs.per_packed_id_s
           + n.bucketised_ids * costs.per_bucketised_id_s + n.pooled_fwd * costs.per_pooled_element_s)
    bwd = n.shard_calls_bwd * costs.per_shard_call_s + n.pooled_bwd * costs.per_pooled_element_s
    return fwd, bwd


__all__ = ["HostCosts", "HostCounts", "host_counts", "host_seconds"]
