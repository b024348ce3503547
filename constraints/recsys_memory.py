"""Per-rank HBM of a DLRM embedding sharding plan, term by term.

Terms and where they come from
------------------------------
Shard geometry follows TorchRec (torchrec/distributed/sharding_plan.py
``calculate_shard_sizes_and_offsets``): row-wise and table-row-wise split the rows in blocks of
``ceil(rows / n)`` (so the last ranks may hold fewer, or none), column-wise splits the dimension
evenly, data-parallel holds the whole table on every rank.

weights
    shard rows x shard dim x bytes per element (``EmbeddingTable.row_bytes``).
optimizer
    FBGEMM TBE keeps the fused optimizer's state beside the weights:
    SGD none; row-wise Adagrad one fp32 ``momentum1`` per row; Adam fp32 ``momentum1`` and
    ``momentum2`` per element (fbgemm_gpu split_table_batched_embeddings_ops_training.py, the
    optimizer states are allocated in ``optimizer_state_dtypes``, fp32 unless asked otherwise).
    TorchRec's estimator (planner/shard_estimators.py ``_get_optimizer_multipler``) counts
    ``1 / dim`` of the weight bytes for row-wise Adagrad and ``2 x`` for Adam: the same for fp32
    tables, half of what FBGEMM allocates for 16-bit tables; and 0 when the table's optimizer class
    is not attached to the tensor (the "optimizer storage missed" reports), which we never do.
gradients
    Only for the ``dense`` kernel (data-parallel tables): autograd materialises a dense gradient the
    size of the table and DDP all-reduces it in buckets of the same size (torch DistributedDataParallel
    docs, "gradient bucketing"). The ``fused`` kernel applies the update inside the backward
    (TorchRec fused optimizer; FBGEMM TBE), so no gradient is kept. TorchRec counts none.
input buffers
    The ids a shard looks up, int64 (TorchRec ``BIGINT_DTYPE = 8``), as TorchRec's
    ``_calculate_shard_io_sizes`` counts them: table-wise and column-wise shards see the global
    batch, row-wise shards a 1/world share, table-row-wise a 1/local_world share, data-parallel
    the local batch. ``TrainPipelineSparseDist`` keeps two batches of input in flight (TorchRec
    ``calculate_pipeline_io_cost``: ``pipelining_hbm_input_factor = 2``).
output buffers
    The pooled output a shard produces before the output all-to-all: global batch x shard dim
    (row-wise: partial sums for the whole batch, reduce-scattered), data-parallel the local batch;
    fp32. TorchRec calls it ephemeral and leaves it out unless ``count_ephemeral_storage_cost``; it
    is alive at the peak (during the all-to-all, and its gradient in the backward), so we count it.
cache auxiliary state
    UVM caching only (not an HBM kernel): rows x (4 + caching_ratio x 16) bytes
    (``cache_index_table_map`` int32 per row; ``lxu_cache_state`` and ``lru_state`` int64 per cache
    slot; TorchRec ``_calculate_cache_aux_state_sizes``, citing fbgemm_gpu). The plans here keep
    every table in HBM (``fused`` / ``dense`` kernels), so the term is 0 unless ``caching_ratio``
    is given.
dense part (the same on every rank)
    The data-parallel MLPs: fp32 weights, gradients and ``dense_optimizer_slots`` fp32 states per
    parameter (MLPerf DLRM-DCNv2 reference trains the dense part with Adagrad: one slot;
    mlcommons/training recommendation_v2/torchrec_dlrm ``dlrm_main.py --adagrad``); their
    activations for the local batch, kept for the backward, and the received pooled embeddings
    with their gradients (local batch x sum of pooled widths, fp32, twice).
    TorchRec instead reserves 6x the dense parameter bytes plus a 15% margin
    (planner/storage_reservations.py ``HeuristicalStorageReservation``, planners.py default 0.15).
reserve
    The runtime reserve and fragmentation share are taken from the capacity, as for LLM runs
    (``ClusterSpec.usable_memory_bytes``), not added to the peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from costmodel.recsys.dense import dense_params
from costmodel.recsys.plan import ShardingPlan, TableSharding
from costmodel.specs.gpu import ClusterSpec, GiB
from costmodel.specs.recsys import DTYPE_BYTES, DLRMSpec, EmbeddingTable

INDEX_BYTES = 8
"""Bytes per looked-up id (int64; TorchRec planner/constants.py ``BIGINT_DTYPE``)."""
PIPELINE_INPUT_FACTOR = 2
"""Batches of input ids ``TrainPipelineSparseDist`` holds at once (TorchRec shard_estimators.py)."""
OUTPUT_BYTES = 4
"""Pooled embeddings travel as fp32 (TorchRec's default ``output_dtype``)."""
STATE_BYTES = 4
"""fp32 optimizer state element (FBGEMM default ``optimizer_state_dtypes``)."""
DENSE_OPTIMIZER_SLOTS = 1
"""fp32 optimizer states per dense parameter: Adagrad (MLPerf DLRM-DCNv2 reference, ``--adagrad``)."""
TERMS = ("weights", "optimizer", "gradients", "input_buffers", "output_buffers", "cache_aux")
"""Per-table terms, in the column order of :func:`table_rank_bytes`."""


@dataclass(frozen=True)
class Shard:
    """One piece of a table on one rank: ``rows`` x ``cols`` elements."""

    rank: int
    rows: int
    cols: int


def rank_shards(table: EmbeddingTable, sharding: TableSharding, world_size: int) -> tuple[Shard, ...]:
    """The shards of ``table`` under ``sharding``, TorchRec's geometry (module docstring)."""
    kind = sharding.sharding_type
    if kind == "data_parallel":
        return tuple(Shard(r, table.rows, table.dim) for r in range(world_size))
    if kind == "table_wise":
        return (Shard(sharding.ranks[0], table.rows, table.dim),)
    if kind == "column_wise":
        cols = table.dim // sharding.num_shards
        return tuple(Shard(r, table.rows, cols) for r in sharding.ranks)
    block = math.ceil(table.rows / len(sharding.ranks))  # row_wise, table_row_wise
    return tuple(Shard(r, max(0, min(block, table.rows - i * block)), table.dim)
                 for i, r in enumerate(sharding.ranks))


def local_batch(spec: DLRMSpec, world_size: int) -> int:
    """Samples per rank (the global batch split over the data-parallel dense part)."""
    return math.ceil(spec.batch_size / world_size)


def optimizer_bytes(table: EmbeddingTable, rows: int, cols: int) -> float:
    """Fused optimizer state of a ``rows`` x ``cols`` shard (FBGEMM; module docstring)."""
    if table.optimizer == "rowwise_adagrad":
        return rows * STATE_BYTES
    if table.optimizer == "adam":
        return 2.0 * rows * cols * STATE_BYTES
    return 0.0


def cache_aux_state_bytes(rows: int, caching_ratio: float) -> float:
    """UVM cache bookkeeping of a shard (TorchRec ``_calculate_cache_aux_state_sizes``)."""
    return math.ceil(rows * (4 + caching_ratio * 16))


def _lookup_share(kind: str, n_ranks: int, gpus_per_node: int, world_size: int) -> float:
    """Share of the global batch's ids one shard receives (TorchRec ``_calculate_shard_io_sizes``)."""
    if kind == "row_wise":
        return 1.0 / n_ranks
    if kind == "table_row_wise":
        return 1.0 / min(n_ranks, gpus_per_node)
    if kind == "data_parallel":
        return 1.0 / world_size
    return 1.0


@lru_cache(maxsize=1 << 16)
def shard_term_bytes(table: EmbeddingTable, sharding_type: str, compute_kernel: str, num_shards: int,
                     world_size: int, batch_size: int, gpus_per_node: int,
                     caching_ratio: float | None = None) -> np.ndarray:
    """Bytes of each shard of ``table``, by term: array (shards, len(TERMS)), in ``rank_shards`` order.

    Independent of which ranks hold the shards, so a search that moves shards reuses it (cached; do not
    modify the result).
    """
    ranks = tuple(range(num_shards)) if sharding_type != "data_parallel" else ()
    shards = rank_shards(table, TableSharding(sharding_type, ranks, compute_kernel), world_size)
    out = np.zeros((len(shards), len(TERMS)))
    share = _lookup_share(sharding_type, len(shards), gpus_per_node, world_size)
    lookups = batch_size * table.lookups_per_sample * share
    samples = batch_size / world_size if sharding_type == "data_parallel" else batch_size
    bags = samples * table.num_features
    element = DTYPE_BYTES[table.dtype]
    for row, shard in zip(out, shards):
        if shard.rows == 0:  # TorchRec: empty row-wise shards get no buffers either
            continue
        row[0] = shard.rows * shard.cols * element + shard.rows * (table.row_bytes - table.dim * element)
        row[1] = optimizer_bytes(table, shard.rows, shard.cols)
        if compute_kernel == "dense":
            row[2] = shard.rows * shard.cols * element
        row[3] = PIPELINE_INPUT_FACTOR * lookups * INDEX_BYTES
        row[4] = bags * shard.cols * OUTPUT_BYTES
        if caching_ratio is not None:
            row[5] = cache_aux_state_bytes(shard.rows, caching_ratio)
    out.setflags(write=False)
    return out


def shard_ranks(sharding: TableSharding, world_size: int) -> tuple[int, ...]:
    """The rank of each shard, in ``rank_shards`` order."""
    return tuple(range(world_size)) if sharding.sharding_type == "data_parallel" else sharding.ranks


def table_rank_bytes(table: EmbeddingTable, sharding: TableSharding, world_size: int, batch_size: int,
                     gpus_per_node: int, caching_ratio: float | None = None) -> np.ndarray:
    """Bytes ``table`` puts on each rank: array (world_size, len(TERMS)), columns as in ``TERMS``."""
    ranks = shard_ranks(sharding, world_size)
    out = np.zeros((world_size, len(TERMS)))
    np.add.at(out, list(ranks), shard_term_bytes(table, sharding.sharding_type, sharding.compute_kernel, len(ranks),
                                                 world_size, batch_size, gpus_per_node, caching_ratio))
    return out


def dense_bytes(spec: DLRMSpec, world_size: int) -> tuple[float, float]:
    """(states, activations) of the data-parallel dense part on one rank (module docstring)."""
    states = dense_params(spec) * 4.0 * (2 + DENSE_OPTIMIZER_SLOTS)
    batch = local_batch(spec, world_size)
    dense_elem = DTYPE_BYTES[spec.dense_dtype]
    width = spec.interaction_width
    layers = sum(spec.bottom_mlp) + width * (1 + spec.dcn_num_layers * (spec.interaction == "dcnv2")) \
        + sum(spec.top_mlp)
    pooled = sum(t.dim * t.num_features for t in spec.tables)
    activations = batch * layers * dense_elem + 2.0 * batch * pooled * OUTPUT_BYTES
    return states, activations


@dataclass(frozen=True)
class RankMemory:
    """Peak bytes on one rank, by term."""

    rank: int
    weights_bytes: float
    optimizer_bytes: float
    gradients_bytes: float
    input_buffers_bytes: float
    output_buffers_bytes: float
    cache_aux_bytes: float
    dense_states_bytes: float
    dense_activations_bytes: float

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.optimizer_bytes + self.gradients_bytes + self.input_buffers_bytes
                + self.output_buffers_bytes + self.cache_aux_bytes + self.dense_states_bytes
                + self.dense_activations_bytes)

    def as_gib(self) -> dict[str, float]:
        return {"rank": self.rank, **{f"{k.removesuffix('_bytes')}_gib": v / GiB
                                      for k, v in self.__dict__.items() if k.endswith("_bytes")},
                "total_gib": self.total_bytes / GiB}


