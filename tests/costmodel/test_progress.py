"""StatusLine: one line on a terminal, redrawn in place at most every REDRAW_S, erased or kept; silent elsewhere."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from costmodel.progress import ERASE, REDRAW_S, StatusLine, clock


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _never() -> str:
    raise AssertionError("the text of a line that is not drawn was composed")


@pytest.mark.parametrize("stream, live", [(io.StringIO(), None), (None, None), (Terminal(), False)])
def test_silent_off_a_terminal_none_and_under_json(stream: io.StringIO | None, live: bool | None) -> None:
    line = StatusLine(stream, live=live)
    assert not line.show(_never) and not line.show(_never, force=True)
    line.close()
    line.close(keep=True)
    assert stream is None or stream.getvalue() == ""


def test_drawn_in_place_and_erased_at_the_end() -> None:
    stream = Terminal()
    line = StatusLine(stream)
    assert line.show(lambda: "first") and line.drawn
    assert line.show(lambda: "second", force=True)
    line.close()
    assert stream.getvalue() == f"{ERASE}first{ERASE}second{ERASE}" and not line.drawn


def test_kept_in_its_latest_state() -> None:
    stream = Terminal()
    now = [0.0]
    line = StatusLine(stream, now=lambda: now[0])
    line.show(lambda: "1 done")
    line.show(lambda: "2 done")  # within REDRAW_S: not drawn now
    assert stream.getvalue() == f"{ERASE}1 done"
    line.close(keep=True)
    assert stream.getvalue() == f"{ERASE}1 done{ERASE}2 done\n"


def test_at_most_one_redraw_per_interval() -> None:
    stream = Terminal()
    now = [0.0]
    line = StatusLine(stream, now=lambda: now[0])
    drawn = 0
    for i in range(1000):  # ten seconds of events every 10 ms
        now[0] = i * 0.01
        drawn += line.show(lambda: "x")
    assert drawn == stream.getvalue().count(ERASE)
    assert drawn <= 10 / REDRAW_S + 1


def test_cut_to_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    stream = Terminal()
    line = StatusLine(stream)
    line.show(lambda: "y" * 200)
    drawn = stream.getvalue().removeprefix(ERASE)
    assert drawn == "y" * 39  # the last column stays free: writing into it wraps on some terminals


def test_clock() -> None:
    assert clock(59.4) == "0:59" and clock(61) == "1:01" and clock(3725) == "1:02:05"


def test_tqdm_is_imported_only_to_draw_on_a_terminal() -> None:
    script = ("import io, sys\n"
              "import costmodel.progress, search.progress, studies.progress, costmodel.profiling.sampler\n"
              "line = costmodel.progress.StatusLine(io.StringIO())\n"
              "line.show(lambda: 'x'); line.close()\n"
              "print('tqdm' in sys.modules, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stderr.strip().splitlines()[-1] == "False"
