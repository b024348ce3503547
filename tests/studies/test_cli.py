"""``parplan study``: run, report and worker through the command line; bad input is one line and exit 2."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from parplan import cli
from parplan.cli_study import register
from tests.studies.conftest import TINY, write_study


def main(argv: list[str]) -> int:
    """``parplan study ARGV``."""
    return cli.main(["study", *argv])


def test_run_then_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = write_study(tmp_path, {**TINY, "gpu_counts": [8], "search": {"trials": 10}})
    out = tmp_path / "out"
    assert main(["run", str(study), "--n-jobs", "1", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "2 problems (2 ok); 0 already done, 2 searched" in captured.out
    assert captured.err == ""  # stderr is not a terminal here: no progress
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert str(out / "report" / "report.md") in printed


def test_default_output_folder_is_the_studys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    study = write_study(tmp_path, {**TINY, "models": ["gpt3-350m"], "gpu_counts": [8], "search": {"trials": 5},
                                   "outputs": {"dir": "results-here"}})
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(study)]) == 0
    assert (tmp_path / "results-here" / "study.yaml").is_file()


@pytest.mark.parametrize("argv", [["run", "missing.yaml"], ["report", "."], ["run", "STUDY", "--n-jobs", "0"]])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    write_study(tmp_path, TINY, "STUDY")
    try:
        code = main(argv)
    except SystemExit as exc:  # a flag argparse refuses (--n-jobs 0) exits from the parser
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("parplan: error: ") and err.count("\n") == 1


def test_bad_study_field_is_reported_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = write_study(tmp_path, {**TINY, "search": {"sampler": "cmaes"}})
    assert main(["run", str(study), "--out", str(tmp_path / "o")]) == 2
    assert "'search.sampler'" in capsys.readouterr().err


def test_worker_needs_a_storage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["worker", "study.yaml"])
    assert info.value.code == 2
    assert "--storage" in capsys.readouterr().err


def test_register_adds_study_to_a_parser() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["study", "worker", "s.yaml", "--storage", "sqlite:///x.db", "--max-problems", "2"])
    assert args.study_command == "worker" and args.max_problems == 2 and callable(args.func)


def test_parplan_cli_has_study_once_wired() -> None:
    parser = cli.build_parser()
    choices = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    if "study" not in choices:
        pytest.skip("parplan.cli does not register parplan.cli_study yet")
    assert cli.main(["study", "report", "/nonexistent"]) == 2
