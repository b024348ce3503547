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
DEFAULT_EXHAUSTIVE_LIMIT: Final = 500_000
"""``auto`` sweeps spaces of at most this many strategies: the exact optimum of the cost model. Under ``parplan
search``'s default memory margin (``benchmarks/search.py --cli-margin``, 2026-12-02) TPE with 200 trials and the
hill-climb misses the optimum by more than 2% on five of its thirteen problems, all below this limit: GPT-3 175B on
1,024 A100 by 7.2% (310,704 strategies), Llama-3.1-405B on 2,048 H100 by 7.4% (413,760), GPT-NeoX-20B on 128 A100
by 3.4%, Llama-3.1-8B on 8 H100 by 4.0% and 70B on 1,024 H100 by 2.3%. The two larger spaces (MoE, 0.9 and 1.6
million) are within 0.1% with TPE. A sweep runs 11,800-15,200 strategies/s on two cores (2026-12-07, second
session: 171,000 in 12.8 s, 310,704 in 26.4 s, 413,760 in 27.2 s; 16.6, 38.4 and 43.5 s at the session's start,
26, 69 and 69 s the session before), with a progress line."""
OBJECTIVES: Final = ("time", "pareto")
"""What one search minimises: the step time, or the step time vs peak memory front."""