@dataclass(frozen=True)
class PlanMemory:
    """Every rank's memory and the capacity it must fit in."""

    ranks: tuple[RankMemory, ...]
    usable_bytes: float

    @property
    def peak(self) -> RankMemory:
        return max(self.ranks, key=lambda r: r.total_bytes)

    @property
    def fits(self) -> bool:
        return self.peak.total_bytes <= self.usable_bytes

    @property
    def over_bytes(self) -> float:
        """Bytes by which the fullest rank exceeds the usable memory (0 when it fits)."""
        return max(0.0, self.peak.total_bytes - self.usable_bytes)


def sparse_rank_bytes(spec: DLRMSpec, cluster: ClusterSpec, plan: ShardingPlan,
                      caching_ratio: float | None = None) -> np.ndarray:
    """Sum of :func:`table_rank_bytes` over the tables: array (world_size, len(TERMS))."""
    world = plan.world_size
    total = np.zeros((world, len(TERMS)))
    shardings = plan.as_dict()
    for table in spec.tables:
        sharding = shardings[table.name]
        ranks = shard_ranks(sharding, world)
        np.add.at(total, list(ranks), shard_term_bytes(table, sharding.sharding_type, sharding.compute_kernel,
                                                       len(ranks), world, spec.batch_size, cluster.gpus_per_node,
                                                       caching_ratio))
    return total


def plan_memory(spec: DLRMSpec, cluster: ClusterSpec, plan: ShardingPlan,
                caching_ratio: float | None = None) -> PlanMemory:
    """Per-rank memory of ``plan`` and whether the fullest rank fits ``cluster.usable_memory_bytes``."""
    sparse = sparse_rank_bytes(spec, cluster, plan, caching_ratio)
    states, activations = dense_bytes(spec, plan.world_size)
    ranks = tuple(RankMemory(r, *map(float, sparse[r]), states, activations) for r in range(plan.world_size))
    return PlanMemory(ranks=ranks, usable_bytes=cluster.usable_memory_bytes)


__all__ = ["INDEX_BYTES", "TERMS", "PlanMemory", "RankMemory", "Shard", "cache_aux_state_bytes", "dense_bytes",
           "dense_params", "local_batch", "optimizer_bytes", "plan_memory", "rank_shards", "shard_ranks",
           "shard_term_bytes", "sparse_rank_bytes", "table_rank_bytes"]
