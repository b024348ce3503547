"""The constraint layer over a table of strategies: every rule and the memory model, once per distinct input.

:func:`check_table` gives each strategy of a ``StrategyTable`` exactly the verdict
``constraints.check`` gives it alone: the same violations in the same order and the same peak
bytes, to the last bit. The formulas are the scalar ones. Each rule and each memory term declares
the strategy fields it reads (``costmodel.specs.reads``) and runs once per distinct combination of
them (``StrategyTable.evaluate``); numpy adds the terms per row in the order ``StageMemory.total_bytes``
and ``memory.other_bytes`` add them, and picks each row's peak stage as ``peak_stage_memory`` does.
:func:`check_many` is the entry point for a list of strategies: a table from ``TABLE_MIN_ROWS``
strategies on, one by one below.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from constraints.feasibility import check, memory_violation
from constraints.memory import (
    EAGER_BUFFERS,
    cuda_graph_bytes,
    layer_activation_bytes,
    model_state_bytes,
    peak_candidate_stages,
    stage_total_bytes,
)
from constraints.rules import RULES
from costmodel.specs.layout import layout_of
from costmodel.specs.reads import LAYOUT_FIELDS, ReadsView
from costmodel.specs.runspec import RunSpec
from costmodel.specs.strategy import Strategy
from costmodel.specs.strategy_table import StrategyTable, spread


@dataclass(frozen=True)
class TableVerdict:
    """Per row of a table: the violations (rules, then memory) and the worst stage's bytes."""

    violations: tuple[tuple[str, ...], ...]
    peak_bytes: np.ndarray
    peak_stage: np.ndarray
    usable_bytes: float
    memory_margin: float = 0.0

    def fits(self, row: int) -> bool:
        return not self.violations[row]


TABLE_MIN_ROWS = 256
"""Fewer strategies are checked one by one (``check_many``): a table's fixed cost per layout, stage and term
outweighs what grouping saves below about this many (llama3.1-70b / 8b and mixtral-8x7b on H100, contiguous
runs of a search space: the table is 2x slower at 64 rows, even at 256, 3-4x faster at 1,024)."""


CONTEXT_MEMOS = 16
"""Problem contexts whose check memos a process keeps (``context_memo``), least recently used dropped first.

A study's infeasible problems ask about the same contexts for each of their batch sizes: 405B on 32 GPUs
probes 64, 72, 80, 88, 96 and 128 GPUs for the fewest that fit, and so does each of its four other batches."""
CONTEXT_MEMO_ENTRIES = 400_000
"""Entries all kept memos may hold together (a few hundred bytes each); beyond it, whole contexts are dropped."""

_CONTEXTS: OrderedDict[tuple[Any, ...], dict[Any, Any]] = OrderedDict()
_CONTEXTS_LOCK = threading.Lock()


def context_memo(run: RunSpec) -> dict[Any, Any]:
    """The check memo (``check_table``'s ``memo``) of ``run``'s model, cluster, sequence and framework, shared
    by every table of that context in this process.

    A rule or memory term is a function of the run's model, cluster, sequence length, framework and the
    strategy fields it declares, and its memo key holds those fields' values. So one memo serves every
    problem of a context, whatever its batch size, bounds or margin (the margin is applied after the memo).
    """
    key = (run.model, run.cluster, run.seq_length, run.framework)
    with _CONTEXTS_LOCK:
        memo = _CONTEXTS.get(key)
        if memo is not None:
            _CONTEXTS.move_to_end(key)
            return memo
        while _CONTEXTS and (len(_CONTEXTS) >= CONTEXT_MEMOS
                             or sum(map(len, _CONTEXTS.values())) >= CONTEXT_MEMO_ENTRIES):
            _CONTEXTS.popitem(last=False)
        memo = _CONTEXTS[key] = {}
        return memo


def check_many(run: RunSpec, strategies: Sequence[Strategy], memory_margin: float = 0.0,
               memo: dict[Any, Any] | None = None) -> TableVerdict:
    """``constraints.check`` of each of ``strategies`` on ``run``'s problem, as a table when there are many
    (``memo``: as ``check_table``'s)."""
    if len(strategies) >= TABLE_MIN_ROWS:
        return check_table(run, StrategyTable(strategies), memory_margin, memo)
    verdicts = [check(run.with_strategy(s), memory_margin) for s in strategies]
    return TableVerdict(tuple(v.violations for v in verdicts), np.array([v.memory.total_bytes for v in verdicts]),
                        np.array([v.memory.stage for v in verdicts], dtype=np.int64),
                        run.cluster.usable_memory_bytes, memory_margin)


