"""Search one problem and turn the outcome into a :class:`~studies.result.ProblemResult`.

The search keeps its trials in a plain list (``search.storage.TrialList``); they
are handed back so that the caller stores them in the study's storage in one go. Searching
directly against an RDB storage costs about 26 commits per trial (25 ms of
SQLAlchemy per trial measured on SQLite, 25x the search itself), which is what
would break the study's time budget; one bulk copy per problem keeps every
trial in the storage at a tenth of that.

A problem that fails is a result, not an exception: ``invalid`` when the space
has no legal layout, ``infeasible`` when nothing fits in memory (with the
search package's explanation: the closest miss and the fewest GPUs that fit),
``error`` for anything unexpected (type and message kept, the study goes on).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Any

import optuna
from threadpoolctl import threadpool_limits

from costmodel.specs.errors import SpecError
from search import Evaluator, SearchResult, build_space, contract_prediction, explain_infeasible, make_searcher
from search.gc_pace import fewer_collections
from search.run import resolve_sampler
from search.storage import TrialList
from search import strategy_label as label_of
from studies.problems import Problem, profile_hash
from studies.result import ProblemResult

EXPLAIN_LIMIT_FACTOR = 64
"""Infeasible problems look for the fewest GPUs that fit up to this many times their count (memory checks only)."""


@dataclass(frozen=True)
class Solved:
    """A problem's result and the Optuna trials that produced it (empty when no search ran)."""

    result: ProblemResult
    trials: tuple[optuna.trial.FrozenTrial, ...]
    directions: tuple[str, ...]


def search(problem: Problem) -> tuple[SearchResult, tuple[optuna.trial.FrozenTrial, ...], tuple[str, ...]]:
    """Run ``problem``'s search, keeping its trials (what ``search.run_search`` does, with the trials kept).

    TODO(search): ``run_search(..., study=...)`` or returning the study would let this call it directly.
    """
    settings = problem.search
    with threadpool_limits(limits=1), fewer_collections():
        start = time.perf_counter()
        sp = problem.search_problem()
        space = build_space(sp)
        sampler, reason = resolve_sampler(settings.sampler, space, settings.objective, settings.trials)
        searcher = make_searcher(sampler, objective=settings.objective, seed=settings.seed, n_jobs=1)
        evaluator = Evaluator(sp, settings.profile)
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "study created" line per problem (work study)
        store = TrialList()  # read once the search ends: its trials are added then, not one by one
        evaluations = searcher.search(space, evaluator, n_trials=settings.trials, study=store, store_each=False)
        elapsed = time.perf_counter() - start
    result = SearchResult(problem=sp, evaluations=tuple(evaluations), sampler=sampler,
                          objective=settings.objective, elapsed_s=elapsed, profile_dir=evaluator.profile_dir,
                          evaluator=evaluator, sampler_reason=reason)
    trials = tuple(t for t in store.get_trials() if t.state.is_finished())
    return result, trials, tuple(searcher.directions)


def solve(problem: Problem, top_k: int = 5, worker: str = "") -> Solved:
    """Search ``problem``; every outcome, failures included, becomes a result.

    Raises
    ------
    SpecError
        If the study's profile changed or went missing since the problem was keyed: that is no outcome
        of the problem, and storing it would keep a result the next run cannot correct.
    """
    if problem.profile_hash is not None and profile_hash(problem.search) != problem.profile_hash:
        raise SpecError("search.profile", problem.search.profile,
                        "the profile the run started with (its tables changed during the run; rerun to search "
                        "with the new ones)")
    start, cpu = time.perf_counter(), time.process_time()
    base: dict[str, Any] = {"key": problem.key, **problem.describe(), "sampler": problem.search.sampler,
                            "objective": problem.search.objective, "worker": worker}
    try:
        result, trials, directions = search(problem)
    except SpecError as exc:
        return Solved(ProblemResult(status="invalid", reason=str(exc), **_times(start, cpu), **base), (), ())
    except Exception as exc:  # noqa: BLE001 - one broken problem must not stop a study of hundreds
        reason = f"{type(exc).__name__}: {exc} (at {_where(exc)})"
        return Solved(ProblemResult(status="error", reason=reason, **_times(start, cpu), **base), (), ())
    try:
        row = _row(result, top_k)
    except Exception as exc:  # noqa: BLE001 - as above: the search ran, summarising it failed
        row = {"status": "error", "reason": f"{type(exc).__name__}: {exc} (at {_where(exc)})"}
    counts: dict[str, Any] = {"trials": result.trials, "distinct": len(result.distinct),
                              "feasible": len(result.feasible)}
    base["sampler"] = result.sampler  # what ran: auto resolves per problem (search.run.resolve_sampler)
    return Solved(ProblemResult(**_times(start, cpu), **base, **counts, **row), trials, directions)


def _times(start: float, cpu: float) -> dict[str, Any]:
    return {"elapsed_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{last.filename.rsplit('/', 1)[-1]}:{last.lineno}"


def _row(result: SearchResult, top_k: int) -> dict[str, Any]:
    """The result's figures: best strategy, throughput, memory, breakdown, top-k and Pareto front."""
    best = result.best
    if best is None:
        with threadpool_limits(limits=1):
            limit = result.problem.num_gpus * EXPLAIN_LIMIT_FACTOR
            why = explain_infeasible(result, limit=limit)
        return {"status": "infeasible", "reason": " ".join(why.lines(result.problem))}
    p = result.problem
    with threadpool_limits(limits=1):
        prediction = contract_prediction(p, best.strategy, result.profile_dir)
    tokens_per_s = p.global_batch_size * p.seq_length / prediction["step_time_s"]
    front = result.pareto_front() if result.objective == "pareto" else []
    return {
        "status": "ok",
        "strategy": best.strategy.to_dict(),
        "strategy_label": label_of(best.strategy),
        "step_time_s": prediction["step_time_s"],
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_gpu": prediction["tokens_per_s_per_gpu"],
        "mfu": prediction["mfu"],
        "peak_memory_gib": prediction["peak_memory_gib"],
        "usable_memory_gib": prediction["usable_memory_gib"],
        "gpu_hours_per_billion_tokens": p.num_gpus / tokens_per_s * 1e9 / 3600.0,
        "breakdown": dict(prediction["breakdown"]),
        "top": tuple(_brief(e) for e in result.top(top_k)),
        "pareto": tuple(_brief(e) for e in front),
        "profile": prediction.get("profile") or "none (analytic models only)",
        "warnings": tuple(prediction.get("warnings", ())),
    }


def _brief(evaluation: Any) -> dict[str, Any]:
    return {"strategy_label": label_of(evaluation.strategy), "step_time_s": evaluation.step_time_s,
            "peak_memory_gib": evaluation.peak_memory_gib, "mfu": evaluation.mfu}
