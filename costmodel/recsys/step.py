"""One DLRM training step under a sharding plan: per-rank critical paths, the slowest rank's is the step.

Each rank runs one compute stream and one communication stream. The schedule is that of TorchRec's
``TrainPipelineSparseDist`` (torchrec/distributed/train_pipeline): the id all-to-all of the next batch runs
during this batch's compute; the pooled-embedding all-to-all runs while the bottom MLP's forward computes;
the embedding-gradient all-to-all while the bottom MLP's backward computes; the dense gradient all-reduce
after it (DDP buckets), overlapping the embedding backward. A collective starts when the last rank is ready
for it, so a slow rank delays all. ``pipelined=False`` runs every phase back to back (no overlap).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from costmodel.recsys.comm import CommTimes, all_reduce_bytes, comm_times
from costmodel.recsys.dense import DenseTimes, dense_params, dense_times
from costmodel.recsys.dense_kernel import DenseKernelCosts, dense_backward_seconds
from costmodel.recsys.embedding import (
    GPU_SECTOR_BYTES,
    CacheLevels,
    LookupShard,
    RooflineLookups,
    backward_bytes,
    efficiency,
    gpu_caches,
    lookup_columns,
    optimizer_state_bytes_per_row,
)
from costmodel.recsys.host import HostCosts, host_seconds
from costmodel.recsys.plan import ShardingPlan
from costmodel.specs.errors import SpecError
from costmodel.specs.gpu import ClusterSpec
from costmodel.specs.recsys import DLRMSpec, EmbeddingTable
from costmodel.timing import OperatorTimer

NOTE_NO_L2 = ("embedding lookups: no L2 size known for {gpu} (costmodel.recsys.embedding.L2_CACHE_BYTES), so no "
              "cache is modelled: every row a batch touches is read from HBM")
NOTE_ROOFLINE = ("embedding lookups: no measured lookup table for {gpu}, so the roofline fall-back: the traffic "
                 "the access distribution implies past the {l2:.0f} MiB L2, at the catalog HBM bandwidth "
                 "({bandwidth:.0f} GB/s; `parplan profile run --ops embedding_bag` measures a table)")


@dataclass(frozen=True)
class RankTimes:
    """One rank's step, seconds. ``total_s`` is when the rank finishes (its critical path, waits for the
    collectives included); ``exposed_comm_s`` the part of it its compute stream spent waiting."""

    rank: int
    lookup_fwd_s: float
    lookup_bwd_s: float
    dense_fwd_s: float
    dense_bwd_s: float
    dense_optimizer_s: float
    exposed_comm_s: float
    total_s: float
    lookups: float
    unique_rows: float
    host_s: float = 0.0
    """Host work packing and unpacking the embedding all-to-alls (``costmodel.recsys.host``; 0: not modelled)."""
    dense_kernel_s: float = 0.0
    """Of ``lookup_bwd_s``, the data-parallel tables' dense-gradient backward and update
    (``costmodel.recsys.dense_kernel``; 0 where their backward is the bytes-at-efficiency estimate)."""

    @property
    def compute_s(self) -> float:
        return (self.lookup_fwd_s + self.lookup_bwd_s + self.dense_fwd_s + self.dense_bwd_s + self.dense_optimizer_s
                + self.host_s)


@dataclass(frozen=True)
class StepBreakdown:
    """The step time (the slowest rank's critical path), each rank's times and the step's collectives."""

    step_s: float
    ranks: tuple[RankTimes, ...]
    comm: CommTimes
    pipelined: bool
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def slowest_rank(self) -> int:
        return max(self.ranks, key=lambda r: r.total_s).rank


def table_shards(table: EmbeddingTable, kind: str, ranks: tuple[int, ...], world: int,
                 batch: int) -> list[tuple[int, LookupShard]]:
    """``(rank, shard)`` for every shard of ``table`` (a data-parallel table has one per rank)."""
    lookups = batch * table.lookups_per_sample
    bags = float(batch * table.num_features)
    common = {"access": table.access, "lookups_per_batch": lookups}
    if kind == "data_parallel":
        shard = LookupShard(rows=table.rows, dim=table.dim, row_bytes=table.row_bytes, lookups=lookups / world,
                            bags=bags / world, **common)
        return [(rank, shard) for rank in range(world)]
    k = len(ranks)
    if kind in ("table_wise", "column_wise"):
        shard = LookupShard(rows=table.rows, dim=table.dim // k, row_bytes=table.row_bytes / k, lookups=lookups,
                            bags=bags, **common)
        return [(rank, shard) for rank in ranks]
    shard = LookupShard(rows=math.ceil(table.rows / k), dim=table.dim, row_bytes=table.row_bytes,
                        lookups=lookups / k, bags=bags, row_share=1.0 / k, **common)
    return [(rank, shard) for rank in ranks]


@lru_cache(maxsize=65536)
def _rank_lookups(shards: tuple[LookupShard, ...], states: tuple[float, ...], dp_rows: tuple[float, ...],
                  caches: CacheLevels, model: Any, bandwidth: float, sector: float,
                  backward_model: Any = None, dense_s: tuple[float, ...] = ()) -> tuple[float, float, float, float]:
    """Forward and backward (+ sparse optimizer) seconds, unique rows, and the dense kernels' part of the
    backward, of one rank's shards.

    The backward is ``backward_model``'s fitted time where there is one (a kernel whose backward is not
    FBGEMM's fused one, e.g. autograd's sparse gradient), else the fused backward's traffic at the
    forward's efficiency. A data-parallel shard's is ``dense_s`` (its priced dense-kernel backward and
    update) where that is given (not NaN), else the sparse estimate plus its dense bytes at that efficiency.
    """
    columns = lookup_columns(shards, caches)
    fwd = np.asarray(model.predict(columns), dtype=float)
    eff = efficiency(model, columns, bandwidth, sector)
    # data-parallel (dense-kernel) tables also write a dense gradient and step the whole table
    dense = np.array(dp_rows) / (bandwidth * eff)
    if backward_model is not None:
        bwd = np.asarray(backward_model.predict(columns), dtype=float) + dense
    else:
        bwd = backward_bytes(columns, sector, np.array(states)) / (bandwidth * eff) + dense
    priced = np.array(dense_s if dense_s else [np.nan] * len(shards), dtype=float)
    known = ~np.isnan(priced)
    bwd = np.where(known, priced, bwd)
    return float(fwd.sum()), float(bwd.sum()), float(columns[:, 4].sum()), float(priced[known].sum())


@lru_cache(maxsize=64)
def _roofline(bandwidth: float) -> RooflineLookups:
    return RooflineLookups(bandwidth)


@lru_cache(maxsize=256)
def _default_timer(cluster: ClusterSpec) -> OperatorTimer:
    return OperatorTimer(gpu=cluster.gpu)


def plan_step_seconds(spec: DLRMSpec, cluster: ClusterSpec, plan: ShardingPlan, *, lookup_model: Any = None,
                      timer: OperatorTimer | None = None, pipelined: bool = True,
                      caches: CacheLevels | None = None, backward_model: Any = None,
                      host: HostCosts | None = None, dense_kernel: DenseKernelCosts | None = None) -> StepBreakdown:
    """Per-rank times and the step time of ``spec`` trained on ``cluster`` with ``plan``.

    Parameters
    ----------
    lookup_model : object with ``predict(columns) -> seconds``, optional
        A fitted ``EmbeddingBagPredictor`` (its ``hbm_bandwidth_bytes_per_s`` and ``sector`` are used);
        the HBM roofline (``RooflineLookups``) when None, labelled in ``notes``.
    timer : OperatorTimer, optional
        Times the dense GEMMs (a fitted profile's, or the analytic fall-backs); one per cluster by default.
    pipelined : bool
        TorchRec's pipelined schedule (module docstring), or every phase back to back.
    caches : CacheLevels, optional
        The caches the lookup columns are computed for (those ``lookup_model`` was fitted with); the
        catalog GPU's L2 by default.
    backward_model : object with ``predict(columns) -> seconds``, optional
        The lookup backward + sparse optimizer step fitted on the same columns (a measured profile of a
        kernel that is not FBGEMM's fused TBE); the fused backward's traffic at the forward's
        efficiency when None.
    host : HostCosts, optional
        Unit costs of the host work around the embedding all-to-alls (packing, bucketising, unpacking;
        measured on a CPU), on each rank's compute stream before its lookups and after its backward;
        not modelled when None (a GPU's kernels for it are inside the collective model's latency).
    dense_kernel : DenseKernelCosts, optional
        Unit costs of the data-parallel tables' dense-gradient backward, update and gradient all-reduce
        on a CPU (``costmodel.recsys.dense_kernel``, measured); when given they price those tables'
        backward and the step's all-reduce (instead of the collective model's); when None the dense
        gradient is its bytes at the lookups' efficiency.

    Raises
    ------
    SpecError
        If the plan's world size is not the cluster's GPU count, or it does not cover the tables.
    """
    world = plan.world_size
    if world != cluster.num_gpus:
        raise SpecError("plan.world_size", world, f"equal to cluster.num_gpus={cluster.num_gpus}")
    if spec.batch_size % world:
        raise SpecError("recsys.batch_size", spec.batch_size, f"a multiple of the {world} ranks")
    plan.check_covers(spec, cluster.gpus_per_node)
    notes: list[str] = []
    if caches is None:
        caches = gpu_caches(cluster.gpu.name)
        if not caches.near_bytes:
            notes.append(NOTE_NO_L2.format(gpu=cluster.gpu.name))
    if lookup_model is None:
        lookup_model = _roofline(cluster.gpu.hbm_bandwidth_bytes_per_s)
        notes.append(NOTE_ROOFLINE.format(gpu=cluster.gpu.name, l2=caches.near_bytes / 2**20,
                                          bandwidth=cluster.gpu.hbm_bandwidth_bytes_per_s / 1e9))
    bandwidth = float(getattr(lookup_model, "hbm_bandwidth_bytes_per_s", cluster.gpu.hbm_bandwidth_bytes_per_s))
    sector = float(getattr(lookup_model, "sector", GPU_SECTOR_BYTES))
    per_rank: list[list[tuple[LookupShard, float, float, float]]] = [[] for _ in range(world)]
    for table in spec.tables:
        sharding = plan[table.name]
        state = optimizer_state_bytes_per_row(table.optimizer, table.dim)
        for rank, shard in table_shards(table, sharding.sharding_type, sharding.ranks, world, spec.batch_size):
            dense_grad, priced = 0.0, math.nan
            if sharding.sharding_type == "data_parallel":  # zero + write the dense grad, step every row
                dense_grad = shard.rows * (2 * table.dim * 4 + 2 * (shard.row_bytes + state))
                if dense_kernel is not None:
                    priced = dense_backward_seconds(table.rows, table.dim, shard.lookups, dense_kernel)
            per_rank[rank].append((shard, state, dense_grad, priced))
    lookups = []
    for entries in per_rank:
        if not entries:
            lookups.append((0.0, 0.0, 0.0, 0.0))
            continue
        shards, states, dp_rows, priced = zip(*entries)
        lookups.append(_rank_lookups(tuple(shards), tuple(states), tuple(dp_rows), caches, lookup_model,
                                     bandwidth, sector, backward_model, tuple(priced)))
    dense = _dense(spec, spec.batch_size // world, timer or _default_timer(cluster))
    notes += dense.notes
    comm = comm_times(spec, cluster, plan, dense_params(spec))
    if dense_kernel is not None:  # the measured (gloo, CPU) all-reduce of the dense and data-parallel gradients
        comm = dataclasses.replace(comm, dense_all_reduce=dense_kernel.all_reduce_seconds(
            all_reduce_bytes(spec, plan, dense_params(spec))))
    host_fwd, host_bwd = host_seconds(spec, plan, host) if host is not None else (np.zeros(world), np.zeros(world))
    ranks = _schedule(lookups, dense, comm, pipelined, [sum(e[0].lookups for e in entries) for entries in per_rank],
                      host_fwd, host_bwd)
    return StepBreakdown(step_s=max(r.total_s for r in ranks), ranks=ranks, comm=comm, pipelined=pipelined,
                         notes=tuple(notes))


def _dense(spec: DLRMSpec, local_batch: int, timer: OperatorTimer) -> DenseTimes:
    key = ("recsys.dense", spec, local_batch)
    if key not in timer.stage_memo:
        timer.stage_memo[key] = dense_times(spec, local_batch, timer)
    return timer.stage_memo[key]


def _schedule(lookups: list[tuple[float, float, float, float]], dense: DenseTimes, comm: CommTimes, pipelined: bool,
              lookup_counts: list[float], host_fwd: np.ndarray, host_bwd: np.ndarray) -> tuple[RankTimes, ...]:
    """Each rank's end time on the two-stream schedule (module docstring); the host work of the input and
    output distribution runs on the compute stream with the lookups, that of the gradients with the backward."""
    fwd = np.array([lookup[0] for lookup in lookups]) + host_fwd
    bwd = np.array([lookup[1] for lookup in lookups]) + host_bwd
    host = host_fwd + host_bwd
    top = dense.top_fwd + dense.top_bwd
    if not pipelined:
        comm_total = comm.input_dist + comm.output_dist + comm.grad_dist + comm.dense_all_reduce
        end = comm_total + fwd + bwd + dense.bottom_fwd + dense.bottom_bwd + top + dense.optimizer
        return tuple(_rank(r, lookups[r], dense, float(end[r]), comm_total, lookup_counts[r], float(host[r]))
                     for r in range(len(lookups)))
    out_start = float(fwd.max())  # the pooled all-to-all needs every rank's lookups
    ready_top = np.maximum(fwd + dense.bottom_fwd, out_start + comm.output_dist)
    grad_start = float((ready_top + top).max())
    ready_emb_bwd = np.maximum(ready_top + top + dense.bottom_bwd, grad_start + comm.grad_dist)
    dense_grads_ready = float((ready_top + top + dense.bottom_bwd).max())
    all_reduce_start = max(grad_start + comm.grad_dist, dense_grads_ready)
    end = np.maximum(ready_emb_bwd + bwd, all_reduce_start + comm.dense_all_reduce) + dense.optimizer
    # the comm stream carries every collective once per step, the next batch's ids included
    comm_busy = comm.input_dist + comm.output_dist + comm.grad_dist + comm.dense_all_reduce
    end = np.maximum(end, comm_busy)
    compute = fwd + bwd + dense.bottom_fwd + dense.bottom_bwd + top + dense.optimizer
    return tuple(_rank(r, lookups[r], dense, float(end[r]), float(end[r] - compute[r]), lookup_counts[r],
                       float(host[r])) for r in range(len(lookups)))


def _rank(rank: int, lookup: tuple[float, float, float, float], dense: DenseTimes, total: float, exposed: float,
          count: float, host: float) -> RankTimes:
    return RankTimes(rank=rank, lookup_fwd_s=lookup[0], lookup_bwd_s=lookup[1],
                     dense_fwd_s=dense.bottom_fwd + dense.top_fwd, dense_bwd_s=dense.bottom_bwd + dense.top_bwd,
                     dense_optimizer_s=dense.optimizer, exposed_comm_s=max(0.0, exposed), total_s=total,
                     lookups=count, unique_rows=lookup[2], host_s=host, dense_kernel_s=lookup[3])
