"""Searchers: TPE (default), NSGA-II (Pareto front) and the exhaustive sweep (ground truth)."""

from search.choices import SAMPLERS  # defined where flag parsing reads it without Optuna
from search.samplers._base import BaseSearcher
from search.samplers._exhaustive import ExhaustiveSearcher
from search.samplers._nsga import NSGAIISearcher
from search.samplers._tpe import TPESearcher

__all__ = ["SAMPLERS", "BaseSearcher", "ExhaustiveSearcher", "NSGAIISearcher", "TPESearcher"]
