"""The per-rank table TorchRec's planner prints (``EmbeddingStats``), from parplan's figures, to diff the two.

TorchRec's ``torchrec/distributed/planner/stats.py`` logs, per rank, ``HBM (GB)``, ``Perf (ms)``,
``Input (MB)``, ``Output (MB)`` and the shard count by sharding type. :func:`rank_rows` builds the same
columns from ``constraints.recsys_memory.PlanMemory`` and the cost model's per-rank times, and
:func:`render` lays them out the way TorchRec does (``|``-separated columns), so that
``parplan predict`` and a TorchRec planner log can be read side by side.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from constraints.recsys_memory import PlanMemory
from costmodel.recsys.plan import ShardingPlan
from costmodel.specs.gpu import GiB

SHORT = {"table_wise": "TW", "row_wise": "RW", "column_wise": "CW", "table_row_wise": "TWRW", "data_parallel": "DP"}
"""TorchRec's own abbreviations (stats.py ``_get_sharding_type_abbr``)."""
MB = 1024 * 1024


def shard_counts(plan: ShardingPlan) -> list[Counter]:
    """Shards per rank by sharding type."""
    counts = [Counter() for _ in range(plan.world_size)]
    for name, sharding in plan.shardings:
        for rank in plan.ranks_of(name):
            counts[rank][SHORT[sharding.sharding_type]] += 1
    return counts


def rank_rows(plan: ShardingPlan, memory: PlanMemory,
              rank_times: Sequence[Mapping[str, float]] | None = None) -> list[dict[str, Any]]:
    """One mapping per rank: ``rank``, ``hbm_gib``, ``hbm_used_fraction``, ``input_mb``, ``output_mb``,
    ``shards`` (``{"TW": n, ...}``) and, when ``rank_times`` is given, ``perf_ms`` (total) and each of its
    components in ms."""
    rows = []
    for mem, shards in zip(memory.ranks, shard_counts(plan)):
        row: dict[str, Any] = {"rank": mem.rank, "hbm_gib": mem.total_bytes / GiB,
                               "hbm_used_fraction": mem.total_bytes / memory.usable_bytes,
                               "input_mb": mem.input_buffers_bytes / MB, "output_mb": mem.output_buffers_bytes / MB,
                               "shards": dict(sorted(shards.items()))}
        if rank_times is not None:
            times = rank_times[mem.rank]
            row["perf_ms"] = 1e3 * times.get("total", sum(v for k, v in times.items() if k != "total"))
            row.update({f"{k}_ms": 1e3 * v for k, v in times.items() if k != "total"})
        rows.append(row)
    return rows


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as TorchRec's ``Rank | HBM (GB) | Perf (ms) | Input (MB) | Output (MB) | Shards`` table."""
    header = ["Rank", "HBM (GiB)", "Perf (ms)", "Input (MB)", "Output (MB)", "Shards"]
    lines = []
    for row in rows:
        shards = " ".join(f"{k}: {v}" for k, v in row["shards"].items()) or "-"
        perf = f"{row['perf_ms']:.3f}" if "perf_ms" in row else "-"
        lines.append([str(row["rank"]), f"{row['hbm_gib']:.2f} ({row['hbm_used_fraction']:.0%})", perf,
                      f"{row['input_mb']:.1f}", f"{row['output_mb']:.1f}", shards])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    out = [" | ".join(h.ljust(w) for h, w in zip(header, widths)),
           " | ".join("-" * w for w in widths)]
    out += [" | ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


__all__ = ["SHORT", "rank_rows", "render", "shard_counts"]
