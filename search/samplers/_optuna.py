"""Shared loop of the Optuna-backed searchers (TPE, NSGA-II)."""

from __future__ import annotations

from typing import Any

import optuna

from search.objective import Evaluation, Evaluator, optuna_objective, strategy_from_attrs
from search.samplers._base import BaseSearcher
from search.space import StrategySpace
from search.storage import study_directions


class OptunaSearcher(BaseSearcher):
    """Runs ``n_trials`` of an Optuna study over the space with :func:`optuna_objective`."""

    objective: str = "time"
    default_trials: int = 200

    def _run(self, study: Any, space: StrategySpace, evaluator: Evaluator, total: int) -> None:
        """Run trials until the study holds ``total`` (subclasses may schedule phases)."""
        study.optimize(optuna_objective(evaluator, space, self.objective), n_trials=total - len(study.trials),
                       gc_after_trial=False)

    def search(self, space: StrategySpace, evaluator: Evaluator, *, n_trials: int | None,
               study: Any = None) -> list[Evaluation]:
        total = self.default_trials if n_trials is None else n_trials
        verbosity = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no line per trial or per study
        try:
            return self._search(space, evaluator, total, study)
        finally:
            optuna.logging.set_verbosity(verbosity)

    def _search(self, space: StrategySpace, evaluator: Evaluator, total: int, study: Any) -> list[Evaluation]:
        if study is None:
            study = optuna.create_study(directions=study_directions(self.directions), sampler=self.make_sampler())
        stored = [t for t in study.get_trials(deepcopy=False)
                  if t.state == optuna.trial.TrialState.COMPLETE and "strategy" in t.user_attrs]
        # Resuming: re-evaluate the stored strategies (memoised) instead of re-running their trials.
        done = [evaluator.evaluate(strategy_from_attrs(t.user_attrs, space)) for t in stored]
        remaining = max(0, total - len(done))
        before = len(study.trials)
        if remaining:
            self._run(study, space, evaluator, len(study.trials) + remaining)
        new = study.get_trials(deepcopy=False)[before:]
        return done + [evaluator.evaluate(strategy_from_attrs(t.user_attrs, space)) for t in new
                       if "strategy" in t.user_attrs]
