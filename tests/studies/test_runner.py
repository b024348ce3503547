"""The runner: outputs side by side, resuming skips finished problems, failures are recorded, jobs agree."""

from __future__ import annotations

import io
import json
from pathlib import Path

import optuna
import yaml

from studies.outputs import read_results, read_runs
from studies.problems import expand
from studies.runner import RunSummary, run_study
from studies.spec import StudySpec, load_study
from studies.store import StudyStore, default_url
from tests.studies.conftest import FAILING, comparable, write_study


def test_run_writes_study_versions_and_results_side_by_side(tiny_reference: tuple[StudySpec, RunSummary]) -> None:
    spec, summary = tiny_reference
    out = summary.out_dir
    assert {p.name for p in out.iterdir()} >= {"study.yaml", "versions.json", "run.json", "results", "study.db"}
    assert load_study(out / "study.yaml") == spec  # the resolved study reads back as the same study
    versions = json.loads((out / "versions.json").read_text())
    assert {"parplan", "optuna", "numpy", "scikit-learn"} <= set(versions["packages"])
    results = read_results(out)
    assert set(results) == {p.id for p in expand(spec)}
    assert all(r.ok and r.trials == 40 and r.strategy for r in results.values())
    assert read_runs(out)[-1]["status"] == {"ok": 4}


def test_every_trial_is_kept_as_an_optuna_study(tiny_reference: tuple[StudySpec, RunSummary]) -> None:
    spec, summary = tiny_reference
    store = StudyStore(summary.storage)
    results = store.results()
    for problem in expand(spec):
        study = store.trials_study(problem.key)
        assert isinstance(study, optuna.Study)
        assert len(study.trials) == 40
        assert study.user_attrs["parplan_problem"]["problem"] == problem.id
        assert study.best_trial.value == results[problem.key].step_time_s  # the same numbers as the table


def test_rerun_searches_nothing(tiny_reference: tuple[StudySpec, RunSummary]) -> None:
    spec, first = tiny_reference
    again = run_study(spec, first.out_dir, n_jobs=1, stream=io.StringIO())
    assert again.searched == 0 and again.done_before == 4
    assert comparable(again.results) == comparable(first.results)
    assert len(read_runs(first.out_dir)) >= 2


def test_changed_settings_search_again_into_the_same_folder(tmp_path: Path,
                                                            tiny_reference: tuple[StudySpec, RunSummary]) -> None:
    spec, first = tiny_reference
    data = yaml.safe_load((first.out_dir / "study.yaml").read_text())
    data["gpu_counts"] = [8]
    data["search"]["trials"] = 12
    changed = load_study(write_study(tmp_path, data))
    out = tmp_path / "out"
    run_study(spec, out, n_jobs=1, stream=io.StringIO())  # copies nothing: a new folder, a new database
    summary = run_study(changed, out, n_jobs=1, stream=io.StringIO())
    assert summary.searched == 2  # the settings changed, so the stored results do not apply
    assert {r.trials for r in summary.results} == {12}
    assert set(read_results(out)) == {p.id for p in expand(changed)}  # results of dropped problems are gone


def test_failing_problems_are_recorded_and_do_not_stop_the_study(tmp_path: Path) -> None:
    spec = load_study(write_study(tmp_path, FAILING))
    summary = run_study(spec, tmp_path / "out", n_jobs=1, stream=io.StringIO())
    by_id = {r.problem: r for r in summary.results}
    assert len(by_id) == 4
    ok = by_id["gpt3-350m_a100-sxm4-40gb_8g_b64_s2048"]
    assert ok.status == "ok"
    infeasible = by_id["llama3.1-70b_a100-sxm4-40gb_8g_b64_s2048"]
    assert infeasible.status == "infeasible" and "No strategy fits" in infeasible.reason
    assert infeasible.step_time_s is None and infeasible.trials == 20
    invalid = by_id["gpt3-350m_a100-sxm4-40gb_12g_b64_s2048"]
    assert invalid.status == "invalid" and "num_gpus" in invalid.reason or "node" in invalid.reason
    assert summary.counts == {"ok": 1, "infeasible": 1, "invalid": 2}
    again = run_study(spec, tmp_path / "out", n_jobs=1, stream=io.StringIO())
    assert again.searched == 0  # a failure is a result: not searched again


def test_two_jobs_give_the_same_table_as_one(tmp_path: Path, tiny_reference: tuple[StudySpec, RunSummary]) -> None:
    spec, reference = tiny_reference
    summary = run_study(spec, tmp_path / "out", n_jobs=2, stream=io.StringIO())
    assert summary.searched == 4
    assert comparable(summary.results) == comparable(reference.results)


def test_storage_url_is_honoured(tmp_path: Path, tiny_reference: tuple[StudySpec, RunSummary]) -> None:
    spec, _ = tiny_reference
    url = default_url(tmp_path / "elsewhere")
    run_study(spec, tmp_path / "out", storage=url, n_jobs=1, stream=io.StringIO())
    assert not (tmp_path / "out" / "study.db").exists()
    assert len(StudyStore(url).results()) == 4
