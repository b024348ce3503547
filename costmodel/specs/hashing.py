"""Frozen specs hashed once.

A search looks its memos up by the model, GPU, cluster and framework of every strategy (operator
times, collectives, placements), and a frozen dataclass hashes all its fields on every lookup: a
GPU spec's forty-odd fields cost more than the lookup. :func:`hash_once` keeps the first hash on the
instance. Pickling leaves it out: string hashes differ between processes (``PYTHONHASHSEED``), so a
copy sent to a worker hashes itself again there.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T", bound=type)

_SLOT = "_hash_once"


def hash_once(cls: T) -> T:
    """Decorate a frozen dataclass (applied above ``@dataclass``) so that its hash is computed once per instance."""
    fields_hash = cls.__hash__
    if fields_hash is None or "__hash__" not in cls.__dict__:
        raise TypeError(f"hash_once needs a hashable dataclass. Got {cls.__name__} instead.")

    def __hash__(self: Any) -> int:
        state = self.__dict__
        value = state.get(_SLOT)
        if value is None:
            value = state[_SLOT] = fields_hash(self)  # the instance dict: frozen __setattr__ is bypassed
        return value

    def __getstate__(self: Any) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop(_SLOT, None)
        return state

    cls.__hash__ = __hash__  # type: ignore[assignment]
    cls.__getstate__ = __getstate__  # type: ignore[attr-defined]
    return cls
