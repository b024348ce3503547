"""The contract every searcher keeps."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

from costmodel.specs.strategy import Strategy
from search.objective import Evaluator
from search.space import StrategySpace

TrialCallback = Callable[[int, "int | None"], None]
"""``on_trial(finished, total)``: called as trials finish (for a progress line)."""


class BaseSearcher(abc.ABC):
    """Proposes strategies of a space and evaluates them.

    An implementation must:

    - propose only strategies of ``space`` (``space.contains`` holds for each);
    - evaluate every proposal through ``evaluator`` (so results are memoised and
      time is predicted only for feasible strategies);
    - return the evaluations in the order it proposed them, one per trial,
      repeats included, so that "best after n trials" can be read off;
    - be deterministic for a given ``seed`` (when it takes one);
    - when given an Optuna ``study``, store its trials there and count the
      finished trials already stored against ``n_trials``; a search resumed
      after an interruption reaches what an uninterrupted one would.
    """

    name: str = ""
    directions: tuple[str, ...] = ("minimize",)

    @abc.abstractmethod
    def search(self, space: StrategySpace, evaluator: Evaluator, *, n_trials: int | None,
               study: Any = None, on_trial: TrialCallback | None = None,
               starts: Sequence[Strategy] = (), store_each: bool = True) -> list[Any]:
        """Evaluations (``search.objective.Evaluation``) in proposal order.

        Parameters
        ----------
        space : StrategySpace
            The legal strategies.
        evaluator : Evaluator
            Memoised evaluation on the space's problem.
        n_trials : int or None
            Trials to run in total (stored ones included); ``None``: the searcher's default.
        study : optuna.Study, optional
            Where to store trials; a new in-memory study when absent (Optuna searchers).
        on_trial : callable, optional
            Told ``(finished, total)`` as trials finish.
        starts : sequence of Strategy
            Strategies of the space to try first (a user's own strategy), within ``n_trials``; a
            sweep of the whole space tries them anyway.
        store_each : bool
            Store each trial in ``study`` as it finishes, so that an interrupted search resumes from
            it (default). False: store them all once the search ends, for an in-memory study that
            nothing reads meanwhile (a trial copied as it finishes costs Optuna a deep copy).
        """

    def make_sampler(self) -> Any:
        """The Optuna sampler of this searcher (``None`` for non-Optuna searchers)."""
        return None
