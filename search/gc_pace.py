"""How often Python's cyclic garbage collector runs while a search fills its memos.

A search builds millions of small objects that live until it ends (strategies, operators, memo
entries) and almost no reference cycles. CPython 3.11 scans every tracked object in a full
(generation 2) collection, which it starts each time the long-lived heap has grown by a quarter
(``gc`` module docs, "gc.set_threshold"; Modules/gcmodule.c ``long_lived_pending``). The exhaustive
sweep of 70B on 256 H100 (171,000 strategies) ran 17 full collections, about 10% of its 22.5 s; with
a young-generation threshold of 50,000 allocations it runs one (20.7 s, measured on this project's
2-core VM). A 200-trial TPE study problem spent about 7% of its CPU in collections.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000
"""Allocations between young-generation collections inside a search (CPython's default: 700)."""


_LOCK = threading.Lock()
_inside = 0  # blocks open now, in any thread
_before: tuple[int, ...] = ()  # the thresholds the first of them found


@contextmanager
def fewer_collections(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Collect garbage less often inside the block (cycles are still collected); the thresholds
    before it are restored after it, also when it raises. A higher threshold already set, or 0
    (collection off), is kept. The thresholds are the process's: with blocks open in several
    threads, the first sets them and the last one out restores them."""
    global _inside, _before
    with _LOCK:
        if not _inside:
            _before = gc.get_threshold()
            gc.set_threshold(0 if _before[0] == 0 else max(young, _before[0]), *_before[1:])
        _inside += 1
    try:
        yield
    finally:
        with _LOCK:
            _inside -= 1
            if not _inside:
                gc.set_threshold(*_before)
