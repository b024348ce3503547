"""Memoising a mechanism for the run being predicted now.

One step-time prediction asks the same few questions of its run many times: the parameters a
pipeline rank holds are read by the optimizer step, the shard groups, the ZeRO gathers, the
gradient tail and the parameter all-gather. :func:`for_last_run` keeps a function's answers for
the last run object it was given, by identity: runs are frozen, so the same object gives the same
answers, and a new run starts a fresh memo. :func:`by_reads` keeps them across the strategies of one
problem that share the fields a mechanism declares it reads (``costmodel.specs.reads``). Each memo
is one tuple, replaced whole, so threads never read another run's or problem's answers.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

R = TypeVar("R")
_MISSING = object()


def for_last_run(fn: Callable[..., R]) -> Callable[..., R]:
    """``fn(run, *args)`` memoised on ``args`` for the last ``run`` it was called with (identity)."""
    last: tuple[Any, dict[tuple[Any, ...], Any]] = (None, {})

    @wraps(fn)
    def memoised(run: Any, *args: Any) -> R:
        nonlocal last
        memo = last
        if memo[0] is not run:
            memo = last = (run, {})
        hit = memo[1].get(args, _MISSING)
        if hit is _MISSING:
            hit = memo[1][args] = fn(run, *args)
        return hit

    return memoised


_MAX_ENTRIES = 1 << 17  # per function and problem: a sweep's distinct combinations, bounded
MEMOISED_BY_READS: list[Callable[..., Any]] = []
"""Every :func:`by_reads` function: their declared reads are a correctness promise, checked by a test."""


def by_reads(fn: Callable[..., R]) -> Callable[..., R]:
    """``fn(run, *args)`` memoised across the strategies of one problem that share the fields ``fn`` reads.

    ``fn`` declares the strategy fields it reads (``costmodel.specs.reads.reads``); the rest of the run
    (model, cluster, framework, sequence length) must be the same objects as the last call's, else the
    memo starts afresh.
    """
    fields = operator.attrgetter(*sorted(fn.reads))  # type: ignore[attr-defined]
    problem: tuple[Any, ...] = (None, None, None, None, {})

    @wraps(fn)
    def memoised(run: Any, *args: Any) -> R:
        nonlocal problem
        memo = problem
        if memo[0] is not run.model or memo[1] is not run.cluster or memo[2] is not run.framework \
                or memo[3] != run.seq_length or len(memo[4]) > _MAX_ENTRIES:
            memo = problem = (run.model, run.cluster, run.framework, run.seq_length, {})
        key = (fields(run.strategy), args)
        hit = memo[4].get(key, _MISSING)
        if hit is _MISSING:
            hit = memo[4][key] = fn(run, *args)
        return hit

    MEMOISED_BY_READS.append(memoised)
    return memoised
