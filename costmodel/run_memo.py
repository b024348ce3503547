"""Memoising a mechanism for the run being predicted now.

One step-time prediction asks the same few questions of its run many times: the parameters a
pipeline rank holds are read by the optimizer step, the shard groups, the ZeRO gathers, the
gradient tail and the parameter all-gather. :func:`for_last_run` keeps a function's answers for
the last run object it was given, by identity: runs are frozen, so the same object gives the same
answers, and a new run starts a fresh memo. The memo is one tuple, replaced whole, so threads
never read another run's answers.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

R = TypeVar("R")


def for_last_run(fn: Callable[..., R]) -> Callable[..., R]:
    """``fn(run, *args)`` memoised on ``args`` for the last ``run`` it was called with (identity)."""
    last: tuple[Any, dict[tuple[Any, ...], Any]] = (None, {})

    @wraps(fn)
    def memoised(run: Any, *args: Any) -> R:
        nonlocal last
        memo = last
        if memo[0] is not run:
            memo = last = (run, {})
        hit = memo[1].get(args, memo)  # the memo tuple itself: never a stored answer
        if hit is memo:
            hit = memo[1][args] = fn(run, *args)
        return hit

    return memoised
