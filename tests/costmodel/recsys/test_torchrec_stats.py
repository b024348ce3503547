"""The EmbeddingStats-style per-rank table (costmodel/recsys/torchrec_stats.py)."""

from __future__ import annotations

import pytest

from constraints.recsys_memory import plan_memory
from costmodel.recsys.plan import ShardingPlan, TableSharding
from costmodel.recsys.torchrec_stats import rank_rows, render
from costmodel.specs.recsys import DLRMSpec, EmbeddingTable
from costmodel.specs.runspec import resolve_cluster

CLUSTER = resolve_cluster({"gpu": "h100-sxm5-80gb", "num_gpus": 4})
SPEC = DLRMSpec(name="t", tables=tuple(EmbeddingTable(name=f"t{i}", rows=1000 * (i + 1), dim=64) for i in range(4)),
                bottom_mlp=(13, 64), top_mlp=(64, 1), batch_size=4096)
PLAN = ShardingPlan.from_dict(4, {"t0": TableSharding("table_wise", (1,)),
                                  "t1": TableSharding("row_wise", (0, 1, 2, 3)),
                                  "t2": TableSharding("column_wise", (2, 3)),
                                  "t3": TableSharding("data_parallel", (), "dense")})


def test_rows_count_shards_by_torchrec_abbreviation_and_carry_memory():
    memory = plan_memory(SPEC, CLUSTER, PLAN)
    rows = rank_rows(PLAN, memory, [{"fwd_compute": 1e-3, "bwd_compute": 2e-3}] * 4)
    assert rows[1]["shards"] == {"DP": 1, "RW": 1, "TW": 1}
    assert rows[2]["shards"] == {"CW": 1, "DP": 1, "RW": 1}
    assert rows[0]["perf_ms"] == pytest.approx(3.0) and rows[0]["bwd_compute_ms"] == pytest.approx(2.0)
    assert rows[3]["hbm_gib"] * 2**30 == pytest.approx(memory.ranks[3].total_bytes)


def test_render_is_torchrec_like_and_tolerates_no_times():
    text = render(rank_rows(PLAN, plan_memory(SPEC, CLUSTER, PLAN)))
    lines = text.splitlines()
    assert lines[0].split(" | ")[0].strip() == "Rank" and "Perf (ms)" in lines[0]
    assert len(lines) == 2 + 4 and "TW: 1" in lines[3]
