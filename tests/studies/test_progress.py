"""Progress: one status line on a terminal (done/total, a bar, elapsed, ETA, the last problem), silent elsewhere."""

from __future__ import annotations

import io

import pytest

from studies.progress import Progress, clock
from studies.result import ProblemResult
from tests.studies.conftest import Terminal


def _result(problem: str, status: str = "ok") -> ProblemResult:
    figures = {"step_time_s": 1.5, "tokens_per_s_per_gpu": 1234.0, "mfu": 0.4, "strategy_label": "tp2 pp1"} \
        if status == "ok" else {"reason": "no layout"}
    return ProblemResult(key=f"s/{problem}/x", problem=problem, model="m", gpu="g", num_gpus=8,
                         global_batch_size=8, seq_length=8, tokens_per_step=64, status=status, **figures)


def _last_drawn(stream: io.StringIO) -> str:
    return stream.getvalue().rsplit("\r\033[K", 1)[-1]


def test_counts_bar_and_eta_from_this_runs_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    now = [100.0]
    stream = Terminal()
    progress = Progress(total=10, done=2, stream=stream, now=lambda: now[0])
    now[0] += 30
    progress.finished(_result("a"))
    line = _last_drawn(stream)
    assert "3/10 problems (30%)" in line
    assert "elapsed 0:30" in line and "ETA 3:30" in line  # 7 left at 30 s each
    assert "a: 1.500 s/step, 1,234 tok/s/GPU, MFU 0.40, tp2 pp1" in line
    now[0] += 1  # past the redraw limit
    progress.finished(_result("b", "invalid"), searched_here=False)
    assert _last_drawn(stream).endswith("b: invalid: no layout")


def test_a_terminal_gets_one_status_line_redrawn_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    stream = Terminal()
    progress = Progress(total=50, done=0, stream=stream)
    for i in range(50):
        progress.finished(_result(f"problem-{i}"))
    progress.close()
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")  # one line, ended once
    assert all(len(draw) <= 59 for draw in text.rstrip("\n").split("\r\033[K"))  # cut to the terminal
    assert "50/50 problems (100%)" in _last_drawn(stream)


def test_silent_when_the_stream_is_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(total=3, done=1, stream=stream)
    progress.finished(_result("a"))
    progress.note("held by other workers")
    progress.close()
    assert stream.getvalue() == ""
    assert progress.done == 2  # still counted


def test_eta_unknown_before_the_first_problem() -> None:
    progress = Progress(total=4, done=0, stream=io.StringIO())
    assert progress.eta_s is None and "ETA --:--" in progress.status_line()


def test_clock() -> None:
    assert clock(59.4) == "0:59" and clock(61) == "1:01" and clock(3725) == "1:02:05" and clock(None) == "--:--"
