"""``parplan study run | worker | report``: parse, call one library function, print, return an exit code.

``register(subparsers)`` adds the ``study`` command to ``parplan.cli``'s parser.
``SpecError`` (a bad study file or argument) propagates to ``parplan.cli.main``,
which prints it on one line and exits with 2. Ctrl-C in ``run`` or ``worker``
prints one line and exits with 130: everything stored so far is kept, and the
same command resumes.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import Any

from parplan._argtypes import jobs, positive_int, positive_number
from parplan._json import dumps
from parplan._interrupt import resumable
from studies.backends import BACKENDS, INSTALL_HINT

EXIT_OK, EXIT_USAGE, EXIT_UNFINISHED = 0, 2, 1
"""130 = 128 + SIGINT, what shells report for a command ended by Ctrl-C."""


def register(subparsers: Any) -> None:
    """Add ``study`` with its ``run``, ``worker`` and ``report`` subcommands to ``subparsers``."""
    study = subparsers.add_parser(
        "study", help="batch studies over models x GPU kinds x GPU counts",
        description="Run a study file (YAML: models, GPU kinds, GPU counts, batches, search settings) in "
                    "parallel and resumably, share it between workers through PostgreSQL, report it.")
    sub = study.add_subparsers(dest="study_command", required=True, parser_class=type(study))

    run = sub.add_parser("run", help="search every problem of a study (resumes a killed run)",
                         description="Expand the study into problems and search each once, in parallel. "
                                     "Re-running the same command resumes: finished problems are skipped.")
    run.add_argument("study_file", metavar="STUDY.yaml")
    run.add_argument("--out", metavar="DIR", default=None,
                     help="output folder (default: the study's outputs.dir, else ./study-NAME)")
    run.add_argument("--storage", metavar="URL", default=None,
                     help="database URL shared with workers, e.g. postgresql://user:pw@host/db "
                          "(default: sqlite file DIR/study.db)")
    run.add_argument("--n-jobs", type=jobs, default=None, metavar="N",
                     help="problems searched in parallel (-1: one per CPU, or every dask worker thread; "
                          "default 1 with loky, -1 with dask)")
    run.add_argument("--backend", choices=BACKENDS, default="loky",
                     help="loky: processes on this machine (default); dask: the workers of a running dask "
                          f"scheduler (--scheduler; {INSTALL_HINT}), which need the study's --storage")
    run.add_argument("--scheduler", metavar="ADDRESS", default=None,
                     help="the dask scheduler of --backend dask, e.g. tcp://10.0.0.5:8786")
    run.add_argument("--claim-ttl", type=positive_number, default=None, metavar="S", help=argparse.SUPPRESS)
    run.add_argument("--json", action="store_true", help="print only JSON: counts, elapsed_s, out_dir, results")
    run.set_defaults(func=cmd_run)

    worker = sub.add_parser("worker", help="claim and search problems of a study from a shared database",
                            description="Start any number of these, on any machines, against one database: "
                                        "each problem is searched once; a dead worker's problem is taken over "
                                        "when its claim expires. Exits when every problem has a result.")
    worker.add_argument("study_file", metavar="STUDY.yaml")
    worker.add_argument("--storage", metavar="URL", required=True,
                        help="the shared database, e.g. postgresql://user:pw@host:5432/db")
    worker.add_argument("--out", metavar="DIR", default=None,
                        help="also write the study's results into this folder when done")
    worker.add_argument("--claim-ttl", type=positive_number, default=None, metavar="S",
                        help="seconds a claim lives without a heartbeat (default 120)")
    worker.add_argument("--poll", type=positive_number, default=None, metavar="S",
                        help="seconds between looks when other workers hold every problem left (default 5)")
    worker.add_argument("--max-problems", type=positive_int, default=None, metavar="N",
                        help="stop after searching N problems")
    worker.add_argument("--json", action="store_true", help="print only JSON: searched, left, problems")
    worker.set_defaults(func=cmd_worker)

    report = sub.add_parser("report", help="tables, Markdown and plots of a study's output folder",
                            description="Write DIR/report/: results.csv, results.json (one row per problem), "
                                        "report.md and PNG plots.")
    report.add_argument("out_dir", metavar="DIR")
    report.add_argument("--json", action="store_true", help="print only JSON: the files written")
    report.set_defaults(func=cmd_report)

    export = sub.add_parser("export", help="copy a study's trials into an Optuna database (optuna-dashboard)",
                            description="Write every problem's trials as an ordinary Optuna study (named by the "
                                        "problem key) into --storage, which optuna-dashboard and the optuna CLI "
                                        "open: `optuna-dashboard sqlite:///trials.db`. Infeasible trials keep their "
                                        "constraint, so the dashboard shows them as infeasible.")
    export.add_argument("out_dir", metavar="DIR", help="a study output folder (from `parplan study run`)")
    export.add_argument("--storage", metavar="URL", required=True,
                        help="the Optuna database to write, e.g. sqlite:///trials.db (not the study's own)")
    export.add_argument("--from", dest="source", metavar="URL", default=None,
                        help="the study's database (default: the one its last run used)")
    export.add_argument("--json", action="store_true", help="print only JSON: exported, without_trials, storage")
    export.set_defaults(func=cmd_export)


def _out_dir(args: argparse.Namespace, spec: Any) -> Path:
    if args.out is not None:
        return Path(args.out)
    if spec.out_dir is not None:
        return Path(spec.out_dir)
    return Path(f"study-{spec.name}")


def _progress_stream(args: argparse.Namespace) -> io.StringIO | None:
    """stderr, or under ``--json`` a stream that is no terminal: the progress line stays silent."""
    return io.StringIO() if args.json else None


@resumable
def cmd_run(args: argparse.Namespace) -> int:
    from studies.backends import check_backend

    check_backend(args.backend, args.scheduler)  # flags first, before the study and the search are imported
    from studies.spec import load_study

    spec = load_study(args.study_file)
    n_jobs = args.n_jobs if args.n_jobs is not None else (-1 if args.backend == "dask" else 1)
    if n_jobs == 0 or n_jobs < -1:
        from costmodel.specs.errors import SpecError

        raise SpecError("n-jobs", n_jobs, "a positive integer or -1")
    out = _out_dir(args, spec)
    from studies.claims import DEFAULT_TTL_S
    from studies.runner import run_study

    summary = run_study(spec, out, storage=args.storage, n_jobs=n_jobs,
                        ttl_s=DEFAULT_TTL_S if args.claim_ttl is None else args.claim_ttl,
                        stream=_progress_stream(args), backend=args.backend, scheduler=args.scheduler)
    if args.json:
        from studies.store import redact

        print(dumps({"out_dir": str(summary.out_dir), "storage": redact(summary.storage), "counts": summary.counts,
                     "done_before": summary.done_before, "searched": summary.searched,
                     "elapsed_s": summary.elapsed_s, "results": [r.to_dict() for r in summary.results]}))
        return EXIT_OK
    counts = ", ".join(f"{n} {status}" for status, n in sorted(summary.counts.items()))
    print(f"{len(summary.results)} problems ({counts}); {summary.done_before} already done, {summary.searched} "
          f"searched in {summary.elapsed_s:.1f} s; results in {summary.out_dir}")
    print(f"next: parplan study report {summary.out_dir}")
    return EXIT_OK


@resumable
def cmd_worker(args: argparse.Namespace) -> int:
    from studies.claims import DEFAULT_TTL_S
    from studies.spec import load_study
    from studies.work import DEFAULT_POLL_S, run_worker, store_for

    spec = load_study(args.study_file)
    searched = run_worker(spec, args.storage, out_dir=None if args.out is None else Path(args.out),
                          ttl_s=DEFAULT_TTL_S if args.claim_ttl is None else args.claim_ttl,
                          poll_s=DEFAULT_POLL_S if args.poll is None else args.poll,
                          max_problems=args.max_problems, stream=_progress_stream(args))
    from studies.problems import expand

    keys = [p.key for p in expand(spec)]
    left = len(keys) - len(store_for(args.storage).done_keys(keys))
    if args.json:
        print(dumps({"searched": searched, "left": left, "problems": len(keys)}))
        return EXIT_OK if left == 0 else EXIT_UNFINISHED
    print(f"worker searched {searched} problem(s); {left} of {len(keys)} left")
    return EXIT_OK if left == 0 else EXIT_UNFINISHED


def cmd_report(args: argparse.Namespace) -> int:
    from studies.report import write_report

    written = write_report(Path(args.out_dir))
    if args.json:
        print(dumps({"written": [str(p) for p in written]}))
        return EXIT_OK
    for path in written:
        print(path)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from studies.export import export_study
    from studies.store import redact

    summary = export_study(args.out_dir, args.storage, source=args.source)
    if args.json:
        print(dumps(summary.to_dict()))
        return EXIT_OK
    print(f"{len(summary.exported)} problem(s) exported as Optuna studies to {redact(summary.storage)}"
          + (f"; {len(summary.without_trials)} without stored trials" if summary.without_trials else ""))
    print(f"open it with: optuna-dashboard {redact(summary.storage)}")
    return EXIT_OK
