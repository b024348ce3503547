"""Optuna's TPE sampler, sampling our categorical spaces from tables, with what depends only on the finished
trials made once: the same proposals, bit for bit, in a third of the time.

With ``group=True`` TPE samples each group of parameters that always occur
together on its own (our conditional knobs give about six groups: the
degrees and settings, then ``micro_batch_size``, ``vpp``, ``sequence_parallel``,
``cp_comm_type``, ``hsdp_shard_size`` alone), and for each group Optuna's
``TPESampler._sample`` (``optuna/samplers/_tpe/sampler.py``) splits every
finished trial into the best ``gamma(n)`` and the rest (``_split_trials``),
takes every trial's parameters in its internal representation
(``_get_internal_repr``), builds a Parzen estimator of each half, samples 24
candidates from the below one and keeps the one with the best
``log_pdf(below) - log_pdf(above)``. What this module keeps:

- The split depends on the finished trials alone, which do not change while a
  trial is sampled: it is made once per trial, not once per group (the last
  split is kept with the study, for the same trials), and the infeasibility
  score it reads from each trial's system attributes once per trial.
- A finished trial's parameters never change: its internal values are taken
  once per study and search space and kept with the study
  (``HistorySeededSampler`` makes or reseeds an inner sampler per trial, and
  any sampler of the same study reads them).
- Every parameter of our searches is a ``suggest_categorical``
  (``search.objective.suggest_strategy``). For a categorical parameter
  ``_ParzenEstimator._calculate_categorical_distributions``
  (``parzen_estimator.py``) gives each observation the kernel row
  ``prior_weight / n_kernels`` everywhere plus 1 at its choice, normalised,
  and the prior the row without the 1: for a given ``n_kernels`` there are
  only ``n_choices + 1`` distinct rows. ``_categorical_tpe._categorical_kernels`` makes them
  once per ``(n_kernels, n_choices)`` with Optuna's operations, and
  ``CategoricalParzenEstimator`` samples and evaluates the mixture by looking
  rows up, where ``_MixtureOfProductDistribution.sample`` and ``.log_pdf``
  (``probability_distributions.py``) build an ``(n_kernels, n_choices)``
  matrix per parameter and per group, then gather and take logarithms of
  ``(24, n_kernels)`` weights per parameter.

The random generator is called as Optuna calls it (``choice`` of the
components with the same weights, then one ``rand`` per parameter in the
space's order) and every floating-point value is made by the same operations
on the same values, so each candidate, acquisition value and pick, and the
generator's state after them, are Optuna's bit for bit.
``SplitMemoTPESampler._sample`` takes that path only where it is Optuna's
arithmetic (``_takes_categorical_path``: one objective, Optuna's estimator and
default weights, every distribution categorical) and no trial but the one
sampled runs; otherwise it runs Optuna's ``_sample``, with the memoised split
and representations. Optuna 5 samples with ``constant_liar=True`` by default
(``TPESampler.__init__``), and ``TPESearcher`` keeps the default: it fetches
the running trials too and drops the one sampled, and so does this path.

The proposals are Optuna's exactly (``tests/search/test_memo_tpe.py`` and
``tests/search/test_fast_tpe.py`` check them against the stock sampler, the
generator's state and each estimator's densities bit for bit). Measured on 2
shared cores, problems of ``benchmarks/study.py --problems 1000`` searched in
one process with this module and its previous version in turn:
``sample_relative`` 0.44 -> 0.15 and 0.38 -> 0.13 s CPU per 200-trial problem
(40 problems each, two samples of problems), the search 0.87 -> 0.53 and
0.76 -> 0.47 s, every trial the same. Before: the split saved a quarter of
TPE's time (0.97 -> 0.73 s per problem), the representations a tenth of the
rest (``sample_relative`` 0.386 -> 0.347 s).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import operator
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.samplers._tpe import sampler as _tpe
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator

from search.samplers._categorical_tpe import CategoricalParzenEstimator
from optuna.trial import TrialState

# Optuna's sampling module is shared by every sampler of the process, and a study's memo by its samplers:
# one sampling at a time.
_PATCH_LOCK = threading.RLock()

# A search space as a key: its (name, distribution) pairs in order (equal distributions give equal values).
_SpaceKey = tuple[tuple[str, Any], ...]
# The same space by its names and its distribution objects' ids (hashing a distribution costs microseconds).
_SpaceIds = tuple[tuple[str, ...], tuple[int, ...]]
_UNSEEN = object()
_NUMBER = operator.attrgetter("number")

# TPESampler._sample's states without and with constant_liar (lists, as it passes them to Study._get_trials).
_FINISHED_STATES = [TrialState.COMPLETE, TrialState.PRUNED]
_LIAR_STATES = [TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING]


class _Split(NamedTuple):
    """Optuna's below/above split of some finished trials, with the trials' numbers."""

    trials: list[Any]  # the trials split, as Optuna was given them
    n_below: int
    below: list[Any]
    above: list[Any]
    numbers: np.ndarray  # of trials, in their order
    n_numbers: int  # one more than the largest of them
    below_numbers: np.ndarray
    above_numbers: np.ndarray


class _ChoiceCodes:
    """Each finished trial's choice indices in one categorical search space, a column per trial number."""

    def __init__(self, n_choices: tuple[int, ...], rows: dict[int, tuple[Any, ...] | None]) -> None:
        self.n_choices = n_choices
        self.rows = rows  # the study's memo of the same values as Python tuples, filled as they are asked for
        self.codes = np.zeros((len(n_choices), 0), dtype=np.int64)
        self.kept = np.zeros(0, dtype=bool)  # the trial has every parameter of the space (Optuna keeps it)
        self.known = np.zeros(0, dtype=bool)

    def unknown(self, numbers: np.ndarray, n_numbers: int) -> np.ndarray:
        """The positions in ``numbers`` (all below ``n_numbers``) of trials not recorded yet."""
        if n_numbers > len(self.known):  # doubling: a study adds a trial at a time
            extra = max(n_numbers, 2 * len(self.known)) - len(self.known)
            self.codes = np.hstack([self.codes, np.zeros((len(self.codes), extra), dtype=np.int64)])
            self.kept = np.append(self.kept, np.zeros(extra, dtype=bool))
            self.known = np.append(self.known, np.zeros(extra, dtype=bool))
        return (~self.known[numbers]).nonzero()[0]

    def add(self, number: int, row: tuple[Any, ...] | None) -> None:
        """Record trial ``number``'s internal values (None: Optuna leaves the trial out)."""
        if row is not None:
            self.codes[:, number] = row
        self.kept[number] = row is not None
        self.known[number] = True

    def observed(self, numbers: np.ndarray) -> np.ndarray:
        """The kept trials' codes among ``numbers``, a column each in their order (``_get_internal_repr``'s)."""
        return self.codes[:, numbers[self.kept[numbers]]]


