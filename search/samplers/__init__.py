"""Searchers: TPE (default), NSGA-II (Pareto front) and the exhaustive sweep (ground truth)."""

from search.samplers._base import BaseSearcher
from search.samplers._exhaustive import ExhaustiveSearcher
from search.samplers._nsga import NSGAIISearcher
from search.samplers._tpe import TPESearcher

SAMPLERS = ("tpe", "nsga2", "exhaustive")

__all__ = ["SAMPLERS", "BaseSearcher", "ExhaustiveSearcher", "NSGAIISearcher", "TPESearcher"]
