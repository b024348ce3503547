"""Embedding sharding against TorchRec's planner: random DLRM problems and measured CPU miniatures.

Part 1 (planning, no GPU needed): ``--problems`` random DLRM problems (default 24). Tables are drawn
from the public tables of the catalog (``costmodel/catalog/recsys/models.yaml``: MLPerf DLRM-DCNv2,
the DLRM paper's Criteo Kaggle and benchmark configs: rows, dimension, pooling), their access from the
published reuse-factor histograms (``access_profiles.yaml``, Meta's dlrm_datasets) or Zipf 1.05 / 1.2;
20 to 120 tables on 4 to 64 A100-40GB / H100-80GB GPUs, global batch 65536. Each problem is planned by
TorchRec's ``EmbeddingShardingPlanner``, the five DreamShard heuristics and parplan's search, and every
plan is priced under parplan's cost model *and* under TorchRec's own estimators, each with its own
memory model. Printed: parplan's win rate and median step-time gain over TorchRec's plan under each
model, and each method's memory violations under each memory model.

Part 2 (measured): ``--miniatures`` CPU miniatures (default 10): 3 to 5 tables on 2 (or 4) gloo
processes, each candidate plan timed with real all-to-alls and EmbeddingBags, interleaved, a fresh batch
every round as in training (``benchmarks/_sharding_miniature.py``), as the critical path of CPU time (the
machine is shared: wall time mostly measures waiting for a core; the fastest wall-clock step is printed
beside it). Both cost
models are given this machine's figures, measured here first (``benchmarks/_sharding_hardware.py``:
memory bandwidth, the gloo all-to-all latency and bandwidth); parplan's also this CPU's lookup profile
(forward and the miniature's autograd backward + sparse SGD, fitted on the miniatures' table sizes) and
the serial schedule the miniature runs, the host work around the all-to-alls (``costmodel.recsys.host``:
packing, row-wise bucketising, splitting, pooled packing, unit costs timed here by
``_sharding_hardware.cpu_host_costs``; ``--no-host`` leaves it out), the data-parallel tables' dense
gradient (``costmodel.recsys.dense_kernel``: zero fill, sort, scatter, update, gloo all-reduce, timed here by
``cpu_dense_kernel_costs``; ``--no-dense-kernel`` prices it as bytes instead), and the backward's sort
(``costmodel.recsys.cpu_sort``, in the ``SparseBackwardPredictor``); its search prices with that same model.
Printed per miniature: every plan's shape, measured and predicted times, and per phase (input
all-to-alls, lookups, output all-to-all, gradient all-to-all, backward + update, data-parallel) the
measured / predicted milliseconds; the noise floor between the halves of the rounds; then how often
each model's pick is measured best or within 10% of it, and the share of plan pairs each orders as
measured (Kendall concordance), for parplan's model, without the host work, without the dense-kernel
pricing, the previous round's (forward-count backward fit, dense gradient as bytes), and TorchRec's.

Targets (issue 17): parplan's pick measured best or within 10% in >= 85% of miniatures; parplan's plan
never infeasible where TorchRec's is feasible.

Usage: ``python benchmarks/sharding.py [--problems N] [--miniatures N] [--json] [--skip-miniatures]
[--no-host] [--no-dense-kernel]``
(needs the ``recsys`` extra; not run in CI: minutes).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costmodel.recsys.plan import ShardingPlan  # noqa: E402
from costmodel.recsys.torchrec_estimate import available, torchrec_evaluate, torchrec_planner_plan  # noqa: E402
from costmodel.specs.recsys import (  # noqa: E402
    AccessDistribution, DLRMSpec, EmbeddingTable, access_profiles, dlrm_catalog,
)
from costmodel.specs.runspec import resolve_cluster  # noqa: E402
from search.recsys_proposals import HEURISTICS, heuristic_plan  # noqa: E402
from search.recsys_search import PlanEvaluator, parplan_rank_seconds, search_plans  # noqa: E402

GPUS = ("a100-sxm4-40gb", "h100-sxm5-80gb")
GPU_COUNTS = (4, 8, 16, 32, 64)
TARGET_WITHIN = 0.10
MAX_TABLES = 120
"""Most tables of a random problem: parplan's model prices 500 tables on 64 GPUs in about 2 s a plan, so 20+
problems x 8 plans x two estimators stay within minutes on a 2-core machine."""
TARGET_SHARE = 0.85


def public_tables() -> list[EmbeddingTable]:
    """Every table of the catalog's public DLRM configs."""
    return [t for spec in dlrm_catalog().values() for t in spec.tables]


