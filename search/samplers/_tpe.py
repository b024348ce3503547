"""Tree-structured Parzen Estimator search (the default)."""

from __future__ import annotations

import optuna

from search.samplers._optuna import OptunaSearcher


class TPESearcher(OptunaSearcher):
    """Seeded Optuna TPE minimising step time; infeasible trials are ranked by their constraint.

    Parameters
    ----------
    seed : int
        Sampler seed: the same seed gives the same trials.
    n_startup_trials : int
        Random trials before TPE models the space.
    """

    name = "tpe"

    def __init__(self, seed: int = 0, n_startup_trials: int = 10) -> None:
        self.seed = seed
        self.n_startup_trials = n_startup_trials

    def make_sampler(self) -> optuna.samplers.BaseSampler:
        return optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=self.n_startup_trials, multivariate=True)
