"""Ctrl-C in a long command: one line and exit 130, never a traceback (rerunning the command resumes)."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

EXIT_INTERRUPTED = 130


def resumable(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``command`` with KeyboardInterrupt turned into one stderr line and :data:`EXIT_INTERRUPTED`."""

    @functools.wraps(command)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except KeyboardInterrupt:
            sys.stderr.write("parplan: interrupted; rerun the same command to resume\n")
            sys.stderr.flush()
            return EXIT_INTERRUPTED

    return wrapper
