"""Speed of a batch study, as wall time, problems/s and CPU time per problem (less noisy on a shared machine).

``--problems 60`` (default): 5 models x 6 GPU counts x 2 GPU kinds, 200-trial TPE searches, ``--n-jobs 2``;
target (issue 6) under 3 minutes on the 2-core CI machine. ``--problems 1000`` (issue 18 item 5): 10 models x
10 GPU counts x 5 batches x 2 GPU kinds; target under 5 minutes on 2 cores. ``--problems 200`` is the same
grid at one batch size (a quicker look). The fitted predictors of both GPUs are loaded (fitted on a cold cache)
before the clock starts, and that time is printed apart: it is paid once per machine, not per study.
``--backend dask --scheduler ADDRESS`` runs the problems on a running dask cluster instead of this machine's
process pool. ``--sample N`` searches N problems of the study (drawn with a fixed seed) one after another in
this process instead, and prints CPU seconds per problem (search, and the result row with its infeasibility
explanation) and, with ``--profile``, the functions that cost most (cProfile; it slows Python code ~1.5x).

Usage::

    python benchmarks/study.py [--problems 60|200|1000] [--n-jobs 2] [--trials N] [--out DIR]
    python benchmarks/study.py --problems 1000 --sample 30 [--profile]
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# A script's folder comes first on sys.path, and benchmarks/search.py would shadow the search package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from studies.report import write_report  # noqa: E402
from studies.runner import run_study  # noqa: E402
from studies.spec import study_from_mapping  # noqa: E402

STUDY: dict[str, Any] = {
    "name": "benchmark",
    "description": "5 dense models from 8B to 405B x 64-2048 GPUs x H100/B200, 4M tokens per step",
    "models": ["llama3.1-8b", "llama2-13b", "gpt-neox-20b", "llama3.1-70b", "llama3.1-405b"],
    "gpus": ["h100-sxm5-80gb", "b200"],
    "gpu_counts": {"min": 64, "max": 2048, "factor": 2},
    "batch": {"tokens_per_step": 4 * 1024**2},
    "seq_length": 4096,
    "search": {"sampler": "tpe", "trials": 200, "seed": 0},
}
SCALE_MODELS = ["gpt3-1.3b", "mistral-7b", "llama3.1-8b", "qwen2.5-7b", "llama2-13b", "gpt-neox-20b",
                "codellama-34b", "llama3.1-70b", "qwen2.5-72b", "llama3.1-405b"]
SCALE: dict[str, Any] = {
    **STUDY,
    "name": "benchmark-scale",
    "description": "10 dense models from 1.3B to 405B x 8-4096 GPUs x 5 batches (0.5M-8M tokens) x H100/B200",
    "models": SCALE_MODELS,
    "gpu_counts": {"min": 8, "max": 4096, "factor": 2},
    "batch": {"tokens_per_step": [2**19, 2**20, 2**21, 2**22, 2**23]},
}
STUDIES: dict[int, tuple[dict[str, Any], float]] = {
    60: (STUDY, 180.0),  # issue 6
    200: ({**SCALE, "batch": {"tokens_per_step": 2**22}}, 60.0),  # a fifth of the 1,000, at the same rate
    1000: (SCALE, 300.0),  # issue 18 item 5
}
"""Problems -> (study, target wall time in seconds on 2 cores)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, choices=sorted(STUDIES), default=60)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--trials", type=int, default=None, help="trials per problem (default: the study's, 200)")
    parser.add_argument("--backend", default="loky", help="loky (this machine) or dask (with --scheduler)")
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS")
    parser.add_argument("--out", default=None, help="output folder (default: a temporary one, removed)")
    parser.add_argument("--no-report", action="store_true", help="skip the report (tables and plots)")
    parser.add_argument("--sample", type=int, default=None, metavar="N",
                        help="search N of the study's problems in this process, one after another (CPU per problem)")
    parser.add_argument("--profile", action="store_true", help="with --sample: cProfile, top functions printed")
    args = parser.parse_args(argv)
    study, target_s = STUDIES[args.problems]
    trials = args.trials or study["search"]["trials"]
    spec = study_from_mapping({**study, "search": {**study["search"], "trials": trials}})

    from costmodel.specs.catalog import get_gpu
    from search.objective import search_timer

    start = time.perf_counter()
    for gpu in spec.gpus:
        search_timer(get_gpu(gpu))  # fits and caches on disk when the cache is cold; workers then load it
    warm_s = time.perf_counter() - start
    if args.sample:
        return _sample(spec, args.sample, args.profile)

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or Path(tmp) / "out")
        start, cpu_start = time.perf_counter(), _cpu_s()
        summary = run_study(spec, out, n_jobs=args.n_jobs, stream=io.StringIO() if args.out is None else None,
                            backend=args.backend, scheduler=args.scheduler)
        run_s, run_cpu = time.perf_counter() - start, _cpu_s() - cpu_start
        start = time.perf_counter()
        if not args.no_report:
            write_report(out)
        report_s = time.perf_counter() - start
    searched = list(summary.results)
    n = max(1, len(searched))
    per_problem = sum(r.elapsed_s for r in searched) / n
    cpu = sum(r.cpu_s for r in searched)
    print(f"problems: {len(searched)} ({summary.counts}); trials per problem: {trials}; n_jobs {args.n_jobs}, "
          f"backend {args.backend}")
    print(f"predictors loaded/fitted before the run: {warm_s:.1f} s")
    print(f"study run: {run_s:.1f} s wall, {len(searched) / run_s:.2f} problems/s (target < {target_s:.0f} s on 2 "
          f"cores: {'met' if run_s < target_s else 'MISSED'}); mean {per_problem:.2f} s per problem in a worker")
    print(f"CPU time per problem: {cpu / n:.3f} s in the searches, {run_cpu / n:.3f} s of all processes of the run "
          f"(parent and pool); {cpu:.1f} s of searches = {cpu / 2:.1f} s of wall time on 2 otherwise idle cores "
          f"(wall/CPU per problem: {sum(r.elapsed_s for r in searched) / max(cpu, 1e-9):.2f})")
    by_status: dict[str, list[float]] = {}
    for r in searched:
        by_status.setdefault(r.status, []).append(r.cpu_s)
    print("CPU time by outcome: " + "; ".join(f"{status} {len(c)} x {sum(c) / len(c):.2f} s = {sum(c):.0f} s"
                                               for status, c in sorted(by_status.items())))
    if not args.no_report:
        print(f"report (tables, markdown, plots): {report_s:.1f} s")
    return 0 if run_s < target_s else 1