class _StudyMemo:
    """What sampling one study computes once from its finished trials, whichever sampler asks."""

    def __init__(self) -> None:
        # the last split of finished trials only (a running one may finish before the next sampling)
        self.split: _Split | None = None
        # constant liar: (the trial sampled, the storage's trials, the ones Optuna would split) when none
        # of those runs
        self.fetched: tuple[int, list[Any], list[Any]] | None = None
        # finished trial number -> (the trial, Optuna's infeasibility score of it)
        self.infeasible: dict[int, tuple[Any, Any]] = {}
        # search space -> trial number -> the trial's internal values in the space's order,
        # or None where it lacks one of the space's parameters (Optuna leaves it out)
        self.rows: dict[_SpaceKey, dict[int, tuple[Any, ...] | None]] = {}
        # categorical search space -> the same values as an array
        self.codes: dict[_SpaceKey, _ChoiceCodes] = {}
        # the same by identity, with the distributions held so that no other object takes their ids
        self.codes_by_ids: dict[_SpaceIds, tuple[tuple[Any, ...], _ChoiceCodes]] = {}


# By the study object itself, weakly: an entry goes with its study and can never be read for another one
# (an id() could be reused by a later study with the same trial numbers).
_MEMOS: weakref.WeakKeyDictionary[Any, _StudyMemo] = weakref.WeakKeyDictionary()


def _study_memo(study: Any) -> _StudyMemo:
    memo = _MEMOS.get(study)
    if memo is None:
        memo = _MEMOS[study] = _StudyMemo()
    return memo


def _numbers(trials: list[Any]) -> np.ndarray:
    return np.fromiter(map(_NUMBER, trials), dtype=np.intp, count=len(trials))


@contextlib.contextmanager
def _memoised_infeasibility(scores: dict[int, tuple[Any, Any]]) -> Iterator[None]:
    """Optuna's ``_get_infeasible_trial_score`` taken once per finished trial while the block runs.

    ``_split_trials`` asks it for every trial it splits, and it parses the trial's system attributes:
    about half of a split's time. A finished trial cannot change (Optuna's storages refuse), so its score
    is kept with the trial object; a score is served only for that object, whichever study another
    thread's sampler splits meanwhile (the function is the module's).
    """
    score = _tpe._get_infeasible_trial_score

    def memoised(trial: Any) -> Any:
        hit = scores.get(trial.number)
        if hit is not None and hit[0] is trial:
            return hit[1]
        value = score(trial)
        if trial.state.is_finished():
            scores[trial.number] = (trial, value)
        return value

    _tpe._get_infeasible_trial_score = memoised
    try:
        yield
    finally:
        _tpe._get_infeasible_trial_score = score


