"""Claims: one holder at a time, taken over when expired or when the holder's process is gone."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from studies.claims import Heartbeat, Owner, holders, release, renew, try_claim
from studies.store import StudyStore, default_url


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StudyStore]:
    s = StudyStore(default_url(tmp_path))
    yield s
    s.close()


def _other_host(pid: int = 1) -> Owner:
    return Owner("another-host", "boot", pid, "nonce")


def test_one_holder_at_a_time(store: StudyStore) -> None:
    a, b = Owner.current(), Owner.current()
    assert a != b  # two workers in one process are still two owners
    assert try_claim(store, "s/p/1", a)
    assert not try_claim(store, "s/p/1", b)
    assert try_claim(store, "s/p/1", a)  # re-claiming one's own claim renews it
    release(store, "s/p/1", a)
    assert try_claim(store, "s/p/1", b)


def test_expired_claim_is_taken_over_and_the_old_owner_learns_it(store: StudyStore) -> None:
    old, new = _other_host(), Owner.current()
    assert try_claim(store, "k", old, ttl_s=0.2)
    assert not try_claim(store, "k", new)
    time.sleep(0.3)
    assert try_claim(store, "k", new)
    assert not renew(store, "k", old)  # the old owner's heartbeat now fails
    assert holders(store, ["k"])["k"][0] == str(new)


def test_claim_of_a_dead_local_process_is_taken_over_at_once(store: StudyStore) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    here = Owner.current()
    dead = Owner(here.host, here.boot, int(gone.stdout), "nonce")
    assert dead.is_dead_here()
    assert try_claim(store, "k", dead, ttl_s=3600)
    assert try_claim(store, "k", here)


def test_live_claim_on_another_host_is_respected(store: StudyStore) -> None:
    assert try_claim(store, "k", _other_host(pid=999_999), ttl_s=3600)
    assert not _other_host(pid=999_999).is_dead_here()  # another machine's pids say nothing here
    assert not try_claim(store, "k", Owner.current())


def test_heartbeat_keeps_a_short_claim_alive(store: StudyStore) -> None:
    me = Owner.current()
    assert try_claim(store, "k", me, ttl_s=0.4)
    with Heartbeat(store, "k", me, ttl_s=0.4) as beat:
        time.sleep(1.0)
        assert not try_claim(store, "k", _other_host())
    assert not beat.lost.is_set()


def test_owner_round_trips_through_text() -> None:
    me = Owner.current()
    assert Owner.parse(str(me)) == me
    assert Owner.parse("garbage") is None
