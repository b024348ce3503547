"""Hill-climb over the neighbours of the best strategy, as enqueued trials of a study.

TPE models each knob well but rarely lands on the exact optimum of coupled
degrees (tp, pp, cp, dp and the micro-batch trade against one another under the
memory budget). The climb evaluates the neighbours of the best strategy so far
and moves to the best one until none improves. A neighbour that does not fit in
memory is replaced by its *repairs*: each single memory-saving change that makes
it fit (more recomputation, a higher ZeRO stage, half the micro-batch, twice the
context / pipeline / tensor degree, sequence parallelism), so that the climb can
cross the infeasible ridge between two basins (e.g. tp 2 -> 1 fits only with cp
doubled). Memory checks cost no trial.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from costmodel.specs.strategy import RECOMPUTE, Strategy
from search.objective import Evaluation, Evaluator, strategy_from_attrs
from search.samplers._optuna import finished, finished_trials
from search.space import StrategySpace, change_knob


def _repairs(strategy: Strategy, num_gpus: int) -> Iterator[Strategy | None]:
    """Memory-saving variants of ``strategy``, cheapest in speed first."""
    s = strategy
    if s.recompute != "full":
        yield change_knob(s, "recompute", RECOMPUTE[RECOMPUTE.index(s.recompute) + 1], num_gpus)
    if s.zero_stage < 3:
        yield change_knob(s, "zero_stage", s.zero_stage + 1, num_gpus)
    if s.micro_batch_size % 2 == 0:
        yield change_knob(s, "micro_batch_size", s.micro_batch_size // 2, num_gpus)
    for knob in ("cp", "pp", "tp"):
        yield change_knob(s, knob, getattr(s, knob) * 2, num_gpus)
    if not s.sequence_parallel and s.tp > 1:
        yield change_knob(s, "sequence_parallel", True, num_gpus)


def candidates(space: StrategySpace, evaluator: Evaluator, current: Strategy) -> list[Strategy]:
    """Feasible neighbours of ``current``, then every fitting repair of the infeasible ones."""
    direct: dict[Strategy, None] = {}
    repaired: dict[Strategy, None] = {}
    n = space.problem.num_gpus
    for neighbour in space.neighbours(current):
        if evaluator.fits(neighbour):
            direct[neighbour] = None
            continue
        for variant in _repairs(neighbour, n):
            if variant is not None and space.contains(variant) and evaluator.fits(variant):
                repaired[variant] = None
    direct.update(repaired)
    direct.pop(current, None)
    return list(direct)


def _best(evaluations: list[Evaluation]) -> Evaluation | None:
    feasible = [e for e in evaluations if e.feasible and e.step_time_s is not None]
    return min(feasible, key=lambda e: e.step_time_s, default=None)  # type: ignore[arg-type, return-value]


def regime(strategy: Strategy) -> tuple[bool, bool]:
    """The basin a strategy sits in: pipelined or not, parameters sharded (ZeRO-3) or not.

    Moving between basins takes several coupled changes (pp 16 -> 1 needs ZeRO-3 and
    more recomputation to fit), which a one-move climb rarely makes.
    """
    return strategy.pp > 1, strategy.zero_stage == 3


def polish(study: Any, optimize: Callable[[int], None], space: StrategySpace, evaluator: Evaluator,
           total: int) -> None:
    """Climb from the study's best; with trials left, from the best of each other ``regime`` in turn.

    A climb moves to the best neighbour until none improves; ``total`` counts
    finished trials. Only this study's finished trials count as tried (the
    evaluator's memo may hold strategies other searches evaluated).
    """
    def tried() -> dict[Strategy, Evaluation]:
        return {e.strategy: e for e in (evaluator.evaluate(strategy_from_attrs(t.user_attrs, space))
                                        for t in finished_trials(study))}

    climbed: set[tuple[bool, bool]] = set()
    while finished(study) < total:
        start = _best([e for e in tried().values() if regime(e.strategy) not in climbed])
        if start is None:
            return
        climbed.add(regime(start.strategy))
        _climb(study, optimize, space, evaluator, total, start, tried)


def _climb(study: Any, optimize: Callable[[int], None], space: StrategySpace, evaluator: Evaluator, total: int,
           current: Evaluation, tried: Callable[[], dict[Strategy, Evaluation]]) -> None:
    seen = tried()
    while finished(study) < total:
        fresh = [s for s in candidates(space, evaluator, current.strategy) if s not in seen]
        fresh = fresh[:total - finished(study)]
        if not fresh:
            return
        for strategy in fresh:
            study.enqueue_trial(space.knobs_of(strategy), skip_if_exists=False)
        optimize(len(fresh))
        seen = tried()
        better = _best([seen[s] for s in fresh if s in seen])
        if better is None or better.step_time_s >= current.step_time_s:  # type: ignore[operator]
            return
        current = better