# TPESampler methods that _sample calls: a subclass that overrides one gets Optuna's _sample.
_STOCK_METHODS = ("_build_parzen_estimator", "_compute_acquisition_func", "_compare", "_get_params")


@functools.lru_cache(maxsize=None)
def _keeps_stock_methods(cls: type) -> bool:
    return all(inspect.getattr_static(cls, name) is inspect.getattr_static(optuna.samplers.TPESampler, name)
               for name in _STOCK_METHODS)


def _takes_categorical_path(sampler: SplitMemoTPESampler, study: Any, search_space: dict[str, Any]) -> bool:
    """Whether ``_sample_categorical`` is Optuna's ``TPESampler._sample`` for this sampler and space (the
    trials are checked apart: ``_trials_to_split``)."""
    parameters = sampler._parzen_estimator_parameters  # noqa: SLF001 - TPESampler's own settings
    return (len(study.directions) == 1  # several: Optuna weighs the below trials alike
            and sampler._parzen_estimator_cls is _ParzenEstimator  # noqa: SLF001
            and parameters.weights is _tpe.default_weights  # a pure function of n: its weights are cached
            and parameters.prior_weight > 0
            and sampler._n_ei_candidates > 0  # noqa: SLF001
            and _keeps_stock_methods(type(sampler))
            and all(isinstance(d, CategoricalDistribution) for d in search_space.values()))


