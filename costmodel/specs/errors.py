"""Typed errors for user input, kept apart from bugs."""

from __future__ import annotations

from typing import Any


class SpecError(ValueError):
    """A run spec, catalog entry or argument is invalid.

    The message always has one shape: it names the field, the value given and
    what is allowed, on a single line.
    """

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"The {field!r} parameter must be {allowed}. Got {value!r} instead.")


def require_int(field: str, value: Any, minimum: int = 1) -> int:
    """Return ``value`` if it is an int >= ``minimum`` (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(field, value, f"an integer >= {minimum}")
    return value


def require_number(field: str, value: Any, minimum: float = 0.0, strict: bool = True) -> float:
    """Return ``value`` as float if it is a number > (or >=) ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field, value, "a number")
    ok = value > minimum if strict else value >= minimum
    if not ok:
        raise SpecError(field, value, f"a number {'>' if strict else '>='} {minimum}")
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
                            "a known key (" + ", ".join(sorted(allowed)) + ")")
