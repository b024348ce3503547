"""Shared loop of the Optuna-backed searchers (TPE, NSGA-II), and what makes a stored study resume exactly.

A search interrupted (Ctrl-C, ``kill -9``) and re-run must end where an
uninterrupted one would. Three things make it so:

- the budget counts *finished* (complete) trials only: a trial cut off by
  Ctrl-C (failed) or left running by a killed process is not one;
- trials run in an in-memory working study, and each complete trial is copied
  to the given (stored) study as it finishes (``store_each``; a caller that
  reads its store only once the search ends gets them all then). Trials a phase enqueued but did
  not start never reach the storage: a re-run starts from the stored complete
  trials, and the phase it was in enqueues them again in its own order. (It
  is also fast: Optuna commits to a database about 25 times a trial, and
  reads every trial back for each proposal.)
- :class:`HistorySeededSampler` draws each trial's random numbers from the seed
  and the number of finished trials, so a trial's proposal depends on the
  stored history alone, not on how many runs it took to get there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import optuna
from optuna.search_space.group_decomposed import _SearchSpaceGroup
from optuna.trial import TrialState

from costmodel.specs.strategy import Strategy
from search.objective import Evaluation, Evaluator, optuna_objective, stored_copy, strategy_from_attrs, working_copy
from search.samplers._base import BaseSearcher, TrialCallback
from search.space import StrategySpace
from search.storage import study_directions


def finished_trials(study: Any) -> list[optuna.trial.FrozenTrial]:
    """The study's complete trials that evaluated a strategy, in trial order."""
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if "strategy" in t.user_attrs]


def finished(study: Any) -> int:
    """How many trials count against the budget: the complete ones."""
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


class HistorySeededSampler(optuna.samplers.BaseSampler):
    """Wraps an Optuna sampler so that each trial's draws depend only on ``seed`` and the finished trials.

    Before each trial the inner sampler is made, or reseeded in place (``reseed``), with a seed derived
    from ``(seed, finished trials)``; Optuna samplers keep no other state between trials that a proposal
    depends on than their random generator (search-space caches are rebuilt from the study), so the
    proposal is a function of the stored history.

    Parameters
    ----------
    make : callable
        ``make(seed)`` returns the inner sampler.
    seed : int
        Base seed.
    reseed : callable, optional
        ``reseed(sampler, seed)`` seeds the inner sampler in place as ``make(seed)`` seeds a new one
        and returns True, or returns False (a new one is made).
    """

    def __init__(self, make: Callable[[int], optuna.samplers.BaseSampler], seed: int,
                 reseed: Callable[[optuna.samplers.BaseSampler, int], bool] | None = None) -> None:
        self._make, self._seed, self._reseed = make, seed, reseed
        self._inner = make(seed)
        self._group_space = IncrementalGroupSearchSpace()

    def _trial_seed(self, study: Any) -> int:
        return int(np.random.SeedSequence([self._seed, finished(study)]).generate_state(1)[0])

    def before_trial(self, study: Any, trial: optuna.trial.FrozenTrial) -> None:
        seed = self._trial_seed(study)
        if self._reseed is None or not self._reseed(self._inner, seed):
            self._inner = self._make(seed)
        if getattr(self._inner, "_group_decomposed_search_space", None) is not None:
            self._inner._group_decomposed_search_space = self._group_space  # type: ignore[attr-defined]
        self._inner.before_trial(study, trial)

    def infer_relative_search_space(self, study: Any, trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
        return self._inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Any, trial: optuna.trial.FrozenTrial,
                        search_space: dict[str, Any]) -> dict[str, Any]:
        return self._inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study: Any, trial: optuna.trial.FrozenTrial, param_name: str,
                           param_distribution: Any) -> Any:
        return self._inner.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Any, trial: optuna.trial.FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._inner.reseed_rng()


class IncrementalGroupSearchSpace:
    """Optuna's group-decomposed search space (``TPESampler(group=True)``), folded over the new trials only.

    Optuna's ``_GroupDecomposedSearchSpace.calculate`` folds ``add_distributions`` over every complete
    (and pruned) trial and deep-copies the result on each call, once per trial: 10% of a 200-trial
    search, and growing with the trials. The fold is a left fold in trial order, so folding only the
    trials appended since the last call gives the same groups; when the trials are not the last call's
    followed by new ones (another study, a trial completed out of order) it folds from the start.
    ``HistorySeededSampler`` hands one of these to its ``TPESampler`` before each trial.
    """

    STATES: tuple[TrialState, ...] = (TrialState.COMPLETE, TrialState.PRUNED)  # Optuna's include_pruned=True

    def __init__(self) -> None:
        self._study: Any = None
        self._numbers: list[int] = []
        self._group = _SearchSpaceGroup()

    def calculate(self, study: Any, use_cache: bool = False) -> _SearchSpaceGroup:
        trials = study.get_trials(deepcopy=False, states=self.STATES)
        numbers = [t.number for t in trials]
        if study is not self._study or numbers[:len(self._numbers)] != self._numbers:
            self._study, self._numbers, self._group = study, [], _SearchSpaceGroup()
        for trial in trials[len(self._numbers):]:
            self._group.add_distributions(trial.distributions)
        self._numbers = numbers
        # A copy the sampler may keep: its dicts are new, the distributions (which TPE only reads) shared.
        copied = _SearchSpaceGroup()
        copied._search_spaces = [dict(space) for space in self._group.search_spaces]
        return copied


