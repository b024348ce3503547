"""Evaluate strategies: rules and memory first, time only for the feasible ones.

:class:`Evaluator` turns a :class:`~costmodel.specs.Strategy` into a frozen
:class:`Evaluation` and memoises it by strategy (strategies are hashable), so a
sampler that proposes the same strategy twice pays once.

Infeasible candidates and Optuna
--------------------------------
One mechanism: **Optuna trial constraints** (``trial.set_constraint``, which
``TPESampler`` and ``NSGAIISampler`` read; Optuna 5 replaced ``constraints_func``
with it). :func:`optuna_objective` records the evaluation in the trial's user
attributes (``feasible``, ``reason``, ``violation``, ``strategy``), sets the
constraint ``violation`` (<= 0 feasible; else GiB over the memory budget plus one
per broken rule) and returns ``inf`` for an infeasible candidate without
predicting its time. The samplers rank infeasible trials below every feasible
one and among themselves by how far they miss. Trials are never pruned.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from constraints import check
from constraints.table import check_many
from constraints.oom import oom_probability
from costmodel.llm.compute import distinct_stages, layer_ops_key, stage_ops_key, stage_totals
from costmodel.llm.decompose import run_layer_ops, stage_ops
from costmodel.ops import Op
from costmodel.predict import timer_for
from costmodel.specs.gpu import GiB, GPUSpec
from costmodel.specs.runspec import RunSpec
from costmodel.specs.strategy import Strategy
from costmodel.llm.step import predict_step, throughput
from costmodel.timing import OperatorTimer
from search.space import LAYOUT_KNOBS, SearchProblem, StrategySpace, nearest
from search.choices import OBJECTIVES as OBJECTIVES  # re-exported: defined where flag parsing reads it

INFEASIBLE = math.inf
"""Objective value returned for an infeasible trial (the constraint, not this value, ranks it)."""
CONSTRAINT = "violation"
"""Name of the Optuna constraint every trial sets (system attribute ``constraints:violation``)."""


def memory_excess_gib(peak_gib: float, usable_gib: float, memory_margin: float) -> float:
    """GiB over the memory budget, usable memory less the margin (0 when it fits)."""
    return max(0.0, peak_gib - usable_gib * (1.0 - memory_margin))


def violation_value(violations: tuple[str, ...], peak_gib: float, usable_gib: float, memory_margin: float) -> float:
    """``Evaluation.violation`` of a verdict: 0 when nothing is violated; else GiB missing plus one per broken rule
    (memory violations read "needs ...")."""
    if not violations:
        return 0.0
    rules = sum(1 for v in violations if not v.startswith("needs "))
    return memory_excess_gib(peak_gib, usable_gib, memory_margin) + rules


@dataclass(frozen=True)
class Evaluation:
    """Outcome of one strategy on one problem (a finished record, like Optuna's ``FrozenTrial``).

    ``step_time_s`` and the throughput figures are ``None`` for infeasible
    strategies: their time is never predicted.
    """

    strategy: Strategy
    violations: tuple[str, ...]
    peak_memory_gib: float
    usable_memory_gib: float
    step_time_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    mfu: float | None = None
    breakdown: tuple[tuple[str, float], ...] = field(default=())
    memory_margin: float = 0.0
    """Fraction of usable memory the search kept free (``SearchProblem.memory_margin``)."""

    @property
    def feasible(self) -> bool:
        return not self.violations

    @property
    def memory_excess_gib(self) -> float:
        """GiB over the memory budget, usable memory less the margin (0 when it fits)."""
        return memory_excess_gib(self.peak_memory_gib, self.usable_memory_gib, self.memory_margin)

    @property
    def headroom_gib(self) -> float:
        """Usable memory left at the peak (negative: over the limit), margin not subtracted."""
        return self.usable_memory_gib - self.peak_memory_gib

    @property
    def oom_probability(self) -> float:
        """P(the true peak exceeds usable memory), ``constraints.oom``."""
        return oom_probability(self.peak_memory_gib, self.usable_memory_gib)

    @property
    def violation(self) -> float:
        """Optuna constraint value: <= 0 feasible; else GiB missing plus one per broken rule."""
        return violation_value(self.violations, self.peak_memory_gib, self.usable_memory_gib, self.memory_margin)

    @property
    def reason(self) -> str:
        """The first violation, or ``""`` when feasible."""
        return self.violations[0] if self.violations else ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready row."""
        return {
            "strategy": self.strategy.to_dict(),
            "feasible": self.feasible,
            "violations": list(self.violations),
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "mfu": self.mfu,
            "peak_memory_gib": self.peak_memory_gib,
            "usable_memory_gib": self.usable_memory_gib,
            "headroom_gib": self.headroom_gib,
            "oom_probability": self.oom_probability,
            "breakdown": dict(self.breakdown),
        }


def search_timer(gpu: GPUSpec, profile_dir: str | None = None) -> OperatorTimer:
    """The operator timer searches use (``costmodel.predict.timer_for``, memoised per GPU and profile)."""
    return timer_for(gpu, profile_dir)


class Evaluator:
    """Memoised evaluation of strategies on one problem.

    Parameters
    ----------
    problem : SearchProblem
        The model, cluster, batch and sequence length.
    profile_dir : str or Path, optional
        A user profile instead of the GPU's built-in one.
    timer : OperatorTimer, optional
        Overrides the timer (tests); by default :func:`search_timer`.
    """

    def __init__(self, problem: SearchProblem, profile_dir: str | Path | None = None,
                 timer: OperatorTimer | None = None) -> None:
        self.problem = problem
        self.profile_dir = None if profile_dir is None else str(Path(profile_dir).resolve())
        self._timer = timer
        self.cache: dict[Strategy, Evaluation] = {}
        self._table_memo: dict[Any, Any] = {}  # the rules' and memory terms' results of this problem (check_table)

    @property
    def timer(self) -> OperatorTimer:
        if self._timer is None:
            self._timer = search_timer(self.problem.gpu, self.profile_dir)
        return self._timer

    def evaluate(self, strategy: Strategy) -> Evaluation:
        """Rules and memory of ``strategy``; its step time only when it fits."""
        hit = self.cache.get(strategy)
        if hit is not None:
            return hit
        run = self.problem.run(strategy)
        verdict = check(run, self.problem.memory_margin)
        result = self._finish(run, verdict.violations, verdict.memory.total_bytes, verdict.usable_bytes)
        self.cache[strategy] = result
        return result

    def _finish(self, run: RunSpec, violations: tuple[str, ...], peak_bytes: float, usable_bytes: float) -> Evaluation:
        """The evaluation of ``run`` given its verdict: the step time predicted only when it fits."""
        margin, peak, usable = self.problem.memory_margin, float(peak_bytes / GiB), float(usable_bytes / GiB)
        if violations:
            return Evaluation(run.strategy, violations, peak, usable, memory_margin=margin)
        step = predict_step(run, self.timer)
        rates = throughput(run, step.step_time_s)
        return Evaluation(run.strategy, (), peak, usable, float(step.step_time_s),
                          float(rates["tokens_per_s_per_gpu"]), float(rates["mfu"]),
                          tuple((k, float(v)) for k, v in step.breakdown.items()), memory_margin=margin)

    def fits(self, strategy: Strategy) -> bool:
        """Whether ``strategy`` passes the rules and the memory model (no time prediction, no memo entry)."""
        hit = self.cache.get(strategy)
        if hit is not None:
            return hit.feasible
        return check(self.problem.run(strategy), self.problem.memory_margin).fits

    def evaluate_many(self, strategies: Iterable[Strategy]) -> list[Evaluation]:
        """Evaluate ``strategies``: rules and memory over them at once (``constraints.table.check_many``), then
        the operators of all the feasible ones timed in one batch, then each step time."""
        strategies = list(strategies)
        fresh = [s for s in dict.fromkeys(strategies) if s not in self.cache]
        if fresh:
            runs = [self.problem.run(s) for s in fresh]
            verdict = check_many(runs[0], fresh, self.problem.memory_margin, self._table_memo)
            prewarm([run for row, run in enumerate(runs) if verdict.fits(row)], self.timer)
            for row, run in enumerate(runs):
                self.cache[run.strategy] = self._finish(run, verdict.violations[row], verdict.peak_bytes[row],
                                                        verdict.usable_bytes)
        return [self.cache[s] for s in strategies]

    def remember(self, evaluation: Evaluation) -> None:
        """Add an evaluation computed elsewhere (another process, a stored study)."""
        self.cache.setdefault(evaluation.strategy, evaluation)


def prewarm(runs: Iterable[RunSpec], timer: OperatorTimer) -> None:
    """Time every distinct operator of ``runs`` in one batched predictor call per family.

    ``OperatorTimer`` memoises per shape but calls its predictors once per new
    strategy; a sweep that asks for all shapes at once pays the predictor
    overhead once instead of once per strategy. Stages with equal
    ``stage_ops_key`` have equal operators, so each is decomposed once.
    """
    ops: dict[Op, None] = {}
    by_key: dict[tuple[Any, ...], list[Op]] = {}
    layer_ops: dict[tuple[Any, ...], list[Op]] = {}  # a sweep's stages share a tenth as many layer shapes

    def layer_ops_of(run: RunSpec, moe: bool) -> list[Op]:
        key = (layer_ops_key(run), run.cluster.gpu.name, moe)
        if key not in layer_ops:
            layer_ops[key] = run_layer_ops(run, moe)
        return layer_ops[key]

    for run in runs:
        for stage in distinct_stages(run):
            key = stage_ops_key(run, stage)
            if key not in by_key and key not in timer.stage_memo:
                by_key[key] = stage_ops(run, stage, layer_ops_of)
                ops.update(dict.fromkeys(by_key[key]))
    if ops:
        timer.time_ops(list(ops))
    for key, stage_op_list in by_key.items():  # what stage_compute would time again, from the memo now
        timer.stage_memo[key] = stage_totals(timer, stage_op_list)


# -- Optuna glue ------------------------------------------------------------------------------
LegalTree = dict[tuple[Any, ...], tuple[list[Any], dict[Any, tuple[Any, ...]]]]
"""``legal_values``' memo: layout-knob values picked so far -> (the next knob's legal values, the
layouts that remain for each of them)."""


def legal_values(space: StrategySpace, prefix: tuple[Any, ...], memo: LegalTree) -> tuple[list[Any], dict[Any, Any]]:
    """The legal values of layout knob ``len(prefix)`` given the earlier knobs' ``prefix``, and per value the
    layouts left (memoised in ``memo``: a search asks the same prefixes again and again)."""
    hit = memo.get(prefix)
    if hit is None:
        candidates = space.layouts if not prefix else legal_values(space, prefix[:-1], memo)[1][prefix[-1]]
        index = len(prefix)
        groups: dict[Any, list[Any]] = {}
        for lay in candidates:
            groups.setdefault(lay[index], []).append(lay)
        hit = memo[prefix] = (sorted(groups), {v: tuple(g) for v, g in groups.items()})
    return hit


def suggest_strategy(trial: Any, space: StrategySpace, memo: LegalTree | None = None) -> Strategy:
    """Ask ``trial`` for one legal strategy of ``space``.

    Each knob is declared with its fixed list of values over the whole space
    (``space.choices``), so the distributions never change between trials. A
    layout knob is then snapped to the nearest value that is legal given the
    knobs picked before it (log scale), so every trial is a legal strategy;
    knobs with a single value are not asked. ``memo`` keeps the legal values
    per prefix between trials of one space (:func:`legal_values`).
    """
    memo = {} if memo is None else memo
    picked: dict[str, Any] = {}
    prefix: tuple[Any, ...] = ()
    for knob in LAYOUT_KNOBS:
        legal = legal_values(space, prefix, memo)[0]
        if len(legal) == 1:  # dp always lands here: tp, pp and cp determine it
            value = legal[0]
        else:
            value = nearest(trial.suggest_categorical(knob, list(space.choices[knob])), legal)
        picked[knob] = value
        prefix += (value,)
    for knob, values in space.settings:
        picked[knob] = values[0] if len(values) == 1 else trial.suggest_categorical(knob, list(values))
    return space.strategy(picked)


def record(trial: Any, evaluation: Evaluation, space: StrategySpace) -> None:
    """Store ``evaluation`` in the trial's user attributes (readable in optuna-dashboard) and its constraint."""
    trial.set_user_attr("strategy", space.knobs_of(evaluation.strategy))
    trial.set_user_attr("feasible", evaluation.feasible)
    trial.set_user_attr("reason", evaluation.reason)
    trial.set_user_attr("violation", evaluation.violation)
    trial.set_user_attr("peak_memory_gib", evaluation.peak_memory_gib)
    trial.set_constraint(CONSTRAINT, evaluation.violation)
    if evaluation.feasible:
        trial.set_user_attr("step_time_s", evaluation.step_time_s)
        trial.set_user_attr("tokens_per_s_per_gpu", evaluation.tokens_per_s_per_gpu)
        trial.set_user_attr("mfu", evaluation.mfu)


DASHBOARD_CONSTRAINTS = "constraints"
"""System attribute optuna-dashboard (0.21) reads a trial's constraints from: Optuna's old list format, which
Optuna 5 still reads beside ``constraints:<name>`` (``optuna.study._constrained_optimization``)."""
SUGGESTED = "suggested"
"""User attribute keeping the values the sampler proposed, where snapping changed them (for an exact resume)."""


def stored_copy(trial: Any) -> Any:
    """The ``FrozenTrial`` to store: parameters exactly the evaluated strategy, constraint readable by the dashboard.

    A sampler's proposal is snapped to the nearest legal value (``suggest_strategy``);
    the stored ``params`` are the knobs evaluated, and the proposal is kept in the
    ``suggested`` user attribute so that :func:`working_copy` restores it.
    """
    import optuna

    evaluated = trial.user_attrs.get("strategy", {})
    params = {k: evaluated.get(k, v) for k, v in trial.params.items()}
    user_attrs = dict(trial.user_attrs)
    if params != trial.params:
        user_attrs[SUGGESTED] = dict(trial.params)
    system_attrs = dict(trial.system_attrs)
    if f"constraints:{CONSTRAINT}" in system_attrs:
        system_attrs[DASHBOARD_CONSTRAINTS] = [system_attrs[f"constraints:{CONSTRAINT}"]]
    return optuna.trial.create_trial(state=trial.state, values=trial.values, params=params,
                                     distributions=trial.distributions, user_attrs=user_attrs,
                                     system_attrs=system_attrs, intermediate_values=trial.intermediate_values)


def working_copy(trial: Any) -> Any:
    """A stored trial as the sampler proposed it (inverse of :func:`stored_copy`), for resuming a search."""
    import optuna

    suggested = trial.user_attrs.get(SUGGESTED)
    if not suggested:
        return trial
    user_attrs = {k: v for k, v in trial.user_attrs.items() if k != SUGGESTED}
    return optuna.trial.create_trial(state=trial.state, values=trial.values, params={**trial.params, **suggested},
                                     distributions=trial.distributions, user_attrs=user_attrs,
                                     system_attrs=trial.system_attrs, intermediate_values=trial.intermediate_values)


def objective_values(evaluation: Evaluation, objective: str = "time") -> float | tuple[float, float]:
    """What Optuna minimises: step time, or (step time, peak memory) for the Pareto front."""
    if objective not in OBJECTIVES:
        raise ValueError(f"The 'objective' parameter must be one of {', '.join(OBJECTIVES)}. "
                         f"Got {objective!r} instead.")
    time_s = evaluation.step_time_s if evaluation.feasible else INFEASIBLE
    assert time_s is not None
    if objective == "pareto":
        return time_s, evaluation.peak_memory_gib
    return time_s


def optuna_objective(evaluator: Evaluator, space: StrategySpace,
                     objective: str = "time") -> Callable[[Any], float | tuple[float, float]]:
    """An Optuna objective over ``space``: suggest, evaluate (memoised), record, return."""
    memo: LegalTree = {}

    def run_trial(trial: Any) -> float | tuple[float, float]:
        evaluation = evaluator.evaluate(suggest_strategy(trial, space, memo))
        record(trial, evaluation, space)
        return objective_values(evaluation, objective)

    return run_trial


def strategy_from_attrs(attrs: Mapping[str, Any], space: StrategySpace) -> Strategy:
    """Rebuild the strategy a stored trial evaluated (for resuming a study)."""
    return space.strategy(dict(attrs["strategy"]))
