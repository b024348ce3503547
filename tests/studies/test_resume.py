"""Fault tolerance: kill -9 a study run part-way, run the same command again, get the uninterrupted table."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from studies.outputs import read_results
from studies.problems import expand
from studies.runner import run_study
from studies.spec import load_study
from studies.store import StudyStore, default_url
from tests.studies.conftest import TINY, comparable, write_study

SLOWER = {**TINY, "name": "kill", "gpu_counts": [8, 16, 32], "search": {"trials": 60, "seed": 5}}
"""Six problems of a few tenths of a second each: a window wide enough to kill the run inside."""


def _command(study: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "parplan", "study", "run", str(study), "--out", str(out), "--n-jobs", "1"]


def test_kill_9_then_rerun_resumes_and_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    study = write_study(tmp_path, SLOWER)
    spec = load_study(study)
    total = len(expand(spec))
    reference = run_study(spec, tmp_path / "reference", n_jobs=1, stream=io.StringIO())

    out = tmp_path / "out"
    results_dir = out / "results"
    first = subprocess.Popen(_command(study, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)  # its own process group: kill it whole, as a crash would
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None:
        if results_dir.is_dir() and any(results_dir.glob("*.json")):
            break
        time.sleep(0.01)
    assert first.poll() is None, f"the run ended before it could be killed: {first.communicate()[1]!r}"
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL
    done_at_kill = len(StudyStore(default_url(out)).results())
    assert 1 <= done_at_kill < total

    start = time.monotonic()
    second = subprocess.run(_command(study, out), capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert time.monotonic() - start < 60  # the killed run's claims were taken over at once, not after expiry
    assert f"{done_at_kill} already done, {total - done_at_kill} searched" in second.stdout

    store = StudyStore(default_url(out))
    resumed = store.results()
    assert len(resumed) == total  # every problem exactly one result
    assert comparable(resumed.values()) == comparable(reference.results)
    assert comparable(read_results(out).values()) == comparable(reference.results)
    counts = store.trial_counts(p.key for p in expand(spec))
    assert set(counts.values()) == {60}  # no trial of an interrupted search was kept twice
