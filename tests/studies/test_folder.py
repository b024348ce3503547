"""The output folder: parplan writes only where it made or marked a folder, never through a symlink, atomically."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from costmodel.specs.errors import SpecError
from parplan.cli import main as parplan_main
from studies.folder import MARKER_FILE, StudyFolder
from studies.outputs import read_results
from studies.report import write_report
from studies.runner import run_study
from studies.spec import StudySpec, load_study
from tests.studies.conftest import TINY, write_study


def main(argv: list[str]) -> int:
    """``parplan study ARGV``."""
    return parplan_main(["study", *argv])


SMALL = {**TINY, "name": "small", "gpu_counts": [8], "search": {"trials": 5, "seed": 1}}
"""Two problems of a few tenths of a second."""


@pytest.fixture
def small(tmp_path: Path) -> StudySpec:
    return load_study(write_study(tmp_path, SMALL))


def _run(spec: StudySpec, out: Path) -> None:
    run_study(spec, out, n_jobs=1, stream=io.StringIO())


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_new_folder_is_created_and_marked_with_the_study(small: StudySpec, tmp_path: Path) -> None:
    out = tmp_path / "a" / "b"
    _run(small, out)
    marker = json.loads((out / MARKER_FILE).read_text())
    assert marker["study"] == "small"
    assert sorted(marker["results"]) == sorted(read_results(out))  # the manifest of what parplan wrote


def test_an_empty_folder_is_adopted(small: StudySpec, tmp_path: Path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    _run(small, out)
    assert (out / MARKER_FILE).is_file() and len(read_results(out)) == 2


def test_a_non_empty_foreign_folder_is_refused_and_left_as_it_was(small: StudySpec, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    (out / "results").mkdir(parents=True)
    (out / "results" / "notes.json").write_text('{"keep": true}')
    (out / "run.json").write_text("my run log")
    (out / "study.yaml").write_text("my study")
    before = _tree(out)
    with pytest.raises(SpecError, match="'out'.*new or empty folder"):
        _run(small, out)
    assert _tree(out) == before and not (out / MARKER_FILE).exists()


def test_a_folder_of_another_study_is_refused(small: StudySpec, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(small, out)
    other = load_study(write_study(tmp_path, {**SMALL, "name": "other"}, "other.yaml"))
    before = _tree(out)
    with pytest.raises(SpecError, match="study 'small'"):
        _run(other, out)
    assert _tree(out) == before


def test_unrelated_files_in_results_survive_and_only_parplans_stale_files_go(small: StudySpec,
                                                                            tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(small, out)
    notes = out / "results" / "notes.json"
    notes.write_text('{"mine": 1}')
    (out / "results" / "plot.png").write_bytes(b"\x89PNG")
    fewer = load_study(write_study(tmp_path, {**SMALL, "models": ["gpt3-350m"]}, "fewer.yaml"))
    _run(fewer, out)
    assert notes.read_text() == '{"mine": 1}' and (out / "results" / "plot.png").exists()
    names = {p.name for p in (out / "results").iterdir()}
    assert names == {"notes.json", "plot.png", "gpt3-350m_h100-pcie-80gb_8g_b64_s2048.json"}  # 1.3b's file went
    write_report(out)  # a stranger's JSON in results/ is not parsed as a result


@pytest.mark.parametrize("name", ["results", "report"])
def test_a_symlinked_subfolder_is_refused_not_followed(name: str, small: StudySpec, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(small, out)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.json").write_text("precious")
    if (out / name).exists():
        os.rename(out / name, tmp_path / f"old-{name}")
    (out / name).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(SpecError, match="not a symlink"):
        if name == "results":
            _run(small, out)
        else:
            write_report(out)
    assert _tree(elsewhere) == {"precious.json": b"precious"}


@pytest.mark.parametrize("name", ["run.json", "study.yaml", "versions.json", "study.db"])
def test_a_symlinked_file_is_refused_not_followed(name: str, small: StudySpec, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(small, out)
    target = tmp_path / "victim.txt"
    target.write_text("victim")
    os.replace(out / name, tmp_path / f"old-{name}")
    (out / name).symlink_to(target)
    with pytest.raises(SpecError, match="not symlinks|not a symlink"):
        _run(small, out)
    assert target.read_text() == "victim"


def test_a_symlinked_result_file_is_refused_not_followed(small: StudySpec, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(small, out)
    result = next((out / "results").glob("gpt3-*.json"))
    target = tmp_path / "victim.json"
    target.write_text("victim")
    result.unlink()
    result.symlink_to(target)
    with pytest.raises(SpecError, match="not symlinks"):
        _run(small, out)
    with pytest.raises(SpecError, match="not symlinks"):
        write_report(out)
    assert target.read_text() == "victim"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a symlink to another user needs root")
def test_an_out_symlink_planted_by_another_user_is_refused(small: StudySpec, tmp_path: Path) -> None:
    target = tmp_path / "victim-home"
    target.mkdir()
    link = tmp_path / "shared-tmp-s"
    link.symlink_to(target, target_is_directory=True)
    os.lchown(link, 12345, 12345)
    with pytest.raises(SpecError, match="belongs to another user"):
        _run(small, link)
    assert list(target.iterdir()) == []


def test_writes_leave_no_temporary_files(small: StudySpec, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(small, out)
    _run(small, out)
    write_report(out)
    leftovers = [p for p in out.rglob(".*") if p.name != MARKER_FILE]
    assert leftovers == []


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = StudyFolder.claim(tmp_path / "out", "s")
    folder.write_text("results/a.json", "old")

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError):
        folder.write_text("results/a.json", "new")
    assert (tmp_path / "out" / "results" / "a.json").read_text() == "old"
    assert [p.name for p in (tmp_path / "out" / "results").iterdir()] == ["a.json"]


def test_out_pointing_at_a_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = write_study(tmp_path, SMALL)
    target = tmp_path / "a-file"
    target.write_text("mine")
    assert main(["run", str(study), "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("parplan: error: The 'out' parameter") and err.count("\n") == 1 and "a-file" in err
    assert target.read_text() == "mine"


def test_a_damaged_result_file_fails_the_report_in_one_line_and_a_run_rewrites_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = write_study(tmp_path, SMALL)
    out = tmp_path / "out"
    assert main(["run", str(study), "--out", str(out)]) == 0
    damaged = next((out / "results").glob("gpt3-*.json"))
    damaged.write_text('{"key": "truncated')
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and damaged.name in err and "rerun `parplan study run`" in err
    assert main(["run", str(study), "--out", str(out)]) == 0  # the storage holds the result: written again
    assert json.loads(damaged.read_text())["problem"] == damaged.stem
    assert main(["report", str(out)]) == 0


def test_a_fifo_in_place_of_a_result_is_refused_without_waiting(small: StudySpec, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(small, out)
    result = next((out / "results").glob("gpt3-*.json"))
    result.unlink()
    os.mkfifo(result)
    with pytest.raises(SpecError, match="regular files"):
        write_report(out)


def test_report_needs_the_marker(small: StudySpec, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(small, out)
    (out / MARKER_FILE).unlink()
    with pytest.raises(SpecError, match=MARKER_FILE):
        write_report(out)