def random_problem(index: int, rng: np.random.Generator) -> tuple[DLRMSpec, Any]:
    pool = public_tables()
    accesses = [*access_profiles().values(), AccessDistribution(kind="zipf", zipf_exponent=1.05),
                AccessDistribution(kind="zipf", zipf_exponent=1.2)]
    n = int(rng.integers(20, MAX_TABLES + 1))
    dim = int(rng.choice([64, 128]))
    tables = []
    for i in range(n):
        base = pool[int(rng.integers(len(pool)))]
        tables.append(EmbeddingTable(name=f"t{i}", rows=base.rows, dim=dim, pooling_mean=base.pooling_mean,
                                     access=accesses[int(rng.integers(len(accesses)))], optimizer="rowwise_adagrad",
                                     source=f"catalog table {base.name}"))
    spec = DLRMSpec(name=f"problem{index}", tables=tuple(tables), bottom_mlp=(13, 512, 256, dim),
                    top_mlp=(1024, 1024, 512, 256, 1), interaction="dot", batch_size=65536)
    gpu = GPUS[int(rng.integers(len(GPUS)))]
    count = int(rng.choice(GPU_COUNTS))
    cluster = resolve_cluster({"gpu": gpu, "num_gpus": count})
    return spec, cluster


def price(spec: DLRMSpec, cluster: Any, plan: ShardingPlan | None, ours: PlanEvaluator) -> dict[str, Any]:
    if plan is None:
        return {"planned": False}
    step, over, _ = ours(plan)
    theirs = torchrec_evaluate(spec, cluster, plan)
    return {"planned": True, "parplan_s": step if math.isfinite(step) else None, "parplan_fits": over <= 0,
            "torchrec_s": theirs.step_seconds, "torchrec_fits": theirs.fits}


