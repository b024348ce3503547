"""Per-rank memory of embedding sharding plans (constraints/recsys_memory.py)."""

from __future__ import annotations

import math

import pytest

from constraints.recsys_memory import (
    PIPELINE_INPUT_FACTOR, TERMS, plan_memory, rank_shards, table_rank_bytes,
)
from costmodel.recsys.plan import ShardingPlan, TableSharding
from costmodel.specs.recsys import DLRMSpec, EmbeddingTable
from costmodel.specs.runspec import resolve_cluster

CLUSTER = resolve_cluster({"gpu": "h100-sxm5-80gb", "num_gpus": 8})


def _spec(*tables: EmbeddingTable, batch: int = 8192) -> DLRMSpec:
    return DLRMSpec(name="t", tables=tables, bottom_mlp=(13, 64), top_mlp=(64, 1), interaction="cat",
                    batch_size=batch)


def _term(arr, name):
    return arr[:, TERMS.index(name)]


def test_row_wise_shards_cover_the_rows_in_ceil_blocks():
    table = EmbeddingTable(name="a", rows=10, dim=16)
    shards = rank_shards(table, TableSharding("row_wise", (0, 1, 2, 3)), 4)
    assert [s.rows for s in shards] == [3, 3, 3, 1]  # TorchRec's example in _calculate_rw_shard_sizes_and_offsets


def test_sharded_weights_sum_to_the_table_and_data_parallel_replicates():
    table = EmbeddingTable(name="a", rows=1001, dim=64, dtype="fp16")
    for sharding in (TableSharding("row_wise", tuple(range(8))), TableSharding("column_wise", (1, 5, 5, 2)),
                     TableSharding("table_row_wise", (0, 1, 2)), TableSharding("table_wise", (6,))):
        arr = table_rank_bytes(table, sharding, 8, 1024, 8)
        assert _term(arr, "weights").sum() == pytest.approx(table.weight_bytes)
    dp = table_rank_bytes(table, TableSharding("data_parallel", (), "dense"), 8, 1024, 8)
    assert list(_term(dp, "weights")) == [table.weight_bytes] * 8
    assert list(_term(dp, "gradients")) == [table.weight_bytes] * 8  # dense kernel: full gradient


def test_optimizer_state_per_optimizer():
    rows, dim = 5000, 32
    tw = TableSharding("table_wise", (0,))
    opt = {}
    for name in ("sgd", "rowwise_adagrad", "adam"):
        for dtype in ("fp32", "fp16"):
            table = EmbeddingTable(name="a", rows=rows, dim=dim, dtype=dtype, optimizer=name)
            opt[name, dtype] = _term(table_rank_bytes(table, tw, 2, 64, 8), "optimizer")[0]
    assert opt["sgd", "fp32"] == 0
    assert opt["rowwise_adagrad", "fp32"] == rows * 4 == opt["rowwise_adagrad", "fp16"]  # one fp32 per row
    assert opt["adam", "fp32"] == 2 * rows * dim * 4 == opt["adam", "fp16"]  # fp32 m and v


def test_fused_kernel_keeps_no_gradient():
    table = EmbeddingTable(name="a", rows=100, dim=8)
    arr = table_rank_bytes(table, TableSharding("row_wise", (0, 1)), 2, 64, 8)
    assert _term(arr, "gradients").sum() == 0


def test_a_table_too_big_for_one_gpu_fits_only_row_wise():
    big = EmbeddingTable(name="big", rows=400_000_000, dim=64)  # 95 GiB of fp32
    spec = _spec(big)
    tw = ShardingPlan.from_dict(8, {"big": TableSharding("table_wise", (0,))})
    rw = ShardingPlan.from_dict(8, {"big": TableSharding("row_wise", tuple(range(8)))})
    assert not plan_memory(spec, CLUSTER, tw).fits
    assert plan_memory(spec, CLUSTER, tw).over_bytes > 0
    mem = plan_memory(spec, CLUSTER, rw)
    assert mem.fits and mem.over_bytes == 0
    assert mem.peak.weights_bytes == pytest.approx(big.weight_bytes / 8, rel=1e-6)


def test_cache_aux_state_only_with_a_caching_ratio():
    table = EmbeddingTable(name="a", rows=1000, dim=8)
    tw = TableSharding("table_wise", (0,))
    assert _term(table_rank_bytes(table, tw, 2, 64, 8), "cache_aux").sum() == 0
    assert _term(table_rank_bytes(table, tw, 2, 64, 8, 0.2), "cache_aux")[0] == math.ceil(1000 * (4 + 0.2 * 16))


def test_dense_part_is_on_every_rank_and_shrinks_with_more_ranks():
    spec = _spec(EmbeddingTable(name="a", rows=100, dim=8))
    plan4 = ShardingPlan.from_dict(4, {"a": TableSharding("table_wise", (0,))})
    plan8 = ShardingPlan.from_dict(8, {"a": TableSharding("table_wise", (0,))})
    m4, m8 = plan_memory(spec, CLUSTER, plan4), plan_memory(spec, CLUSTER, plan8)
    assert len({r.dense_states_bytes for r in m4.ranks}) == 1 and m4.ranks[0].dense_states_bytes > 0
    assert m8.ranks[1].dense_activations_bytes < m4.ranks[1].dense_activations_bytes


# -- agreement with TorchRec's own storage formulas where we count the same thing --------------------------
torchrec = pytest.importorskip("torchrec", reason="TorchRec is the optional 'recsys' extra")


@pytest.mark.parametrize("sharding_type,ranks", [("table_wise", (3,)), ("row_wise", tuple(range(8))),
                                                  ("table_row_wise", (0, 1, 2, 3)), ("column_wise", (2, 5))])
def test_input_buffers_and_geometry_match_torchrec(sharding_type, ranks):
    import torch
    from torchrec.distributed.planner.shard_estimators import _calculate_shard_io_sizes
    from torchrec.distributed.sharding_plan import calculate_shard_sizes_and_offsets

    table = EmbeddingTable(name="a", rows=100_003, dim=256, pooling_mean=7.0)
    world, local, batch = 8, 4, 4096
    sharding = TableSharding(sharding_type, ranks)
    ours = [(s.rows, s.cols) for s in rank_shards(table, sharding, world)]
    tensor = torch.empty(table.rows, table.dim, device="meta")
    kw = {"col_wise_shard_dim": table.dim // len(ranks)} if sharding_type == "column_wise" else {}
    sizes, _ = calculate_shard_sizes_and_offsets(tensor, world, local, sharding_type, **kw)
    assert ours == [tuple(s) for s in sizes]
    inputs, _ = _calculate_shard_io_sizes(sharding_type, [batch // world], world, local, [7.0], table.dim,
                                          sizes, 8, 4, [1.0], True)
    arr = table_rank_bytes(table, sharding, world, batch, local)
    got = [_term(arr, "input_buffers")[r] / PIPELINE_INPUT_FACTOR for r in ranks]
    assert got == pytest.approx(inputs, rel=1e-6)
