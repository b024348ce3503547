"""Run a search: build the space, pick the searcher, open the storage, time it.

Every function here holds BLAS/OpenMP pools to one thread while it runs: a
search makes thousands of predictor calls on a handful of rows each, where
thread start-up costs far more than the work (on a busy 2-core machine a single
gradient-boosting call went from 1 ms to 1.2 s with the default pool).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

from constraints.table import check_many, context_memo
from costmodel.specs.errors import SpecError, require_int
from costmodel.specs.gpu import GiB
from costmodel.specs.strategy import Strategy
from search.objective import OBJECTIVES, Evaluation, Evaluator
from search.result import SearchResult
from search.samplers import SAMPLERS, BaseSearcher, ExhaustiveSearcher, NSGAIISearcher, TPESearcher
from search.samplers._base import TrialCallback
from search.choices import DEFAULT_EXHAUSTIVE_LIMIT
from search.gc_pace import fewer_collections
from search.space import LAYOUT_KNOBS, Layout, SearchProblem, StrategySpace, build_space
from search.storage import open_study


def make_searcher(sampler: str = "tpe", *, objective: str = "time", seed: int = 0, n_jobs: int = 1) -> BaseSearcher:
    """The searcher named ``sampler`` for ``objective`` (``time`` or ``pareto``); ``auto`` is resolved first
    (:func:`resolve_sampler`)."""
    check_sampler(sampler, objective)
    if sampler == "exhaustive":
        return ExhaustiveSearcher(n_jobs=n_jobs, objective=objective)
    return NSGAIISearcher(seed=seed) if sampler == "nsga2" else TPESearcher(seed=seed)


def check_sampler(sampler: str, objective: str) -> None:
    """A one-line error unless ``sampler`` is a searcher that runs ``objective`` (``auto`` is resolved first)."""
    if sampler not in SAMPLERS or sampler == "auto":
        raise SpecError("sampler", sampler, "one of " + ", ".join(s for s in SAMPLERS if s != "auto")
                        + " (auto is resolved against the space first: resolve_sampler)")
    if objective not in OBJECTIVES:
        raise SpecError("objective", objective, "one of " + ", ".join(OBJECTIVES))
    if sampler != "exhaustive" and (sampler == "nsga2") != (objective == "pareto"):
        raise SpecError("sampler", sampler, "nsga2 or exhaustive for the pareto objective, tpe or exhaustive "
                                            "for the time objective")


def resolve_sampler(sampler: str, space: StrategySpace, objective: str = "time", n_trials: int | None = None,
                    exhaustive_limit: int = DEFAULT_EXHAUSTIVE_LIMIT) -> tuple[str, str]:
    """(the sampler to run, why) for ``sampler``; ``auto`` sweeps the whole space when it holds at most
    ``exhaustive_limit`` strategies and ``n_trials`` (if given) does not stop short of them, so a small
    problem's pick is its exact optimum; larger spaces get TPE (NSGA-II for the Pareto objective)."""
    if sampler != "auto":
        return sampler, ""
    require_int("exhaustive_limit", exhaustive_limit, minimum=0)
    size = space.size_at_most(exhaustive_limit)
    if size <= exhaustive_limit and (n_trials is None or n_trials >= size):
        return "exhaustive", f"auto: the space holds {size:,} strategies (at most {exhaustive_limit:,} are swept)"
    fallback = _auto_fallback(objective)
    if size > exhaustive_limit:
        return fallback, f"auto: the space holds more than {exhaustive_limit:,} strategies, the exhaustive limit"
    return fallback, f"auto: a budget of {n_trials} trials stops short of the space's {size:,} strategies"


def _auto_fallback(objective: str) -> str:
    """What ``auto`` runs on a space too large to sweep: NSGA-II for the Pareto front, else TPE."""
    return "nsga2" if objective == "pareto" else "tpe"