class OptunaSearcher(BaseSearcher):
    """Runs trials of an Optuna study over the space with :func:`optuna_objective` until ``n_trials`` finished."""

    objective: str = "time"
    default_trials: int = 200
    seed: int = 0

    def make_inner_sampler(self, seed: int) -> optuna.samplers.BaseSampler:
        """The Optuna sampler for one trial, seeded with ``seed``."""
        raise NotImplementedError

    def reseed_inner(self, sampler: optuna.samplers.BaseSampler, seed: int) -> bool:
        """Seed ``sampler`` in place as ``make_inner_sampler(seed)`` would seed a new one; False: not possible
        (``HistorySeededSampler`` then makes a new one)."""
        return False

    def make_sampler(self) -> optuna.samplers.BaseSampler:
        return HistorySeededSampler(self.make_inner_sampler, self.seed, self.reseed_inner)

    def optimizer(self, study: Any, space: StrategySpace, evaluator: Evaluator, total: int,
                  on_trial: TrialCallback | None, store: Any = None) -> Callable[[int], None]:
        """``optimize(n)`` runs ``n`` more trials of ``study`` (nothing when ``n <= 0``).

        Each complete trial is copied to ``store`` (the stored study, if any) as it finishes.
        """
        objective = optuna_objective(evaluator, space, self.objective)

        def finished_one(work: Any, trial: optuna.trial.FrozenTrial) -> None:
            if store is not None and trial.state == TrialState.COMPLETE:
                store.add_trial(stored_copy(trial))
            if on_trial is not None:
                on_trial(finished(work), total)

        # Optuna deep-copies every finished trial for its callbacks: none unless something reads it
        callbacks = [finished_one] if store is not None or on_trial is not None else None

        def optimize(n_trials: int) -> None:
            if n_trials > 0:
                study.optimize(objective, n_trials=n_trials, gc_after_trial=False, callbacks=callbacks)

        return optimize

    def _run(self, study: Any, space: StrategySpace, evaluator: Evaluator, total: int,
             optimize: Callable[[int], None]) -> None:
        """Run trials until ``study`` holds ``total`` finished ones (subclasses may schedule phases)."""
        optimize(total - finished(study))

    def search(self, space: StrategySpace, evaluator: Evaluator, *, n_trials: int | None,
               study: Any = None, on_trial: TrialCallback | None = None,
               starts: Sequence[Strategy] = (), store_each: bool = True) -> list[Evaluation]:
        total = self.default_trials if n_trials is None else n_trials
        verbosity = optuna.logging.get_verbosity()
        # No line per trial or study, and no traceback for the trial Ctrl-C cuts off (it is marked failed).
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        try:
            return self._search(space, evaluator, total, study, on_trial, starts, store_each)
        finally:
            optuna.logging.set_verbosity(verbosity)

    def _search(self, space: StrategySpace, evaluator: Evaluator, total: int, store: Any,
                on_trial: TrialCallback | None, starts: Sequence[Strategy] = (),
                store_each: bool = True) -> list[Evaluation]:
        work = optuna.create_study(directions=study_directions(self.directions), sampler=self.make_sampler())
        if store is not None:
            work.add_trials([working_copy(t) for t in finished_trials(store)])
        resumed = len(work.get_trials(deepcopy=False))
        # Resuming: the stored strategies are evaluated again (one batch, memoised), not run again.
        tried = evaluator.evaluate_many(strategy_from_attrs(t.user_attrs, space) for t in finished_trials(work))
        # The caller's starts run first (the sampler and the hill-climb then see them), unless already tried.
        seen = {e.strategy for e in tried}
        for strategy in dict.fromkeys(s for s in starts if space.contains(s) and s not in seen):
            if len(seen) >= total:
                break
            work.enqueue_trial(space.knobs_of(strategy), skip_if_exists=False)
            seen.add(strategy)
        if finished(work) < total:
            self._run(work, space, evaluator, total,
                      self.optimizer(work, space, evaluator, total, on_trial, store if store_each else None))
        if store is not None and not store_each:  # what finished_one would have stored, in the same order
            store.add_trials([stored_copy(t) for t in work.get_trials(deepcopy=False)[resumed:]
                              if t.state == TrialState.COMPLETE])
        return [evaluator.evaluate(strategy_from_attrs(t.user_attrs, space)) for t in finished_trials(work)]
