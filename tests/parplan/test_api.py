"""The Python API: mappings, paths and spec objects in, typed results with ``.to_dict()`` out."""

from __future__ import annotations

import doctest
import json
import subprocess
import sys

import pytest
import yaml

import parplan
from costmodel.specs.errors import SpecError
from costmodel.specs.runspec import run_spec_from_mapping
from parplan import api

RUN = {"model": "llama3.1-8b", "seq_length": 4096,
       "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
       "strategy": {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1, "global_batch_size": 64,
                    "recompute": "selective"}}
PROBLEM = {"model": "llama3.1-8b", "gpu": "h100-sxm5-80gb", "num_gpus": 8, "global_batch_size": 64,
           "seq_length": 4096}


def test_the_module_doctests_pass():
    failures, tried = doctest.testmod(api, optionflags=doctest.ELLIPSIS)
    assert tried >= 8
    assert failures == 0


def test_a_mapping_a_path_and_a_spec_predict_the_same(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(RUN), encoding="utf-8")
    by_mapping = parplan.predict(RUN)
    by_path = parplan.predict(path)
    by_spec = parplan.predict(run_spec_from_mapping(RUN))
    assert isinstance(by_mapping, parplan.Prediction)
    assert by_mapping.to_dict() == by_path.to_dict() == by_spec.to_dict()
    assert by_mapping.step_time_s == by_mapping.to_dict()["step_time_s"] > 0


def test_to_dict_is_the_cli_contract_json(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(RUN), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "parplan", "predict", str(path), "--json"],
                          capture_output=True, text=True, check=True)
    cli = json.loads(proc.stdout)
    lib = json.loads(json.dumps(parplan.predict(path).to_dict()))
    assert set(cli) == set(lib)
    assert cli["step_time_s"] == pytest.approx(lib["step_time_s"])


def test_a_strategy_that_breaks_a_rule_has_no_time_and_says_why():
    bad = parplan.predict({**RUN, "strategy": {**RUN["strategy"], "tp": 3, "dp": 1}})
    assert not bad.fits and bad.step_time_s is None
    assert any("must equal num_gpus=8" in v for v in bad.violations)
    p = parplan.predict({**RUN, "strategy": {**RUN["strategy"], "recompute": "none", "tp": 1, "dp": 8,
                                             "micro_batch_size": 2}})  # ~96 GiB: well over an H100
    assert not p.fits and p.violations and "GiB" in p.violations[0]


@pytest.mark.parametrize("value", [42, ["run.yaml"], None])
def test_a_value_that_is_no_run_is_a_one_line_error(value):
    with pytest.raises(SpecError) as exc:
        parplan.predict(value)
    assert exc.value.field == "run" and "\n" not in str(exc.value)


def test_search_over_a_problem_mapping_returns_a_typed_outcome():
    out = parplan.search(PROBLEM, trials=30, seed=1)
    assert isinstance(out, parplan.SearchOutcome)
    assert out.trials == 30 and out.feasible >= 1
    s = out.best_strategy
    assert out.best.fits and s["tp"] * s["pp"] * s["cp"] * s["dp"] == 8
    data = out.to_dict()
    assert data["best"]["strategy"] == dict(out.best_strategy)
    assert data["best"]["prediction"]["step_time_s"] == pytest.approx(out.best.step_time_s)
    assert out.baseline is None and out.speedup_over_baseline is None


def test_search_honours_fix_and_allow():
    out = parplan.search({**PROBLEM, "fix": {"tp": 4}, "allow": {"recompute": ["full"]}}, trials=20)
    assert out.best_strategy["tp"] == 4 and out.best_strategy["recompute"] == "full"


def test_search_from_a_run_reports_the_speedup_over_it():
    slow = {**RUN, "strategy": {**RUN["strategy"], "tp": 8, "dp": 1, "recompute": "full"}}
    out = parplan.search(slow, trials=40)
    assert out.baseline is not None and out.baseline.step_time_s > 0
    assert out.speedup_over_baseline == pytest.approx(out.baseline.step_time_s / out.best.step_time_s)
    assert out.speedup_over_baseline > 1.0
    assert out.to_dict()["baseline"]["step_time_s"] == out.baseline.step_time_s


@pytest.mark.parametrize("problem, field", [
    ({**PROBLEM, "gpus": 8}, "problem.gpus"),
    ({k: v for k, v in PROBLEM.items() if k != "gpu"}, "problem.gpu"),
    ({**PROBLEM, "fix": {"tensor": 2}}, "problem.fix"),
])
def test_a_bad_problem_names_its_field(problem, field):
    with pytest.raises(SpecError) as exc:
        parplan.search(problem, trials=5)
    assert exc.value.field == field


def test_study_runs_a_mapping_into_a_folder(tmp_path):
    spec = {"name": "api-study", "models": ["llama3.1-8b"], "gpus": ["h100-sxm5-80gb"], "gpu_counts": [8, 16],
            "batch": {"global_batch_size": 64}, "seq_length": 4096,
            "search": {"sampler": "tpe", "trials": 15, "seed": 0}}
    out = parplan.study(spec, tmp_path / "out")
    assert isinstance(out, parplan.StudyOutcome)
    assert len(out.results) == 2 and out.searched == 2 and out.counts == {"ok": 2}
    data = out.to_dict()
    assert [r["num_gpus"] for r in data["results"]] == [8, 16]
    again = parplan.study(spec, tmp_path / "out")  # resumes: nothing left to search
    assert again.searched == 0 and len(again.results) == 2
