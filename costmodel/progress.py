"""One status line on a terminal, redrawn in place; silent elsewhere.

The one progress display of parplan: ``search.progress``, ``studies.progress``
and ``costmodel.profiling.sampler`` compose their own text and hand it to a
``StatusLine``. It lives in ``costmodel``, beside ``lazy.py``, because that is
the one package all three may import: search and studies build on the cost
model, profiling is part of it, and the cost model imports neither of them.

tqdm draws the line (its lock, its write-error handling, its width trimming);
it is imported on the first draw on a terminal only, so ``parplan --help`` and
runs whose stderr is a file or a pipe never load it.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["REDRAW_S", "StatusLine", "clock", "is_terminal", "line_width"]

REDRAW_S = 0.1
"""Shortest time between two redraws (at most ten a second: a fast loop does not spend its time on the terminal)."""

ERASE = "\r\033[K"
"""Carriage return, then erase to the end of the line: each draw replaces the line instead of padding it."""


def clock(seconds: float) -> str:
    """``1:02:03`` / ``2:03`` style durations."""
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` says it is a terminal (files, pipes, ``None`` and captured streams are not)."""
    return bool(getattr(stream, "isatty", lambda: False)())


def line_width(stream: TextIO) -> int:
    """Columns a status line may fill: ``COLUMNS`` if set, else the stream's own terminal, less one.

    The stream's terminal, not stdout's: ``parplan search > plan.txt`` draws on stderr's. The last
    column is left free because writing into it wraps the line on some terminals.
    """
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        width = int(columns)
    else:
        try:
            width = os.get_terminal_size(stream.fileno()).columns
        except (AttributeError, OSError, ValueError):  # no file descriptor, or not a terminal
            width = shutil.get_terminal_size().columns
    return max(width - 1, 20)


class StatusLine:
    """A status line on ``stream``: drawn at most every ``REDRAW_S``, erased or kept at the end.

    Parameters
    ----------
    stream : text stream or None
        Usually ``sys.stderr``; ``None`` is silent.
    live : bool, optional
        Draw at all; default: whether ``stream`` is a terminal. Pass ``False`` under ``--json``.
    now : callable
        Monotonic clock of the redraw limit (tests pass a fake one).

    Notes
    -----
    A redraw skipped by the limit is not made up later by a timer: the next ``show`` or ``close``
    draws the line as it then is.
    """

    def __init__(self, stream: TextIO | None, live: bool | None = None,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.stream, self._now = stream, now
        self.live = stream is not None and (is_terminal(stream) if live is None else live)
        self._bar: Any = None  # the tqdm line, from the first draw to close
        self._drawn_at: float | None = None
        self._text: Callable[[], str] | None = None

    @property
    def drawn(self) -> bool:
        """Whether the line is on the terminal now."""
        return self._bar is not None

    def show(self, text: Callable[[], str], force: bool = False) -> bool:
        """Draw ``text()`` unless the last draw was under ``REDRAW_S`` ago (``force``: draw anyway).

        ``text`` is called only when the line is drawn. Returns whether it was.
        """
        self._text = text
        if not self.live or self.stream is None:
            return False
        now = self._now()
        if not force and self._drawn_at is not None and now - self._drawn_at < REDRAW_S:
            return False
        self._drawn_at = now
        if self._bar is None:
            self._bar = _open_line(self.stream, text(), line_width(self.stream))
        else:
            self._bar.ncols = line_width(self.stream)
            self._bar.set_description_str(text(), refresh=True)
        return True

    def close(self, keep: bool = False) -> None:
        """End the line: erase it (the command's output starts on a clean line) or, ``keep``, leave it
        drawn in its latest state and move to the next line."""
        bar, self._bar, self._drawn_at = self._bar, None, None
        if bar is None:
            return
        if keep and self._text is not None and self.stream is not None:
            bar.ncols = line_width(self.stream)
            bar.set_description_str(self._text(), refresh=False)
        bar.leave = keep
        bar.close()


def _open_line(stream: TextIO, text: str, width: int) -> Any:
    """A tqdm line on ``stream`` showing ``text``, cut to ``width`` columns."""
    return _line_class()(file=stream, desc=text, bar_format="{desc}", ncols=width, mininterval=0, disable=False,
                         leave=False, dynamic_ncols=False)


@functools.cache
def _line_class() -> type:
    """The tqdm subclass that draws ``{desc}`` alone, with no background monitor thread (tqdm imported here)."""
    from tqdm import tqdm

    class _Line(tqdm):  # type: ignore[misc, type-arg]
        monitor_interval = 0

        @staticmethod
        def status_printer(file: Any) -> Callable[[str], None]:
            def print_status(text: str) -> None:
                file.write(ERASE + text)
                file.flush()
            return print_status

        def display(self, msg: str | None = None, pos: int | None = None) -> bool:
            self.sp(self.__str__() if msg is None else msg)
            # False after an erase: tqdm's close would add a "\r", and the erase already left the cursor there
            return msg != ""

    return _Line
