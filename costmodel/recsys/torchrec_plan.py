"""A sharding plan as TorchRec ``ParameterSharding`` JSON, and back into TorchRec's own types.

The JSON holds, per table, exactly the fields of ``torchrec.distributed.types.ParameterSharding``
that a plan decides: ``sharding_type``, ``compute_kernel``, ``ranks`` and the shards of its
``EnumerableShardingSpec`` (offsets, sizes, placement ``rank:R/cuda:D`` with ``D = R mod local
world size``, as TorchRec's ``construct_module_sharding_plan`` writes it). Writing needs no
TorchRec; :func:`load_torchrec_plan` builds a ``torchrec.distributed.types.ShardingPlan`` with
TorchRec itself (the optional ``recsys`` extra).

TorchRec's layouts are narrower than a ``ShardingPlan``'s: row-wise spans every rank, table-row-wise
one whole node. :func:`torchrec_json` refuses other layouts with a ``SpecError``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from constraints.recsys_memory import rank_shards
from costmodel.recsys.plan import ShardingPlan
from costmodel.specs.errors import SpecError
from costmodel.specs.recsys import DLRMSpec

FORMAT = "parplan.torchrec_sharding_plan/1"
MODULE_PATH_DEFAULT = "sparse_arch.embedding_bag_collection"
"""Where TorchRec's DLRM example keeps its EmbeddingBagCollection (torchrec/models/dlrm.py: ``sparse_arch``)."""
SHARD_KEYS = ("sharding_type", "compute_kernel", "ranks", "shards")


def _check_torchrec_layout(name: str, kind: str, ranks: tuple[int, ...], world: int, local: int) -> None:
    if kind == "row_wise" and tuple(ranks) != tuple(range(world)):
        raise SpecError(f"plan.{name}.ranks", ranks, f"every rank 0..{world - 1} in order (TorchRec row_wise)")
    if kind == "table_row_wise":
        first = ranks[0] if ranks else 0
        if first % local or tuple(ranks) != tuple(range(first, first + local)):
            raise SpecError(f"plan.{name}.ranks", ranks,
                            f"all {local} ranks of one node in order (TorchRec table_row_wise)")


def torchrec_json(spec: DLRMSpec, plan: ShardingPlan, local_world_size: int, device: str = "cuda",
                  module_path: str = MODULE_PATH_DEFAULT) -> dict[str, Any]:
    """The plan as plain data: ``{format, world_size, local_world_size, module_path, plan: {table: ...}}``."""
    world = plan.world_size
    tables: dict[str, Any] = {}
    for table in spec.tables:
        sharding = plan[table.name]
        kind = sharding.sharding_type
        ranks = plan.ranks_of(table.name)
        _check_torchrec_layout(table.name, kind, ranks, world, local_world_size)
        entry: dict[str, Any] = {"sharding_type": kind, "compute_kernel": sharding.compute_kernel,
                                 "ranks": list(ranks), "shards": None}
        if kind != "data_parallel":  # TorchRec gives data-parallel tables no sharding_spec
            shards, row, col = [], 0, 0
            for shard in rank_shards(table, sharding, world):
                shards.append({"offsets": [row, col], "sizes": [shard.rows, shard.cols],
                               "placement": f"rank:{shard.rank}/{device}:{shard.rank % local_world_size}"})
                if kind == "column_wise":
                    col += shard.cols
                else:
                    row += shard.rows
            entry["shards"] = shards
        tables[table.name] = entry
    return {"format": FORMAT, "world_size": world, "local_world_size": local_world_size,
            "module_path": module_path, "plan": tables}


def write_torchrec_json(path: str | Path, data: dict[str, Any]) -> Path:
    """Write ``data`` to ``path`` atomically (a temporary file beside it, then ``os.replace``)."""
    target = Path(path)
    text = json.dumps(data, indent=1) + "\n"
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent if str(target.parent) else ".")
    temporary = Path(name)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        temporary.chmod(0o644)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return target


def load_torchrec_plan(data: dict[str, Any]) -> Any:
    """``torchrec.distributed.types.ShardingPlan`` from :func:`torchrec_json` data (needs TorchRec)."""
    from torchrec.distributed.types import (
        EmbeddingModuleShardingPlan, EnumerableShardingSpec, ParameterSharding, ShardingPlan as TorchRecPlan,
        ShardMetadata,
    )

    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SpecError("format", data.get("format") if isinstance(data, dict) else data, repr(FORMAT))
    params = {}
    for name, entry in data["plan"].items():
        if not isinstance(entry, dict) or set(entry) != set(SHARD_KEYS):
            raise SpecError(f"plan.{name}", entry, "a mapping with " + ", ".join(SHARD_KEYS))
        spec = None
        if entry["shards"] is not None:
            spec = EnumerableShardingSpec([ShardMetadata(shard_offsets=list(s["offsets"]),
                                                         shard_sizes=list(s["sizes"]), placement=s["placement"])
                                           for s in entry["shards"]])
        params[name] = ParameterSharding(sharding_type=entry["sharding_type"], compute_kernel=entry["compute_kernel"],
                                         ranks=list(entry["ranks"]), sharding_spec=spec)
    return TorchRecPlan({data["module_path"]: EmbeddingModuleShardingPlan(params)})


__all__ = ["FORMAT", "load_torchrec_plan", "torchrec_json", "write_torchrec_json"]