class SplitMemoTPESampler(optuna.samplers.TPESampler):
    """``optuna.samplers.TPESampler`` that splits a given set of finished trials once, takes each
    finished trial's internal representation once per study and search space, and samples categorical
    spaces from table-built Parzen estimators; the proposals are Optuna's exactly.

    Takes ``TPESampler``'s arguments. With ``constant_liar`` (Optuna 5's default) a
    split that holds another running trial is made anew each time, as the trial
    may finish before the next sampling.
    """

    @staticmethod
    def _split(study: Any, trials: list[Any], n_below: int, split: Callable[..., Any],
               finished: bool | None = None) -> _Split:
        """Optuna's ``split(study, trials, n_below)``, made once for the same finished trials (``finished``:
        whether none of ``trials`` runs, where the caller knows)."""
        memo = _study_memo(study)
        last = memo.split
        # Equal trial lists: the same objects (a storage replaces a trial it updates), else equal
        # FrozenTrials (FrozenTrial.__eq__ compares every field); finished trials never change.
        if last is not None and last.n_below == n_below and last.trials == trials:
            return last
        with _memoised_infeasibility(memo.infeasible):
            below, above = split(study, trials, n_below)
        numbers = _numbers(trials)
        made = _Split(trials, n_below, below, above, numbers, int(numbers.max(initial=-1)) + 1, _numbers(below),
                      _numbers(above))
        if finished is None:
            finished = all(t.state != TrialState.RUNNING for t in trials)
        if finished:  # constant liar: a running trial may finish before the next sampling
            memo.split = made
        return made

    def _sample(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        with _PATCH_LOCK:
            split = _tpe._split_trials
            if _takes_categorical_path(self, study, search_space):
                trials = self._trials_to_split(study, trial)
                if trials is not None:
                    return self._sample_categorical(study, trials, search_space, split)
            _tpe._split_trials = lambda study, trials, n_below: self._split(study, trials, n_below, split)[2:4]
            try:
                return super()._sample(study, trial, search_space)
            finally:
                _tpe._split_trials = split

    def _trials_to_split(self, study: Any, trial: Any) -> list[Any] | None:
        """The trials ``TPESampler._sample`` splits; None where a trial other than ``trial`` is running
        (constant liar: Optuna's ``_sample`` takes it, above the split)."""
        if not self._constant_liar:
            return study._get_trials(deepcopy=False, states=_FINISHED_STATES, use_cache=True)  # noqa: SLF001
        # Optuna asks the storage for its complete, pruned and running trials (a filtered copy of its list) and
        # drops ``trial``. The same filter over the storage's whole list gives the same trials.
        fetched = study._get_trials(deepcopy=False, states=None, use_cache=False)  # noqa: SLF001
        memo = _study_memo(study)
        # The trial's earlier groups saw the same trials if the list holds the same objects: an in-memory
        # storage replaces a trial it updates, never changes it ("the replacing trick", InMemoryStorage).
        if (memo.fetched is not None and memo.fetched[0] == trial.number and memo.fetched[1] == fetched
                and type(study._storage) is optuna.storages.InMemoryStorage):  # noqa: SLF001
            return memo.fetched[2]
        trials = [t for t in fetched if t.state in _LIAR_STATES and trial.number != t.number]
        if any(t.state == TrialState.RUNNING for t in trials):
            return None
        memo.fetched = (trial.number, fetched, trials)
        return trials

    def _sample_categorical(self, study: Any, trials: list[Any], search_space: dict[str, CategoricalDistribution],
                            split: Callable[..., Any]) -> dict[str, Any]:
        """``TPESampler._sample`` for one objective, categorical parameters and finished ``trials``."""
        if self._gamma is None:  # Optuna sets it on the first sampling, and so do we
            self._gamma = _tpe.default_gamma
        halves = self._split(study, trials, self._gamma(len(trials)), split, finished=True)
        codes = self._choice_codes(study, search_space, halves)
        prior_weight = self._parzen_estimator_parameters.prior_weight
        below = CategoricalParzenEstimator.fit(codes.observed(halves.below_numbers), codes.n_choices, prior_weight)
        above = CategoricalParzenEstimator.fit(codes.observed(halves.above_numbers), codes.n_choices, prior_weight)
        picked = below.sample(self._rng.rng, self._n_ei_candidates)
        best = (below.log_pdf(picked) - above.log_pdf(picked)).argmax()  # TPESampler._compare: the first best
        # Optuna holds the indices as floats and maps them back with to_external_repr (int() of the float).
        return {name: dist.to_external_repr(float(index))
                for (name, dist), index in zip(search_space.items(), picked[:, best].tolist())}

    def _choice_codes(self, study: Any, search_space: dict[str, Any], halves: _Split) -> _ChoiceCodes:
        """The study's choice indices in ``search_space``, with a row for each trial ``halves`` split."""
        memo = _study_memo(study)
        distributions = tuple(search_space.values())
        ids = (tuple(search_space), tuple(map(id, distributions)))
        entry = memo.codes_by_ids.get(ids)
        if entry is None:
            if len(memo.codes_by_ids) > 64:  # new distribution objects each trial (Optuna's own group space)
                memo.codes_by_ids.clear()
            key = tuple(search_space.items())
            codes = memo.codes.get(key)
            if codes is None:
                n_choices = tuple(len(d.choices) for d in distributions)
                codes = memo.codes[key] = _ChoiceCodes(n_choices, memo.rows.setdefault(key, {}))
            entry = memo.codes_by_ids[ids] = (distributions, codes)
        codes = entry[1]
        for position in codes.unknown(halves.numbers, halves.n_numbers).tolist():
            trial = halves.trials[position]  # finished, as every trial split here: its params are final
            codes.add(trial.number, self._memo_row(codes.rows, trial, search_space, study))
        return codes

    def _get_internal_repr(self, trials: list[Any], search_space: dict[str, Any], study: Any) -> dict[str, Any]:
        if not search_space:
            return super()._get_internal_repr(trials, search_space, study)
        rows = _study_memo(study).rows.setdefault(tuple(search_space.items()), {})
        kept = [row for row in (self._memo_row(rows, trial, search_space, study) for trial in trials)
                if row is not None]
        # np.asarray of the same Python values in the same order as Optuna's: the same arrays, dtype included.
        return {name: np.asarray([row[i] for row in kept]) for i, name in enumerate(search_space)}

    def _memo_row(self, rows: dict[int, tuple[Any, ...] | None], trial: Any, search_space: dict[str, Any],
                  study: Any) -> tuple[Any, ...] | None:
        """``_internal_row`` of ``trial``, kept in ``rows`` (the study's, for the space) once it is finished."""
        row = rows.get(trial.number, _UNSEEN)
        if row is _UNSEEN:
            row = self._internal_row(trial, search_space, study)
            if trial.state.is_finished():  # its params are final (a running trial's are not)
                rows[trial.number] = row
        return row  # type: ignore[return-value]

    def _internal_row(self, trial: Any, search_space: dict[str, Any], study: Any) -> tuple[Any, ...] | None:
        """One trial's values as Optuna's ``_get_internal_repr`` collects them (its loop, for one trial);
        None: it leaves the trial out. ``np.asarray`` of these, trial after trial, is Optuna's array."""
        params = self._get_params(trial, study)
        if not search_space.keys() <= params.keys():
            return None
        return tuple(distribution.to_internal_repr(params[name]) for name, distribution in search_space.items())
