"""Study backends: the tiny study on a dask LocalCluster equals the loky/in-process run; bad backends are one line."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from costmodel.specs.errors import SpecError
from studies import backends
from studies.backends import check_backend, study_backend
from studies.outputs import read_results, read_runs
from studies.runner import RunSummary, run_study
from studies.spec import StudySpec, load_study
from tests.studies.conftest import TINY, comparable, write_study


@pytest.fixture(scope="module")
def local_cluster() -> object:
    """A two-worker, one-thread-each dask cluster in threads of this process (no extra processes)."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
    yield cluster
    cluster.close()


def test_dask_run_equals_the_in_process_run(local_cluster, tiny_reference: tuple[StudySpec, RunSummary],
                                            tmp_path: Path) -> None:
    spec, reference = tiny_reference
    out = tmp_path / "dask"
    summary = run_study(spec, out, n_jobs=-1, stream=io.StringIO(), backend="dask",
                        scheduler=local_cluster.scheduler_address)
    assert summary.searched == 4 and summary.counts == {"ok": 4}
    assert comparable(summary.results) == comparable(reference.results)  # same seeds, same trials, same results
    assert set(read_results(out)) == {r.problem for r in reference.results}  # result files written by the run
    assert read_runs(out)[-1]["backend"] == "dask"


def test_dask_rerun_searches_nothing(local_cluster, tmp_path: Path) -> None:
    spec = load_study(write_study(tmp_path, {**TINY, "gpu_counts": [8]}))
    first = run_study(spec, tmp_path / "out", n_jobs=2, stream=io.StringIO(), backend="dask",
                      scheduler=local_cluster.scheduler_address)
    again = run_study(spec, tmp_path / "out", n_jobs=2, stream=io.StringIO(), backend="dask",
                      scheduler=local_cluster.scheduler_address)
    assert first.searched == 2 and again.searched == 0 and again.done_before == 2


@pytest.mark.parametrize(("backend", "scheduler", "field"), [
    ("ray", None, "backend"), ("dask", None, "scheduler"), ("dask", "", "scheduler"),
    ("loky", "tcp://127.0.0.1:8786", "scheduler")])
def test_bad_backend_settings_are_one_spec_error(backend: str, scheduler: str | None, field: str) -> None:
    with pytest.raises(SpecError) as info:
        check_backend(backend, scheduler)
    assert info.value.field == field and "\n" not in str(info.value)


def test_unreachable_scheduler_names_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    monkeypatch.setattr(backends, "CONNECT_TIMEOUT_S", 1.0)
    spec = load_study(write_study(tmp_path, TINY))
    with pytest.raises(SpecError) as info:
        run_study(spec, tmp_path / "out", backend="dask", scheduler="tcp://127.0.0.1:9")  # discard port: refused
    assert info.value.field == "scheduler" and "127.0.0.1:9" in str(info.value)
    assert not (tmp_path / "out").exists()  # refused before the output folder is made


@pytest.mark.parametrize("address", ["not an address", "tcp://host-without-port", "carrier-pigeon://h:1"])
def test_malformed_scheduler_is_refused_before_connecting(address: str) -> None:
    pytest.importorskip("distributed")
    with pytest.raises(SpecError) as info, study_backend("dask", address):
        pass
    assert info.value.field == "scheduler" and "SCHEME://HOST:PORT" in str(info.value)


def test_dask_not_installed_is_one_spec_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(SpecError) as info, study_backend("dask", "tcp://127.0.0.1:8786"):
        pass
    assert info.value.field == "backend" and "parplan[dask]" in str(info.value)


def test_loky_backend_names_joblib_loky() -> None:
    with study_backend("loky") as parallel:
        assert parallel == {"backend": "loky"}


@pytest.mark.parametrize(("argv", "names"), [
    (["--backend", "ray"], "--backend"),
    (["--scheduler", "tcp://127.0.0.1:8786"], "scheduler"),
    (["--backend", "dask"], "scheduler"),
    (["--backend", "dask", "--scheduler", "tcp://127.0.0.1:9"], "scheduler"),
])
def test_cli_bad_backend_is_one_line_and_exit_2(argv: list[str], names: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from parplan.cli import main

    if "tcp://127.0.0.1:9" in argv:
        pytest.importorskip("distributed")
    monkeypatch.setattr(backends, "CONNECT_TIMEOUT_S", 1.0)
    study = write_study(tmp_path, TINY)
    try:
        code = main(["study", "run", str(study), "--out", str(tmp_path / "out"), *argv])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and names in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("scheduler", "storage", "refused"), [
    ("tcp://10.0.0.5:8786", None, True),
    ("tcp://10.0.0.5:8786", "sqlite:////tmp/x.db", True),
    ("tcp://10.0.0.5:8786", "postgresql://u@h/db", False),
    ("tcp://127.0.0.1:8786", None, False),
    ("inproc://10.0.0.5/1/2", None, False),
])
def test_a_remote_scheduler_needs_storage_its_workers_reach(scheduler: str, storage: str | None,
                                                             refused: bool) -> None:
    from studies.backends import check_storage_reachable

    if refused:
        with pytest.raises(SpecError) as info:
            check_storage_reachable("dask", scheduler, storage)
        assert info.value.field == "storage" and "postgresql" in str(info.value)
    else:
        check_storage_reachable("dask", scheduler, storage)
    check_storage_reachable("loky", None, storage)  # this machine's pool shares the disk


def test_a_pool_worker_keeps_its_caches_past_lokys_leak_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loky replaces a worker grown by 300 MB; a study worker raises that limit for itself (its caches are
    bounded), and the parent process leaves it alone."""
    from joblib.externals.loky import process_executor

    from studies.backends import WORKER_MEMORY_GROWTH_BYTES, keep_worker_caches

    monkeypatch.setattr(process_executor, "_MAX_MEMORY_LEAK_SIZE", int(3e8))
    keep_worker_caches()
    assert process_executor._MAX_MEMORY_LEAK_SIZE == WORKER_MEMORY_GROWTH_BYTES  # noqa: SLF001
    monkeypatch.setattr(process_executor, "_MAX_MEMORY_LEAK_SIZE", 4 * WORKER_MEMORY_GROWTH_BYTES)
    keep_worker_caches()  # never lowers a larger limit
    assert process_executor._MAX_MEMORY_LEAK_SIZE == 4 * WORKER_MEMORY_GROWTH_BYTES  # noqa: SLF001


def test_only_a_process_other_than_the_parent_raises_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import studies.work as work

    calls: list[int] = []
    monkeypatch.setattr(work, "keep_worker_caches", lambda: calls.append(1))
    monkeypatch.setattr(work.signal, "signal", lambda *args: None)  # a worker ignores Ctrl-C; this test process not
    monkeypatch.setattr(work, "store_for", lambda url: (_ for _ in ()).throw(RuntimeError("stop")))
    for parent in (os.getpid(), os.getpid() + 1):
        with pytest.raises(RuntimeError, match="stop"):
            work.attempt(None, "sqlite://", parent_pid=parent)  # type: ignore[arg-type]
    assert calls == [1]  # the second call, as if from a pool worker
