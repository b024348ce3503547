"""The names a search accepts for its sampler and objective, in a module light enough for flag parsing.

``parplan search`` builds its ``--sampler`` choices and a study file is checked against these before
Optuna or the cost model is imported (start-up: a one-line error costs an interpreter, not a search).
``search.samplers`` and ``search.objective`` re-export them.
"""

from __future__ import annotations

from typing import Final

__all__ = ["OBJECTIVES", "SAMPLERS"]

SAMPLERS: Final = ("tpe", "nsga2", "exhaustive")
"""Searchers by name: TPE (the default), NSGA-II (the Pareto front), the exhaustive sweep (ground truth)."""
OBJECTIVES: Final = ("time", "pareto")
"""What one search minimises: the step time, or the step time vs peak memory front."""
