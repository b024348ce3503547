"""Start-up of the ``parplan`` command, each case a whole process: median wall time of N runs, with its target.

Cases (issue 18 item 4): ``parplan --help`` and one-line errors (``parplan predict --model nope``, a search
flag, a study file: the commands whose checks need more than argparse), target <= 0.3 s; a cold ``parplan
predict RUN.yaml`` with warm caches (the built-in profile's tables and the fitted predictors; one untimed run
fills them), target <= 0.5 s. ``--baseline DIR`` times another checkout (e.g. ``git worktree add /tmp/base
HEAD~3``) in the same run, interleaved, so that the before/after ratio holds on a busy machine where absolute
times do not.

Usage::

    python benchmarks/startup.py [--runs 7] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_SPEC = "studies/examples/llama3.1-8b-8xh100.yaml"
BAD_STUDY = "name: bad\nmodels: [llama3.1-8b]\ngpus: [h100-sxm5-80gb]\ngpu_counts: [0]\n"
# (label, argv, exit code, target s or None)
CASES: tuple[tuple[str, tuple[str, ...], int, float | None], ...] = (
    ("parplan --help", ("--help",), 0, 0.3),
    ("one-line error: predict --model nope", ("predict", "--model", "nope"), 2, 0.3),
    ("cold predict (warm caches)", ("predict", RUN_SPEC), 0, 0.5),
    ("one-line error: search --trials 0", ("search", "--model", "llama3.1-8b", "--trials", "0"), 2, 0.3),
    ("one-line error: study run (bad gpu_counts)", ("study", "run", "{bad_study}"), 2, 0.3),
)


def _command(root: Path, argv: tuple[str, ...], bad_study: str) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ, PYTHONPATH=str(root))  # ahead of the editable install's path entry
    return [sys.executable, "-m", "parplan", *(a.replace("{bad_study}", bad_study) for a in argv)], env


def _time_once(root: Path, argv: tuple[str, ...], code: int, bad_study: str) -> float:
    command, env = _command(root, argv, bad_study)
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if proc.returncode != code:
        raise SystemExit(f"{' '.join(command)}: exit {proc.returncode}, expected {code}: {proc.stderr[-300:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per case (median printed)")
    parser.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                        help="another parplan checkout to time alongside this one")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs: {args.runs} is not allowed: a whole number >= 1")
    if args.baseline is not None and not (args.baseline / "parplan" / "__init__.py").is_file():
        parser.error(f"--baseline: {str(args.baseline)[:80]!r} is not allowed: a parplan checkout (with parplan/__init__.py)")
    roots = {"this": ROOT} | ({} if args.baseline is None else {"baseline": args.baseline.resolve()})
    with tempfile.TemporaryDirectory() as tmp:
        bad_study = str(Path(tmp) / "bad-study.yaml")
        Path(bad_study).write_text(BAD_STUDY, encoding="utf-8")
        for root in roots.values():  # fills the profile and predictor caches; imports land in the page cache
            _time_once(root, ("predict", RUN_SPEC), 0, bad_study)
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.runs):
            for label, case, code, _target in CASES:
                for name, root in roots.items():  # interleaved: both see the same load
                    times.setdefault((label, name), []).append(_time_once(root, case, code, bad_study))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"median of {args.runs} whole-process runs each ({os.cpu_count()} CPUs, load average {load:.1f})")
    met = True
    for label, _case, _code, target in CASES:
        now = statistics.median(times[(label, "this")])
        verdict = "" if target is None else f"  target <= {target:.1f} s: {'met' if now <= target else 'MISSED'}"
        met &= target is None or now <= target
        line = f"{label:45s} {now:6.2f} s{verdict}"
        if "baseline" in roots:
            before = statistics.median(times[(label, "baseline")])
            line += f"  (baseline {before:.2f} s, {before / now:.1f}x)"
        print(line)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
