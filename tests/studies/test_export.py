"""``parplan study export``: a study's trials as Optuna studies that optuna-dashboard opens (issue 15 item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from parplan.cli import main as parplan_main
from tests.dashboard import dashboard, get
from tests.studies.conftest import FAILING, write_study

STUDY = {**FAILING, "name": "exported", "gpu_counts": [8], "search": {"trials": 25, "seed": 1}}
"""Two problems: gpt3-350m fits on 8 x A100-40GB, llama3.1-70b does not (every trial infeasible)."""


def _json(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> dict:
    capsys.readouterr()
    assert parplan_main(argv) == code
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("export")
    out = root / "out"
    assert parplan_main(["study", "run", str(write_study(root, STUDY)), "--out", str(out)]) == 0
    return out


def test_export_writes_one_optuna_study_per_problem(study_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'trials.db'}"
    summary = _json(capsys, ["study", "export", str(study_dir), "--storage", url, "--json"])
    names = sorted(optuna.get_all_study_names(url))
    assert names == sorted(summary["exported"]) and len(names) == 2 and summary["without_trials"] == []
    by_model = {optuna.load_study(study_name=n, storage=url).user_attrs["parplan_problem"]["model"]: n
                for n in names}
    fits = optuna.load_study(study_name=by_model["gpt3-350m"], storage=url).get_trials()
    none = optuna.load_study(study_name=by_model["llama3.1-70b"], storage=url).get_trials()
    assert len(fits) == len(none) == 25
    assert any(t.user_attrs["feasible"] for t in fits)
    assert not any(t.user_attrs["feasible"] for t in none)
    assert all(all(v > 0 for v in t.constraints.values()) for t in none)  # infeasible, as Optuna reads it


def test_a_second_export_into_the_same_database_is_refused_whole(study_dir: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'twice.db'}"
    assert parplan_main(["study", "export", str(study_dir), "--storage", url]) == 0
    capsys.readouterr()
    assert parplan_main(["study", "export", str(study_dir), "--storage", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--storage" in err and "without a study named" in err


def test_exporting_into_the_studys_own_database_or_from_no_study_is_one_line(study_dir: Path, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert parplan_main(["study", "export", str(study_dir), "--storage", f"sqlite:///{study_dir / 'study.db'}"]) == 2
    assert "another database than the study's own" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    target = tmp_path / "new.db"
    assert parplan_main(["study", "export", str(tmp_path / "empty"), "--storage", f"sqlite:///{target}"]) == 2
    assert capsys.readouterr().err.startswith("parplan: error:")
    assert not target.exists()  # nothing written on an error


def test_run_report_and_worker_print_json(study_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_study(tmp_path, STUDY)
    run = _json(capsys, ["study", "run", str(spec), "--out", str(study_dir), "--json"])
    assert run["searched"] == 0 and run["done_before"] == 2 and run["counts"] == {"infeasible": 1, "ok": 1}
    assert {r["model"] for r in run["results"]} == {"gpt3-350m", "llama3.1-70b"}
    report = _json(capsys, ["study", "report", str(study_dir), "--json"])
    assert any(p.endswith("results.csv") for p in report["written"])
    worker = _json(capsys, ["study", "worker", str(spec), "--storage", f"sqlite:///{study_dir / 'study.db'}",
                            "--json"])
    assert worker == {"searched": 0, "left": 0, "problems": 2}


def test_optuna_dashboard_lists_the_exported_study_with_infeasible_trials(study_dir: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    assert parplan_main(["study", "export", str(study_dir), "--storage", url]) == 0
    with dashboard(url) as (base, studies):
        assert sorted(s["study_name"] for s in studies) == sorted(optuna.get_all_study_names(url))
        for summary in studies:
            detail = get(f"{base}/studies/{summary['study_id']}")
            truth = {t.number: t.user_attrs["feasible"]
                     for t in optuna.load_study(study_name=summary["study_name"], storage=url).get_trials()}
            assert len(detail["trials"]) == 25
            assert {t["number"]: t["constraints"][0] <= 0 for t in detail["trials"]} == truth
