"""Every trial of every problem, kept as an Optuna journal in the study's database.

Why a journal and not Optuna's RDB tables: copying a 200-trial study into
``RDBStorage`` runs ~20 ORM inserts and a commit per trial, measured at
25-50 ms per trial on SQLite and PostgreSQL, 8x the search itself; a
5 x 6 x 2 study of 200-trial searches would spend minutes in it. Optuna's
``JournalStorage`` describes a study as a list of JSON operations instead. The
trials are replayed into a journal held in memory (Optuna's own code writes
the operations) and the operations are inserted into ``parplan_trials`` in one
transaction: one commit per problem, about 1 ms per trial.

Reading is the same journal replayed by Optuna: :func:`load_trials` returns an
ordinary ``optuna.Study`` (``trials``, ``best_trial``, ``trials_dataframe()``,
``optuna.visualization``). One journal per problem, written only by the
worker holding its claim, so log numbers never interleave.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.storages import JournalStorage
from optuna.storages.journal import BaseJournalBackend

from search.objective import stored_copy

metadata = sa.MetaData()
trials_table = sa.Table(
    "parplan_trials", metadata,
    sa.Column("key", sa.String(400), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("log", sa.Text, nullable=False),
)


class _MemoryJournal(BaseJournalBackend):
    """Collects the operations Optuna writes, for one bulk insert."""

    def __init__(self) -> None:
        self.logs: list[dict[str, Any]] = []

    def read_logs(self, log_number_from: int) -> Iterable[dict[str, Any]]:
        return self.logs[log_number_from:]

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        self.logs.extend(logs)


class SQLJournal(BaseJournalBackend):
    """The journal of problem ``key`` in ``parplan_trials`` (one row per operation, ``seq`` from 0).

    Appending after the bulk write works too (e.g. a user adding trials by hand):
    a concurrent append fails on the primary key instead of interleaving.
    """

    def __init__(self, engine: sa.engine.Engine, key: str) -> None:
        self.engine, self.key = engine, key

    def read_logs(self, log_number_from: int) -> Iterable[dict[str, Any]]:
        query = (sa.select(trials_table.c.log)
                 .where(trials_table.c.key == self.key, trials_table.c.seq >= log_number_from)
                 .order_by(trials_table.c.seq))
        with self.engine.connect() as conn:
            return [json.loads(text) for text in conn.execute(query).scalars()]

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        with self.engine.begin() as conn:
            last = conn.execute(sa.select(sa.func.max(trials_table.c.seq))
                                .where(trials_table.c.key == self.key)).scalar()
            start = 0 if last is None else last + 1
            _insert(conn, self.key, logs, start)


def _insert(conn: sa.engine.Connection, key: str, logs: list[dict[str, Any]], start: int) -> None:
    if logs:
        conn.execute(sa.insert(trials_table),
                     [{"key": key, "seq": start + i, "log": json.dumps(log)} for i, log in enumerate(logs)])


def write_trials(engine: sa.engine.Engine, key: str, directions: Sequence[str],
                 trials: Sequence[optuna.trial.FrozenTrial], attrs: dict[str, Any]) -> None:
    """Store ``trials`` as study ``key`` with user attributes ``attrs``, replacing what was stored under ``key``."""
    journal = _MemoryJournal()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=JournalStorage(journal), study_name=key,
                                directions=[optuna.study.StudyDirection[d.upper()] for d in directions])
    for name, value in attrs.items():
        study.set_user_attr(name, value)
    study.add_trials([stored_copy(t) for t in trials])  # evaluated params, dashboard-readable constraints
    with engine.begin() as conn:
        conn.execute(sa.delete(trials_table).where(trials_table.c.key == key))
        _insert(conn, key, journal.logs, 0)


def load_trials(engine: sa.engine.Engine, key: str) -> optuna.Study:
    """The Optuna study stored under ``key``.

    Raises
    ------
    KeyError
        If no trials are stored under ``key``.
    """
    storage = JournalStorage(SQLJournal(engine, key))
    return optuna.load_study(study_name=key, storage=storage)


def count_trials(engine: sa.engine.Engine, keys: Iterable[str]) -> dict[str, int]:
    """Trials stored per key (0 when none)."""
    out = {}
    for key in keys:
        try:
            out[key] = len(load_trials(engine, key).trials)
        except KeyError:
            out[key] = 0
    return out
