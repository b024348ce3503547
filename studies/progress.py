"""Progress of a study on stderr: problems done / total, a bar, elapsed time, ETA and the last problem finished.

On a terminal it is one status line, redrawn in place and cut to the
terminal's width; when stderr is not a terminal (CI logs, files, pipes) nothing
is written: the command's summary on stdout says what happened. The ETA assumes
the problems left take as long on average as the ones this run finished
(problems found already done are not counted: they took no time).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from search.progress import clock as search_clock
from search.progress import redraw
from studies.result import ProblemResult

BAR_WIDTH = 24


def clock(seconds: float | None) -> str:
    """``1:02:03`` / ``2:03`` style durations; ``--:--`` when unknown."""
    return "--:--" if seconds is None else search_clock(seconds)


def summary(result: ProblemResult) -> str:
    """One short line about a result."""
    if result.ok:
        return (f"{result.step_time_s:.3f} s/step, {result.tokens_per_s_per_gpu:,.0f} tok/s/GPU, "
                f"MFU {result.mfu:.2f}, {result.strategy_label}")
    reason = result.reason if len(result.reason) <= 100 else result.reason[:97] + "..."
    return f"{result.status}: {reason}"


class Progress:
    """Counts finished problems of a study and shows them on ``stream`` when it is a terminal.

    Parameters
    ----------
    total : int
        Problems in the study.
    done : int
        Problems that already had a result when the run started.
    stream : text stream
        Usually ``sys.stderr``.
    now : callable
        Monotonic clock (tests pass a fake one).
    live : bool, optional
        Draw the status line; default: whether ``stream`` is a terminal.
    """

    def __init__(self, total: int, done: int, stream: TextIO, now: Callable[[], float] = time.monotonic,
                 live: bool | None = None) -> None:
        self.total, self.done, self.stream, self._now = total, done, stream, now
        self.solved = 0
        self.start = now()
        self.last = f"{done} already done, {total - done} to search"
        self.live = bool(getattr(stream, "isatty", lambda: False)()) if live is None else live
        self._drawn = False
        self.draw()

    @property
    def elapsed_s(self) -> float:
        return self._now() - self.start

    @property
    def eta_s(self) -> float | None:
        if self.solved == 0:
            return None
        return self.elapsed_s / self.solved * (self.total - self.done)

    def status_line(self) -> str:
        frac = self.done / self.total if self.total else 1.0
        filled = int(round(frac * BAR_WIDTH))
        return (f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self.done}/{self.total} problems "
                f"({100 * frac:.0f}%)  elapsed {clock(self.elapsed_s)}  ETA {clock(self.eta_s)}  {self.last}")

    def finished(self, result: ProblemResult, searched_here: bool = True) -> None:
        """Count one more finished problem (``searched_here``: by this run, so it counts for the ETA)."""
        self.done += 1
        self.solved += int(searched_here)
        self.last = f"{result.problem}: {summary(result)}"
        self.draw()

    def note(self, text: str) -> None:
        self.last = text
        self.draw()

    def draw(self) -> None:
        if not self.live:
            return
        redraw(self.stream, self.status_line())
        self._drawn = True

    def close(self) -> None:
        """End the status line (it stays on screen as the run's last state)."""
        if self.live and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
