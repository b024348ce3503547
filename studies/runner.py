"""``parplan study run``: expand a study, search its problems in parallel, write the output folder.

Problems are joblib tasks: on one reusable loky process pool for the whole run
(``n_jobs=1`` runs them in this process), whose workers keep the fitted
predictors and storage connections from one problem to the next, or on an
existing dask cluster (``backend="dask"``, :mod:`studies.backends`). Each task claims its problem in the study's storage before it
searches, so a run can share a PostgreSQL database with ``parplan study
worker`` processes on other machines, and a run that was killed resumes where
it stopped: problems with a stored result are skipped, a problem interrupted
mid-search is searched again from its first trial. (A seeded TPE search cannot
be continued half-way and give the trials an uninterrupted one gives, so
restarting the problem is what makes a resumed study equal an uninterrupted
one; at most ``n_jobs`` problems' work is lost.)

The output folder is claimed before anything else (see :mod:`studies.folder`):
a new or empty folder, or one an earlier run of the same study marked; the
study's problems, its profile and the backend (a dask scheduler is connected
to) are checked before the first search. Result files are written here, by the
process that runs the study, as tasks return: a task needs the storage only,
not the output folder.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from joblib import Parallel, delayed

from studies.backends import check_storage_reachable, study_backend
from studies.claims import DEFAULT_TTL_S, holders
from studies.folder import StudyFolder
from studies.outputs import RESULTS_DIR, export_results, write_result, write_run, write_study
from studies.problems import Problem, expand
from studies.progress import Progress, clock
from studies.result import ProblemResult
from studies.spec import StudySpec
from studies.store import DEFAULT_DB, default_url, redact
from studies.work import DEFAULT_POLL_S, attempt, open_store, store_for


@dataclass(frozen=True)
class RunSummary:
    """What a run leaves: every problem's result (in study order) and where things are."""

    out_dir: Path
    storage: str
    results: tuple[ProblemResult, ...]
    searched: int
    elapsed_s: float
    done_before: int = 0
    """Problems that had a result when the run started."""

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(r.status for r in self.results))


def _largest_first(problem: Problem) -> tuple[int, int, str]:
    # Longest jobs first (more GPUs: larger spaces; larger models: longer steps) shortens the tail of a pool.
    return (-problem.num_gpus, -problem.model.num_params, problem.id)


def run_study(spec: StudySpec, out_dir: str | Path, *, storage: str | None = None, n_jobs: int = 1,
              ttl_s: float = DEFAULT_TTL_S, poll_s: float = DEFAULT_POLL_S,
              stream: TextIO | None = None, backend: str = "loky", scheduler: str | None = None) -> RunSummary:
    """Search every problem of ``spec`` that has no result yet and write the output folder.

    Parameters
    ----------
    spec : StudySpec
    out_dir : path
        Output folder: created, or an empty one, or one an earlier run of this study marked; holds
        ``study.db`` unless ``storage`` is given.
    storage : str, optional
        Database URL shared with other workers (``postgresql://...``).
    n_jobs : int
        Parallel problems (joblib; ``-1``: one per CPU, or every thread of the dask cluster).
    ttl_s, poll_s : float
        Claim lifetime without heartbeat; wait between polls for problems other workers hold.
    stream : text stream
        Where progress goes (one status line, only when it is a terminal).
    backend, scheduler : str
        ``loky`` (this machine's processes) or ``dask`` with the scheduler's address
        (see :mod:`studies.backends`).

    Raises
    ------
    SpecError
        If the output folder is not one parplan may write (see :class:`~studies.folder.StudyFolder`),
        the storage is malformed or damaged, two problems share an id, the profile is missing, or
        the backend is unknown, not installed or unreachable.
    """
    # Bad model names, a missing profile, a bad storage URL and an unreachable scheduler fail here,
    # before the folder is touched.
    problems = expand(spec)
    if storage is not None:
        open_store(storage)
    with study_backend(backend, scheduler) as parallel:
        check_storage_reachable(backend, scheduler, storage)  # after the address itself is checked
        return _run(spec, problems, out_dir, storage, n_jobs, ttl_s, poll_s, stream, backend, parallel)


def _run(spec: StudySpec, problems: tuple[Problem, ...], out_dir: str | Path, storage: str | None, n_jobs: int,
         ttl_s: float, poll_s: float, stream: TextIO | None, backend: str, parallel: dict[str, Any]) -> RunSummary:
    folder = StudyFolder.claim(out_dir, spec.name)
    out = folder.path
    folder.require_subfolder(RESULTS_DIR)  # refused now rather than after the first search
    if storage is None:
        for name in (DEFAULT_DB, f"{DEFAULT_DB}-wal", f"{DEFAULT_DB}-shm"):
            folder.require_no_symlink(name)  # SQLite opens these by path and would follow a link
    url = storage or default_url(out)
    started = datetime.now(UTC)
    store = store_for(url) if storage is not None else open_store(url)
    write_study(folder, spec)
    keys = [p.key for p in problems]
    done = store.done_keys(keys)
    progress = Progress(len(problems), len(done), stream or sys.stderr)
    searched = 0
    pending = sorted((p for p in problems if p.key not in done), key=_largest_first)
    try:  # the status line ends on a new line even when a Ctrl-C ends the run
        while pending:
            tasks = (delayed(attempt)(p, url, spec.top_k, ttl_s, None, os.getpid()) for p in pending)
            busy = []
            for a in Parallel(n_jobs=n_jobs, return_as="generator_unordered", batch_size=1, **parallel)(tasks):
                if a.outcome == "busy" or a.result is None:
                    busy.append(a.key)
                    continue
                if a.outcome == "searched":
                    write_result(folder, a.result)
                searched += int(a.outcome == "searched")
                progress.finished(a.result, searched_here=a.outcome == "searched")
            pending = [p for p in pending if p.key in busy and p.key not in store.done_keys([p.key])]
            if pending:
                left = min((s for _, s in holders(store, [p.key for p in pending]).values()), default=0.0)
                progress.note(f"{len(pending)} problem(s) held by other workers; next claim expires in "
                              f"{clock(max(0.0, left))}")
                time.sleep(poll_s)
    finally:
        progress.close()
    stored = store.results(keys)
    export_results(folder, problems, stored)
    results = tuple(stored[k] for k in keys if k in stored)
    summary = RunSummary(out, url, results, searched, progress.elapsed_s, len(done))
    write_run(folder, _run_info(summary, n_jobs, started, backend))
    return summary


def _run_info(summary: RunSummary, n_jobs: int, started: datetime, backend: str) -> dict[str, Any]:
    return {"storage": redact(summary.storage), "n_jobs": n_jobs, "backend": backend,
            "started_at": started.isoformat(),
            "finished_at": datetime.now(UTC).isoformat(), "elapsed_s": summary.elapsed_s,
            "problems": len(summary.results), "searched_by_this_run": summary.searched,
            "status": summary.counts}
