"""The data-parallel (dense-kernel) table's CPU backward, update and all-reduce (costmodel.recsys.dense_kernel)
and the CPU sort every embedding backward runs (costmodel.recsys.cpu_sort)."""

from __future__ import annotations

import math

import pytest

from costmodel.recsys.comm import all_reduce_bytes
from costmodel.recsys.cpu_sort import RADIX_MIN_IDS, SortCosts, compare_steps, sort_seconds
from costmodel.recsys.dense import dense_params
from costmodel.recsys.dense_kernel import MMAP_THRESHOLD_MAX_BYTES, DenseKernelCosts, dense_backward_seconds
from costmodel.recsys.plan import ShardingPlan, TableSharding
from costmodel.recsys.step import plan_step_seconds
from costmodel.specs.recsys import dlrm_from_mapping
from costmodel.specs.runspec import resolve_cluster

SORT = SortCosts(per_compare_step_s=5e-9, per_radix_id_s=40e-9)
COSTS = DenseKernelCosts(per_zeroed_byte_s=5e-11, per_fresh_page_s=1.5e-6, sort=SORT, per_lookup_s=50e-9,
                         per_scatter_line_s=2e-9, per_update_byte_s=1.2e-10, all_reduce_latency_s=1e-4,
                         all_reduce_s_per_byte=6e-10)


def test_the_sort_switches_to_radix_at_32768_ids_and_is_cheaper_per_id_there():
    below, at = sort_seconds(RADIX_MIN_IDS - 1, SORT), sort_seconds(RADIX_MIN_IDS, SORT)
    assert below == pytest.approx((RADIX_MIN_IDS - 1) * math.log2(RADIX_MIN_IDS - 1) * 5e-9)
    assert at == pytest.approx(RADIX_MIN_IDS * 40e-9)
    assert at < below  # ~75 ns vs 40 ns per id: not monotone in the ids
    assert sort_seconds(1, SORT) == 0.0 and compare_steps(1) == 0.0


def test_the_zero_fill_and_update_grow_with_the_table_not_with_the_lookups():
    small = dense_backward_seconds(10_000, 32, 1000, COSTS)
    big = dense_backward_seconds(100_000, 32, 1000, COSTS)
    per_byte = 5e-11 + 1.2e-10
    assert big - small == pytest.approx(90_000 * 32 * 4 * per_byte)


def test_a_gradient_above_the_mmap_threshold_pays_its_fresh_pages():
    rows = MMAP_THRESHOLD_MAX_BYTES // (64 * 4)  # exactly the threshold: heap-reused
    under = dense_backward_seconds(rows, 64, 1000, COSTS)
    over = dense_backward_seconds(rows + 16, 64, 1000, COSTS)  # one 4-KiB page more
    pages = math.ceil((rows + 16) * 64 * 4 / 4096)
    expected_bytes = 16 * 64 * 4 * (5e-11 + 1.2e-10)
    assert over - under == pytest.approx(pages * 1.5e-6 + expected_bytes)


def test_the_lookups_pay_the_sort_and_a_scatter_per_line():
    costs = DenseKernelCosts(sort=SORT, per_lookup_s=50e-9, per_scatter_line_s=2e-9)
    n = 20_000
    assert dense_backward_seconds(10, 64, n, costs) == pytest.approx(sort_seconds(n, SORT) + n * (50e-9 + 4 * 2e-9))
    assert dense_backward_seconds(10, 16, n, costs) == pytest.approx(sort_seconds(n, SORT) + n * (50e-9 + 2e-9))


def test_an_empty_all_reduce_costs_nothing():
    assert COSTS.all_reduce_seconds(0) == 0.0
    assert COSTS.all_reduce_seconds(1e6) == pytest.approx(1e-4 + 6e-4)


SPEC = dlrm_from_mapping({"bottom_mlp": [13, 16], "top_mlp": [16, 1], "batch_size": 2048, "interaction": "cat",
                          "tables": [{"name": "a", "rows": 30_000, "dim": 32, "pooling_mean": 10, "optimizer": "sgd"},
                                     {"name": "b", "rows": 5_000, "dim": 16, "pooling_mean": 4, "optimizer": "sgd"}]})
CLUSTER = resolve_cluster({"gpu": "h100-sxm5-80gb", "num_gpus": 2})


def _plan(kind_a: str) -> ShardingPlan:
    return ShardingPlan.from_dict(2, {"a": TableSharding(kind_a, (0,) if kind_a != "data_parallel" else (0, 1)),
                                      "b": TableSharding("table_wise", (1,))})


def test_a_data_parallel_tables_backward_is_the_dense_kernels_on_every_rank():
    step = plan_step_seconds(SPEC, CLUSTER, _plan("data_parallel"), dense_kernel=COSTS, pipelined=False)
    own = dense_backward_seconds(30_000, 32, 2048 * 10 / 2, COSTS)  # each rank looks up its local batch
    assert [r.dense_kernel_s for r in step.ranks] == pytest.approx([own, own])
    assert all(r.lookup_bwd_s >= own for r in step.ranks)
    assert step.comm.dense_all_reduce == pytest.approx(
        COSTS.all_reduce_seconds(all_reduce_bytes(SPEC, _plan("data_parallel"), dense_params(SPEC))))


def test_without_dense_kernel_costs_nothing_is_priced_as_a_dense_kernel():
    step = plan_step_seconds(SPEC, CLUSTER, _plan("data_parallel"), pipelined=False)
    assert all(r.dense_kernel_s == 0.0 for r in step.ranks)


def test_a_table_wise_plan_only_changes_by_its_all_reduce():
    plain = plan_step_seconds(SPEC, CLUSTER, _plan("table_wise"), pipelined=False)
    priced = plan_step_seconds(SPEC, CLUSTER, _plan("table_wise"), dense_kernel=COSTS, pipelined=False)
    assert [r.lookup_bwd_s for r in priced.ranks] == [r.lookup_bwd_s for r in plain.ranks]
    assert priced.comm.dense_all_reduce == pytest.approx(COSTS.all_reduce_seconds(dense_params(SPEC) * 4))


def test_the_all_reduce_carries_the_dense_parameters_and_every_data_parallel_table():
    assert all_reduce_bytes(SPEC, _plan("table_wise"), 100) == 400
    assert all_reduce_bytes(SPEC, _plan("data_parallel"), 100) == 400 + 30_000 * 32 * 4