def _sample(spec: Any, n: int, profile: bool, seed: int = 1) -> int:
    """Search ``n`` of ``spec``'s problems in this process; print CPU seconds per problem (and the profile)."""
    import cProfile
    import pstats
    import random

    from studies.problems import expand
    from studies.solve import _row, search

    problems = random.Random(seed).sample(list(expand(spec)), min(n, len(expand(spec))))
    profiler = cProfile.Profile() if profile else None
    searched = explained = 0.0
    outcomes: dict[str, int] = {}
    if profiler is not None:
        profiler.enable()
    for problem in problems:
        start = time.process_time()
        try:
            result, _, _ = search(problem)
        except Exception:  # noqa: BLE001 - an invalid problem costs its space building only
            outcomes["invalid"] = outcomes.get("invalid", 0) + 1
            searched += time.process_time() - start
            continue
        middle = time.process_time()
        status = _row(result, spec.top_k)["status"]
        outcomes[status] = outcomes.get(status, 0) + 1
        searched, explained = searched + middle - start, explained + time.process_time() - middle
    if profiler is not None:
        profiler.disable()
    print(f"{len(problems)} sampled problems (seed {seed}) in one process: {outcomes}")
    print(f"CPU time per problem: {(searched + explained) / len(problems):.3f} s ({searched / len(problems):.3f} s "
          f"searching, {explained / len(problems):.3f} s for the result row and infeasibility explanations)"
          + (" under cProfile" if profiler is not None else ""))
    if profiler is not None:
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(20)
    return 0


def _cpu_s() -> float:
    """CPU seconds of this process and its finished or running children (the loky workers)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + _children_cpu_s()


def _children_cpu_s() -> float:
    """CPU seconds of this process's live child processes (loky workers outlive the run), from /proc."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid():  # ppid
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


if __name__ == "__main__":
    sys.exit(main())