def run_search(problem: SearchProblem, *, sampler: str = "tpe", objective: str = "time",
               n_trials: int | None = None, seed: int = 0, profile_dir: str | Path | None = None,
               storage: str | None = None, study_name: str | None = None, n_jobs: int = 1,
               evaluator: Evaluator | None = None, on_trial: TrialCallback | None = None,
               starts: Sequence[Strategy] = (), exhaustive_limit: int = DEFAULT_EXHAUSTIVE_LIMIT) -> SearchResult:
    """Search ``problem`` and return every evaluation with the time it took.

    Parameters
    ----------
    problem : SearchProblem
    sampler : {"auto", "tpe", "nsga2", "exhaustive"}
        ``auto``: the exhaustive sweep up to ``exhaustive_limit`` strategies, else TPE / NSGA-II
        (:func:`resolve_sampler`).
    objective : {"time", "pareto"}
        Minimise step time, or find the (step time, peak memory) front.
    n_trials : int, optional
        Trials in total (stored ones included); default 200 for TPE, 300 for
        NSGA-II, the whole space for the exhaustive sweep.
    seed : int
        Sampler seed.
    profile_dir : path, optional
        A user profile instead of the GPU's built-in one.
    storage, study_name : str, optional
        Optuna storage URL and study name; a name alone means a SQLite file
        ``<name>.db`` in the working directory. Re-running resumes.
    n_jobs : int
        Processes for the exhaustive sweep (``-1``: all CPUs).
    evaluator : Evaluator, optional
        Reuse memoised evaluations (e.g. across samplers on one problem).
    on_trial : callable, optional
        Told ``(finished, total)`` as trials finish (a progress line).
    starts : sequence of Strategy
        Strategies tried first when they are in the space (the run spec's own, searched from).

    Raises
    ------
    SpecError
        Before any trial, if the profile, the storage or the space is invalid.
    """
    # a bad name or objective: one error, before the space is built (auto checked as what it may become)
    check_sampler(_auto_fallback(objective) if sampler == "auto" else sampler, objective)
    with threadpool_limits(limits=1), fewer_collections():
        start = time.perf_counter()
        space = build_space(problem)
        sampler, reason = resolve_sampler(sampler, space, objective, n_trials, exhaustive_limit)
        searcher = make_searcher(sampler, objective=objective, seed=seed, n_jobs=n_jobs)
        evaluator = evaluator or Evaluator(problem, profile_dir)
        evaluator.timer  # noqa: B018 - load the profile once, before any trial: a bad one is one error
        study = open_study(storage, study_name, searcher.directions, searcher.make_sampler())
        evaluations = searcher.search(space, evaluator, n_trials=n_trials, study=study, on_trial=on_trial,
                                      starts=starts)
        elapsed = time.perf_counter() - start
    return SearchResult(problem=problem, evaluations=tuple(evaluations), sampler=sampler, objective=objective,
                        elapsed_s=elapsed, profile_dir=evaluator.profile_dir, evaluator=evaluator,
                        sampler_reason=reason)


# -- when nothing fits ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Infeasibility:
    """Why nothing fits and what would: the closest miss, and the fewest GPUs of this kind that fit."""

    closest: Evaluation | None
    fewest_gpus: int | None
    fitting_example: Evaluation | None
    searched_up_to: int

    def lines(self, problem: SearchProblem) -> list[str]:
        """The explanation, one sentence per line."""
        from search.result import strategy_label

        out = [f"No strategy fits {problem.model.name} on {problem.num_gpus} x {problem.gpu.name} "
               f"(global batch {problem.global_batch_size}, sequence {problem.seq_length})."]
        if self.closest is not None:
            c = self.closest
            short = f", {c.memory_excess_gib:.1f} GiB short" if c.memory_excess_gib > 0 else ""
            out.append(f"Closest: {strategy_label(c.strategy)} {c.reason}{short}.")
        if self.fewest_gpus is not None and self.fitting_example is not None:
            out.append(f"Fewest {problem.gpu.name} GPUs that fit: {self.fewest_gpus} "
                       f"(e.g. {strategy_label(self.fitting_example.strategy)}, "
                       f"{self.fitting_example.peak_memory_gib:.1f} GiB of "
                       f"{self.fitting_example.usable_memory_gib:.1f} GiB usable).")
        else:
            out.append(f"No count of {problem.gpu.name} GPUs up to {self.searched_up_to} fits this batch; "
                       f"try a larger GPU, a larger global batch or a shorter sequence.")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "closest": None if self.closest is None else self.closest.to_dict(),
            "memory_short_gib": None if self.closest is None else self.closest.memory_excess_gib,
            "fewest_gpus": self.fewest_gpus,
            "fitting_example": None if self.fitting_example is None else self.fitting_example.to_dict(),
        }


_RECOMPUTE_RANK = {"full": 0, "selective": 1, "none": 2}


def _memory_friendly_key(tp: int, pp: int, cp: int, micro_batch_size: int, recompute: str, zero_stage: int,
                         precision: str) -> tuple[Any, ...]:
    return (-(tp * pp * cp), _RECOMPUTE_RANK[recompute], -zero_stage, micro_batch_size, precision != "bf16")


def _memory_friendly_first(strategy: Any) -> tuple[Any, ...]:
    s = strategy
    return _memory_friendly_key(s.tp, s.pp, s.cp, s.micro_batch_size, s.recompute, s.zero_stage, s.precision)