def planning_part(count: int, seed: int, trials: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(count):
        spec, cluster = random_problem(index, rng)
        ours = PlanEvaluator(spec, cluster, parplan_rank_seconds(spec, cluster))
        started = time.monotonic()
        torchrec_plan = torchrec_planner_plan(spec, cluster)
        torchrec_s = time.monotonic() - started
        found = search_plans(spec, cluster, n_trials=trials, seed=seed)
        plans = {"torchrec": torchrec_plan, "parplan": found.best.plan,
                 **{h: heuristic_plan(h, spec, cluster, seed=seed) for h in HEURISTICS}}
        row = {"problem": spec.name, "tables": len(spec.tables), "gpu": cluster.gpu.name, "gpus": cluster.num_gpus,
               "parplan_search_s": found.seconds, "torchrec_plan_s": torchrec_s,
               "plans": {name: price(spec, cluster, plan, ours) for name, plan in plans.items()}}
        rows.append(row)
        p, t = row["plans"]["parplan"], row["plans"]["torchrec"]
        print(f"{spec.name}: {len(spec.tables)} tables on {cluster.num_gpus} x {cluster.gpu.name}: "
              f"parplan {_ms(p.get('parplan_s'))} / {_ms(p.get('torchrec_s'))}, "
              f"torchrec {_ms(t.get('parplan_s'))} / {_ms(t.get('torchrec_s'))} (parplan's / TorchRec's model); "
              f"search {found.seconds:.1f} s", flush=True)
    return {"problems": rows, "summary": summarise(rows)}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{1e3 * value:.2f} ms"


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for model in ("parplan", "torchrec"):
        gains, wins, compared = [], 0, 0
        for row in rows:
            p, t = row["plans"]["parplan"], row["plans"]["torchrec"]
            if not t.get("planned") or p.get(f"{model}_s") is None or t.get(f"{model}_s") is None:
                continue
            if not (p[f"{model}_fits"] and t[f"{model}_fits"]):
                continue
            compared += 1
            gain = t[f"{model}_s"] / p[f"{model}_s"] - 1
            gains.append(gain)
            wins += gain > 0
        out[f"under_{model}_model"] = {"compared": compared, "parplan_win_rate": wins / compared if compared else None,
                                       "median_gain": statistics.median(gains) if gains else None}
    methods = sorted({name for row in rows for name in row["plans"]})
    out["memory_violations"] = {
        name: {"parplan_memory": sum(1 for r in rows if r["plans"][name].get("planned")
                                     and not r["plans"][name]["parplan_fits"]),
               "torchrec_memory": sum(1 for r in rows if r["plans"][name].get("planned")
                                      and not r["plans"][name]["torchrec_fits"]),
               "no_plan": sum(1 for r in rows if not r["plans"][name].get("planned"))} for name in methods}
    out["parplan_infeasible_where_torchrec_feasible"] = sum(
        1 for r in rows if r["plans"]["torchrec"].get("planned") and r["plans"]["torchrec"]["torchrec_fits"]
        and not r["plans"]["parplan"]["parplan_fits"])
    return out


# -- part 2: measured miniatures ---------------------------------------------------------------------
def miniature_part(count: int, seed: int, host: bool = True, dense_kernel: bool = True,
                   concurrent: bool = True) -> dict[str, Any]:
    from benchmarks._sharding_hardware import (
        cpu_cluster, cpu_dense_kernel_costs, cpu_host_costs, cpu_lookup_profile, cpu_sort_costs,
    )
    from benchmarks._sharding_miniature import PHASES, MiniTable, measure_plans

    rng = np.random.default_rng(seed + 1000)
    cluster_of, dense_kernel_of = {}, {}
    rows = []
    batch = 2048
    sort = cpu_sort_costs()
    profile = cpu_lookup_profile(batch, sort=sort, world=2 if concurrent else 1)
    held = profile.held_out
    print(f"sort unit costs: {sort}; backward + SGD held-out MAPE: sort-aware {held['sparse_backward']:.1f}%, "
          f"forward counts {held['forward_counts']:.1f}%", flush=True)
    # this CPU's fitted lookup profile; the miniature runs its phases back to back (blocking gloo, no pipeline)
    base_model = {"lookup_model": profile.forward, "backward_model": profile.backward, "caches": profile.caches,
                  "pipelined": False}
    if host:  # the host work around the all-to-alls, its unit costs timed here (costmodel.recsys.host)
        base_model["host"] = cpu_host_costs()
        print(f"host unit costs: {base_model['host']}", flush=True)
    for index in range(count):
        world = 4 if index % 5 == 4 else 2
        if world not in cluster_of:
            cluster_of[world] = cpu_cluster(world)
            if dense_kernel:  # the data-parallel tables' dense gradient (costmodel.recsys.dense_kernel)
                dense_kernel_of[world] = cpu_dense_kernel_costs(world, concurrent=concurrent)
                print(f"dense-kernel unit costs ({world} ranks): {dense_kernel_of[world]}", flush=True)
        cluster = cluster_of[world]
        cost_model = {**base_model, **({"dense_kernel": dense_kernel_of[world]} if dense_kernel else {})}
        n = int(rng.integers(3, 6))
        minis = [MiniTable(f"t{i}", rows=int(10 ** rng.uniform(3.5, 5.5)), dim=int(rng.choice([16, 32, 64])),
                           pooling=int(rng.integers(1, 40)), zipf=float(rng.choice([0.0, 1.05, 1.2])))
                 for i in range(n)]
        spec = DLRMSpec(name=f"mini{index}", batch_size=batch, interaction="cat", bottom_mlp=(13, 16), top_mlp=(16, 1),
                        tables=tuple(EmbeddingTable(
                            name=m.name, rows=m.rows, dim=m.dim, pooling_mean=float(m.pooling), optimizer="sgd",
                            access=AccessDistribution(kind="zipf", zipf_exponent=m.zipf) if m.zipf else
                            AccessDistribution()) for m in minis))
        ours = PlanEvaluator(spec, cluster, parplan_rank_seconds(spec, cluster, **cost_model))
        candidates = candidate_plans(spec, cluster, ours.rank_seconds)
        timing = measure_plans(minis, [{n: (s.sharding_type, s.ranks) for n, s in plan.shardings}
                                       for plan in candidates.values()], world, batch, seed=seed + index)
        measured = timing.cpu_s
        predicted = {"parplan": [ours(p)[0] for p in candidates.values()],
                     "torchrec": [torchrec_evaluate(spec, cluster, p).step_seconds for p in candidates.values()]}
        if host:  # the same candidates and measurements, priced without the host work (round 1's model)
            bare = {k: v for k, v in cost_model.items() if k != "host"}
            predicted["parplan_no_host"] = [float(np.max(parplan_rank_seconds(spec, cluster, **bare)(p)))
                                            for p in candidates.values()]
        if dense_kernel:  # ... without the dense-kernel pricing, and the previous round's whole model (the
            # forward-count backward fit, the dense gradient as bytes)
            bare = {k: v for k, v in cost_model.items() if k != "dense_kernel"}
            predicted["parplan_no_dense_kernel"] = [float(np.max(parplan_rank_seconds(spec, cluster, **bare)(p)))
                                                    for p in candidates.values()]
            bare["backward_model"] = profile.backward_forward_counts
            predicted["parplan_previous"] = [float(np.max(parplan_rank_seconds(spec, cluster, **bare)(p)))
                                             for p in candidates.values()]
        row = {"miniature": spec.name, "world": world, "tables": n, "plans": list(candidates),
               "measured_s": measured, "measured_wall_s": timing.wall_s, **{f"{k}_s": v for k, v in predicted.items()}}
        best = min(measured)
        for model, values in predicted.items():
            pick = int(np.argmin(values))
            row[f"{model}_pick_within"] = measured[pick] / best - 1
            row[f"{model}_concordance"] = concordance(values, measured)
        rows.append(row)
        print(f"{spec.name} ({world} ranks, {n} tables): parplan pick +{100 * row['parplan_pick_within']:.1f}%, "
              f"TorchRec pick +{100 * row['torchrec_pick_within']:.1f}%; per plan measured (CPU critical path, wall) / "
              "parplan / TorchRec ms:", flush=True)
        row["measured_phase_s"] = timing.phase_s
        row["noise_pct"] = timing.noise_pct
        print(f"    noise floor (first vs second half of the rounds): {timing.noise_pct:.1f}%", flush=True)
        row["parplan_phase_s"] = [predicted_phases(spec, cluster, p, cost_model) for p in candidates.values()]
        for name, m, w, ours_s, theirs_s, got, want in zip(candidates, measured, timing.wall_s, predicted["parplan"],
                                                           predicted["torchrec"], timing.phase_s,
                                                           row["parplan_phase_s"]):
            kinds = sorted(sh.sharding_type for _, sh in candidates[name].shardings)
            shape = ",".join(f"{kind.replace('table_row_wise', 'TWRW').replace('_wise', '')}x{kinds.count(kind)}"
                             for kind in sorted(set(kinds)))
            print(f"    {name:18s} {1e3 * m:7.2f} ({1e3 * w:7.2f}) {1e3 * ours_s:7.2f} {1e3 * theirs_s:7.2f}   "
                  f"[{shape}] "
                  + " ".join(f"{phase} {1e3 * g:.2f}/{1e3 * q:.2f}" for phase, g, q in zip(PHASES, got, want)),
                  flush=True)
    summary = {model: {"pick_within_10pct": float(np.mean([r[f"{model}_pick_within"] <= TARGET_WITHIN for r in rows])),
                       "mean_concordance": float(np.mean([r[f"{model}_concordance"] for r in rows]))}
               for model in predicted}
    summary["noise_floor_pct"] = float(np.mean([r["noise_pct"] for r in rows]))
    summary["backward_held_out_mape_pct"] = profile.held_out
    return {"miniatures": rows, "summary": summary}


def predicted_phases(spec: DLRMSpec, cluster: Any, plan: ShardingPlan, cost_model: dict) -> list[float]:
    """parplan's seconds for each of the miniature's phases (``_sharding_miniature.PHASES``): the
    collectives, and the busiest rank's lookup forward and backward (the data-parallel tables' forward is
    in the forward; the last phase is their dense-kernel backward and update, where priced, and the
    all-reduce). The forward's host work
    (``costmodel.recsys.host``: packing, bucketising, splitting, pooled packing) is shown with the input
    distribution, the backward's with the backward."""
    from costmodel.recsys.host import host_seconds
    from costmodel.recsys.step import plan_step_seconds

    step = plan_step_seconds(spec, cluster, plan, **cost_model)
    host_fwd, host_bwd = host_seconds(spec, plan, cost_model["host"]) if "host" in cost_model else ([0.0], [0.0])
    return [step.comm.input_dist + max(host_fwd), max(r.lookup_fwd_s for r in step.ranks), step.comm.output_dist,
            step.comm.grad_dist, max(r.lookup_bwd_s - r.dense_kernel_s for r in step.ranks) + max(host_bwd),
            max(r.dense_kernel_s for r in step.ranks) + step.comm.dense_all_reduce]


def candidate_plans(spec: DLRMSpec, cluster: Any, rank_seconds: Any) -> dict[str, ShardingPlan]:
    """The plans a miniature times: parplan's pick (searched with ``rank_seconds``, the cost model the
    miniature is judged by), TorchRec's, the greedy heuristics and all row-wise."""
    from search.recsys_proposals import uniform_proposals

    found = search_plans(spec, cluster, rank_seconds, n_trials=10, seed=0)
    plans = {"parplan": found.best.plan}
    theirs = torchrec_planner_plan(spec, cluster)
    if theirs is not None:
        plans["torchrec"] = theirs
    for name in ("lookup_greedy", "size_greedy", "random"):
        plans[name] = heuristic_plan(name, spec, cluster)
    plans["uniform_row_wise"] = uniform_proposals(spec, cluster)["uniform_row_wise"]
    unique: dict[ShardingPlan, str] = {}
    for name, plan in plans.items():  # the same plan twice would only repeat a measurement
        unique.setdefault(plan, name)
    return {name: plan for plan, name in unique.items()}


def concordance(predicted: list[float], measured: list[float]) -> float:
    """Share of plan pairs the prediction orders as the measurement does."""
    pairs = [(i, j) for i in range(len(measured)) for j in range(i + 1, len(measured))]
    if not pairs:
        return 1.0
    agree = sum((predicted[i] - predicted[j]) * (measured[i] - measured[j]) > 0 for i, j in pairs)
    return agree / len(pairs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", type=int, default=24)
    parser.add_argument("--miniatures", type=int, default=10)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-miniatures", action="store_true")
    parser.add_argument("--no-host", action="store_true",
                        help="miniatures: leave the host work around the all-to-alls out of parplan's model")
    parser.add_argument("--no-dense-kernel", action="store_true",
                        help="miniatures: price the data-parallel tables' dense gradient as bytes (the previous model)")
    parser.add_argument("--alone", action="store_true",
                        help="miniatures: time the lookup profile and dense-kernel costs in one process, not two at once")
    parser.add_argument("--json", action="store_true", help="print the JSON of every figure at the end")
    args = parser.parse_args(argv)
    if not available():
        print("benchmarks/sharding.py needs TorchRec: pip install -e '.[recsys]' && pip install --no-deps "
              "torchrec==1.8.0", file=sys.stderr)
        return 2
    out: dict[str, Any] = {}
    if args.problems:
        out["planning"] = planning_part(args.problems, args.seed, args.trials)
        print(json.dumps(out["planning"]["summary"], indent=1))
    if args.miniatures and not args.skip_miniatures:
        out["miniatures"] = miniature_part(args.miniatures, args.seed, host=not args.no_host,
                                           dense_kernel=not args.no_dense_kernel, concurrent=not args.alone)
        print(json.dumps(out["miniatures"]["summary"], indent=1))
    if args.json:
        print(json.dumps(out, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