def check_table(run: RunSpec, table: StrategyTable, memory_margin: float = 0.0,
                memo: dict[Any, Any] | None = None) -> TableVerdict:
    """``constraints.check`` of every strategy of ``table`` on ``run``'s model, cluster, framework and
    sequence (``run.strategy`` itself is not read). ``memo`` keeps each rule's and memory term's results
    by the values of the fields it reads, for later tables of the same problem (a new one when not given)."""
    memo = {} if memo is None else memo
    found: list[list[str]] = [[] for _ in range(len(table))]
    for rule in RULES:
        messages, group = table.evaluate(_on(run, rule), rule.reads, memo=memo, key=rule)  # type: ignore[attr-defined]
        broken = [g for g, message in enumerate(messages) if message is not None]
        for row in np.flatnonzero(np.isin(group, broken)):
            found[row].append(messages[group[row]])
    peak, stage = peak_memory(run, table, memo)
    usable, gpu = run.cluster.usable_memory_bytes, run.cluster.gpu.name
    for row, (total, at) in enumerate(zip(peak.tolist(), stage.tolist(), strict=True)):
        if (message := memory_violation(total, at, usable, gpu, memory_margin)) is not None:
            found[row].append(message)
    return TableVerdict(tuple(map(tuple, found)), peak, stage, usable, memory_margin)


def peak_memory(run: RunSpec, table: StrategyTable,
                memo: dict[Any, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(peak bytes, peak stage) per row: ``peak_stage_memory(run.with_strategy(row))``'s total and stage.

    Each pipeline rank that is a peak candidate of some row's layout (``peak_candidate_stages``) is evaluated
    once, over all the rows it is a candidate for, whatever their layouts. Ranks go in increasing order and
    a later one takes a row's peak only when strictly larger: the first of equal maxima, as ``max()`` keeps
    it over a layout's candidates (in rank order). ``memo`` keeps per-term results between calls for the
    same ``run`` (a new one when not given)."""
    memo = {} if memo is None else memo
    peak = np.full(len(table), -np.inf)
    at = np.zeros(len(table), dtype=np.int64)
    firsts, layout_group = table.groups(LAYOUT_FIELDS)
    candidates = [peak_candidate_stages(layout_of(run.model, table.strategies[first])) for first in firsts]
    for stage in sorted(set().union(*candidates)):
        rows = np.flatnonzero(np.isin(layout_group, [g for g, stages in enumerate(candidates) if stage in stages]))
        totals = _stage_total_bytes(run, table, rows, stage, memo)
        larger = totals > peak[rows]
        peak[rows[larger]] = totals[larger]
        at[rows[larger]] = stage
    return peak, at


def _stage_total_bytes(run: RunSpec, table: StrategyTable, rows: np.ndarray, stage: int,
                       memo: dict[Any, Any]) -> np.ndarray:
    """``stage_memory(run, stage).total_bytes`` of each of ``rows``: the same terms, added in its order."""

    def per_row(fn: Any) -> tuple[list[Any], np.ndarray]:
        return table.evaluate(_on(run, fn, stage), fn.reads, rows, memo=memo, key=(fn, stage))

    states, group = per_row(model_state_bytes)
    weights, grads, optimizer = (np.asarray([s[i] for s in states], dtype=np.float64)[group] for i in range(3))
    activations = spread(*per_row(layer_activation_bytes))
    other = np.zeros(len(rows))
    for term in EAGER_BUFFERS:
        other += spread(*per_row(term))
    graphs = np.zeros(len(rows))
    captured = table.rows_where("cuda_graphs", lambda scope: scope != "none", rows)
    for k in np.flatnonzero(np.isin(rows, captured)):  # depends on the row's eager buffers: once per row
        view = ReadsView(table.strategies[rows[k]], cuda_graph_bytes.reads)  # type: ignore[attr-defined]
        graphs[k] = cuda_graph_bytes(_with_strategy(run, view), stage, float(other[k]))
    return stage_total_bytes(weights, grads, optimizer, activations, other + graphs)


def _on(run: RunSpec, fn: Callable[..., Any], *args: Any) -> Callable[[ReadsView], Any]:
    """``fn`` of ``run`` with the strategy a view gives (and ``args``)."""
    return lambda view: fn(_with_strategy(run, view), *args)


def _with_strategy(run: RunSpec, view: ReadsView) -> RunSpec:
    """``run`` with ``view`` as its strategy (a shallow copy: the rest of ``run`` is checked already)."""
    copied = object.__new__(type(run))  # copy.copy's shallow copy, without its reduce protocol (~5 us a call)
    vars(copied).update(vars(run), strategy=view)
    return copied
