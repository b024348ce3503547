"""Where a study keeps its state: results, claims and the Optuna studies, in one database.

One URL names it: ``sqlite:///DIR/study.db`` by default (no server), or
``postgresql://user:password@host/db`` so that workers on many machines share
it. Three tables:

- ``parplan_results``: one row per finished problem, primary key = problem key,
  so a problem can have at most one result whoever finishes it;
- ``parplan_claims``: which worker is searching which problem, until when
  (see :mod:`studies.claims`);
- ``parplan_trials``: every trial of every problem, as the log of an Optuna
  journal storage, one study per problem (see :mod:`studies.trials`).

Times are taken from the database's clock (offset measured once per
connection), so workers on machines whose clocks disagree still agree on when
a claim expires.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import optuna
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from costmodel.specs.errors import SpecError
from studies.result import ProblemResult
from studies.trials import count_trials, load_trials, metadata, trials_table, write_trials

DEFAULT_DB = "study.db"
SQLITE_TIMEOUT_S = 120.0
"""How long a SQLite writer waits for the lock: other local workers commit in milliseconds, so only a stuck
process would exceed it."""

results_table = sa.Table(
    "parplan_results", metadata,
    sa.Column("key", sa.String(400), primary_key=True),
    sa.Column("study", sa.String(100), nullable=False, index=True),
    sa.Column("problem", sa.String(300), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("owner", sa.String(300), nullable=False),
    sa.Column("finished_at", sa.Float, nullable=False),
)
claims_table = sa.Table(
    "parplan_claims", metadata,
    sa.Column("key", sa.String(400), primary_key=True),
    sa.Column("owner", sa.String(300), nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
)

T = TypeVar("T")


def default_url(out_dir: str | Path) -> str:
    """The SQLite file of an output folder."""
    return f"sqlite:///{(Path(out_dir) / DEFAULT_DB).resolve()}"


def redact(url: str) -> str:
    """``url`` without its password (for files and messages)."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):
        return url


def retry(action: Callable[[], T], attempts: int = 6) -> T:
    """Run ``action``, retrying on database errors.

    Several workers starting together race to create the same tables (in
    PostgreSQL a concurrent CREATE TABLE fails on the catalog's unique index);
    the loser only has to try again once the winner has committed.
    """
    for attempt in range(attempts):
        try:
            return action()
        except SQLAlchemyError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1) + random.random() * 0.3)
    raise AssertionError("unreachable")  # pragma: no cover


