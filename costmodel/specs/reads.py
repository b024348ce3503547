"""What a mechanism of the cost model reads of a strategy, declared and enforced.

A mechanism (a memory term, a legality rule) is a scalar function of a run. It declares the strategy
fields it reads with :func:`reads`; evaluated on a :class:`ReadsView`, reading any other field raises
:class:`UndeclaredRead`, also inside the derived properties (``num_microbatches`` reads
``global_batch_size``, ``micro_batch_size`` and ``dp``). So a result is the same for every strategy
that shares the declared fields' values, and ``costmodel.specs.strategy_table`` evaluates a whole
table of strategies once per distinct combination of them. No numpy here: the rules and the memory
model import this at start-up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from costmodel.specs.strategy import Strategy

F = TypeVar("F", bound=Callable[..., Any])

LAYOUT_FIELDS = ("pp", "vpp", "pipeline_layout", "first_stage_layers", "last_stage_layers",
                 "account_for_embedding", "account_for_loss")
"""What ``costmodel.specs.layout.layout_of`` reads: the pipeline layout's fields."""
_DERIVED = tuple(name for name, value in vars(Strategy).items() if isinstance(value, property))
"""Strategy's derived properties (``num_microbatches`` ...), which a view computes through its guarded fields."""


def reads(*fields: str) -> Callable[[F], F]:
    """Declare the strategy fields ``fn`` reads (``fn.reads``), for :meth:`StrategyTable.evaluate`."""
    unknown = [f for f in fields if f not in Strategy.__dataclass_fields__]
    if unknown:
        raise ValueError(f"The 'reads' parameter must name Strategy fields. Got {', '.join(unknown)} instead.")

    def declare(fn: F) -> F:
        fn.reads = frozenset(fields)  # type: ignore[attr-defined]
        return fn

    return declare


class UndeclaredRead(LookupError):
    """A mechanism read a strategy field it does not declare (not an ``AttributeError``, so that ``hasattr``
    and ``getattr`` with a default cannot swallow it)."""


class ReadsView:
    """A strategy through which only the fields ``allowed`` can be read (derived properties included).

    What the guard cannot see: a view is not a ``Strategy`` (``isinstance``), hashes by identity and is
    compared by identity, so a mechanism must read a strategy through its attributes only.
    """

    __slots__ = ("_strategy", "_allowed")

    def __init__(self, strategy: Strategy, allowed: frozenset[str]) -> None:
        object.__setattr__(self, "_strategy", strategy)
        object.__setattr__(self, "_allowed", allowed)

    def __getattr__(self, name: str) -> Any:
        if name in self._allowed:
            return getattr(self._strategy, name)
        if name in Strategy.__dataclass_fields__:
            raise UndeclaredRead(f"strategy.{name} is read but not declared (declared: "
                                 f"{', '.join(sorted(self._allowed))}): add it to the function's reads()")
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a ReadsView is read-only")

    def replaced(self, **changes: Any) -> ReadsView:
        """The view of the strategy with ``changes``; the changed fields become readable (they no longer
        come from the row)."""
        return ReadsView(replace(self._strategy, **changes), self._allowed | frozenset(changes))


for _name in _DERIVED:  # the derived properties, computed through the guarded fields
    setattr(ReadsView, _name, property(getattr(Strategy, _name).fget))


def replaced(strategy: Strategy | ReadsView, **changes: Any) -> Any:
    """``dataclasses.replace`` for a strategy or a :class:`ReadsView` of one."""
    if isinstance(strategy, ReadsView):
        return strategy.replaced(**changes)
    return replace(strategy, **changes)
