"""Problems: keys follow every input, a user profile by its content; ids that collide are an error."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from costmodel.profiles import make_profile, save_profile
from costmodel.specs.catalog import get_model
from costmodel.specs.errors import SpecError
from studies.problems import expand
from studies.runner import run_study
from studies.solve import solve
from studies.spec import load_study
from tests.studies.conftest import TINY, write_study


def _save_profile(folder: Path, gemm_latency_s: float) -> Path:
    tables = {"gemm_bf16": {"m": [1, 64, 4096], "n": [128, 128, 4096], "k": [256, 256, 4096],
                            "latency_s": [1.5e-6, 2.25e-6, gemm_latency_s]}}
    save_profile(make_profile("laptop", "cpu", {"source": "test"}, tables), folder)
    return folder


def _study(tmp_path: Path, **search: Any) -> Path:
    return write_study(tmp_path, {**TINY, "search": {**TINY["search"], **search}}, "profiled.yaml")


def test_keys_follow_the_profile_tables_not_the_folder(tmp_path: Path) -> None:
    profile = _save_profile(tmp_path / "prof", 0.1)
    study = _study(tmp_path, profile="prof")
    first = [p.key for p in expand(load_study(study))]
    assert [p.key for p in expand(load_study(study))] == first  # stable
    _save_profile(profile, 0.2)  # new measurements in the same folder
    changed = [p.key for p in expand(load_study(study))]
    assert set(changed).isdisjoint(first)  # every problem is searched again
    shutil.copytree(profile, tmp_path / "copy")
    moved = _study(tmp_path, profile="copy")
    assert [p.key for p in expand(load_study(moved))] == changed  # the same tables elsewhere: the same results


def test_a_missing_profile_fails_before_any_search_and_touches_nothing(tmp_path: Path) -> None:
    spec = load_study(_study(tmp_path, profile="no-such-profile"))
    out = tmp_path / "out"
    with pytest.raises(SpecError, match="'search.profile'"):
        run_study(spec, out, n_jobs=1, stream=io.StringIO())
    assert not out.exists()  # nothing stored, so nothing is cached as "invalid"


def test_a_profile_changed_during_the_run_is_an_error_not_a_stored_result(tmp_path: Path) -> None:
    profile = _save_profile(tmp_path / "prof", 0.1)
    problem = expand(load_study(_study(tmp_path, profile="prof")))[0]
    _save_profile(profile, 0.3)
    with pytest.raises(SpecError, match="tables changed"):
        solve(problem)
    shutil.rmtree(profile)
    with pytest.raises(SpecError, match="'search.profile'"):
        solve(problem)


def test_model_names_whose_ids_collide_are_an_error_naming_both(tmp_path: Path) -> None:
    fields = {k: v for k, v in get_model("gpt3-350m").to_dict().items()
              if k not in ("published_params", "published_params_source")}
    models = [{**fields, "name": "my model"}, {**fields, "name": "my-model", "num_layers": 12}]
    spec = load_study(write_study(tmp_path, {**TINY, "models": models}))
    with pytest.raises(SpecError, match="'my model' and 'my-model'"):
        expand(spec)


def test_equal_problems_from_two_batches_are_searched_once(tmp_path: Path) -> None:
    data = {**TINY, "models": ["gpt3-350m"], "gpu_counts": [8], "seq_length": 2048,
            "batch": {"tokens_per_step": [131072, 131073]}}  # both round to 64 sequences of 2048
    assert len(expand(load_study(write_study(tmp_path, data)))) == 1
