"""Host work around the embedding all-to-alls (costmodel.recsys.host) and its place in the step."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.recsys.host import HostCosts, host_counts, host_seconds
from costmodel.recsys.plan import ShardingPlan, TableSharding, uniform_plan
from costmodel.recsys.step import plan_step_seconds
from costmodel.specs.recsys import dlrm_from_mapping
from costmodel.specs.runspec import resolve_cluster

SPEC = dlrm_from_mapping({
    "bottom_mlp": [13, 16], "top_mlp": [16, 1], "batch_size": 2048, "interaction": "cat",
    "tables": [{"name": "a", "rows": 10**5, "dim": 32, "pooling_mean": 20},
               {"name": "b", "rows": 10**4, "dim": 32, "pooling_mean": 4}]})
CLUSTER = resolve_cluster({"gpu": "h100-sxm5-80gb", "num_gpus": 2})
COSTS = HostCosts(per_shard_call_s=10e-6, per_packed_id_s=1e-9, per_bucketised_id_s=8e-9, per_pooled_element_s=4e-9)


def _plan(a: str) -> ShardingPlan:
    ranks = (0, 1) if a in ("row_wise", "column_wise") else (0,)
    return ShardingPlan.from_dict(2, {"a": TableSharding(a, ranks), "b": TableSharding("table_wise", (1,))})


def test_a_row_wise_table_is_bucketised_once_per_shard_a_table_wise_one_not_at_all():
    rw, tw = host_counts(SPEC, _plan("row_wise")), host_counts(SPEC, _plan("table_wise"))
    ids_local = 1024 * 20
    assert rw.bucketised_ids.tolist() == [2 * ids_local] * 2
    assert tw.bucketised_ids.tolist() == [0.0, 0.0]


def test_a_row_wise_table_receives_a_partial_sum_per_shard():
    rw, tw = host_counts(SPEC, _plan("row_wise")), host_counts(SPEC, _plan("table_wise"))
    # 'a' (1024 x 32 per source): as a source each rank gets 2 partial sums instead of one slice; as a
    # holder each of the 2 shards packs 2 sources' slices instead of 1 table-wise holder
    slice_ = 1024 * 32
    assert rw.pooled_fwd.sum() - tw.pooled_fwd.sum() == 2 * (2 - 1) * slice_ + (2 * 2 - 2) * slice_


def test_column_wise_packs_every_id_for_each_shard():
    cw, tw = host_counts(SPEC, _plan("column_wise")), host_counts(SPEC, _plan("table_wise"))
    source_a = 1024 * 20 + 1024  # 'a': ids and lengths of the local batch
    # sources pack them twice (one copy per shard), and two holders unpack both sources' instead of one
    assert cw.packed_ids.sum() - tw.packed_ids.sum() == 2 * source_a + 2 * source_a


def test_data_parallel_tables_have_no_host_work():
    counts = host_counts(SPEC, uniform_plan(SPEC, 2, "data_parallel"))
    assert all(not np.any(c) for c in vars(counts).values())


def test_the_serial_step_grows_by_the_busiest_ranks_host_seconds():
    plan = _plan("row_wise")
    without = plan_step_seconds(SPEC, CLUSTER, plan, pipelined=False)
    with_host = plan_step_seconds(SPEC, CLUSTER, plan, pipelined=False, host=COSTS)
    fwd, bwd = host_seconds(SPEC, plan, COSTS)
    assert with_host.step_s == pytest.approx(without.step_s + float(np.max(fwd + bwd)), rel=1e-9)
    assert [r.host_s for r in with_host.ranks] == pytest.approx((fwd + bwd).tolist())


def test_without_host_costs_nothing_is_added():
    plan = _plan("row_wise")
    assert plan_step_seconds(SPEC, CLUSTER, plan).step_s == plan_step_seconds(SPEC, CLUSTER, plan,
                                                                               host=HostCosts()).step_s
