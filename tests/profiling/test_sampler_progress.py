"""The profiler's status line: elapsed/budget, measured, resumed, too slow and the current op, on a terminal only."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from costmodel.profiling.sampler import SamplerReport, _Progress
from costmodel.progress import ERASE


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(stream: io.StringIO | None, tmp_path: Path) -> None:
    progress = _Progress(stream, budget_s=60, start=0.0)
    report = SamplerReport(out=tmp_path, measured=Counter(gemm=41), resumed=3, too_slow=2)
    point = SimpleNamespace(stream="gemm", shape=(1024, 512, 256))
    for _ in range(200):  # a burst of fast measurements: one line, not one per measurement
        progress.show(point, 0.00125, 0.04, report)  # type: ignore[arg-type]
    progress.close()


def test_silent_on_a_file_or_pipe(tmp_path: Path) -> None:
    stream = io.StringIO()
    _run(stream, tmp_path)
    _run(None, tmp_path)  # --quiet / --json
    assert stream.getvalue() == ""


def test_a_terminal_gets_one_line_erased_at_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    stream = Terminal()
    _run(stream, tmp_path)
    text = stream.getvalue()
    drawn = text.split(ERASE)[1]
    assert drawn.startswith("parplan profile: ") and drawn.endswith(
        "/60 s  41 measured (3 resumed, 2 too slow)  gemm(1024,512,256) 1.250 ms +-4%")
    assert "\n" not in text and text.endswith(ERASE) and text.count(ERASE) < 200
