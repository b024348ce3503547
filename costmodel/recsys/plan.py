"""An embedding sharding plan: for each table, how it is split and on which ranks (TorchRec's vocabulary)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from costmodel.specs.errors import SpecError, reject_unknown_keys, require_choice, require_int
from costmodel.specs.recsys import DLRMSpec

SHARDING_TYPES = ("table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel")
"""TorchRec ``ShardingType`` values (torchrec/distributed/types.py), lower-case."""
COMPUTE_KERNELS = ("fused", "dense")
"""TorchRec ``EmbeddingComputeKernel`` values we model: ``fused`` (FBGEMM TBE with the optimizer fused into the
backward, a sparse row-wise update) and ``dense`` (autograd EmbeddingBag + dense optimizer, data-parallel tables)."""
SHARD_KEYS = frozenset({"sharding_type", "ranks", "compute_kernel"})


@dataclass(frozen=True)
class TableSharding:
    """How one table is split.

    ``ranks`` means, by ``sharding_type``:
    - ``table_wise``: the one rank that holds the whole table;
    - ``row_wise``: the ranks over which the rows are split evenly (TorchRec: every rank);
    - ``table_row_wise``: the ranks of one node over which the rows are split evenly;
    - ``column_wise``: one rank per column shard (the dimension is split evenly; a rank may appear twice);
    - ``data_parallel``: every rank holds a replica (``ranks`` is all of them, or empty for all).
    """

    sharding_type: str
    ranks: tuple[int, ...]
    compute_kernel: str = "fused"

    def __post_init__(self) -> None:
        require_choice("plan.sharding_type", self.sharding_type, SHARDING_TYPES)
        require_choice("plan.compute_kernel", self.compute_kernel, COMPUTE_KERNELS)
        if self.sharding_type == "table_wise" and len(self.ranks) != 1:
            raise SpecError("plan.ranks", self.ranks, "exactly one rank for table_wise")
        if self.sharding_type not in ("data_parallel",) and not self.ranks:
            raise SpecError("plan.ranks", self.ranks, f"at least one rank for {self.sharding_type}")
        if self.sharding_type in ("row_wise", "table_row_wise") and len(set(self.ranks)) != len(self.ranks):
            raise SpecError("plan.ranks", self.ranks, f"distinct ranks for {self.sharding_type}")

    @property
    def num_shards(self) -> int:
        return max(1, len(self.ranks))


@dataclass(frozen=True)
class ShardingPlan:
    """Table name -> ``TableSharding`` for every table of a model, on ``world_size`` ranks (hashable)."""

    world_size: int
    shardings: tuple[tuple[str, TableSharding], ...]

    def __post_init__(self) -> None:
        require_int("plan.world_size", self.world_size, maximum=2**20)
        seen = set()
        for name, sharding in self.shardings:
            if name in seen:
                raise SpecError("plan", name, "one sharding per table")
            seen.add(name)
            for rank in sharding.ranks:
                require_int(f"plan.{name}.ranks", rank, minimum=0, maximum=self.world_size - 1)

    @classmethod
    def from_dict(cls, world_size: int, shardings: Mapping[str, TableSharding]) -> ShardingPlan:
        return cls(world_size=world_size, shardings=tuple(shardings.items()))

    def as_dict(self) -> dict[str, TableSharding]:
        return dict(self.shardings)

    def __getitem__(self, table: str) -> TableSharding:
        for name, sharding in self.shardings:
            if name == table:
                return sharding
        raise KeyError(table)

    def ranks_of(self, table: str) -> tuple[int, ...]:
        """The ranks that hold part of ``table`` (all ranks for data-parallel)."""
        sharding = self[table]
        if sharding.sharding_type == "data_parallel":
            return tuple(range(self.world_size))
        return sharding.ranks

    def check_covers(self, spec: DLRMSpec, gpus_per_node: int | None = None) -> None:
        """Raise unless the plan names exactly the tables of ``spec`` (and table-row-wise stays in one node)."""
        names = {t.name for t in spec.tables}
        given = {name for name, _ in self.shardings}
        missing, extra = sorted(names - given), sorted(given - names)
        if missing:
            raise SpecError("plan", missing[0], f"a sharding for every table ({len(missing)} missing)")
        if extra:
            raise SpecError("plan", extra[0], "a table of the model")
        for table in spec.tables:
            sharding = self[table.name]
            if sharding.sharding_type == "column_wise" and table.dim % sharding.num_shards:
                raise SpecError(f"plan.{table.name}.ranks", sharding.ranks,
                                f"a count of column shards that divides dim={table.dim}")
            if sharding.sharding_type == "table_row_wise" and gpus_per_node:
                if len({r // gpus_per_node for r in sharding.ranks}) != 1:
                    raise SpecError(f"plan.{table.name}.ranks", sharding.ranks,
                                    f"ranks of one node ({gpus_per_node} GPUs per node) for table_row_wise")


def uniform_plan(spec: DLRMSpec, world_size: int, sharding_type: str,
                 ranks: Iterable[int] | None = None) -> ShardingPlan:
    """Every table sharded the same way; table-wise tables are dealt round-robin over the ranks."""
    pool = tuple(ranks) if ranks is not None else tuple(range(world_size))
    out = {}
    for index, table in enumerate(spec.tables):
        if sharding_type == "table_wise":
            out[table.name] = TableSharding("table_wise", (pool[index % len(pool)],))
        elif sharding_type == "data_parallel":
            out[table.name] = TableSharding("data_parallel", (), compute_kernel="dense")
        else:
            out[table.name] = TableSharding(sharding_type, pool)
    return ShardingPlan.from_dict(world_size, out)


def plan_from_mapping(value: Any, spec: DLRMSpec, world_size: int, gpus_per_node: int | None = None) -> ShardingPlan:
    """A run spec's ``plan:`` block: ``{table: {sharding_type, ranks, compute_kernel?}}``."""
    if not isinstance(value, dict):
        raise SpecError("plan", value, "a mapping of table name to {sharding_type, ranks}")
    out = {}
    for name, entry in value.items():
        where = f"plan.{name}"
        if not isinstance(entry, dict):
            raise SpecError(where, entry, "a mapping with sharding_type and ranks")
        reject_unknown_keys(where, entry, SHARD_KEYS)
        ranks = entry.get("ranks", [])
        if not isinstance(ranks, list) or len(ranks) > world_size * 64:
            raise SpecError(f"{where}.ranks", ranks, "a list of rank numbers")
        kind = require_choice(f"{where}.sharding_type", entry.get("sharding_type"), SHARDING_TYPES)
        kernel = entry.get("compute_kernel", "dense" if kind == "data_parallel" else "fused")
        out[str(name)] = TableSharding(kind, tuple(require_int(f"{where}.ranks", r, minimum=0,
                                                               maximum=world_size - 1) for r in ranks), kernel)
    plan = ShardingPlan.from_dict(world_size, out)
    plan.check_covers(spec, gpus_per_node)
    return plan
