"""Many strategies of one problem as one table, and each mechanism evaluated once per distinct input.

A mechanism declares the strategy fields it reads (``costmodel.specs.reads``).
:meth:`StrategyTable.evaluate` groups the table's rows by the values of those fields, calls the
mechanism once per group on a guarded view of the group's first row, and spreads the results back
over the rows with numpy. The formula exists once (the scalar path calls it directly), and a sweep
of 171,000 strategies calls it a few thousand times. The view refuses undeclared fields, so the
grouping is exact, not an approximation.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from operator import attrgetter
from typing import Any, Protocol, runtime_checkable

import numpy as np

from costmodel.specs.reads import ReadsView
from costmodel.specs.strategy import Strategy

_MAX_CODE = 1 << 40  # joint codes are re-numbered before they could overflow int64
_PLAIN = frozenset({bool, int, float, str, type(None)})
"""Types whose values are equal only within the type, but for the numeric ones among themselves."""
_NUMERIC = frozenset({bool, int, float})


@runtime_checkable
class ColumnRows(Protocol):
    """Rows that give a field's column without building their strategies (``search.space.SpaceRows``).

    ``column(field)`` returns (values, index): with ``index`` None, one value per row; else row ``i``'s
    value is ``values[index[i]]`` (each value once per source the rows share, e.g. per layout).
    ``rows[i]`` is the strategy of row ``i``, exactly as ``Strategy(...)`` builds it.
    """

    def column(self, field: str) -> tuple[list[Any], np.ndarray | None]: ...

    def __getitem__(self, row: int) -> Strategy: ...

    def __len__(self) -> int: ...


class StrategyTable:
    """Strategies of one problem as columns (one per field, built on first use).

    Parameters
    ----------
    strategies : sequence of Strategy, or ColumnRows
        The rows, in order (``ColumnRows``: read column by column, a strategy built only for a row read).
    """

    def __init__(self, strategies: Iterable[Strategy] | ColumnRows) -> None:
        # rows that give their columns (ColumnRows) are kept as they are: a Strategy is built only for a row read
        self.strategies: Sequence[Strategy] = strategies if isinstance(strategies, ColumnRows) else tuple(strategies)
        self._codes: dict[str, tuple[np.ndarray, tuple[Any, ...]]] = {}
        self._keys: dict[str, tuple[Any, ...]] = {}  # per field, its distinct values with their types (memo keys)

    def __len__(self) -> int:
        return len(self.strategies)

    def codes(self, field: str) -> tuple[np.ndarray, tuple[Any, ...]]:
        """Per row, the index of its value of ``field`` in the distinct values (the second item)."""
        hit = self._codes.get(field)
        if hit is None:
            if isinstance(self.strategies, ColumnRows):
                column, index = self.strategies.column(field)
            else:
                column, index = list(map(attrgetter(field), self.strategies)), None
            kinds = set(map(type, column))
            typed = not kinds <= _PLAIN or len(kinds & _NUMERIC) > 1
            if typed:  # keyed by type too: 1 and 1.0 (a capacity factor given either way) hash alike but are two
                column = [(v.__class__, v) for v in column]
            distinct = tuple(dict.fromkeys(column))
            position = {v: i for i, v in enumerate(distinct)}
            codes = np.fromiter(map(position.__getitem__, column), dtype=np.int64, count=len(column))
            if index is not None:  # the column held each source's value once: spread them over the rows
                codes = codes[index]
            hit = self._codes[field] = (codes, tuple(v for _, v in distinct) if typed else distinct)
            # memo keys carry the type always: another table's column may hold 1.0 where this one holds 1
            self._keys[field] = distinct if typed else tuple((v.__class__, v) for v in distinct)
        return hit

    def rows_where(self, field: str, keep: Callable[[Any], bool], rows: np.ndarray | None = None) -> np.ndarray:
        """The rows of ``rows`` (default all) whose value of ``field`` passes ``keep``."""
        codes, values = self.codes(field)
        rows = np.arange(len(self)) if rows is None else rows
        return rows[np.isin(codes[rows], [i for i, v in enumerate(values) if keep(v)])]

    def groups(self, fields: Iterable[str], rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(first row of each group, group of each row) of ``rows`` (default all) grouped by ``fields``' values.

        Groups are numbered in the order of their first row, so iterating them visits rows in table order.
        """
        rows = np.arange(len(self)) if rows is None else rows
        joint = np.zeros(len(rows), dtype=np.int64)
        for field in sorted(fields):
            codes, values = self.codes(field)
            size = max(len(values), 1)
            if int(joint.max(initial=0)) * size >= _MAX_CODE:
                joint = np.unique(joint, return_inverse=True)[1].astype(np.int64)
            joint = joint * size + codes[rows]
        _, first, inverse = np.unique(joint, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # renumber groups by first appearance
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        return rows[first[order]], rank[inverse.reshape(-1)]

    def evaluate(self, fn: Callable[[ReadsView], Any], fields: frozenset[str], rows: np.ndarray | None = None,
                 memo: dict[Hashable, Any] | None = None, key: Hashable = None) -> tuple[list[Any], np.ndarray]:
        """``fn`` of every row of ``rows`` (default all): (one result per group, group of each row).

        ``fn`` is called once per distinct combination of ``fields``, on a :class:`ReadsView` of the
        group's first row that reads ``fields`` only. With a ``memo`` (the caller's, for one problem: the
        same model, cluster, framework and sequence) and a ``key`` naming ``fn`` and every other argument
        it takes, results are kept in ``memo`` by the fields' values and reused by later calls with the
        same key, for other rows of this table and for other tables of the problem.
        """
        first, group = self.groups(fields, rows)
        if memo is None:
            return [fn(ReadsView(self.strategies[i], fields)) for i in first], group
        ordered = sorted(fields)
        columns = [(self.codes(f)[0], self._keys[f]) for f in ordered]
        values = []
        for i in first:
            memo_key = (key, tuple(ordered), tuple(keys[c[i]] for c, keys in columns))
            hit = memo.get(memo_key, _MISSING)
            if hit is _MISSING:
                hit = memo[memo_key] = fn(ReadsView(self.strategies[i], fields))
            values.append(hit)
        return values, group


_MISSING = object()


def spread(values: Sequence[Any], group: np.ndarray) -> np.ndarray:
    """Per-group float ``values`` as one value per row."""
    return np.asarray(values, dtype=np.float64)[group]
