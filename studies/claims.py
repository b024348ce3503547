"""Claims: which worker searches which problem, so that each problem is searched once.

A worker inserts a claim row (primary key = problem key) before it searches a
problem and renews its expiry from a heartbeat thread while it does. Another
worker may take the problem over only when the claim has expired (its owner
stopped renewing: the machine died, the process was killed) or when the owner
is a process of this machine that no longer runs, which is seen at once instead
of after the expiry. Taking over is a compare-and-swap on (owner, expires_at):
of two workers that both see a stale claim, one update matches and the other
finds zero rows. Both PostgreSQL (row lock, WHERE re-checked on the newest row
version) and SQLite (one writer at a time) make that atomic.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from studies.store import StudyStore, claims_table

DEFAULT_TTL_S = 120.0
"""A claim lives this long without renewal: heartbeats come every quarter of it, so a busy worker (a
search holds the GIL for seconds at a time) never loses its claim, and a dead one's problem waits at most
two minutes."""


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "noboot"


@dataclass(frozen=True)
class Owner:
    """Who holds a claim: host, boot, process id and a nonce (so a reused pid is another owner)."""

    host: str
    boot: str
    pid: int
    nonce: str

    @classmethod
    def current(cls) -> Owner:
        """This process (a fresh nonce per call: one per worker loop or joblib task process)."""
        return cls(socket.gethostname(), _boot_id(), os.getpid(), uuid.uuid4().hex[:8])

    def __str__(self) -> str:
        return f"{self.host}|{self.boot}|{self.pid}|{self.nonce}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        parts = text.split("|")
        if len(parts) != 4 or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]), parts[3])

    def is_dead_here(self) -> bool:
        """True only when the owner ran on this machine (same host and boot) and its process is gone."""
        here = Owner.current()
        if (self.host, self.boot) != (here.host, here.boot):
            return False
        return not _process_alive(self.pid)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed child nobody has reaped yet still answers kill(0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return True


def try_claim(store: StudyStore, key: str, owner: Owner, ttl_s: float = DEFAULT_TTL_S) -> bool:
    """Claim problem ``key`` for ``owner``; False when another live worker holds it.

    Does not look at results: callers check ``store.done_keys`` before and after.
    """
    me = str(owner)
    for _ in range(3):  # the row may vanish (released) between our failed insert and our read
        try:
            with store.engine.begin() as conn:
                conn.execute(sa.insert(claims_table).values(key=key, owner=me, expires_at=store.now() + ttl_s,
                                                            attempts=1))
            return True
        except IntegrityError:
            pass
        with store.engine.connect() as conn:
            row = conn.execute(sa.select(claims_table).where(claims_table.c.key == key)).first()
        if row is None:
            continue
        if row.owner == me:
            return renew(store, key, owner, ttl_s)
        holder = Owner.parse(row.owner)
        stale = row.expires_at < store.now() or (holder is not None and holder.is_dead_here())
        if not stale:
            return False
        with store.engine.begin() as conn:
            taken = conn.execute(
                sa.update(claims_table)
                .where(claims_table.c.key == key, claims_table.c.owner == row.owner,
                       claims_table.c.expires_at == row.expires_at)
                .values(owner=me, expires_at=store.now() + ttl_s, attempts=row.attempts + 1))
        return taken.rowcount == 1
    return False


def renew(store: StudyStore, key: str, owner: Owner, ttl_s: float = DEFAULT_TTL_S) -> bool:
    """Push the expiry of ``owner``'s claim on ``key``; False when the claim was taken over."""
    with store.engine.begin() as conn:
        done = conn.execute(sa.update(claims_table)
                            .where(claims_table.c.key == key, claims_table.c.owner == str(owner))
                            .values(expires_at=store.now() + ttl_s))
    return done.rowcount == 1


def release(store: StudyStore, key: str, owner: Owner) -> None:
    """Drop ``owner``'s claim on ``key`` (after its result is stored)."""
    with store.engine.begin() as conn:
        conn.execute(sa.delete(claims_table).where(claims_table.c.key == key, claims_table.c.owner == str(owner)))


def holders(store: StudyStore, keys: list[str]) -> dict[str, tuple[str, float]]:
    """Current claims on ``keys``: owner and seconds until expiry."""
    wanted = set(keys)
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(claims_table.c.key, claims_table.c.owner, claims_table.c.expires_at)).all()
    now = store.now()
    return {k: (o, e - now) for k, o, e in rows if k in wanted}


class Heartbeat:
    """Renews a claim every ``ttl_s / 4`` seconds from a daemon thread while a problem is searched.

    ``lost`` is set when a renewal finds the claim gone (taken over after an
    expiry): the search finishes anyway and its result only counts if it is the
    first stored.
    """

    def __init__(self, store: StudyStore, key: str, owner: Owner, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.store, self.key, self.owner, self.ttl_s = store, key, owner, ttl_s
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat {key}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            try:
                if not renew(self.store, self.key, self.owner, self.ttl_s):
                    self.lost.set()
                    return
            except Exception:  # noqa: BLE001 - a database hiccup: try again at the next beat
                continue
