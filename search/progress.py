"""Progress of a search on a terminal: one status line, redrawn in place; silent elsewhere.

On a terminal (stderr a TTY) the line shows the trials done of the total, the
elapsed time and, for a budget search over several GPU counts, which count is
being searched. Under ``--json`` or when stderr is a file or a pipe nothing is
written: the command's output says what happened. Redraws are at most ten a
second, so a fast search does not spend its time writing to the terminal.
The line itself is ``costmodel.progress.StatusLine``, shared with studies and profiling.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO

from costmodel.progress import REDRAW_S, StatusLine, clock

__all__ = ["REDRAW_S", "SearchProgress", "clock"]


class SearchProgress:
    """A status line for one search or a budget search over several GPU counts.

    Parameters
    ----------
    stream : text stream
        Usually ``sys.stderr``.
    live : bool, optional
        Draw the line; default: whether ``stream`` is a terminal.
    now : callable
        Monotonic clock (tests pass a fake one).
    """

    def __init__(self, stream: TextIO, live: bool | None = None,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.stream, self._now = stream, now
        self._line = StatusLine(stream, live=live, now=now)
        self.begun = now()
        self.total_counts = 1
        self.counts_done = 0
        self.num_gpus: int | None = None
        self.trials = 0
        self.trials_total: int | None = None
        self.best: str = ""

    def counts(self, total: int) -> None:
        """A budget search over ``total`` GPU counts begins."""
        self.total_counts = total

    def start(self, num_gpus: int) -> None:
        """The search on ``num_gpus`` GPUs begins."""
        self.num_gpus, self.trials, self.trials_total = num_gpus, 0, None
        self.draw(force=True)

    def trial(self, done: int, total: int | None = None) -> None:
        """``done`` trials of ``total`` have finished in the current search."""
        self.trials, self.trials_total = done, total
        self.draw()

    def finished(self, result: Any) -> None:
        """The current search ended with ``result`` (a ``SearchResult``)."""
        self.counts_done += 1
        best = result.best
        self.best = "" if best is None else f"best on {result.problem.num_gpus} GPUs: {best.step_time_s:.3f} s/step"
        self.draw(force=True)

    def status_line(self) -> str:
        parts = []
        if self.total_counts > 1:
            parts.append(f"GPU count {min(self.counts_done + 1, self.total_counts)}/{self.total_counts}"
                         + ("" if self.num_gpus is None else f" ({self.num_gpus} GPUs)"))
        elif self.num_gpus is not None:
            parts.append(f"{self.num_gpus} GPUs")
        of = "" if self.trials_total is None else f"/{self.trials_total}"
        parts.append(f"trial {self.trials}{of}")
        parts.append(f"elapsed {clock(self._now() - self.begun)}")
        if self.best:
            parts.append(self.best)
        return "search: " + ", ".join(parts)

    @property
    def live(self) -> bool:
        """Whether the line is drawn (stream a terminal, not ``--json``)."""
        return self._line.live

    def draw(self, force: bool = False) -> None:
        self._line.show(self.status_line, force=force)

    def close(self) -> None:
        """Erase the status line so that the command's output starts on a clean line."""
        self._line.close()
