"""Tree-structured Parzen Estimator search (the default), finished by a local polish."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import optuna

from search.objective import Evaluator, strategy_from_attrs
from search.samplers._memo_tpe import SplitMemoTPESampler
from search.samplers._optuna import OptunaSearcher, finished, finished_trials
from search.samplers._polish import polish
from search.samplers._recipes import recipe_starts
from search.space import StrategySpace


class TPESearcher(OptunaSearcher):
    """Seeded multivariate TPE minimising step time, then a hill-climb from its best.

    TPE runs ``1 - polish_fraction`` of the trials. The rest go to the launch
    recipes' strategies (``search.samplers._recipes``) and a hill-climb from the
    best so far (``search.samplers._polish``), each neighbour an enqueued trial
    of the same study; trials left over go back to TPE.

    Parameters
    ----------
    seed : int
        Sampler seed: the same seed gives the same trials.
    n_startup_trials : int
        Random trials before TPE models the space.
    polish_fraction : float
        Share of the trials reserved for the hill-climb (0 disables it).
    """

    name = "tpe"

    def __init__(self, seed: int = 0, n_startup_trials: int = 10, polish_fraction: float = 0.25) -> None:
        self.seed = seed
        self.n_startup_trials = n_startup_trials
        self.polish_fraction = polish_fraction

    def make_inner_sampler(self, seed: int) -> optuna.samplers.BaseSampler:
        with warnings.catch_warnings():  # group=True is marked experimental; it is what handles our conditional knobs
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return SplitMemoTPESampler(seed=seed, n_startup_trials=self.n_startup_trials,
                                       multivariate=True, group=True)

    def reseed_inner(self, sampler: optuna.samplers.BaseSampler, seed: int) -> bool:
        # What a TPESampler keeps between trials and a proposal depends on is its two random generators: _gamma
        # is set once to the study type's default, the group search space is HistorySeededSampler's and
        # recomputed (_search_space_group), and _search_space is unused with group=True. A new sampler seeds
        # each generator with a LazyRandomState(seed): RandomState(), which draws OS entropy, then .seed(seed),
        # which resets the whole state. Building one per trial cost ~0.5 ms. Checked: tests/search/test_reseed.py
        # (against a new sampler per trial) and test_memo_tpe.py (against stock TPE, both reseeded).
        if not isinstance(sampler, optuna.samplers.TPESampler):
            return False
        sampler._rng.rng.seed(seed)  # noqa: SLF001 - the attributes TPESampler.__init__ seeds
        sampler._random_sampler._rng.rng.seed(seed)  # noqa: SLF001
        return True

    def _run(self, study: Any, space: StrategySpace, evaluator: Evaluator, total: int,
             optimize: Callable[[int], None]) -> None:
        # Each phase is decided from the finished trials alone, so a resumed run picks up the phase it was in.
        optimize(total - math.floor(total * self.polish_fraction) - finished(study))
        # The recipes' basins, unless TPE already tried them: the climb starts from the best of all.
        tried = {strategy_from_attrs(t.user_attrs, space) for t in finished_trials(study)}
        starts = [s for s in recipe_starts(space, evaluator) if s not in tried][:max(0, total - finished(study))]
        for strategy in starts:
            study.enqueue_trial(space.knobs_of(strategy), skip_if_exists=False)
        optimize(len(starts))
        polish(study, optimize, space, evaluator, total)
        optimize(total - finished(study))
