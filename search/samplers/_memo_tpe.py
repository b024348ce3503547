"""Optuna's TPE sampler with its trials' below/above split made once per trial, not once per group, and
each finished trial's internal representation once per study.

With ``group=True`` TPE samples each group of parameters that always occur
together on its own (our conditional knobs give about six groups: the
degrees and settings, then ``micro_batch_size``, ``vpp``, ``sequence_parallel``,
``cp_comm_type``, ``hsdp_shard_size`` alone), and for each group Optuna's
sampler splits every finished trial into the best ``gamma(n)`` and the rest
again (``optuna.samplers._tpe.sampler._split_trials``). The split depends on the
finished trials alone, which do not change while one trial is being sampled.
``SplitMemoTPESampler`` runs Optuna's own sampling unchanged and only memoises
that module function while it runs, by the study and its finished trials'
numbers.

Each group's two Parzen estimators also need every finished trial's parameters
in Optuna's internal representation (``TPESampler._get_internal_repr``), again
for every trial sampled. A finished trial's parameters never change, so each
trial's values are taken from Optuna's own method once per study and search
space and kept with the study: ``HistorySeededSampler`` makes or reseeds an
inner sampler per trial, and any sampler of the same study reads them.

The proposals are Optuna's exactly (``tests/search/test_memo_tpe.py`` checks
them against the stock sampler). The split saved a quarter of TPE's time (0.97
-> 0.73 s per 200-trial problem of ``benchmarks/study.py --problems 1000``,
measured in one session); the representations save a tenth of the rest
(``sample_relative`` 0.386 -> 0.347 s CPU per problem, 20 problems of that
study, three interleaved runs each, the same picks).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
from optuna.samplers._tpe import sampler as _tpe

# Optuna's sampling module is shared by every sampler of the process: one memoised sampling at a time.
_PATCH_LOCK = threading.RLock()

# A search space as a key: its (name, distribution) pairs in order (equal distributions give equal values).
_SpaceKey = tuple[tuple[str, Any], ...]
_UNSEEN = object()


class _StudyMemo:
    """What sampling one study computes once from its finished trials, whichever sampler asks."""

    def __init__(self) -> None:
        # (n_below, the finished trials' numbers) -> Optuna's (below, above) split of those trials
        self.splits: dict[tuple[int, tuple[int, ...]], Any] = {}
        # search space -> trial number -> the trial's internal values in the space's order,
        # or None where it lacks one of the space's parameters (Optuna leaves it out)
        self.rows: dict[_SpaceKey, dict[int, tuple[Any, ...] | None]] = {}


# By the study object itself, weakly: an entry goes with its study and can never be read for another one
# (an id() could be reused by a later study with the same trial numbers).
_MEMOS: weakref.WeakKeyDictionary[Any, _StudyMemo] = weakref.WeakKeyDictionary()


def _study_memo(study: Any) -> _StudyMemo:
    memo = _MEMOS.get(study)
    if memo is None:
        memo = _MEMOS[study] = _StudyMemo()
    return memo


class SplitMemoTPESampler(optuna.samplers.TPESampler):
    """``optuna.samplers.TPESampler`` that splits a given set of finished trials once, and takes each
    finished trial's internal representation once per study and search space.

    Takes ``TPESampler``'s arguments. ``constant_liar`` (running trials in the
    split) is not supported: the running trials change while a trial is sampled.
    """

    def __init__(self, **kwargs: Any) -> None:
        if kwargs.get("constant_liar"):
            raise ValueError("The 'constant_liar' parameter must be False for SplitMemoTPESampler. Got True instead.")
        super().__init__(**kwargs)

    @staticmethod
    def _memoised(split: Callable[..., Any]) -> Callable[..., Any]:
        def memoised_split(study: Any, trials: list[Any], n_below: int) -> Any:
            # Finished (complete, pruned) trials never change, so the study and their numbers name the split.
            splits = _study_memo(study).splits
            key = (n_below, tuple(t.number for t in trials))
            hit = splits.get(key)
            if hit is None:
                if len(splits) > 8:  # the study goes on: keep only the current trials' split
                    splits.clear()
                hit = splits[key] = split(study, trials, n_below)
            return hit
        return memoised_split

    def _sample(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        with _PATCH_LOCK:
            split = _tpe._split_trials
            _tpe._split_trials = self._memoised(split)
            try:
                return super()._sample(study, trial, search_space)
            finally:
                _tpe._split_trials = split

    def _get_internal_repr(self, trials: list[Any], search_space: dict[str, Any], study: Any) -> dict[str, Any]:
        if not search_space:
            return super()._get_internal_repr(trials, search_space, study)
        rows = _study_memo(study).rows.setdefault(tuple(search_space.items()), {})
        kept = []
        for trial in trials:
            row = rows.get(trial.number, _UNSEEN)
            if row is _UNSEEN:
                row = self._internal_row(trial, search_space, study)
                if trial.state.is_finished():  # its params are final (a running trial's are not)
                    rows[trial.number] = row
            if row is not None:
                kept.append(row)
        # np.asarray of the same Python values in the same order as Optuna's: the same arrays, dtype included.
        return {name: np.asarray([row[i] for row in kept]) for i, name in enumerate(search_space)}

    def _internal_row(self, trial: Any, search_space: dict[str, Any], study: Any) -> tuple[Any, ...] | None:
        """One trial's values by Optuna's own ``_get_internal_repr``, as Python scalars; None: it leaves it out."""
        columns = super()._get_internal_repr([trial], search_space, study)
        if len(next(iter(columns.values()))) == 0:
            return None
        return tuple(column[0].item() for column in columns.values())  # int64 -> int, float64 -> float
