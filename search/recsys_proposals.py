"""Greedy sharding proposals: the warm starts of the plan search and the baselines it is measured against.

- The five heuristics of the DreamShard / NeuroShard benchmarks (daochenzha/dreamshard
  ``dreamshard/sharders.py``; Zha et al. 2022, arXiv 2210.02023): every table table-wise, tables
  sorted by a cost and dealt, largest first, to the rank with the smallest cost sum among those it
  still fits on (ties: the emptier rank). The costs are ``dim`` (dim-greedy), ``dim x pooling``
  (lookup-greedy), table bytes (size-greedy) and ``dim x pooling x log10(rows)``
  (size-lookup-greedy); ``random`` puts each table on a uniformly drawn rank. Where the original
  checks a fixed per-GPU byte budget of fp16 weights, "fits" here is parplan's per-rank memory
  (``constraints.recsys_memory``).
- TorchRec-style proposals (torchrec/distributed/planner/proposers.py ``UniformProposer`` and
  ``GreedyProposer``): one sharding type for every table, table-wise and column-wise shards placed
  by the same greedy partitioner on :func:`shard_cost_seconds`, a bandwidth proxy in the spirit of
  TorchRec's ``EmbeddingPerfEstimator`` (bytes over the catalog's HBM and link bandwidths).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from constraints.recsys_memory import OUTPUT_BYTES, dense_bytes, shard_term_bytes
from costmodel.recsys.plan import ShardingPlan, TableSharding
from costmodel.specs.gpu import ClusterSpec
from costmodel.specs.recsys import DLRMSpec, EmbeddingTable

HEURISTICS = ("random", "dim_greedy", "lookup_greedy", "size_greedy", "size_lookup_greedy")
"""DreamShard / NeuroShard baseline sharders, by their names there."""
BACKWARD_FACTOR = 2.0
"""Backward lookup traffic over forward (gradient scatter + fused update read/write: TorchRec
planner/constants.py ``BWD_COMPUTE_MULTIPLIER = 2``)."""


def heuristic_cost(table: EmbeddingTable, heuristic: str) -> float:
    """The sort key and load of one table under a DreamShard heuristic."""
    if heuristic == "dim_greedy":
        return float(table.dim)
    if heuristic == "lookup_greedy":
        return table.dim * table.lookups_per_sample
    if heuristic == "size_greedy":
        return table.weight_bytes
    if heuristic == "size_lookup_greedy":
        return table.dim * table.lookups_per_sample * math.log10(max(table.rows, 2))
    raise ValueError(f"unknown heuristic {heuristic!r}; one of {HEURISTICS}")


def shard_cost_seconds(table: EmbeddingTable, cols: int, share: float, spec: DLRMSpec,
                       cluster: ClusterSpec, world_size: int, data_parallel: bool = False) -> float:
    """Bandwidth proxy of one shard's step: its lookups' row reads (forward + backward) over HBM
    bandwidth plus what it sends: the pooled output and its gradient over the link it crosses, or, for a
    data-parallel replica, its share of the ring all-reduce of the dense gradient (2 (w - 1) / w of the
    table). ``share`` is the share of the global batch's lookups the shard serves (1 for table- and
    column-wise, 1/w for a data-parallel replica)."""
    gpu = cluster.gpu
    row_bytes = cols * table.row_bytes / table.dim
    lookups = spec.batch_size * table.lookups_per_sample * share
    compute = lookups * row_bytes * (1 + BACKWARD_FACTOR) / gpu.hbm_bandwidth_bytes_per_s
    link = gpu.intra_node_bandwidth_bytes_per_s if world_size <= cluster.gpus_per_node \
        else gpu.inter_node_bandwidth_bytes_per_s
    if data_parallel:
        return compute + 2 * (world_size - 1) / world_size * table.weight_bytes / link
    comm = 2 * spec.batch_size * table.num_features * cols * OUTPUT_BYTES / link  # forward + backward
    return compute + comm


class Placer:
    """Greedy partitioner state: per-rank load and per-rank bytes, and the capacity each rank has."""

    def __init__(self, spec: DLRMSpec, cluster: ClusterSpec, world_size: int) -> None:
        self.spec, self.cluster, self.world = spec, cluster, world_size
        self.load = np.zeros(world_size)
        self.bytes = np.zeros(world_size)
        states, activations = dense_bytes(spec, world_size)
        self.capacity = cluster.usable_memory_bytes - states - activations

    def shard_bytes(self, table: EmbeddingTable, kind: str, num_shards: int, kernel: str = "fused") -> np.ndarray:
        """Bytes (all terms) of each shard of ``table`` split ``kind`` in ``num_shards``."""
        return shard_term_bytes(table, kind, kernel, num_shards, self.world, self.spec.batch_size,
                                self.cluster.gpus_per_node).sum(axis=1)

    def add(self, ranks: Sequence[int], need: np.ndarray | float, load: np.ndarray | float) -> None:
        np.add.at(self.bytes, list(ranks), need)
        np.add.at(self.load, list(ranks), load)

    def best_rank(self, need: float, exclude: Sequence[int] = ()) -> int:
        """The least-loaded rank with ``need`` bytes free; ties go to the emptier rank; when none has
        room, the emptiest rank (the plan will be infeasible)."""
        room = self.bytes + need <= self.capacity
        if exclude:
            room[list(exclude)] = False
        if not room.any():  # the emptiest rank not excluded (any, if all are)
            order = [int(r) for r in np.lexsort((self.load, self.bytes))]
            return next((r for r in order if r not in exclude), order[0])
        candidates = np.flatnonzero(room)
        return int(candidates[np.lexsort((self.bytes[candidates], self.load[candidates]))[0]])


def greedy_table_wise(spec: DLRMSpec, cluster: ClusterSpec, world_size: int,
                      cost: Callable[[EmbeddingTable], float]) -> ShardingPlan:
    """Every table table-wise, dealt by decreasing ``cost`` to the least-loaded rank it fits on."""
    placer = Placer(spec, cluster, world_size)
    order = sorted(range(len(spec.tables)), key=lambda i: (cost(spec.tables[i]), spec.tables[i].weight_bytes, i),
                   reverse=True)
    out: dict[str, TableSharding] = {}
    for index in order:
        table = spec.tables[index]
        need = float(placer.shard_bytes(table, "table_wise", 1)[0])
        rank = placer.best_rank(need)
        placer.add((rank,), need, cost(table))
        out[table.name] = TableSharding("table_wise", (rank,))
    return ShardingPlan.from_dict(world_size, {t.name: out[t.name] for t in spec.tables})


def random_plan(spec: DLRMSpec, world_size: int, seed: int = 0) -> ShardingPlan:
    """DreamShard's ``random``: each table table-wise on a uniformly drawn rank (memory unchecked, as there)."""
    rng = np.random.default_rng(seed)
    return ShardingPlan.from_dict(world_size, {t.name: TableSharding("table_wise", (int(rng.integers(world_size)),))
                                               for t in spec.tables})


