"""The study database: a malformed URL or a damaged SQLite file is one line naming --storage, with the way out."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from costmodel.specs.errors import SpecError
from parplan.cli import main as parplan_main
from studies.runner import run_study
from studies.spec import load_study
from studies.store import StudyStore, default_url
from studies.work import open_store
from tests.studies.conftest import TINY, write_study


def main(argv: list[str]) -> int:
    """``parplan study ARGV``."""
    return parplan_main(["study", *argv])


SMALL = {**TINY, "name": "small", "models": ["gpt3-350m"], "gpu_counts": [8], "search": {"trials": 5}}


@pytest.mark.parametrize("url", ["not a url", "postgresql://u:p@host:notaport/db", "nosuch://x", "sqlite://",
                                 "sqlite:///:memory:"])
def test_a_malformed_storage_url_is_one_line_naming_storage(url: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    study = write_study(tmp_path, SMALL)
    out = tmp_path / "out"
    start = time.monotonic()
    assert main(["run", str(study), "--out", str(out), "--storage", url]) == 2
    assert time.monotonic() - start < 2
    err = capsys.readouterr().err
    assert err.startswith("parplan: error: The 'storage' parameter") and err.count("\n") == 1
    assert "Traceback" not in err and not out.exists()  # nothing written before the URL was checked


def test_worker_with_a_malformed_storage_url_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = write_study(tmp_path, SMALL)
    assert main(["worker", str(study), "--storage", "postgresql://u:p@h:x/db"]) == 2
    err = capsys.readouterr().err
    assert "'storage'" in err and err.count("\n") == 1


def _damage(db: Path) -> None:
    data = bytearray(db.read_bytes())
    page = 4096
    for offset in range(page, len(data), page):  # every page but the header: tables and indexes unreadable
        data[offset:offset + 64] = b"\xde\xad\xbe\xef" * 16
    db.write_bytes(bytes(data))


def test_a_damaged_sqlite_file_is_refused_before_resuming_with_the_way_out(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    study = write_study(tmp_path, SMALL)
    out = tmp_path / "out"
    assert main(["run", str(study), "--out", str(out)]) == 0
    open_store(default_url(out)).close()  # as when the run's process ends: the WAL checkpointed into study.db
    kept = sorted(p.name for p in (out / "results").iterdir())
    _damage(out / "study.db")
    capsys.readouterr()
    assert main(["run", str(study), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'storage'" in err
    assert "remove study.db and rerun: results/ are kept" in err
    assert sorted(p.name for p in (out / "results").iterdir()) == kept
    (out / "study.db").unlink()  # the advice works
    for leftover in out.glob("study.db-*"):
        leftover.unlink()
    assert main(["run", str(study), "--out", str(out)]) == 0


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "study.db"
    db.write_text("these are my notes, not a database\n" * 200)
    with pytest.raises(SpecError, match="intact SQLite database"):
        StudyStore(f"sqlite:///{db}")
    assert db.read_text().startswith("these are my notes")


def test_an_intact_database_resumes(tmp_path: Path) -> None:
    spec = load_study(write_study(tmp_path, SMALL))
    run_study(spec, tmp_path / "out", n_jobs=1, stream=io.StringIO())
    again = run_study(spec, tmp_path / "out", n_jobs=1, stream=io.StringIO())
    assert again.searched == 0 and again.done_before == 1
