"""TorchRec's planner and estimators on parplan problems (costmodel/recsys/torchrec_estimate.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torchrec", reason="TorchRec is the optional 'recsys' extra")

from costmodel.recsys.plan import ShardingPlan, TableSharding  # noqa: E402
from costmodel.recsys.torchrec_estimate import torchrec_evaluate, torchrec_planner_plan  # noqa: E402
from costmodel.specs.recsys import DLRMSpec, EmbeddingTable  # noqa: E402
from costmodel.specs.runspec import resolve_cluster  # noqa: E402

CLUSTER = resolve_cluster({"gpu": "h100-sxm5-80gb", "num_gpus": 4})
TABLES = tuple(EmbeddingTable(name=f"t{i}", rows=10 ** (4 + i % 3), dim=64, pooling_mean=1.0 + 5 * i)
               for i in range(6))
SPEC = DLRMSpec(name="t", tables=TABLES, bottom_mlp=(13, 64), top_mlp=(64, 1), batch_size=8192)


def _tw(ranks):
    return ShardingPlan.from_dict(4, {t.name: TableSharding("table_wise", (r,)) for t, r in zip(TABLES, ranks)})


def test_planner_plan_covers_every_table_and_fits_its_own_estimate():
    plan = torchrec_planner_plan(SPEC, CLUSTER)
    assert plan is not None
    plan.check_covers(SPEC, CLUSTER.gpus_per_node)
    assert torchrec_evaluate(SPEC, CLUSTER, plan).fits


def test_piling_tables_on_one_rank_is_slower_and_fuller_there():
    piled = torchrec_evaluate(SPEC, CLUSTER, _tw([0] * 6))
    spread = torchrec_evaluate(SPEC, CLUSTER, _tw([0, 1, 2, 3, 1, 2]))
    assert piled.step_seconds > spread.step_seconds
    assert piled.rank_hbm_bytes[0] > spread.rank_hbm_bytes[0]
    assert piled.rank_seconds[1] == 0.0


def test_a_table_beyond_hbm_is_infeasible_table_wise_and_not_row_wise():
    big = DLRMSpec(name="b", tables=(EmbeddingTable(name="big", rows=300_000_000, dim=64),),
                   bottom_mlp=(13, 64), top_mlp=(64, 1), batch_size=8192)
    tw = ShardingPlan.from_dict(4, {"big": TableSharding("table_wise", (0,))})
    rw = ShardingPlan.from_dict(4, {"big": TableSharding("row_wise", (0, 1, 2, 3))})
    assert not torchrec_evaluate(big, CLUSTER, tw).fits
    assert torchrec_evaluate(big, CLUSTER, rw).fits
