"""Distributed workers against a real PostgreSQL server (skipped when PARPLAN_TEST_POSTGRES_URL is unset)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from studies.claims import Owner, holders, try_claim
from studies.outputs import read_results
from studies.problems import expand
from studies.runner import RunSummary, run_study
from studies.spec import StudySpec
from studies.store import StudyStore, results_table
from tests.studies.conftest import TINY, comparable, write_study


def _worker(study: Path, url: str, out: Path | None = None) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "parplan", "study", "worker", str(study), "--storage", url, "--poll", "0.2"]
    if out is not None:
        command += ["--out", str(out)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_three_workers_search_each_problem_once_and_match_one_process(
        tmp_path: Path, postgres_url: str, tiny_reference: tuple[StudySpec, RunSummary]) -> None:
    spec, reference = tiny_reference
    study = write_study(tmp_path, TINY)
    workers = [_worker(study, postgres_url, tmp_path / "out" if i == 0 else None) for i in range(3)]
    outputs = [w.communicate(timeout=240) for w in workers]
    for w, (_, stderr) in zip(workers, outputs):
        assert w.returncode == 0, stderr
    counts = [re.search(r"worker searched (\d+) problem", stdout) for stdout, _ in outputs]
    searched = [int(m.group(1)) for m in counts if m is not None]
    assert len(searched) == 3
    problems = expand(spec)
    assert sum(searched) == len(problems)  # each problem searched by exactly one worker

    store = StudyStore(postgres_url)
    stored = store.results()
    assert sorted(stored) == sorted(p.key for p in problems)  # every problem exactly one result
    assert comparable(stored.values()) == comparable(reference.results)  # = one process, same seeds
    assert set(store.trial_counts(stored).values()) == {40}
    # the first worker, started with --out, waited for the others and wrote every result
    assert comparable(read_results(tmp_path / "out").values()) == comparable(reference.results)


def test_a_dead_workers_problem_is_finished_by_another(tmp_path: Path, postgres_url: str,
                                                       tiny_reference: tuple[StudySpec, RunSummary]) -> None:
    spec, reference = tiny_reference
    study = write_study(tmp_path, TINY)
    store = StudyStore(postgres_url)
    victim = expand(spec)[0]
    dead = Owner("crashed-host", "boot", 4242, "gone")  # another machine: only the expiry can free its claim
    ttl = 6.0
    assert try_claim(store, victim.key, dead, ttl_s=ttl)
    expires_at = holders(store, [victim.key])[victim.key][1] + store.now()
    worker = subprocess.run([sys.executable, "-m", "parplan", "study", "worker", str(study),
                             "--storage", postgres_url, "--poll", "0.5"], capture_output=True, text=True,
                            timeout=240)
    assert worker.returncode == 0, worker.stderr
    with store.engine.connect() as conn:
        finished_at, owner = conn.execute(sa.select(results_table.c.finished_at, results_table.c.owner)
                                          .where(results_table.c.key == victim.key)).one()
    assert finished_at >= expires_at  # searched only once the dead worker's claim had expired
    assert owner != str(dead)
    assert comparable(store.results().values()) == comparable(reference.results)


def test_run_with_postgres_storage_collects_what_workers_found(
        tmp_path: Path, postgres_url: str, tiny_reference: tuple[StudySpec, RunSummary]) -> None:
    spec, reference = tiny_reference
    summary = run_study(spec, tmp_path / "out", storage=postgres_url, n_jobs=2, stream=io.StringIO())
    assert summary.searched == 4
    again = run_study(spec, tmp_path / "again", storage=postgres_url, n_jobs=1, stream=io.StringIO())
    assert again.searched == 0 and comparable(again.results) == comparable(reference.results)
    assert not (tmp_path / "out" / "study.db").exists()
