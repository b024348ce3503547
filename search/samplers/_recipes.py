"""Starting trials in the basins of the usual launch recipes.

The fastest strategies sit in a few basins that differ in several coupled knobs
at once: fully sharded data parallelism (no model parallelism, ZeRO-3, full
recomputation: torchtitan's FSDP recipe) and Megatron-style model parallelism
(tensor parallelism inside the node, the distributed optimizer, selective
recomputation). A one-knob climb does not cross from one to the other, and
TPE samples a narrow basin rarely (on Llama 3.1 405B over 2048 H100, 2 of its
first 150 trials were fitting FSDP strategies). Each recipe, in each precision
the space allows, is snapped to the nearest legal layout and, if it does not
fit, to its first memory-saving repair that does (``_polish._repairs``); the
search enqueues them as its first trials.
"""

from __future__ import annotations

import math
from typing import Any, Final

from costmodel.specs.strategy import Strategy
from search.objective import Evaluator
from search.samplers._polish import _repairs
from search.space import LAYOUT_KNOBS, StrategySpace

RECIPES: Final[tuple[dict[str, Any], ...]] = (
    {"tp": 1, "pp": 1, "cp": 1, "micro_batch_size": 1, "vpp": 1, "ep": 1, "sequence_parallel": False,
     "zero_stage": 3, "recompute": "full"},
    {"tp": 8, "pp": 1, "cp": 1, "micro_batch_size": 1, "vpp": 1, "ep": 1, "sequence_parallel": True,
     "zero_stage": 1, "recompute": "selective"},
)
# Memory-saving repairs tried, one after another, before a recipe is given up.
MAX_REPAIRS: Final = 4


def recipe_starts(space: StrategySpace, evaluator: Evaluator) -> list[Strategy]:
    """The fitting strategies nearest to each recipe in each allowed precision (distinct, in order)."""
    out: dict[Strategy, None] = {}
    for recipe in RECIPES:
        layout = _nearest_layout(space, recipe)  # precision is a setting: one layout for every precision
        for precision in space.choices.get("precision", ("bf16",)):
            strategy = _fit(_snap(space, {**recipe, "precision": precision}, layout), space, evaluator)
            if strategy is not None:
                out[strategy] = None
    return list(out)


def _snap(space: StrategySpace, recipe: dict[str, Any], layout: tuple[Any, ...] | None = None) -> Strategy:
    """``recipe`` on the legal layout nearest to it (``layout``, when the caller found it already)."""
    layout = _nearest_layout(space, recipe) if layout is None else layout
    values = dict(zip(LAYOUT_KNOBS, layout, strict=True))
    for knob, allowed in space.settings:
        values[knob] = recipe[knob] if recipe.get(knob) in allowed else allowed[0]
    return space.strategy(values)


def _nearest_layout(space: StrategySpace, recipe: dict[str, Any]) -> tuple[Any, ...]:
    """The legal layout nearest to ``recipe``'s degrees (log2 distance; the first of equals)."""
    terms: list[dict[Any, float] | None] = []  # per layout knob, each value's term (None: not counted)
    for index, knob in enumerate(LAYOUT_KNOBS):
        if knob == "dp" or knob not in recipe:  # a knob the recipe leaves to the space (etp)
            terms.append(None)
            continue
        values = {lay[index] for lay in space.layouts}
        terms.append({value: _term(knob, value, recipe[knob]) for value in values})
    counted = [(index, table) for index, table in enumerate(terms) if table is not None]

    def distance(layout: tuple[Any, ...]) -> float:
        total = 0.0
        for index, table in counted:
            total += table[layout[index]]
        return total

    return min(space.layouts, key=distance)


def _term(knob: str, value: Any, wanted: Any) -> float:
    """One knob's share of the distance from ``wanted`` to ``value``."""
    if isinstance(value, bool):
        return float(value != wanted)
    # extra pipeline stages are the costliest way to fit (bubble): weighed double
    return abs(math.log2(value) - math.log2(wanted)) * (2.0 if knob == "pp" else 1.0)


def _fit(strategy: Strategy, space: StrategySpace, evaluator: Evaluator) -> Strategy | None:
    """``strategy`` if it fits, else the first repair (breadth first, up to ``MAX_REPAIRS`` deep) that does."""
    frontier = [strategy]
    for _ in range(MAX_REPAIRS + 1):
        for candidate in frontier:
            if evaluator.fits(candidate):
                return candidate
        frontier = [r for s in frontier for r in _repairs(s, space.problem.num_gpus)
                    if r is not None and space.contains(r)]
        frontier = list(dict.fromkeys(frontier))[:64]
    return None
