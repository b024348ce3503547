"""The fitted-profile cache key names everything a fit depends on, and nothing else.

Every estimator argument (regressor settings included) is written into the
family layout, so that a changed default misses the cache; the source of the
predictor modules enters the key, so that an edited feature or exporter does too.
"""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import numpy as np
import pytest

from costmodel.predictors import AttentionPredictor, CollectivePredictor, GemmPredictor, MemoryPredictor, _fitted
from costmodel.predictors._fitted import _family_layout, _source_digest, cache_key
from costmodel.predictors._settings import REGRESSOR_SETTINGS
from costmodel.profiles import Profile, make_profile
from costmodel.specs import get_gpu

H100 = "h100-sxm5-80gb"
CLASSES = {"gemm": GemmPredictor, "attention": AttentionPredictor, "memory": MemoryPredictor,
           "collective": CollectivePredictor}


@pytest.fixture(scope="module")
def profile() -> Profile:
    """A profile with a table of every family (its numbers are never fitted here)."""
    rows = 4
    attention = {"batch": [1, 2, 4, 8], "seq_len": [1024, 2048, 4096, 8192], "num_heads": [32] * rows,
                 "num_kv_heads": [8] * rows, "head_dim": [128] * rows, "causal": [True] * rows,
                 "latency_s": [1e-4, 2e-4, 4e-4, 8e-4]}
    tables = {
        "gemm_bf16": {"m": [64, 128, 256, 512], "n": [1024] * rows, "k": [1024] * rows,
                      "latency_s": [1e-5, 2e-5, 3e-5, 5e-5]},
        "attention_fwd": attention,
        "memory": {"kind": ["norm"] * rows, "phase": ["fwd"] * rows, "elements": [1024, 2048, 4096, 8192],
                   "bytes": [4096, 8192, 16384, 32768], "latency_s": [3e-6, 3e-6, 4e-6, 5e-6]},
        "nccl": {"op": ["all_reduce"] * rows, "num_gpus": [2, 2, 8, 8], "message_bytes": [1024, 2**20] * 2,
                 "latency_s": [1e-5, 2e-5, 2e-5, 4e-5]},
    }
    return make_profile("every family", H100, {}, {name: {column: np.asarray(values) for column, values in
                                                          table.items()} for name, table in tables.items()})


def test_the_layout_gives_every_constructor_argument(profile):
    """Nothing is left to a class default, so the key (which holds the params) names all a fit used."""
    layout = _family_layout(profile, get_gpu(H100))
    assert {spec.kind for spec in layout.values()} == set(CLASSES)
    for family, spec in layout.items():
        arguments = set(inspect.signature(CLASSES[spec.kind].__init__).parameters) - {"self"}
        assert set(spec.params) == arguments, family


def test_the_class_defaults_are_the_layouts_settings():
    """A bare estimator fits as a profile's family does (one place holds the settings)."""
    for kind, cls in CLASSES.items():
        params = cls().get_params()
        assert {name: params[name] for name in REGRESSOR_SETTINGS[kind]} == REGRESSOR_SETTINGS[kind]


def test_the_key_is_stable(profile):
    gpu = get_gpu(H100)
    assert cache_key(profile, gpu) == cache_key(profile, gpu)
    assert _source_digest(_fitted._SOURCE_DIR) == _source_digest.__wrapped__(_fitted._SOURCE_DIR)


@pytest.mark.parametrize(("kind", "setting", "value"), [
    ("gemm", "max_iter", 101), ("gemm", "learning_rate", 0.25), ("gemm", "max_leaf_nodes", 15),
    ("attention", "max_iter", 150), ("attention", "learning_rate", 0.2), ("memory", "n_knots", 5),
    ("memory", "alpha", 0.5), ("collective", "n_estimators", 50)])
def test_the_key_changes_with_a_regressor_default(profile, monkeypatch, kind, setting, value):
    gpu = get_gpu(H100)
    before = cache_key(profile, gpu)
    monkeypatch.setitem(REGRESSOR_SETTINGS[kind], setting, value)
    assert cache_key(profile, gpu) != before


def _copy_of_the_package(tmp_path: Path) -> Path:
    copy = tmp_path / "predictors"
    copy.mkdir()
    for path in _fitted._SOURCE_DIR.glob("*.py"):
        shutil.copy(path, copy / path.name)
    return copy


def test_an_unchanged_copy_of_the_source_gives_the_same_key(profile, tmp_path, monkeypatch):
    gpu = get_gpu(H100)
    before = cache_key(profile, gpu)
    monkeypatch.setattr(_fitted, "_SOURCE_DIR", _copy_of_the_package(tmp_path))
    assert cache_key(profile, gpu) == before


@pytest.mark.parametrize("module", ["_features.py", "_trees.py", "_splines.py", "_compiled.py", "_sampling.py"])
def test_the_key_changes_with_a_source_edit(profile, tmp_path, monkeypatch, module):
    gpu = get_gpu(H100)
    before = cache_key(profile, gpu)
    copy = _copy_of_the_package(tmp_path)
    source = copy / module
    source.write_text(source.read_text(encoding="utf-8").replace("np.", "numpy_edit.", 1), encoding="utf-8")
    monkeypatch.setattr(_fitted, "_SOURCE_DIR", copy)
    assert cache_key(profile, gpu) != before


def test_an_added_module_changes_the_key(profile, tmp_path, monkeypatch):
    gpu = get_gpu(H100)
    before = cache_key(profile, gpu)
    copy = _copy_of_the_package(tmp_path)
    (copy / "_new_family.py").write_text('"""A new family."""\n', encoding="utf-8")
    monkeypatch.setattr(_fitted, "_SOURCE_DIR", copy)
    assert cache_key(profile, gpu) != before


def test_unreadable_source_trusts_no_other_process(tmp_path):
    """A module that cannot be read gives a digest no other process shares (the cache is bypassed)."""
    copy = _copy_of_the_package(tmp_path)
    (copy / "_features.py").unlink()
    (copy / "_features.py").mkdir()  # read_bytes on a directory fails
    first = _source_digest.__wrapped__(copy)
    assert first != _source_digest.__wrapped__(copy)
