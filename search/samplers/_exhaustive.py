"""Exhaustive sweep: every legal strategy, the ground truth for benchmarks.

The sweep runs without Optuna in the loop: the memory model prunes the whole
space first, the operators of all surviving strategies are timed in one batch
(``search.objective.prewarm``), and only then is each step time composed. With
``n_jobs > 1`` the space is split by layout over forked worker processes.
Results go into an Optuna study only when one is given (``--storage``).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import operator
import os
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from threadpoolctl import threadpool_limits

from costmodel.specs.strategy import Strategy
from search.objective import DASHBOARD_CONSTRAINTS, Evaluation, Evaluator, objective_values, strategy_from_attrs
from search.samplers._base import BaseSearcher, TrialCallback
from search.space import StrategySpace

_WORKER: tuple[Evaluator, list[list[Strategy]]] | None = None  # set in the parent before forking; inherited
assert dataclasses.fields(Evaluation)[0].name == "strategy"  # Evaluation(strategy, *figures) below
_FIGURES = operator.attrgetter(*(f.name for f in dataclasses.fields(Evaluation) if f.name != "strategy"))
"""An evaluation's fields but its strategy, in field order: ``Evaluation(strategy, *figures)`` rebuilds it."""


def _evaluate_chunk(index: int) -> list[tuple[Any, ...]]:
    """The figures (``_FIGURES``) of chunk ``index``'s evaluations, in order. The worker reads the chunk
    it inherited and sends back no strategy: the parent has them (pickling them both ways cost the
    parent ~2.5 s of the 171,000-strategy sweep of 70B on 256 H100)."""
    assert _WORKER is not None
    evaluator, chunks = _WORKER
    with threadpool_limits(limits=1):
        return [_FIGURES(e) for e in evaluator.evaluate_many(chunks[index])]


class ExhaustiveSearcher(BaseSearcher):
    """Evaluate every strategy of the space once, in the space's order.

    Parameters
    ----------
    n_jobs : int
        Worker processes; ``-1`` uses every CPU this process may run on.
    min_parallel : int
        Smaller spaces run in this process: forking costs more than it saves.
    objective : str
        ``"time"`` or ``"pareto"``: what the stored trials' values are.
    """

    name = "exhaustive"

    def __init__(self, n_jobs: int = 1, objective: str = "time", min_parallel: int = 2000) -> None:
        self.n_jobs = n_jobs
        self.min_parallel = min_parallel
        self.objective = objective
        self.directions = ("minimize", "minimize") if objective == "pareto" else ("minimize",)

    def _workers(self, size: int) -> int:
        jobs = len(os.sched_getaffinity(0)) if self.n_jobs == -1 and hasattr(os, "sched_getaffinity") \
            else (os.cpu_count() or 1) if self.n_jobs == -1 else self.n_jobs
        if "fork" not in multiprocessing.get_all_start_methods() or size < self.min_parallel:
            return 1
        return max(1, jobs)

    def search(self, space: StrategySpace, evaluator: Evaluator, *, n_trials: int | None = None,
               study: Any = None, on_trial: TrialCallback | None = None,
               starts: Sequence[Strategy] = (), store_each: bool = True) -> list[Evaluation]:
        # store_each is moot: a sweep stores its trials once it ends, in one call
        strategies = list(space)
        if n_trials is not None:
            strategies = strategies[:n_trials]
        stored: set[Any] = set()
        if study is not None:
            stored = {strategy_from_attrs(t.user_attrs, space) for t in study.get_trials(deepcopy=False)
                      if "strategy" in t.user_attrs}
        jobs = self._workers(len(strategies))
        total = len(strategies)
        chunks = _chunks(strategies, jobs)
        done = 0

        def finished(part: list[Evaluation]) -> list[Evaluation]:
            nonlocal done
            done += len(part)
            if on_trial is not None:  # the progress line moves chunk by chunk
                on_trial(done, total)
            return part

        if jobs == 1:
            results = [e for chunk in chunks for e in finished(evaluator.evaluate_many(chunk))]
        else:
            results = self._parallel(chunks, evaluator, jobs, finished)
        if study is not None:
            _store(study, space, [e for e in results if e.strategy not in stored], self.objective)
        if on_trial is not None and not chunks:
            on_trial(0, 0)
        return results

    @staticmethod
    def _parallel(chunks: list[list[Any]], evaluator: Evaluator, jobs: int,
                  finished: Callable[[list[Evaluation]], list[Evaluation]]) -> list[Evaluation]:
        global _WORKER
        evaluator.timer  # noqa: B018 - load the profile once, before forking
        _WORKER = evaluator, chunks
        try:
            with multiprocessing.get_context("fork").Pool(jobs) as pool:
                parts = [finished([Evaluation(strategy, *figures) for strategy, figures in zip(chunk, part)])
                         for chunk, part in zip(chunks, pool.imap(_evaluate_chunk, range(len(chunks))))]  # in order
        finally:
            _WORKER = None
        results = [e for part in parts for e in part]
        for e in results:
            evaluator.remember(e)
        return results


SWEEP_CHUNKS_PER_JOB = 8
"""Chunks per process of a sweep: each finished chunk moves the progress line; the table check
(``constraints.table``) still gets thousands of strategies at once on large spaces."""


def _chunks(strategies: list[Any], jobs: int) -> list[list[Any]]:
    """``strategies`` in order, in about ``SWEEP_CHUNKS_PER_JOB * jobs`` consecutive chunks (none when empty)."""
    size = max(1, -(-len(strategies) // (SWEEP_CHUNKS_PER_JOB * jobs)))
    return [strategies[i:i + size] for i in range(0, len(strategies), size)]


def _store(study: Any, space: StrategySpace, evaluations: list[Evaluation], objective: str) -> None:
    """Write sweep results as finished trials (same attributes and constraint as Optuna trials)."""
    from search.objective import record

    dists = {k: optuna.distributions.CategoricalDistribution(list(v)) for k, v in space.choices.items()
             if len(v) > 1}
    trials = []
    for e in evaluations:
        holder = _AttrHolder()
        record(holder, e, space)
        params = {k: v for k, v in space.knobs_of(e.strategy).items() if k in dists}
        values = objective_values(e, objective)
        trials.append(optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE,
            values=list(values) if isinstance(values, tuple) else [values],
            params=params, distributions={k: dists[k] for k in params},
            user_attrs=holder.user_attrs, system_attrs=holder.system_attrs))
    study.add_trials(trials)


class _AttrHolder:
    """Collects ``set_user_attr`` / ``set_constraint`` calls (so sweep rows are recorded exactly like trials)."""

    def __init__(self) -> None:
        self.user_attrs: dict[str, Any] = {}
        self.system_attrs: dict[str, Any] = {}

    def set_user_attr(self, key: str, value: Any) -> None:
        self.user_attrs[key] = value

    def set_constraint(self, key: str, value: float) -> None:
        self.system_attrs[f"constraints:{key}"] = float(value)
        self.system_attrs[DASHBOARD_CONSTRAINTS] = [float(value)]  # what optuna-dashboard reads
