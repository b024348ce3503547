"""Greedy sharding proposals (search/recsys_proposals.py)."""

from __future__ import annotations

import pytest

from constraints.recsys_memory import plan_memory
from costmodel.specs.recsys import DLRMSpec, EmbeddingTable
from costmodel.specs.runspec import resolve_cluster
from search.recsys_proposals import (
    HEURISTICS, column_shards, greedy_table_wise, heuristic_cost, heuristic_plan, place, random_plan, warm_starts,
)

CLUSTER = resolve_cluster({"gpu": "h100-sxm5-80gb", "num_gpus": 16})


def _spec(tables, batch=8192):
    return DLRMSpec(name="t", tables=tuple(tables), bottom_mlp=(13, 64), top_mlp=(64, 1), interaction="cat",
                    batch_size=batch)


def test_lookup_greedy_is_longest_processing_time_first():
    # dim x pooling = 5, 4, 3, 3, 3 on 2 ranks: 5 -> r0, 4 -> r1, 3 -> r1, 3 -> r0, 3 -> r1: loads 8 and 10
    tables = [EmbeddingTable(name=f"t{i}", rows=1000, dim=1 * 4, pooling_mean=p / 4)
              for i, p in enumerate((5, 4, 3, 3, 3))]
    plan = heuristic_plan("lookup_greedy", _spec(tables), CLUSTER, world_size=2)
    loads = [0.0, 0.0]
    for table in tables:
        loads[plan[table.name].ranks[0]] += heuristic_cost(table, "lookup_greedy")
    assert sorted(loads) == [8.0, 10.0]


def test_greedy_never_places_a_table_where_it_does_not_fit():
    # 48 GiB tables, ~74 GiB usable per H100: no two share a rank, although the (negative) cost makes the
    # rank holding one the least loaded, so the greedy would pile them up without the memory check.
    tables = [EmbeddingTable(name=f"big{i}", rows=200_000_000, dim=64, optimizer="sgd") for i in range(3)]
    spec = _spec(tables)
    plan = greedy_table_wise(spec, CLUSTER, 3, lambda t: -1.0)
    assert plan_memory(spec, CLUSTER, plan).fits
    assert len({plan[f"big{i}"].ranks[0] for i in range(3)}) == 3
    tight = greedy_table_wise(spec, CLUSTER, 2, lambda t: -1.0)  # 3 on 2 ranks cannot fit: reported, not hidden
    assert not plan_memory(spec, CLUSTER, tight).fits


def test_random_is_seeded_and_every_heuristic_covers_the_model():
    tables = [EmbeddingTable(name=f"t{i}", rows=10 ** (3 + i % 4), dim=32, pooling_mean=1.0 + i) for i in range(40)]
    spec = _spec(tables)
    assert random_plan(spec, 16, seed=3) == random_plan(spec, 16, seed=3) != random_plan(spec, 16, seed=4)
    for name in HEURISTICS:
        heuristic_plan(name, spec, CLUSTER).check_covers(spec, CLUSTER.gpus_per_node)


def test_place_follows_torchrec_layouts():
    tables = [EmbeddingTable(name=n, rows=10_000, dim=128, pooling_mean=4.0) for n in "abcde"]
    spec = _spec(tables)
    kinds = {"a": "row_wise", "b": "table_row_wise", "c": "column_wise", "d": "data_parallel", "e": "table_wise"}
    plan = place(spec, CLUSTER, 16, kinds, {"c": 4})
    assert plan["a"].ranks == tuple(range(16))
    ranks_b = plan["b"].ranks
    assert len(ranks_b) == 8 and len({r // 8 for r in ranks_b}) == 1
    assert len(set(plan["c"].ranks)) == 4  # column shards spread over distinct ranks
    assert plan["d"].compute_kernel == "dense"
    plan.check_covers(spec, CLUSTER.gpus_per_node)


@pytest.mark.parametrize("dim,wanted,expected", [(128, 4, 4), (96, 8, 8), (100, 2, 1), (256, 3, 4), (8, 8, 2)])
def test_column_shards_keep_widths_multiple_of_four(dim, wanted, expected):
    assert column_shards(dim, wanted) == expected


def test_warm_starts_name_the_heuristics_and_uniform_proposals():
    spec = _spec([EmbeddingTable(name=f"t{i}", rows=5000, dim=64) for i in range(10)])
    names = set(warm_starts(spec, CLUSTER))
    assert set(HEURISTICS) <= names and "uniform_row_wise" in names and "uniform_data_parallel" in names


def test_mixed_proposal_replicates_tiny_hot_tables_and_shards_big_ones():
    from search.recsys_proposals import mixed_proposal

    spec = _spec([EmbeddingTable(name="tiny", rows=100, dim=64, pooling_mean=50.0),
                  EmbeddingTable(name="huge", rows=50_000_000, dim=64, pooling_mean=1.0)])
    plan = mixed_proposal(spec, CLUSTER)
    assert plan["tiny"].sharding_type == "data_parallel" and plan["huge"].sharding_type == "table_wise"
