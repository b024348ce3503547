"""A DLRM step under a sharding plan: per-rank critical paths (costmodel.recsys.step)."""

from __future__ import annotations

import pytest

from costmodel.recsys.plan import ShardingPlan, TableSharding, uniform_plan
from costmodel.recsys.step import plan_step_seconds
from costmodel.specs.errors import SpecError
from costmodel.specs.recsys import dlrm_from_mapping, get_dlrm
from costmodel.specs.runspec import resolve_cluster

CLUSTER = resolve_cluster({"gpu": "h100-sxm5-80gb", "num_gpus": 8})
SPEC = dlrm_from_mapping({
    "bottom_mlp": [13, 256, 64], "top_mlp": [256, 1], "batch_size": 8192,
    "tables": [{"name": "big", "rows": 10**7, "dim": 64, "pooling_mean": 50},
               {"name": "small", "rows": 10**4, "dim": 64, "pooling_mean": 2, "count": 7}]})


def test_a_heavy_table_makes_its_rank_the_slowest():
    plan = uniform_plan(SPEC, 8, "table_wise")  # 'big' is dealt to rank 0
    result = plan_step_seconds(SPEC, CLUSTER, plan)
    assert result.slowest_rank == 0
    assert result.ranks[0].lookup_fwd_s > 10 * result.ranks[1].lookup_fwd_s


def test_row_wise_spreads_the_heavy_tables_lookups():
    plan = uniform_plan(SPEC, 8, "table_wise").as_dict()
    plan["big"] = TableSharding("row_wise", tuple(range(8)))
    result = plan_step_seconds(SPEC, CLUSTER, ShardingPlan.from_dict(8, plan))
    counts = [r.lookups for r in result.ranks]
    assert max(counts) < 2 * min(counts)


def test_pipelining_hides_communication():
    plan = uniform_plan(SPEC, 8, "row_wise")
    pipelined = plan_step_seconds(SPEC, CLUSTER, plan).step_s
    serial = plan_step_seconds(SPEC, CLUSTER, plan, pipelined=False).step_s
    assert pipelined < serial


def test_data_parallel_tables_send_no_ids_but_all_reduce_their_gradient():
    dp = plan_step_seconds(SPEC, CLUSTER, uniform_plan(SPEC, 8, "data_parallel"))
    tw = plan_step_seconds(SPEC, CLUSTER, uniform_plan(SPEC, 8, "table_wise"))
    assert dp.comm.input_dist == 0.0
    assert dp.comm.dense_all_reduce > 100 * tw.comm.dense_all_reduce  # a 10^7 x 64 table's gradient


def test_skewed_access_is_cheaper_than_uniform():
    skewed = dlrm_from_mapping({**_mapping(), "tables": [{"name": "big", "rows": 10**7, "dim": 64,
                                                          "pooling_mean": 50, "access": {"zipf": 1.2}}]})
    uniform = dlrm_from_mapping({**_mapping(), "tables": [{"name": "big", "rows": 10**7, "dim": 64,
                                                           "pooling_mean": 50}]})
    times = [plan_step_seconds(s, CLUSTER, uniform_plan(s, 8, "table_wise")).ranks[0].lookup_fwd_s
             for s in (skewed, uniform)]
    assert times[0] < times[1]


def _mapping() -> dict:
    return {"bottom_mlp": [13, 256, 64], "top_mlp": [256, 1], "batch_size": 8192}


def test_plan_for_another_world_size_is_refused():
    with pytest.raises(SpecError) as info:
        plan_step_seconds(SPEC, CLUSTER, uniform_plan(SPEC, 4, "table_wise"))
    assert info.value.field == "plan.world_size"


def test_mlperf_dcnv2_predicts_on_64_gpus():
    spec = get_dlrm("mlperf-dlrm-dcnv2")
    cluster = resolve_cluster({"gpu": "h100-sxm5-80gb", "num_gpus": 64})
    result = plan_step_seconds(spec, cluster, uniform_plan(spec, 64, "row_wise"))
    assert len(result.ranks) == 64 and 0 < result.step_s < 1.0


def test_without_a_lookup_table_the_gpu_roofline_fall_back_is_said_with_its_figures():
    notes = " ".join(plan_step_seconds(SPEC, CLUSTER, uniform_plan(SPEC, 8, "table_wise")).notes)
    assert "no measured lookup table for h100-sxm5-80gb" in notes
    assert "50 MiB L2" in notes and "3350 GB/s" in notes


def test_a_gpu_without_a_known_l2_says_no_cache_is_modelled():
    import dataclasses

    from costmodel.specs.gpu import ClusterSpec

    gpu = dataclasses.replace(CLUSTER.gpu, name="unlisted-gpu")
    cluster = ClusterSpec(gpu=gpu, num_gpus=8, gpus_per_node=8)
    notes = " ".join(plan_step_seconds(SPEC, cluster, uniform_plan(SPEC, 8, "table_wise")).notes)
    assert "no L2 size known for unlisted-gpu" in notes


class _PerShard:
    """A lookup model of fixed seconds per shard (``hbm_bandwidth_bytes_per_s`` and ``sector`` as fitted ones have)."""

    hbm_bandwidth_bytes_per_s = 3350e9
    sector = 32

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def predict(self, columns):
        import numpy as np

        return np.full(len(columns), self.seconds)


def test_a_fitted_backward_model_prices_the_backward_instead_of_the_fused_traffic():
    plan = uniform_plan(SPEC, 8, "table_wise")  # rank 1 holds one 'small' table
    fused = plan_step_seconds(SPEC, CLUSTER, plan, lookup_model=_PerShard(1e-4))
    fitted = plan_step_seconds(SPEC, CLUSTER, plan, lookup_model=_PerShard(1e-4), backward_model=_PerShard(3e-3))
    assert fitted.ranks[1].lookup_bwd_s == pytest.approx(3e-3)
    assert fused.ranks[1].lookup_bwd_s != pytest.approx(3e-3)


def test_the_input_distribution_pays_three_all_to_all_latencies_as_kjt_all_to_all():
    from costmodel.comm import collective_seconds
    from costmodel.recsys.comm import placement_of

    plan = uniform_plan(SPEC, 8, "table_wise")
    latency = collective_seconds("all_to_all", 1.0, placement_of(range(8), CLUSTER), CLUSTER.gpu)
    comm = plan_step_seconds(SPEC, CLUSTER, plan).comm
    assert comm.input_dist >= 3 * latency
