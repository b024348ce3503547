"""Search for the fastest embedding sharding plan that fits: greedy warm starts, Optuna, then a local search.

1. Warm starts (``search.recsys_proposals``): the five DreamShard heuristics and the TorchRec-style
   uniform proposals, each evaluated.
2. Optuna (seeded TPE) over a few *plan-shaping knobs* rather than one variable per table, so that
   hundreds of tables take seconds: tables up to ``dp_bytes`` go data-parallel; tables from
   ``big_bytes`` up are split ``big_kind`` (row-wise, table-row-wise or column-wise); the top
   ``cw_fraction`` of the rest by lookup traffic go column-wise in ``cw_shards`` pieces; the others
   table-wise; ``search.recsys_proposals.place`` puts the shards on ranks.
3. A local search from the best plan found: move one table- or column-wise shard off the slowest
   rank to a faster one, or turn its heaviest table row-wise, while the step gets shorter.

Memory prunes before time, with the project's one mechanism for infeasible candidates
(search/README.md): a plan that does not fit gets no step-time evaluation; its trial returns
``inf`` and sets the Optuna constraint ``violation`` (GiB over the fullest rank's usable memory).
The step time is the slowest rank's critical path, from the evaluator (``costmodel.recsys``).
Where one evaluation is slow (hundreds of tables on tens of GPUs: about 2 s each at 500 tables on 64
GPUs), steps 1 and 2 are screened with the proposals' bandwidth proxy and only the best few plans are
priced by the cost model before step 3 (``screen``).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from constraints.recsys_memory import plan_memory
from costmodel.recsys.plan import ShardingPlan, TableSharding
from costmodel.specs.gpu import ClusterSpec, GiB
from costmodel.specs.recsys import DLRMSpec
from search.recsys_proposals import column_shards, place, shard_cost_seconds, warm_starts

RankSeconds = Callable[[ShardingPlan], np.ndarray]
"""Per-rank step seconds of a plan (each rank's critical path); the step is their maximum."""
CONSTRAINT = "violation"
BIG_KINDS = ("row_wise", "table_row_wise", "column_wise")
CW_SHARDS = (2, 4, 8)
SCREEN_ABOVE_S = 0.25
"""Seconds of one cost-model evaluation above which the search screens with the proxy first."""


@dataclass(frozen=True)
class Candidate:
    """One evaluated plan: ``step_seconds`` is ``inf`` when it does not fit (``over_gib`` > 0)."""

    name: str
    plan: ShardingPlan = field(repr=False)
    step_seconds: float
    over_gib: float

    @property
    def fits(self) -> bool:
        return self.over_gib <= 0


@dataclass(frozen=True)
class PlanSearchResult:
    """The best plan, every warm start's candidate, and what the search cost."""

    best: Candidate
    warm_starts: tuple[Candidate, ...]
    evaluations: int
    seconds: float
    screened: bool = False
    """Whether warm starts and trials were ranked by the bandwidth proxy (their ``step_seconds`` are the
    proxy's then) and only the finalists and the local search by the cost model."""


def proxy_rank_seconds(spec: DLRMSpec, cluster: ClusterSpec) -> RankSeconds:
    """Per-rank sum of ``shard_cost_seconds`` (the proposals' bandwidth proxy), for tests and as a fallback."""
    def evaluate(plan: ShardingPlan) -> np.ndarray:
        world = plan.world_size
        per_node = min(cluster.gpus_per_node, world)
        out = np.zeros(world)
        shardings = plan.as_dict()
        for table in spec.tables:
            sharding = shardings[table.name]
            ranks = tuple(range(world)) if sharding.sharding_type == "data_parallel" else sharding.ranks
            kind = sharding.sharding_type
            cols = table.dim // sharding.num_shards if kind == "column_wise" else table.dim
            share = {"row_wise": 1.0 / len(ranks), "table_row_wise": 1.0 / min(len(ranks), per_node),
                     "data_parallel": 1.0 / world}.get(kind, 1.0)
            cost = shard_cost_seconds(table, cols, share, spec, cluster, world, data_parallel=kind == "data_parallel")
            np.add.at(out, list(ranks), cost)
        return out

    return evaluate


class PlanEvaluator:
    """Memory first, time only for plans that fit; memoised by plan (plans are hashable)."""

    def __init__(self, spec: DLRMSpec, cluster: ClusterSpec, rank_seconds: RankSeconds) -> None:
        self.spec, self.cluster, self.rank_seconds = spec, cluster, rank_seconds
        self.cache: dict[ShardingPlan, tuple[float, float, np.ndarray | None]] = {}

    def __call__(self, plan: ShardingPlan) -> tuple[float, float, np.ndarray | None]:
        """(step seconds or inf, GiB over, per-rank seconds or None)."""
        if plan not in self.cache:
            memory = plan_memory(self.spec, self.cluster, plan)
            if not memory.fits:
                self.cache[plan] = (math.inf, memory.over_bytes / GiB, None)
            else:
                ranks = np.asarray(self.rank_seconds(plan), dtype=float)
                self.cache[plan] = (float(ranks.max()), 0.0, ranks)
        return self.cache[plan]

    def candidate(self, name: str, plan: ShardingPlan) -> Candidate:
        step, over, _ = self(plan)
        return Candidate(name, plan, step, over)


def knob_plan(spec: DLRMSpec, cluster: ClusterSpec, world: int, knobs: dict) -> ShardingPlan:
    """The plan the Optuna knobs describe (module docstring, step 2)."""
    kinds: dict[str, str] = {}
    counts: dict[str, int] = {}
    rest = []
    for table in spec.tables:
        if table.weight_bytes <= knobs["dp_bytes"]:
            kinds[table.name] = "data_parallel"
        elif table.weight_bytes >= knobs["big_bytes"]:
            kinds[table.name] = knobs["big_kind"]
            counts[table.name] = column_shards(table.dim, world if knobs["big_kind"] == "column_wise" else 2)
        else:
            rest.append(table)
    rest.sort(key=lambda t: t.lookups_per_sample * t.dim, reverse=True)
    n_cw = int(round(knobs["cw_fraction"] * len(rest)))
    for index, table in enumerate(rest):
        k = column_shards(table.dim, knobs["cw_shards"]) if index < n_cw else 1
        kinds[table.name] = "column_wise" if k > 1 else "table_wise"
        counts[table.name] = k
    return place(spec, cluster, world, kinds, counts)


def _suggest(trial, spec: DLRMSpec) -> dict:
    sizes = [t.weight_bytes for t in spec.tables]
    low, high = max(1.0, min(sizes) / 2), max(sizes) * 2
    return {"dp_bytes": trial.suggest_float("dp_bytes", low, high, log=True) if trial.suggest_categorical(
                "use_dp", [False, True]) else 0.0,
            "big_bytes": trial.suggest_float("big_bytes", low, high, log=True),
            "big_kind": trial.suggest_categorical("big_kind", list(BIG_KINDS)),
            "cw_fraction": trial.suggest_float("cw_fraction", 0.0, 1.0),
            "cw_shards": trial.suggest_categorical("cw_shards", list(CW_SHARDS))}


def _moves(spec: DLRMSpec, plan: ShardingPlan, ranks: np.ndarray, cluster: ClusterSpec, limit: int):
    """Neighbour plans that unload the slowest rank: relocate a shard of it, or make its heaviest table row-wise."""
    world = plan.world_size
    slow = int(np.argmax(ranks))
    fast = [int(r) for r in np.argsort(ranks)[: min(world - 1, 4)] if r != slow]
    current = plan.as_dict()
    on_slow = [t for t in spec.tables if current[t.name].sharding_type in ("table_wise", "column_wise")
               and slow in current[t.name].ranks]
    on_slow.sort(key=lambda t: shard_cost_seconds(t, t.dim, 1.0, spec, cluster, world), reverse=True)
    for table in on_slow[:limit]:
        sharding = current[table.name]
        for target in fast:
            ranks_new = tuple(target if r == slow else r for r in sharding.ranks)
            yield ShardingPlan.from_dict(world, {**current, table.name: TableSharding(sharding.sharding_type,
                                                                                      ranks_new)})
    if on_slow:
        heavy = on_slow[0]
        yield ShardingPlan.from_dict(world, {**current, heavy.name: TableSharding("row_wise", tuple(range(world)))})
        small = min(on_slow, key=lambda t: t.weight_bytes)  # replicate the smallest: no all-to-all for it
        yield ShardingPlan.from_dict(world, {**current, small.name: TableSharding("data_parallel", (), "dense")})


def local_search(evaluate: PlanEvaluator, start: Candidate, max_evaluations: int = 300,
                 deadline: float = math.inf, limit: int = 4) -> Candidate:
    """First-improvement descent over :func:`_moves` until none helps, ``max_evaluations`` neighbours were
    tried (the budget that keeps a seeded search reproducible) or ``deadline`` (time.monotonic) passes."""
    best, tried = start, 0
    while tried < max_evaluations and time.monotonic() < deadline:
        _, _, ranks = evaluate(best.plan)
        if ranks is None:
            return best
        for plan in _moves(evaluate.spec, best.plan, ranks, evaluate.cluster, limit):
            if plan in evaluate.cache:
                continue
            step, over, _ = evaluate(plan)
            tried += 1
            if step < best.step_seconds * (1 - 1e-9):
                best = Candidate(f"{start.name}+local", plan, step, over)
                break
            if tried >= max_evaluations or time.monotonic() >= deadline:
                return best
        else:
            return best
    return best


def search_plans(spec: DLRMSpec, cluster: ClusterSpec, rank_seconds: RankSeconds | None = None, *,
                 world_size: int | None = None, n_trials: int = 30, seed: int = 0, screen: bool | None = None,
                 finalists: int = 6, local_evaluations: int = 100, local_seconds: float = 20.0) -> PlanSearchResult:
    """The fastest plan that fits ``cluster`` (module docstring); ``rank_seconds`` defaults to parplan's model.

    ``screen``: rank the warm starts and trials with the bandwidth proxy (``proxy_rank_seconds``) and price only
    the best ``finalists`` with ``rank_seconds`` before the local search; None decides by the cost of one
    ``rank_seconds`` call (above :data:`SCREEN_ABOVE_S`: hundreds of tables on tens of GPUs).
    """
    import optuna

    started = time.monotonic()
    world = world_size or cluster.num_gpus
    if rank_seconds is None:
        rank_seconds = parplan_rank_seconds(spec, cluster)
    evaluate = PlanEvaluator(spec, cluster, rank_seconds)
    proposals = warm_starts(spec, cluster, world, seed)
    if screen is None:
        probe = next((p for p in proposals.values() if plan_memory(spec, cluster, p).fits), None)
        tick = time.monotonic()
        if probe is not None:
            evaluate(probe)
        screen = time.monotonic() - tick > SCREEN_ABOVE_S
    scout = PlanEvaluator(spec, cluster, proxy_rank_seconds(spec, cluster)) if screen else evaluate
    starts = tuple(scout.candidate(name, plan) for name, plan in proposals.items())

    plans: dict[int, ShardingPlan] = {}

    def objective(trial) -> float:
        plan = plans[trial.number] = knob_plan(spec, cluster, world, _suggest(trial, spec))
        step, over, _ = scout(plan)
        trial.set_user_attr("over_gib", over)
        trial.set_constraint(CONSTRAINT, over)
        return step

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():  # group=True is marked experimental; it handles the conditional dp_bytes
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, n_trials), multivariate=True,
                                             group=True)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    if n_trials:
        study.optimize(objective, n_trials=n_trials)
    trials = [scout.candidate(f"optuna#{number}", plan) for number, plan in plans.items()]
    pool = sorted((*starts, *trials), key=lambda c: (not c.fits, c.step_seconds, c.over_gib))
    if screen:
        distinct = list({c.plan: c for c in reversed(pool)}.values())[::-1]  # best first, each plan once
        pool = sorted((evaluate.candidate(c.name, c.plan) for c in distinct[:finalists]),
                      key=lambda c: (not c.fits, c.step_seconds, c.over_gib))
    best = pool[0]
    if best.fits:
        best = local_search(evaluate, best, local_evaluations, time.monotonic() + local_seconds)
    return PlanSearchResult(best, starts, len(evaluate.cache), time.monotonic() - started, screened=screen)


