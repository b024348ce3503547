"""Progress of a study on stderr: problems done / total, a bar, elapsed time, ETA and the last problem finished.

On a terminal it is one status line (``costmodel.progress.StatusLine``, shared
with search and profiling), redrawn in place at most ten times a second, cut
to the terminal's width and left on screen at the end as the run's last
state; when stderr is not a terminal (CI logs, files, pipes) nothing is
written: the command's summary on stdout says what happened. The ETA assumes
the problems left take as long on average as the ones this run finished
(problems found already done are not counted: they took no time).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from costmodel.progress import StatusLine
from costmodel.progress import clock as _clock
from studies.result import ProblemResult

BAR_WIDTH = 24


def clock(seconds: float | None) -> str:
    """``1:02:03`` / ``2:03`` style durations; ``--:--`` when unknown."""
    return "--:--" if seconds is None else _clock(seconds)


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
        self._line = StatusLine(stream, live=live, now=now)
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
        """Show ``text`` as the last event (drawn at once: a note often precedes a long wait)."""
        self.last = text
        self.draw(force=True)

    @property
    def live(self) -> bool:
        """Whether the line is drawn (stream a terminal)."""
        return self._line.live

    def draw(self, force: bool = False) -> None:
        self._line.show(self.status_line, force=force)

    def close(self) -> None:
        """End the status line (it stays on screen as the run's last state)."""
        self._line.close(keep=True)
