"""Typed errors for user input, kept apart from bugs."""

from __future__ import annotations

import math
import reprlib
import difflib
from typing import Any

QUOTE_CHARS = 80
"""Longest quoted field or value in an error line (a 10 MB value must not make a 10 MB line)."""
MAX_INT = 2**31 - 1
"""Default upper bound of integer fields: far beyond any real model or job, and small enough that
divisor and layout enumeration (O(sqrt n)) stays instant."""
MAX_NUMBER = 1e18
"""Default upper bound of real-valued fields: far above any physical figure in catalog units
(TFLOP/s, GB/s, GiB, microseconds), so conversions to SI units (x 1e12) and products stay finite."""

_QUOTE = reprlib.Repr()
# reprlib bounds the work as well as the text: a huge nested list is never rendered in full.
_QUOTE.maxstring = _QUOTE.maxother = _QUOTE.maxlong = QUOTE_CHARS
_QUOTE.maxlist = _QUOTE.maxtuple = _QUOTE.maxdict = _QUOTE.maxset = 8
_QUOTE.maxlevel = 3


def quote(value: Any) -> str:
    """``repr(value)`` in at most ``QUOTE_CHARS`` characters, with ``...`` where it was cut."""
    try:
        text = _QUOTE.repr(value)
    except ValueError:  # an int past Python's 4300-digit str() limit
        text = f"<an integer of {value.bit_length()} bits>"
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS - 3] + "..."


class SpecError(ValueError):
    """A run spec, catalog entry or argument is invalid.

    The message always has one shape: it names the field, the value given and
    what is allowed, on a single line; field and value are quoted with
    :func:`quote` (at most 80 characters each).
    """

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        allowed = " ".join(str(allowed).split())  # one line, whatever a parser's message held
        super().__init__(f"The {quote(field)} parameter must be {allowed}. Got {quote(value)} instead.")


def require_int(field: str, value: Any, minimum: int = 1, maximum: int = MAX_INT) -> int:
    """Return ``value`` if it is an int in [``minimum``, ``maximum``].

    Bools and floats are refused, integral ones (``8.0``) too, so that YAML and
    JSON files are read alike.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise SpecError(field, value, f"an integer in [{minimum}, {maximum}]")
    return value


def require_number(field: str, value: Any, minimum: float = 0.0, strict: bool = True,
                   maximum: float = MAX_NUMBER) -> float:
    """Return ``value`` as float if it is a number > (or >=) ``minimum`` and <= ``maximum``.

    NaN and inf are refused (NaN fails every comparison, so it is checked by
    what it is), and so are strings such as ``"1.0e308"``.
    """
    allowed = f"a number {'>' if strict else '>='} {minimum:g} and <= {maximum:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not math.isfinite(value)):
        raise SpecError(field, value, allowed)
    if not (value > minimum if strict else value >= minimum) or value > maximum:
        raise SpecError(field, value, allowed)
    return float(value)


def require_choice(field: str, value: Any, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``."""
    if value not in choices:
        raise SpecError(field, value, "one of " + ", ".join(choices))
    return value


def require_bool(field: str, value: Any) -> bool:
    """Return ``value`` if it is a bool."""
    if not isinstance(value, bool):
        raise SpecError(field, value, "true or false")
    return value


def reject_unknown_keys(section: str, mapping: dict[str, Any], allowed: set[str] | frozenset[str]) -> None:
    """Raise on the first key of ``mapping`` that is not in ``allowed``."""
    for key in mapping:
        if key not in allowed:
            raise SpecError(f"{section}.{key}" if section else str(key), key,
                            "a known key (" + choices_hint(str(key), sorted(allowed)) + ")")


def choices_hint(value: str, choices: list[str] | tuple[str, ...], see: str = "docs/run_spec.md",
                 limit: int = 8) -> str:
    """The allowed values for an error line: all of them when few, else the closest ones and where to look.

    A catalog of 40 names in one error line buries the answer; the nearest spellings are what a
    user who made a typo needs.
    """
    if len(choices) <= limit:
        return ", ".join(choices)
    needle = value.lower()
    close = [c for c in choices if needle and needle in c.lower()][:3] or difflib.get_close_matches(
        value, choices, n=3, cutoff=0.5)
    nearest = f"closest: {', '.join(close)}; " if close else ""
    return f"{nearest}{len(choices)} in all, see {see}"
