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
DEFAULT_EXHAUSTIVE_LIMIT: Final = 50_000
"""``auto`` sweeps spaces of at most this many strategies: the exact optimum of the cost model, in about 15 s on
two cores (a sweep runs 3,100-6,700 strategies/s there, ``benchmarks/search.py``, 2026-12-02). Under
``parplan search``'s default memory margin TPE (200 trials and the hill-climb) picked 10.314 s for GPT-NeoX-20B on
128 A100 (34,320 strategies) where the sweep finds 9.975 s (3.4% faster, swept in 9.3 s); on Llama-3.1-70B on 256
H100 (171,000) and Qwen2.5-72B on 512 H200 (221,712) it found the sweep's optimum, which took 23 and 48 s. Larger
spaces get TPE unless ``--exhaustive-limit`` is raised."""
OBJECTIVES: Final = ("time", "pareto")
"""What one search minimises: the step time, or the step time vs peak memory front."""