def _memory_friendly_pairs(space: StrategySpace) -> list[tuple[Layout, tuple[Any, ...]]]:
    """The (layout, setting) pairs of ``sorted(space, key=_memory_friendly_first)``, no strategy built.

    The keys come from the layout and setting tuples (``StrategySpace.__iter__``'s order: layouts
    outermost, the settings' product inside, conflicting settings skipped); ties keep that order, as
    the stable sort does. A count where something fits stops after a few strategies, and one where
    nothing fits is checked as tables of these pairs (``SpaceRows``), which build a strategy only for
    the rows they read: building every strategy of a 200,000-strategy space cost seconds.
    """
    names = [k for k, _ in space.settings]
    at = {k: names.index(k) for k in ("recompute", "zero_stage", "precision")}
    keyed = []
    for order, (layout, setting) in enumerate(space.legal_settings()):
        picked = dict(zip(LAYOUT_KNOBS, layout, strict=True))
        key = _memory_friendly_key(picked["tp"], picked["pp"], picked["cp"], picked["micro_batch_size"],
                                   setting[at["recompute"]], setting[at["zero_stage"]], setting[at["precision"]])
        keyed.append((key, order, layout, setting))
    keyed.sort(key=lambda item: item[:2])
    return [(layout, setting) for _, _, layout, setting in keyed]


def first_fitting(problem: SearchProblem) -> Evaluation | None:
    """The first strategy of ``problem``, most memory-friendly first, that fits (rules and memory only; no
    time), or ``None``.

    Memoised per problem in this process (``_FIRST_FITTING``): the infeasible problems of a study ask for
    the same GPU counts (8 GPUs probes 16, 32, 64, ...; 16 GPUs probes 32, 64, ...), and a count where
    nothing fits costs a check of every strategy of its space.
    """
    if problem in _FIRST_FITTING:
        return _FIRST_FITTING[problem]
    found = _first_fitting(problem)
    _remember_first_fitting(problem, found)
    return found


def _remember_first_fitting(problem: SearchProblem, found: Evaluation | None) -> None:
    if len(_FIRST_FITTING) >= _FIRST_FITTING_SIZE:
        _FIRST_FITTING.pop(next(iter(_FIRST_FITTING)))
    _FIRST_FITTING[problem] = found


_FIRST_FITTING: dict[SearchProblem, Evaluation | None] = {}
_FIRST_FITTING_SIZE = 4096
"""Problems remembered by :func:`first_fitting` (a result is a few hundred bytes; oldest dropped first)."""


def _first_fitting(problem: SearchProblem) -> Evaluation | None:
    try:
        space = build_space(problem)
    except SpecError:
        return None
    margin, pairs, size = problem.memory_margin, _memory_friendly_pairs(space), _FIRST_CHUNK
    start = 0
    while start < len(pairs):
        rows = space.rows(pairs[start:start + size])
        run = problem.run(rows[0])
        # the same verdicts as checking each (constraints.table.check_many), in the same order; each chunk
        # reuses the terms that earlier chunks and problems of the context computed
        verdict = check_many(run, rows, margin, context_memo(run))
        for row in range(len(rows)):
            if verdict.fits(row):
                return Evaluation(rows[row], (), float(verdict.peak_bytes[row] / GiB), verdict.usable_bytes / GiB,
                                  memory_margin=margin)
        start, size = start + size, size * 4
    return None


_FIRST_CHUNK = 64
"""Strategies :func:`first_fitting` checks in its first batch (most counts fit among the first few, checked one by
one); each next batch holds four times as many, so a count where nothing fits is checked in a few large tables."""


def _fits_on(problem: SearchProblem, count: int) -> Evaluation | None:
    node = problem.cluster.gpus_per_node
    if count > node and count % node:
        return None
    try:
        return first_fitting(problem.with_gpus(count))
    except SpecError:  # e.g. no layout divides the batch on this count
        return None


def explain_infeasible(result: SearchResult, limit: int = 65536, probes: int = 16) -> Infeasibility:
    """Find the fewest GPUs that fit (memory checks only, no time).

    The count doubles until some strategy fits; then up to ``probes`` whole-node
    counts between the last miss and the first fit are tried, smallest first.

    The closest miss is a memory check of every strategy of the space; when none fits, that is
    :func:`first_fitting`'s answer for this problem too, remembered for the problems of a study
    with fewer GPUs, which probe this count (a study searches its largest counts first).
    """
    problem = result.problem
    node = problem.cluster.gpus_per_node
    with threadpool_limits(limits=1):
        closest = result.closest_to_fitting()
        if closest is None or not closest.feasible:
            _remember_first_fitting(problem, None)
        low, count = problem.num_gpus, problem.num_gpus * 2
        while count <= limit:
            fit = _fits_on(problem, count)
            if fit is not None:
                step = max(node, -(-(count - low) // (probes * node)) * node)
                for between in range(low + step, count, step):
                    if (found := _fits_on(problem, between)) is not None:
                        return Infeasibility(closest, between, found, limit)
                return Infeasibility(closest, count, fit, limit)
            low, count = count, count * 2
    return Infeasibility(closest, None, None, limit)
