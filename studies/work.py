"""One unit of work (claim a problem, search it, store the result) and the distributed worker loop.

:func:`attempt` is what every process runs, whether it is a joblib task of
``parplan study run`` or a ``parplan study worker`` on another machine: check
for a result, claim, search under a heartbeat, store the trials and the
result, release. Because results are keyed by problem and the first stored
wins, a problem ends with exactly one result even when a claim expired under a
worker that was only slow.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from studies.backends import keep_worker_caches
from studies.claims import DEFAULT_TTL_S, Heartbeat, Owner, holders, release, try_claim
from studies.folder import StudyFolder
from studies.outputs import export_results, write_result, write_study
from studies.problems import Problem, expand
from studies.progress import Progress
from studies.result import ProblemResult
from studies.solve import solve
from studies.spec import StudySpec
from studies.store import StudyStore, redact

DEFAULT_POLL_S = 5.0
_STORES: dict[str, StudyStore] = {}


def store_for(url: str) -> StudyStore:
    """One store (engine and Optuna storage) per database per process: connecting costs ~0.1 s."""
    if url not in _STORES:
        _STORES[url] = StudyStore(url)
    return _STORES[url]


def open_store(url: str) -> StudyStore:
    """A new store for a run or a worker, checked afresh (a SQLite file may have been damaged since the last)."""
    old = _STORES.pop(url, None)
    if old is not None:
        old.close()
    return store_for(url)


@dataclass(frozen=True)
class Attempt:
    """What became of one try at a problem.

    ``outcome`` is ``searched`` (this process searched it), ``done`` (a result
    was already stored) or ``busy`` (another live worker holds its claim).
    """

    key: str
    problem: str
    outcome: str
    result: ProblemResult | None = None
    lost_claim: bool = False


def attempt(problem: Problem, url: str, top_k: int = 5, ttl_s: float = DEFAULT_TTL_S,
            out_dir: str | None = None, parent_pid: int | None = None) -> Attempt:
    """Search ``problem`` unless it is done or claimed by a live worker; store and return its result.

    ``parent_pid``: the process that started this task; in any other process (a joblib worker) Ctrl-C is
    left to that parent, which stops the pool and prints one line, instead of every worker printing a
    traceback.
    """
    if parent_pid is not None and os.getpid() != parent_pid:
        keep_worker_caches()  # a pool worker: its caches serve the problems after this one
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    store = store_for(url)
    key = problem.key
    if store.done_keys([key]):
        return Attempt(key, problem.id, "done", store.results([key])[key])
    owner = Owner.current()
    if not try_claim(store, key, owner, ttl_s):
        return Attempt(key, problem.id, "busy")
    try:
        if store.done_keys([key]):  # finished by another worker between our check and our claim
            return Attempt(key, problem.id, "done", store.results([key])[key])
        with Heartbeat(store, key, owner, ttl_s) as beat:
            solved = solve(problem, top_k=top_k, worker=str(owner))
            if solved.trials:
                store.store_trials(key, solved.directions, solved.trials,
                                   {"parplan_problem": problem.describe(), "parplan_study": problem.study})
            stored = store.save_result(solved.result, problem.study, str(owner))
    finally:
        release(store, key, owner)
    if out_dir is not None:
        write_result(StudyFolder.existing(out_dir), stored)
    return Attempt(key, problem.id, "searched", stored, beat.lost.is_set())


def run_worker(spec: StudySpec, url: str, *, out_dir: Path | None = None, top_k: int | None = None,
               ttl_s: float = DEFAULT_TTL_S, poll_s: float = DEFAULT_POLL_S, max_problems: int | None = None,
               stream: TextIO | None = None) -> int:
    """Claim and search problems of ``spec`` until every one has a result; return how many this worker searched.

    Any number of workers may run this against one database. Problems held by
    live workers are skipped; when only those are left, the worker polls every
    ``poll_s`` seconds until they finish or their claims expire (their worker
    died), then takes them over.
    """
    problems = expand(spec)  # bad model names and a missing profile fail before any search
    store = open_store(url)
    folder = None if out_dir is None else StudyFolder.claim(out_dir, spec.name)
    keys = [p.key for p in problems]
    k = spec.top_k if top_k is None else top_k
    progress = Progress(len(problems), len(store.done_keys(keys)), stream or sys.stderr)
    progress.note(f"worker {Owner.current()} on {redact(url)}: {progress.total - progress.done} of "
                  f"{progress.total} problems left")
    searched = 0
    try:
        while max_problems is None or searched < max_problems:
            done = store.done_keys(keys)
            pending = [p for p in problems if p.key not in done]
            if not pending:
                break
            moved = False
            for p in pending:
                a = attempt(p, url, k, ttl_s, None if folder is None else str(folder.path))
                if a.outcome == "searched" and a.result is not None:
                    searched += 1
                    moved = True
                    progress.done = len(store.done_keys(keys)) - 1
                    progress.finished(a.result)
                    if max_problems is not None and searched >= max_problems:
                        break
            if not moved:
                claims = holders(store, [p.key for p in pending])
                soonest = min((left for _, left in claims.values()), default=0.0)
                progress.note(f"{len(pending)} problem(s) held by other workers; next claim expires in "
                              f"{max(0.0, soonest):.0f} s")
                time.sleep(poll_s)
    finally:
        progress.close()
    if folder is not None:  # a folder `parplan study report` can read: the resolved study beside the results
        write_study(folder, spec)
        export_results(folder, problems, store.results(keys))
    return searched
