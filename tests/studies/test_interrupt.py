"""Ctrl-C during ``parplan study run``: one line, exit 130, no traceback; the same command then resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.studies.conftest import TINY, write_study

SLOW = {**TINY, "name": "ctrl-c", "gpu_counts": [8, 16], "search": {"trials": 60, "seed": 5}}
"""Four problems of about a second each: the run is interrupted after the first."""


def _as_from_a_terminal() -> None:
    """The child starts with Ctrl-C deliverable, as a terminal's foreground command does: ignored or blocked
    signals are inherited across exec, and a test earlier in this pytest process may have left SIGINT so
    (CI once saw the run ignore the signal and finish with exit 0 and no output)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _command(study: Path, out: Path, jobs: int) -> list[str]:
    return [sys.executable, "-m", "parplan", "study", "run", str(study), "--out", str(out), "--n-jobs", str(jobs)]


@pytest.mark.parametrize("jobs", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_ctrl_c_is_one_line_and_exit_130_then_the_same_command_resumes(jobs: int, tmp_path: Path) -> None:
    study = write_study(tmp_path, SLOW)
    out = tmp_path / "out"
    run = subprocess.Popen(_command(study, out, jobs), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True, preexec_fn=_as_from_a_terminal)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None:
        if (out / "results").is_dir() and any((out / "results").glob("*.json")):
            break
        time.sleep(0.01)
    assert run.poll() is None, "the run ended before it could be interrupted"
    os.killpg(run.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole foreground group, workers included
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130, err
    assert err == "parplan: interrupted; rerun the same command to resume\n"
    again = subprocess.run(_command(study, out, jobs), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "4 problems (4 ok)" in again.stdout and "0 already done" not in again.stdout
