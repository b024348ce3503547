"""The names a search accepts for its sampler and objective, in a module light enough for flag parsing.

``parplan search`` builds its ``--sampler`` choices and a study file is checked against these before
Optuna or the cost model is imported (start-up: a one-line error costs an interpreter, not a search).
``search.samplers`` and ``search.objective`` re-export them.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_EXHAUSTIVE_LIMIT", "OBJECTIVES", "SAMPLERS"]

SAMPLERS: Final = ("auto", "tpe", "nsga2", "exhaustive")
"""Searchers by name: ``auto`` (``parplan search``'s default: the exhaustive sweep where the space is small
enough, ``search.run.resolve_sampler``), TPE, NSGA-II (the Pareto front), the exhaustive sweep (ground truth)."""
DEFAULT_EXHAUSTIVE_LIMIT: Final = 30_000
"""``auto`` sweeps spaces of at most this many strategies. The sweep evaluates about 3,000 strategies per second
per core (``benchmarks/search.py --profile``: 70B on 256 H100, 171,000 strategies in 56 s on one core), so
the limit keeps a sweep at about 10 s on one core, near what 200 TPE trials take; a vectorised step time
(issue 18) would raise it."""
OBJECTIVES: Final = ("time", "pareto")
"""What one search minimises: the step time, or the step time vs peak memory front."""
