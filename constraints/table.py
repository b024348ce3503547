"""The constraint layer over a table of strategies: every rule and the memory model, once per distinct input.

:func:`check_table` gives each strategy of a ``StrategyTable`` exactly the verdict
``constraints.check`` gives it alone: the same violations in the same order and the same peak
bytes, to the last bit. The formulas are the scalar ones. Each rule and each memory term declares
the strategy fields it reads (``costmodel.specs.reads``) and runs once per distinct combination of
them (``StrategyTable.evaluate``); numpy adds the terms per row in the order ``StageMemory.total_bytes``
and ``memory.other_bytes`` add them, and picks each row's peak stage as ``peak_stage_memory`` does.
"""

from __future__ import annotations

from collections.abc import Callable
import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from constraints.feasibility import memory_violation
from constraints.memory import (
    EAGER_BUFFERS,
    cuda_graph_bytes,
    layer_activation_bytes,
    model_state_bytes,
    peak_candidate_stages,
)
from constraints.rules import RULES
from costmodel.specs.layout import layout_of
from costmodel.specs.reads import LAYOUT_FIELDS, ReadsView
from costmodel.specs.runspec import RunSpec
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


def check_table(run: RunSpec, table: StrategyTable, memory_margin: float = 0.0) -> TableVerdict:
    """``constraints.check`` of every strategy of ``table`` on ``run``'s model, cluster, framework and
    sequence (``run.strategy`` itself is not read)."""
    found: list[list[str]] = [[] for _ in range(len(table))]
    for rule in RULES:
        messages, group = table.evaluate(_on(run, rule), rule.reads, key=rule)  # type: ignore[attr-defined]
        broken = [g for g, message in enumerate(messages) if message is not None]
        for row in np.flatnonzero(np.isin(group, broken)):
            found[row].append(messages[group[row]])
    peak, stage = peak_memory(run, table)
    usable = run.cluster.usable_memory_bytes
    budget = usable * (1.0 - memory_margin)
    for row in np.flatnonzero(peak > budget):
        found[row].append(memory_violation(float(peak[row]), int(stage[row]), usable, run.cluster.gpu.name,
                                           memory_margin))
    return TableVerdict(tuple(map(tuple, found)), peak, stage, usable, memory_margin)


def peak_memory(run: RunSpec, table: StrategyTable) -> tuple[np.ndarray, np.ndarray]:
    """(peak bytes, peak stage) per row: ``peak_stage_memory(run.with_strategy(row))``'s total and stage."""
    peak = np.empty(len(table))
    at = np.empty(len(table), dtype=np.int64)
    firsts, layout_group = table.groups(LAYOUT_FIELDS)
    for g, first in enumerate(firsts):
        rows = np.flatnonzero(layout_group == g)
        stages = peak_candidate_stages(layout_of(run.model, table.strategies[first]))
        totals = np.vstack([_stage_total_bytes(run, table, rows, st) for st in stages])
        worst = np.argmax(totals, axis=0)  # the first of equal maxima, as max() keeps it
        peak[rows] = totals[worst, np.arange(len(rows))]
        at[rows] = np.asarray(stages)[worst]
    return peak, at


def _stage_total_bytes(run: RunSpec, table: StrategyTable, rows: np.ndarray, stage: int) -> np.ndarray:
    """``stage_memory(run, stage).total_bytes`` of each of ``rows``, summed in its order."""
    states, group = table.evaluate(_on(run, model_state_bytes, stage), model_state_bytes.reads, rows,
                                    key=(model_state_bytes, stage))
    weights, grads, optimizer = (np.asarray([s[i] for s in states], dtype=np.float64)[group] for i in range(3))
    activations = spread(*table.evaluate(_on(run, layer_activation_bytes, stage), layer_activation_bytes.reads,
                                         rows, key=(layer_activation_bytes, stage)))
    other = np.zeros(len(rows))
    for term in EAGER_BUFFERS:
        other += spread(*table.evaluate(_on(run, term, stage), term.reads, rows,  # type: ignore[attr-defined]
                                        key=(term, stage)))
    graphs = np.zeros(len(rows))
    captured = table.rows_where("cuda_graphs", lambda scope: scope != "none", rows)
    for k in np.flatnonzero(np.isin(rows, captured)):  # depends on the row's eager buffers: once per row
        view = ReadsView(table.strategies[rows[k]], cuda_graph_bytes.reads)  # type: ignore[attr-defined]
        graphs[k] = cuda_graph_bytes(_with_strategy(run, view), stage, float(other[k]))
    return weights + grads + optimizer + activations + (other + graphs)


def _on(run: RunSpec, fn: Callable[..., Any], *args: Any) -> Callable[[ReadsView], Any]:
    """``fn`` of ``run`` with the strategy a view gives (and ``args``)."""
    return lambda view: fn(_with_strategy(run, view), *args)


def _with_strategy(run: RunSpec, view: ReadsView) -> RunSpec:
    """``run`` with ``view`` as its strategy (a shallow copy: the rest of ``run`` is checked already)."""
    copied = copy.copy(run)
    object.__setattr__(copied, "strategy", view)
    return copied
