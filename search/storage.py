"""Optuna storage for searches: any storage URL, SQLite by default when only a name is given.

SQLite files are opened in WAL mode with ``synchronous=NORMAL``: Optuna commits
once per parameter and attribute (about 25 times a trial), and a full fsync per
commit made a stored 200-trial search take over a minute instead of seconds. WAL
stays consistent after a crash or ``kill -9``; only an OS crash can lose the last
commits, which a re-run searches again.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa

from costmodel.specs.errors import SpecError

SQLITE_TIMEOUT_S = 60.0
"""How long a SQLite connection waits for another process's write lock."""
_URL_HELP = "an Optuna storage URL (sqlite:///path.db or postgresql://user:password@host/db)"


def study_directions(directions: tuple[str, ...]) -> list[optuna.study.StudyDirection]:
    """Optuna directions from ``("minimize", ...)``."""
    return [optuna.study.StudyDirection[d.upper()] for d in directions]


class TrialList:
    """Finished trials kept in a plain list: a searcher's ``study`` argument (``get_trials``, ``add_trials``,
    ``add_trial``) for trials the caller copies elsewhere once the search ends (``studies.solve``).

    An in-memory Optuna study would deep-copy each trial added, only for the caller to copy it again.
    The trials are kept as given: a trial from ``optuna.trial.create_trial`` keeps number -1 (a study
    numbers the trials it adds; ``studies.trials.write_trials`` does).
    """

    def __init__(self) -> None:
        self.trials: list[optuna.trial.FrozenTrial] = []

    def get_trials(self, deepcopy: bool = False,
                   states: tuple[optuna.trial.TrialState, ...] | None = None) -> list[optuna.trial.FrozenTrial]:
        """The trials added, in order (of ``states`` only, if given); never copies (``deepcopy`` is ignored)."""
        return [t for t in self.trials if states is None or t.state in states]

    def add_trials(self, trials: list[optuna.trial.FrozenTrial]) -> None:
        self.trials.extend(trials)

    def add_trial(self, trial: optuna.trial.FrozenTrial) -> None:
        self.trials.append(trial)


def _redact(url: str) -> str:
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):
        return url


def check_storage_url(url: str) -> sa.engine.URL:
    """The parsed ``url``; a ``SpecError`` naming ``--storage`` when it is not a database URL."""
    try:
        parsed = sa.engine.make_url(url)
        parsed.get_dialect()  # an unknown scheme or a missing driver fails here
    except (sa.exc.ArgumentError, ValueError, sa.exc.NoSuchModuleError):
        raise SpecError("--storage", _redact(url), _URL_HELP) from None
    except ImportError as exc:
        raise SpecError("--storage", _redact(url), f"a URL whose database driver is installed ({exc})") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise SpecError("--storage", url, "a SQLite file (sqlite:///path.db): an in-memory database is lost "
                                          "when the search ends")
    return parsed


def storage_url(storage: str | None, study_name: str | None) -> str | None:
    """The storage URL to use: ``storage`` as given, or ``sqlite:///<study_name>.db`` in the working directory."""
    if storage:
        return storage
    if study_name:
        return f"sqlite:///{Path(f'{study_name}.db').resolve()}"
    return None


def _storage(url: str) -> optuna.storages.RDBStorage:
    parsed = check_storage_url(url)
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        path = str(parsed.database)

        def connect() -> sqlite3.Connection:
            connection = sqlite3.connect(path, timeout=SQLITE_TIMEOUT_S)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            return connection

        kwargs = {"creator": connect}
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    except (sa.exc.SQLAlchemyError, sqlite3.Error, OSError) as exc:
        first = " ".join(str(exc).split())[:120]
        raise SpecError("--storage", _redact(url), f"a reachable, writable database ({first})") from None


def open_study(storage: str | None, study_name: str | None, directions: tuple[str, ...],
               sampler: Any) -> Any:
    """Create the study, or load it when it exists (re-running resumes); ``None`` without storage or name.

    Raises
    ------
    SpecError
        If the URL is malformed or unreachable, or a stored study with this
        name was created with other directions (a time search resumed as a
        Pareto search, or the reverse).
    """
    url = storage_url(storage, study_name)
    if url is None:
        return None
    if study_name is None:
        raise SpecError("--study-name", None, "given with --storage")
    study = optuna.create_study(storage=_storage(url), study_name=study_name,
                                directions=study_directions(directions), sampler=sampler, load_if_exists=True)
    stored = tuple(d.name.lower() for d in study.directions)
    if stored != directions:
        raise SpecError("--study-name", study_name,
                        f"a study with {len(directions)} objective(s) (it was stored with {len(stored)})")
    return study
