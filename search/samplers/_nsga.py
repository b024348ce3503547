"""NSGA-II for the two-objective front: step time versus peak memory per GPU."""

from __future__ import annotations

import optuna

from search.samplers._optuna import OptunaSearcher


class NSGAIISearcher(OptunaSearcher):
    """Seeded Optuna NSGA-II minimising (step time, peak memory) under the memory constraint.

    Parameters
    ----------
    seed : int
        Sampler seed.
    population_size : int
        Strategies per generation.
    """

    name = "nsga2"
    objective = "pareto"
    directions = ("minimize", "minimize")
    default_trials = 300

    def __init__(self, seed: int = 0, population_size: int = 30) -> None:
        self.seed = seed
        self.population_size = population_size

    def make_inner_sampler(self, seed: int) -> optuna.samplers.BaseSampler:
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=self.population_size)
