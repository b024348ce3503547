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
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000
"""Allocations between young-generation collections inside a search (CPython's default: 700)."""


@contextmanager
def fewer_collections(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Collect garbage less often inside the block (cycles are still collected); the thresholds
    before it are restored after it, also when it raises. A higher threshold already set, or 0
    (collection off), is kept."""
    before = gc.get_threshold()
    gc.set_threshold(0 if before[0] == 0 else max(young, before[0]), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
