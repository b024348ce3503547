"""One-line errors, strict JSON, Ctrl-C and the progress line of the CLI (issue 11, items 8, 9 and 10)."""

from __future__ import annotations

import copy
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from parplan._json import dumps
from parplan.cli import main
from tests.search.conftest import analytic_search_timer  # noqa: F401 - a fixture

SEARCH = ["search", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--global-batch-size", "64",
          "--seq-length", "4096", "--trials", "12"]


def _strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"bare {name} in --json output")

    return json.loads(text, parse_constant=refuse)


def _row(run: dict[str, Any], step_time: Any = 1.0, rid: str = "r1") -> dict[str, Any]:
    # A copy: dicts shared between rows would be dumped as YAML aliases, which parplan refuses.
    return {"id": rid, "source": "test", "run": copy.deepcopy(run), "measured": {"step_time_s": step_time, "how": "measured"}}


def test_validate_lists_a_run_that_does_not_lay_out_the_cluster(tmp_path: Path, base_run: dict[str, Any],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    bad = {**base_run, "strategy": {**base_run["strategy"], "dp": 3}}  # 2 x 2 x 3 = 12 of 16 GPUs
    path = tmp_path / "set.yaml"
    path.write_text(yaml.safe_dump([_row(base_run, rid="good"), _row(bad, rid="bad")]))
    assert main(["validate", str(path), "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    rows = {r["id"]: r for r in out["runs"]}
    assert rows["bad"]["error"] is None and rows["bad"]["predicted_step_time_s"] is None
    assert "lay out" in rows["bad"]["reason"]
    assert rows["good"]["error"] is not None and out["n"] == 1
    assert main(["validate", str(path)]) == 0  # the table prints the row too
    assert "bad" in capsys.readouterr().out


@pytest.mark.parametrize("value", [".nan", ".inf"])
def test_validate_refuses_a_non_finite_measurement(tmp_path: Path, base_run: dict[str, Any], value: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "set.yaml"
    path.write_text(yaml.safe_dump([_row(base_run)]).replace("step_time_s: 1.0", f"step_time_s: {value}"))
    assert main(["validate", str(path), "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "step_time_s" in err[0]


def test_json_never_holds_nan_or_infinity() -> None:
    text = dumps({"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": {"d": (math.nan,)}})
    assert _strict(text) == {"a": None, "b": [None, None, 1.5], "c": {"d": [None]}}


@pytest.mark.parametrize("kind", ["models", "gpus"])
def test_catalog_json_is_strict(kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", kind, "--json"]) == 0
    assert _strict(capsys.readouterr().out)


def test_search_ctrl_c_is_one_line_and_exit_130(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from parplan import cli_search

    def interrupted(*_args: Any, **_kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_search, "run_search", interrupted)
    assert main([*SEARCH, "--gpus", "16"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["parplan: interrupted; rerun the same command to resume"]


def test_search_out_file_is_refused_before_searching(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from parplan import cli_search

    monkeypatch.setattr(cli_search, "run_search", lambda *a, **k: pytest.fail("searched"))
    mine = tmp_path / "file.txt"
    mine.write_text("mine\n")
    assert main([*SEARCH, "--gpus", "16", "--export", "megatron", "--out", str(mine)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0]
    assert mine.read_text() == "mine\n"


def test_missing_profile_is_checked_once_before_any_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from parplan import cli_search

    monkeypatch.setattr(cli_search, "run_search", lambda *a, **k: pytest.fail("searched"))
    code = main([*SEARCH, "--max-gpus", "64", "--tokens", "1e11", "--deadline-days", "30",
                 "--profile", str(tmp_path / "nothing")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--profile" in err[0]


def test_budget_flags_are_checked_before_the_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # A profile may take minutes to fit: a budget flag error must not wait for it.
    from parplan import cli_search

    monkeypatch.setattr(cli_search, "_check_profile", lambda *a, **k: pytest.fail("profile checked first"))
    code = main([*SEARCH, "--gpus", "8", "--deadline-days", "30", "--profile", str(tmp_path / "nothing")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "tokens" in err[0] and "--deadline-days" in err[0]


def test_malformed_storage_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SEARCH, "--gpus", "16", "--storage", "notaurl", "--study-name", "s"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--storage" in err[0]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("json_flag", [True, False])
def test_budget_search_progress_only_on_a_terminal_without_json(analytic_search_timer, monkeypatch,  # type: ignore[no-untyped-def]
                                                                json_flag: bool,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    argv = [*SEARCH, "--max-gpus", "16", "--tokens", "1e11", "--deadline-days", "30"]
    main([*argv, "--json"] if json_flag else argv)
    drawn = terminal.getvalue()
    if json_flag:
        assert drawn == ""
        _strict(capsys.readouterr().out)
    else:
        assert "\r\033[K" in drawn and "GPU count 5/5" in drawn and "trial 12/12" in drawn
        assert "\n" not in drawn  # one status line, redrawn in place, erased at the end
        assert drawn.endswith("\r\033[K")


def test_no_progress_when_stderr_is_not_a_terminal(analytic_search_timer,  # type: ignore[no-untyped-def]
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    main([*SEARCH, "--gpus", "16"])
    assert capsys.readouterr().err == ""