def heuristic_plan(name: str, spec: DLRMSpec, cluster: ClusterSpec, world_size: int | None = None,
                   seed: int = 0) -> ShardingPlan:
    """The plan of DreamShard heuristic ``name`` (:data:`HEURISTICS`)."""
    world = world_size or cluster.num_gpus
    if name == "random":
        return random_plan(spec, world, seed)
    return greedy_table_wise(spec, cluster, world, lambda t: heuristic_cost(t, name))


def column_shards(dim: int, wanted: int) -> int:
    """The column-shard count nearest ``wanted`` that divides ``dim`` into widths that are multiples of 4
    (TorchRec sharding_plan.py ``_find_base_dim``), at least 1."""
    for k in sorted(range(1, dim + 1), key=lambda k: (abs(k - wanted), -k)):
        if dim % k == 0 and (dim // k) % 4 == 0:
            return k
    return 1


def place(spec: DLRMSpec, cluster: ClusterSpec, world_size: int, kinds: dict[str, str],
          column_counts: dict[str, int] | None = None) -> ShardingPlan:
    """Turn a sharding type per table into a plan: row-wise on every rank, table-row-wise on the least
    loaded node, data-parallel everywhere, table- and column-wise shards dealt by decreasing
    :func:`shard_cost_seconds` to the least-loaded rank they fit on (TorchRec's greedy partitioner
    order: largest first; column shards of one table on distinct ranks where there are enough)."""
    placer = Placer(spec, cluster, world_size)
    per_node = min(cluster.gpus_per_node, world_size)
    out: dict[str, TableSharding] = {}
    movable: list[tuple[float, int, int]] = []  # (cost, table index, column shards), placed last
    for index, table in enumerate(spec.tables):
        kind = kinds[table.name]
        if kind in ("table_wise", "column_wise"):
            k = (column_counts or {}).get(table.name, 2) if kind == "column_wise" else 1
            movable.append((shard_cost_seconds(table, table.dim // k, 1.0, spec, cluster, world_size) * k, index, k))
            continue
        if kind == "row_wise":
            ranks, share = tuple(range(world_size)), 1.0 / world_size
            sharding = TableSharding("row_wise", ranks)
        elif kind == "table_row_wise":
            node = int(np.argmin(placer.load.reshape(-1, per_node).sum(axis=1)))
            ranks, share = tuple(range(node * per_node, (node + 1) * per_node)), 1.0 / per_node
            sharding = TableSharding("table_row_wise", ranks)
        else:
            ranks, share = tuple(range(world_size)), 1.0 / world_size
            sharding = TableSharding("data_parallel", (), "dense")
        placer.add(ranks, placer.shard_bytes(table, sharding.sharding_type, len(ranks), sharding.compute_kernel),
                   shard_cost_seconds(table, table.dim, share, spec, cluster, world_size,
                                      data_parallel=kind == "data_parallel"))
        out[table.name] = sharding
    for cost, index, k in sorted(movable, reverse=True):
        table = spec.tables[index]
        needs = placer.shard_bytes(table, "column_wise" if k > 1 else "table_wise", k)
        chosen: list[int] = []
        for need in needs:
            rank = placer.best_rank(float(need), exclude=chosen if k <= world_size else ())
            placer.add((rank,), float(need), cost / k)
            chosen.append(rank)
        out[table.name] = TableSharding("column_wise" if k > 1 else "table_wise", tuple(chosen))
    return ShardingPlan.from_dict(world_size, {t.name: out[t.name] for t in spec.tables})


def uniform_proposals(spec: DLRMSpec, cluster: ClusterSpec, world_size: int | None = None) -> dict[str, ShardingPlan]:
    """TorchRec ``UniformProposer``-style plans: every table one type, placed by :func:`place`."""
    world = world_size or cluster.num_gpus
    out = {}
    for kind in ("table_wise", "row_wise", "table_row_wise", "column_wise", "data_parallel"):
        counts = {t.name: column_shards(t.dim, max(2, t.dim // 128)) for t in spec.tables} \
            if kind == "column_wise" else None
        out[f"uniform_{kind}"] = place(spec, cluster, world, {t.name: kind for t in spec.tables}, counts)
    return out


MIXED_BIAS = (0.5, 1.0, 2.0, 4.0)
"""How much dearer (by the proxy) a data-parallel replica may be and still be chosen in :func:`mixed_proposal`:
the proxy leaves out that a replica never waits for an all-to-all, so a few biases are tried."""


def mixed_proposal(spec: DLRMSpec, cluster: ClusterSpec, world_size: int | None = None,
                   bias: float = 1.0) -> ShardingPlan:
    """Per table the cheaper by :func:`shard_cost_seconds` of data-parallel (times ``1 / bias``) and table-wise
    (TorchRec's ``GreedyProposer`` picks each table's best-rated option the same way), placed by :func:`place`."""
    world = world_size or cluster.num_gpus
    kinds = {}
    for t in spec.tables:
        dp = shard_cost_seconds(t, t.dim, 1.0 / world, spec, cluster, world, data_parallel=True)
        tw = shard_cost_seconds(t, t.dim, 1.0, spec, cluster, world) / world  # spread over the ranks by placement
        kinds[t.name] = "data_parallel" if dp < tw * bias else "table_wise"
    return place(spec, cluster, world, kinds)


def warm_starts(spec: DLRMSpec, cluster: ClusterSpec, world_size: int | None = None,
                seed: int = 0) -> dict[str, ShardingPlan]:
    """Every greedy proposal by name: the five DreamShard heuristics and the uniform proposals."""
    world = world_size or cluster.num_gpus
    out = {name: heuristic_plan(name, spec, cluster, world, seed) for name in HEURISTICS}
    out.update(uniform_proposals(spec, cluster, world))
    for bias in MIXED_BIAS:
        out[f"mixed_dp_table_wise_{bias:g}"] = mixed_proposal(spec, cluster, world, bias)
    return out


__all__ = ["HEURISTICS", "column_shards", "greedy_table_wise", "heuristic_cost", "heuristic_plan", "mixed_proposal",
           "place", "random_plan", "shard_cost_seconds", "uniform_proposals", "warm_starts"]
