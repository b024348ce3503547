"""``parplan study run`` on a terminal: the progress line without ``--json``, nothing on stderr with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costmodel.progress import ERASE
from parplan import cli
from tests.studies.conftest import TINY, Terminal, write_study


@pytest.mark.parametrize("json_flag", [False, True])
def test_study_run_draws_progress_on_a_terminal_unless_json(json_flag: bool, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    study = write_study(tmp_path, {**TINY, "gpu_counts": [8], "search": {"trials": 5}})
    argv = ["study", "run", str(study), "--n-jobs", "1", "--out", str(tmp_path / "out")]
    assert cli.main([*argv, "--json"] if json_flag else argv) == 0
    drawn = terminal.getvalue()
    if json_flag:
        assert drawn == ""
        assert json.loads(capsys.readouterr().out)["searched"] == 2
    else:
        assert drawn.count("\n") == 1 and drawn.endswith("\n")  # one line, kept as the run's last state
        assert "2/2 problems (100%)" in drawn.rstrip("\n").rsplit(ERASE, 1)[-1]
