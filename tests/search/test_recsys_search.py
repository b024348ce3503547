"""Plan search: warm starts, Optuna knobs, memory first, local search (search/recsys_search.py).

The mechanics are tested under the proposals' bandwidth proxy (``proxy_rank_seconds``) so that the test
says what the search does whatever the cost model; the cost model's own tests live in tests/costmodel/recsys.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from constraints.recsys_memory import plan_memory
from costmodel.recsys.plan import ShardingPlan, TableSharding
from costmodel.specs.recsys import DLRMSpec, EmbeddingTable
from costmodel.specs.runspec import resolve_cluster
from search.recsys_search import PlanEvaluator, local_search, proxy_rank_seconds, search_plans

CLUSTER = resolve_cluster({"gpu": "h100-sxm5-80gb", "num_gpus": 8})


def _spec(tables, batch=16384):
    return DLRMSpec(name="t", tables=tuple(tables), bottom_mlp=(13, 64), top_mlp=(64, 1), interaction="cat",
                    batch_size=batch)


def _random_spec(n, seed=0):
    rng = np.random.default_rng(seed)
    return _spec([EmbeddingTable(name=f"t{i}", rows=int(10 ** rng.uniform(3, 7)), dim=int(rng.choice([32, 64, 128])),
                                 pooling_mean=float(rng.uniform(1, 60))) for i in range(n)])


def test_search_is_no_worse_than_any_warm_start_and_fits():
    spec = _random_spec(60)
    result = search_plans(spec, CLUSTER, proxy_rank_seconds(spec, CLUSTER), n_trials=8, local_evaluations=50)
    assert result.best.fits and plan_memory(spec, CLUSTER, result.best.plan).fits
    assert all(result.best.step_seconds <= c.step_seconds for c in result.warm_starts)
    result.best.plan.check_covers(spec, CLUSTER.gpus_per_node)


def test_infeasible_plans_get_no_time_and_report_how_far_they_miss():
    spec = _spec([EmbeddingTable(name="big", rows=400_000_000, dim=64)])
    calls = []

    def rank_seconds(plan):
        calls.append(plan)
        return np.ones(plan.world_size)

    evaluate = PlanEvaluator(spec, CLUSTER, rank_seconds)
    step, over, ranks = evaluate(ShardingPlan.from_dict(8, {"big": TableSharding("table_wise", (0,))}))
    # the weights alone (400e6 x 64 fp32 = 95.4 GiB) exceed the whole HBM, so at least that much is over
    weights_over_gib = (400_000_000 * 64 * 4 - CLUSTER.gpu.hbm_capacity_bytes) / 2**30
    assert math.isinf(step) and over > weights_over_gib and ranks is None and not calls


def test_a_table_no_gpu_holds_is_split_by_the_search():
    spec = _spec([EmbeddingTable(name="big", rows=400_000_000, dim=64, pooling_mean=2.0),
                  *[EmbeddingTable(name=f"s{i}", rows=10_000, dim=64, pooling_mean=10.0) for i in range(6)]])
    result = search_plans(spec, CLUSTER, proxy_rank_seconds(spec, CLUSTER), n_trials=6, local_evaluations=20)
    assert result.best.fits
    assert result.best.plan["big"].sharding_type in ("row_wise", "table_row_wise", "column_wise")


def test_local_search_unloads_the_slowest_rank():
    spec = _spec([EmbeddingTable(name=f"t{i}", rows=1000, dim=64, pooling_mean=20.0) for i in range(8)])
    piled = ShardingPlan.from_dict(8, {f"t{i}": TableSharding("table_wise", (0,)) for i in range(8)})
    evaluate = PlanEvaluator(spec, CLUSTER, proxy_rank_seconds(spec, CLUSTER))
    start = evaluate.candidate("piled", piled)
    better = local_search(evaluate, start, max_evaluations=500)
    assert better.step_seconds < start.step_seconds / 4  # eight equal tables end up (nearly) one per rank


def test_same_seed_same_plan():
    spec = _random_spec(30, seed=1)
    runs = [search_plans(spec, CLUSTER, proxy_rank_seconds(spec, CLUSTER), n_trials=5, local_evaluations=30, seed=7)
            for _ in range(2)]
    assert runs[0].best.plan == runs[1].best.plan


def test_parplan_rank_seconds_prices_with_the_lookup_model_it_is_given():
    from costmodel.recsys.plan import uniform_plan
    from costmodel.recsys.step import plan_step_seconds
    from search.recsys_search import parplan_rank_seconds

    spec, cluster = _random_spec(12), CLUSTER
    plan = uniform_plan(spec, cluster.num_gpus, "table_wise")
    serial = parplan_rank_seconds(spec, cluster, pipelined=False)(plan)
    expected = [r.total_s for r in plan_step_seconds(spec, cluster, plan, pipelined=False).ranks]
    assert list(serial) == pytest.approx(expected)
    assert max(serial) > max(parplan_rank_seconds(spec, cluster)(plan))