def parplan_rank_times(spec: DLRMSpec, cluster: ClusterSpec, plan: ShardingPlan,
                       **model: Any) -> list[dict[str, float]]:
    """Each rank's critical path from parplan's DLRM cost model (``costmodel.recsys.step.plan_step_seconds``),
    as ``{component: seconds, ..., "total": seconds}`` per rank (``total`` includes the exposed communication).

    ``model``: ``plan_step_seconds``'s keywords (``lookup_model``, ``caches``: a fitted lookup profile and
    the caches it was fitted with; ``pipelined``; ``timer``).
    """
    from costmodel.recsys.step import plan_step_seconds

    return [{"lookup_fwd": r.lookup_fwd_s, "lookup_bwd": r.lookup_bwd_s, "dense_fwd": r.dense_fwd_s,
             "dense_bwd": r.dense_bwd_s, "dense_optimizer": r.dense_optimizer_s, "exposed_comm": r.exposed_comm_s,
             "total": r.total_s} for r in plan_step_seconds(spec, cluster, plan, **model).ranks]


def parplan_rank_seconds(spec: DLRMSpec, cluster: ClusterSpec, **model: Any) -> RankSeconds:
    """:data:`RankSeconds` of parplan's DLRM cost model (the total of :func:`parplan_rank_times`, same
    ``model`` keywords)."""
    def evaluate(plan: ShardingPlan) -> np.ndarray:
        return np.array([r["total"] for r in parplan_rank_times(spec, cluster, plan, **model)])

    return evaluate


__all__ = ["Candidate", "PlanEvaluator", "PlanSearchResult", "knob_plan", "local_search", "parplan_rank_seconds",
           "parplan_rank_times", "proxy_rank_seconds", "search_plans"]
