"""A DLRM step's collectives: the id (input) all-to-all, pooled-embedding all-to-all / reduce-scatter and
their backward, and the dense gradient all-reduce, through the shared collective model (``costmodel.comm``).

Bytes follow TorchRec's sharded embedding modules (torchrec/distributed/sharding/*): table-wise and
column-wise shards exchange pooled vectors by all-to-all, row-wise shards reduce-scatter partial sums over
their ranks (all-gather in the backward), table-row-wise shards reduce-scatter inside their node and then
all-to-all across nodes. Ids are int64 and lengths int32, pooled vectors and gradients fp32 (TorchRec's
defaults without quantized comms). The input distribution is three all-to-alls, each with its latency,
as ``KJTAllToAll`` runs it (torchrec/distributed/dist_data.py): the splits, the lengths, the ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from costmodel.comm import GroupPlacement, collective_seconds, scale_up_domain_size
from costmodel.recsys.embedding import INDEX_BYTES, OUTPUT_BYTES
from costmodel.recsys.plan import ShardingPlan
from costmodel.specs.gpu import ClusterSpec
from costmodel.specs.recsys import DLRMSpec

LENGTH_BYTES = 4  # int32 lengths of a KeyedJaggedTensor
GRAD_BYTES = 4  # fp32 dense gradients (DDP default)
SPLIT_BYTES = 2 * 8  # KJTAllToAll's splits: an int64 lengths and values size per destination


def placement_of(ranks: Iterable[int], cluster: ClusterSpec) -> GroupPlacement:
    """Where a set of ranks sits: ranks fill scale-up domains in order (rank // domain size)."""
    members = sorted(set(ranks))
    domain = max(1, scale_up_domain_size(cluster))
    per_domain: dict[int, int] = {}
    for rank in members:
        per_domain[rank // domain] = per_domain.get(rank // domain, 0) + 1
    return GroupPlacement(kind="custom", size=len(members), gpus_per_node=min(per_domain.values()),
                          num_domains=len(per_domain), crosses_nodes=len(per_domain) > 1)


@dataclass(frozen=True)
class CommTimes:
    """Seconds of each collective phase of one step (every rank takes part in each)."""

    input_dist: float
    output_dist: float
    grad_dist: float
    dense_all_reduce: float


def all_reduce_bytes(spec: DLRMSpec, plan: ShardingPlan, dense_params: int) -> float:
    """Bytes of the step's gradient all-reduce: the dense parameters and every data-parallel table."""
    dp_rows = sum(t.rows * t.dim for t in spec.tables if plan[t.name].sharding_type == "data_parallel")
    return float((dense_params + dp_rows) * GRAD_BYTES)


def comm_times(spec: DLRMSpec, cluster: ClusterSpec, plan: ShardingPlan, dense_params: int) -> CommTimes:
    """The collectives of one step under ``plan`` (all-to-alls timed at the busiest rank's send or receive)."""
    world = plan.world_size
    local = spec.batch_size / world
    ids_send = np.zeros(world)
    ids_recv = np.zeros(world)
    lengths_send = np.zeros(world)
    lengths_recv = np.zeros(world)
    pooled_send = np.zeros(world)
    pooled_recv = np.zeros(world)
    reduce_bytes: dict[tuple[int, ...], float] = {}
    for table in spec.tables:
        sharding = plan[table.name]
        kind, ranks = sharding.sharding_type, sharding.ranks
        bags_local = local * table.num_features
        ids_local = bags_local * table.pooling_mean * INDEX_BYTES
        lengths_local = bags_local * LENGTH_BYTES
        pooled_local = bags_local * table.dim * OUTPUT_BYTES
        if kind == "data_parallel":  # replicated: its gradient is in the all-reduce
            continue
        k = len(ranks)
        if kind in ("table_wise", "column_wise"):
            copies = k if kind == "column_wise" else 1  # every column shard needs all the ids
            ids_send += ids_local * copies
            lengths_send += lengths_local * copies
            pooled_recv += pooled_local
            for rank in ranks:  # each shard receives every rank's ids and sends its slice of every bag
                ids_recv[rank] += ids_local * world
                lengths_recv[rank] += lengths_local * world
                pooled_send[rank] += pooled_local * world / k
        else:  # row_wise, table_row_wise: ids bucketised by row block, partial sums reduce-scattered
            ids_send += ids_local
            lengths_send += lengths_local * k  # every row block gets every bag's length
            for rank in ranks:
                ids_recv[rank] += ids_local * world / k
                lengths_recv[rank] += lengths_local * world
            whole = spec.batch_size * table.num_features * table.dim * OUTPUT_BYTES
            if kind == "table_row_wise":  # one node's partial sums reduced in the node, then a2a across nodes
                pooled_recv += pooled_local
                for rank in ranks:
                    pooled_send[rank] += whole / k
            key = tuple(sorted(ranks))
            reduce_bytes[key] = reduce_bytes.get(key, 0.0) + whole  # one batched collective per group
    reduce_seconds = sum(collective_seconds("reduce_scatter", size, placement_of(group, cluster), cluster.gpu)
                         for group, size in reduce_bytes.items())
    everyone = placement_of(range(world), cluster)
    ids = float(max(ids_send.max(), ids_recv.max()))
    lengths = float(max(lengths_send.max(), lengths_recv.max()))
    pooled = float(max(pooled_send.max(), pooled_recv.max()))
    # KJTAllToAll (torchrec/distributed/dist_data.py): one all-to-all of the splits, then one per tensor
    a2a_ids = sum(collective_seconds("all_to_all", size, everyone, cluster.gpu)
                  for size in (SPLIT_BYTES * world, lengths, ids)) if ids or lengths else 0.0
    a2a_pooled = collective_seconds("all_to_all", pooled, everyone, cluster.gpu) if pooled else 0.0
    # backward: the same volumes in reverse (reduce-scatter's transpose is an all-gather of equal time)
    all_reduce = collective_seconds("all_reduce", all_reduce_bytes(spec, plan, dense_params), everyone, cluster.gpu)
    return CommTimes(input_dist=a2a_ids, output_dist=a2a_pooled + reduce_seconds,
                     grad_dist=a2a_pooled + reduce_seconds, dense_all_reduce=all_reduce)
