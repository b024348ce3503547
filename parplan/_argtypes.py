"""Typed ``argparse`` values: each refuses zero, negatives, NaN and inf unless its range allows them.

Every numeric flag of every command takes one of these as ``type=``. argparse
reports a refused value as ``argument --trials: must be an integer in [1, ...].
Got '0' instead.`` on one line, and ``parplan.cli`` exits with 2. Study flags
use them too (``--claim-ttl``, ``--poll``: :func:`positive_number`;
``--max-problems``: :func:`positive_int`; ``--n-jobs``: :func:`jobs`).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from costmodel.specs.errors import MAX_INT, MAX_NUMBER, quote


def _refuse(text: str, allowed: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"must be {allowed}. Got {quote(text)} instead")


def int_in(minimum: int = 1, maximum: int = MAX_INT) -> Callable[[str], int]:
    """A parser of integers in [``minimum``, ``maximum``] (``"8"``; not ``"8.0"``, ``"1e3"`` or ``""``)."""
    allowed = f"an integer in [{minimum}, {maximum}]"

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise _refuse(text, allowed) from None
        if not minimum <= value <= maximum:
            raise _refuse(text, allowed)
        return value

    parse.__name__ = "integer"
    return parse


def number_in(minimum: float = 0.0, maximum: float = MAX_NUMBER, strict: bool = True) -> Callable[[str], float]:
    """A parser of finite numbers > (``strict``) or >= ``minimum`` and <= ``maximum``."""
    allowed = f"a number {'>' if strict else '>='} {minimum:g} and <= {maximum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _refuse(text, allowed) from None
        if not math.isfinite(value) or not (value > minimum if strict else value >= minimum) or value > maximum:
            raise _refuse(text, allowed)
        return value

    parse.__name__ = "number"
    return parse


def int_list(minimum: int = 1, maximum: int = MAX_INT) -> Callable[[str], tuple[int, ...]]:
    """A parser of comma lists of integers in range (``"8,16,32"``); an empty item is refused."""
    one = int_in(minimum, maximum)
    allowed = f"an integer in [{minimum}, {maximum}] or a comma list of them"

    def parse(text: str) -> tuple[int, ...]:
        items = text.split(",")
        if any(not item.strip() for item in items):
            raise _refuse(text, allowed + " with no empty item")
        try:
            return tuple(one(item) for item in items)
        except argparse.ArgumentTypeError:
            raise _refuse(text, allowed) from None

    parse.__name__ = "integer list"
    return parse


positive_int = int_in(1)
"""Integers >= 1 (counts, sizes, bounds)."""
non_negative_int = int_in(0)
"""Integers >= 0."""
positive_number = number_in(0.0)
"""Finite numbers > 0 (tokens, prices, days, seconds)."""
seed = int_in(0, 2**32 - 1)
"""Sampler seeds: what NumPy's random state accepts."""


def jobs(text: str) -> int:
    """A process count: a positive integer, or -1 for one per CPU."""
    if text.strip() == "-1":
        return -1
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise _refuse(text, f"-1 (one per CPU) or an integer in [1, {MAX_INT}]") from None