def make_engine(url: str) -> sa.engine.Engine:
    """A SQLAlchemy engine for ``url``; SQLite files get WAL mode and a long lock timeout.

    Raises
    ------
    SpecError
        If the URL is malformed or its driver is not installed.
    """
    try:
        parsed = sa.engine.make_url(url)
        is_sqlite = parsed.get_backend_name() == "sqlite"
        kwargs: dict[str, Any] = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}} if is_sqlite else \
            {"pool_pre_ping": True}
        engine = sa.create_engine(url, **kwargs)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: e.g. a port that is not a number
        raise SpecError("storage", redact(url), "a database URL (sqlite:///path.db or "
                                                "postgresql://user:password@host/db)") from None
    except ImportError as exc:
        raise SpecError("storage", redact(url), f"a URL whose database driver is installed ({exc}; for "
                                                "postgresql:// install psycopg[binary])") from None
    if is_sqlite:
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers go on while one process writes; NORMAL skips the fsync per commit (WAL stays consistent
    # after a crash or kill -9; only an OS crash may lose the last commits, which a re-run searches again).
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class StudyStore:
    """Results, claims and Optuna trials of studies in the database at ``url``.

    Parameters
    ----------
    url : str
        SQLAlchemy URL; a SQLite file's folder is created when missing.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        if self.engine.dialect.name == "sqlite":
            database = self.engine.url.database
            if not database or database == ":memory:":
                raise SpecError("storage", url, "a SQLite file (sqlite:///path.db) or a server: an in-memory "
                                                "database is lost when the run ends")
            try:
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SpecError("storage", url, f"a SQLite file in a folder parplan can create ({exc.strerror})") \
                    from None
            self._check_sqlite(Path(database))
        try:
            retry(lambda: metadata.create_all(self.engine, checkfirst=True))
        except SQLAlchemyError as exc:
            raise SpecError("storage", redact(url), f"a reachable database ({_first_line(exc)})") from None
        self._clock_offset = self._measure_clock_offset()

    def _check_sqlite(self, path: Path) -> None:
        """``PRAGMA quick_check`` on an existing SQLite file before anything is resumed from it.

        A damaged file (a disk error, a copy taken mid-write) would otherwise fail half-way through
        a run or, worse, answer from damaged pages.
        """
        if not path.is_file() or path.stat().st_size == 0:
            return
        try:
            with self.engine.connect() as conn:
                rows = [str(r) for r in conn.execute(sa.text("PRAGMA quick_check")).scalars().all()]
        except SQLAlchemyError as exc:
            rows = [_first_line(exc)]
        if rows != ["ok"]:
            self.engine.dispose()
            raise SpecError("storage", str(path), f"an intact SQLite database (quick_check says: {rows[0][:80]}); "
                                                  f"to recover, remove {path.name} and rerun: results/ are kept, "
                                                  "the problems are searched again")

    # -- time ------------------------------------------------------------------------------------
    def _measure_clock_offset(self) -> float:
        if self.engine.dialect.name == "postgresql":
            query = "SELECT EXTRACT(EPOCH FROM clock_timestamp())"
        elif self.engine.dialect.name == "sqlite":
            query = "SELECT (julianday('now') - 2440587.5) * 86400.0"
        else:  # other databases: trust the local clock
            return 0.0
        with self.engine.connect() as conn:
            before = time.time()
            db_now = float(conn.execute(sa.text(query)).scalar_one())
            after = time.time()
        return db_now - (before + after) / 2

    def now(self) -> float:
        """Seconds since the epoch on the database's clock."""
        return time.time() + self._clock_offset

    # -- results ---------------------------------------------------------------------------------
    def results(self, keys: Iterable[str] | None = None) -> dict[str, ProblemResult]:
        """Stored results by key (every study's when ``keys`` is ``None``)."""
        query = sa.select(results_table.c.key, results_table.c.payload)
        wanted = None if keys is None else set(keys)
        if wanted is not None:  # a database may hold many studies: read only those of the keys
            query = query.where(results_table.c.study.in_(_studies_of(wanted)))
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return {k: ProblemResult.from_json(p) for k, p in rows if wanted is None or k in wanted}

    def done_keys(self, keys: Iterable[str]) -> set[str]:
        """The subset of ``keys`` that have a result."""
        wanted = set(keys)
        query = sa.select(results_table.c.key).where(results_table.c.study.in_(_studies_of(wanted)))
        with self.engine.connect() as conn:
            stored = conn.execute(query).scalars().all()
        return wanted & set(stored)

    def save_result(self, result: ProblemResult, study: str, owner: str) -> ProblemResult:
        """Store ``result`` unless the problem already has one; return the stored one (first wins)."""
        row = {"key": result.key, "study": study, "problem": result.problem, "status": result.status,
               "payload": result.to_json(), "owner": owner, "finished_at": self.now()}
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.insert(results_table).values(**row))
            return result
        except IntegrityError:
            with self.engine.connect() as conn:
                payload = conn.execute(sa.select(results_table.c.payload)
                                       .where(results_table.c.key == result.key)).scalar_one()
            return ProblemResult.from_json(payload)

    # -- Optuna trials ---------------------------------------------------------------------------
    def store_trials(self, key: str, directions: Sequence[str], trials: Sequence[optuna.trial.FrozenTrial],
                     attrs: dict[str, Any]) -> None:
        """Keep ``trials`` as the Optuna study named ``key`` (replacing a partial one from a dead worker)."""
        write_trials(self.engine, key, directions, trials, attrs)

    def trials_study(self, key: str) -> optuna.Study:
        """The stored Optuna study of problem ``key`` (raises ``KeyError`` when none is stored)."""
        return load_trials(self.engine, key)

    def trial_counts(self, keys: Iterable[str]) -> dict[str, int]:
        """Stored trials per problem key (0 when none)."""
        return count_trials(self.engine, keys)

    def forget(self, study: str) -> None:
        """Delete every result, claim and trial of ``study`` (tests, and starting a study over)."""
        prefix = f"{study}/"
        with self.engine.begin() as conn:
            conn.execute(sa.delete(results_table).where(results_table.c.study == study))
            for table in (claims_table, trials_table):
                conn.execute(sa.delete(table).where(table.c.key.startswith(prefix, autoescape=True)))

    def close(self) -> None:
        self.engine.dispose()


def _studies_of(keys: Iterable[str]) -> list[str]:
    """Study names of problem keys (``<study>/<problem>/<fingerprint>``)."""
    return sorted({k.split("/", 1)[0] for k in keys})


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
