"""Nothing is ever unpickled: the private cache holds data only (``.npz``, ``allow_pickle=False``).

Each attack plants a pickle whose ``__reduce__`` creates a marker file, under the
names parplan looks for now (``<key>.npz``, the pickle inside an object array)
and looked for before (``<key>.joblib`` with a matching ``.sha256``), and checks
that the marker never appears. A cache directory others can write, or that is
not this user's, is not used at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from costmodel.predictors import _cache, cache_dir, fitted_profile, forget_fitted
from costmodel.predictors._fitted import cache_key
from costmodel.profiles import load_profile, make_profile, write_profile_files
from costmodel.specs import get_gpu
from costmodel.specs.notices import ParplanWarning

H100 = "h100-sxm5-80gb"
PEAK, BANDWIDTH = 2e11, 2e10  # a CPU core
PHYSICS = {"peak_flops": {"bf16": PEAK}, "hbm_bandwidth_bytes_per_s": BANDWIDTH, "num_sms": 1, "source": "synthetic"}
RUN = {"model": "llama3.1-8b", "seq_length": 4096, "cluster": {"gpu": H100, "num_gpus": 16},
       "strategy": {"tp": 2, "pp": 2, "micro_batch_size": 1, "global_batch_size": 64}}


class _Planted:
    """Unpickling this creates ``marker``: proof that a planted file ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.marker, "w"))


@pytest.fixture
def profile_dir(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    m, n, k = (np.round(np.exp(rng.uniform(np.log(64), np.log(2048), (120, 3))) / 16) * 16).astype(int).T
    elements = (2 ** rng.uniform(14, 24, 30)).astype(int) // 1024 * 1024
    tables = {
        "gemm_bf16": {"m": m, "n": n, "k": k,
                      "latency_s": 2.0 * m * n * k / (0.7 * PEAK) + 2.0 * (m * k + n * k + m * n) / BANDWIDTH + 5e-6},
        "memory": {"kind": ["norm"] * elements.size, "phase": ["fwd"] * elements.size, "elements": elements,
                   "bytes": 4 * elements, "latency_s": 4.0 * elements / (0.6 * BANDWIDTH) + 3e-6},
    }
    directory = tmp_path / "shared-profile"
    write_profile_files(make_profile("shared", "cpu", {"physics": PHYSICS}, tables), directory)
    return directory


def _plant(directory: Path, key: str, marker: Path) -> list[str]:
    """Pickles under the names of both cache formats; returns the file names."""
    directory.mkdir(parents=True, exist_ok=True)
    payload = pickle.dumps(_Planted(marker))
    (directory / f"{key}.joblib").write_bytes(payload)
    (directory / f"{key}.joblib.sha256").write_text(hashlib.sha256(payload).hexdigest() + "\n", encoding="ascii")
    _plant_npz(directory / f"{key}.npz", key, marker)
    return sorted([f"{key}.joblib", f"{key}.joblib.sha256", f"{key}.npz"])


def _plant_npz(path: Path, key: str, marker: Path) -> None:
    """An ``.npz`` with the right key whose ``train_rows`` is an object array: unpickling it runs the plant."""
    planted = np.empty(1, dtype=object)
    planted[0] = _Planted(marker)
    header = np.frombuffer(json.dumps({"key": key}).encode(), dtype=np.uint8)
    with path.open("wb") as file:
        np.savez(file, allow_pickle=True, **{"gemm_bf16.train_rows": planted, "__meta__": header})


def _key(profile_dir: Path) -> str:
    return cache_key(load_profile(profile_dir), get_gpu(H100))


def _predict_cli(tmp_path: Path, profile_dir: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "run.yaml"
    spec.write_text(yaml.safe_dump(RUN), encoding="utf-8")
    env = {**os.environ, "PARPLAN_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "parplan.cli", "predict", str(spec), "--profile", str(profile_dir),
                           "--json"], capture_output=True, text=True, env=env, timeout=300, check=False)


def test_a_pickle_planted_in_a_profiles_fitted_folder_does_not_run_from_the_cli(tmp_path, profile_dir):
    marker = tmp_path / "ran"
    _plant(profile_dir / "fitted", _key(profile_dir), marker)
    private = tmp_path / "cache"
    private.mkdir(mode=0o700)
    proc = _predict_cli(tmp_path, profile_dir, private)
    assert not marker.exists()
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["step_time_s"] > 0  # refitted from the tables instead


def test_a_pickle_planted_in_a_profiles_fitted_folder_does_not_run_from_the_library(tmp_path, profile_dir,
                                                                                     monkeypatch):
    from parplan import api

    marker = tmp_path / "ran"
    _plant(profile_dir / "fitted", _key(profile_dir), marker)
    monkeypatch.setenv("PARPLAN_CACHE_DIR", str(tmp_path / "cache"))
    forget_fitted()
    fitted = fitted_profile(load_profile(profile_dir), get_gpu(H100))
    assert not marker.exists()
    assert "gemm_bf16" in fitted.families
    spec = tmp_path / "run.yaml"
    spec.write_text(yaml.safe_dump(RUN), encoding="utf-8")
    with pytest.warns(UserWarning):  # the device warning: a CPU profile for an H100 run
        result = api.predict_file(spec, profile_dir)
    assert not marker.exists()
    assert result["step_time_s"] > 0


def test_a_pickle_planted_in_a_group_writable_cache_does_not_run(tmp_path, profile_dir):
    marker = tmp_path / "ran"
    cache = tmp_path / "team-cache"
    planted = _plant(cache / "predictors", _key(profile_dir), marker)
    cache.chmod(0o777)
    (cache / "predictors").chmod(0o775)
    proc = _predict_cli(tmp_path, profile_dir, cache)
    assert not marker.exists()
    assert proc.returncode == 0, proc.stderr
    assert "predictor cache" in proc.stderr and "not private" in proc.stderr
    assert sorted(p.name for p in (cache / "predictors").iterdir()) == planted  # nothing written there


_IMPORT_PROBE = """
import json, sys
from parplan.cli import main
code = main({argv!r})
print(json.dumps({{"code": code, "loaded": sorted(m for m in ("sklearn", "joblib") if m in sys.modules)}}),
      file=sys.stderr)
"""


def test_a_predict_with_a_warm_cache_imports_no_scikit_learn(tmp_path, profile_dir):
    cache = tmp_path / "cache"
    first = _predict_cli(tmp_path, profile_dir, cache)  # fits (scikit-learn) and fills the cache
    assert first.returncode == 0, first.stderr
    assert (cache / "predictors" / f"{_key(profile_dir)}.npz").is_file()
    argv = ["predict", str(tmp_path / "run.yaml"), "--profile", str(profile_dir), "--json"]
    proc = subprocess.run([sys.executable, "-c", _IMPORT_PROBE.format(argv=argv)], capture_output=True, text=True,
                          env={**os.environ, "PARPLAN_CACHE_DIR": str(cache)}, timeout=300, check=False)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "loaded": []}, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["step_time_s"] == json.loads(first.stdout)["step_time_s"]


@pytest.fixture
def private_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PARPLAN_CACHE_DIR", str(tmp_path / "cache"))
    return cache_dir()


def test_the_cache_is_created_private(private_cache):
    assert _cache.store_arrays("k", {"x": np.ones(1)}, {}) == private_cache / "k.npz"
    assert stat.S_IMODE(private_cache.stat().st_mode) == 0o700
    assert stat.S_IMODE((private_cache / "k.npz").stat().st_mode) == 0o600
    assert sorted(p.name for p in private_cache.iterdir()) == ["k.npz"]  # no secret, no temporaries left


def test_a_pickle_planted_in_the_private_cache_is_not_unpickled(tmp_path, private_cache, profile_dir):
    marker = tmp_path / "ran"
    key = _key(profile_dir)
    private_cache.mkdir(parents=True, mode=0o700)
    _plant_npz(private_cache / f"{key}.npz", key, marker)
    assert _cache.load_arrays(key) is None
    forget_fitted()
    fitted = fitted_profile(load_profile(profile_dir), get_gpu(H100))  # refitted, and the plant overwritten
    assert not marker.exists()
    assert "gemm_bf16" in fitted.families
    assert _cache.load_arrays(key) is not None


def test_a_cache_owned_by_another_user_is_not_used(private_cache, monkeypatch):
    _cache.store_arrays("k", {"x": np.ones(1)}, {})
    monkeypatch.setattr(os, "getuid", lambda: os.stat(private_cache).st_uid + 1)
    with pytest.warns(UserWarning, match="not private"):
        assert _cache.load_arrays("k") is None
        assert _cache.store_arrays("k2", {"x": np.ones(1)}, {}) is None
    assert not (private_cache / "k2.npz").exists()


def test_a_symlinked_cache_directory_is_not_used(tmp_path, monkeypatch):
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "predictors").symlink_to(real)
    monkeypatch.setenv("PARPLAN_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.warns(UserWarning, match="not private"):
        assert _cache.store_arrays("k", {"x": np.ones(1)}, {}) is None
    assert list(real.iterdir()) == []


def test_a_refit_from_the_tables_matches_the_cached_fit(tmp_path, profile_dir, monkeypatch):
    """Another user (another cache) refits the shared profile to the same predictions."""
    profile = load_profile(profile_dir)
    monkeypatch.setenv("PARPLAN_CACHE_DIR", str(tmp_path / "mine"))
    forget_fitted()
    mine = fitted_profile(profile, get_gpu(H100))
    monkeypatch.setenv("PARPLAN_CACHE_DIR", str(tmp_path / "theirs"))
    forget_fitted()
    theirs = fitted_profile(profile, get_gpu(H100))
    X, _ = mine.shapes("gemm_bf16")
    np.testing.assert_array_equal(mine.predictor("gemm_bf16").predict(X), theirs.predictor("gemm_bf16").predict(X))
    forget_fitted()
    again = fitted_profile(profile, get_gpu(H100))  # from the private cache, not refitted
    assert again.fit_seconds == theirs.fit_seconds


def test_arrays_round_trip_as_data_only(private_cache):
    path = _cache.store_arrays("tables", {"x": np.arange(4.0), "n": np.array([1, 2], dtype=np.int32)}, {"v": 3})
    assert path == private_cache / "tables.npz"
    arrays, meta = _cache.load_arrays("tables")
    assert arrays["x"].tolist() == [0.0, 1.0, 2.0, 3.0] and arrays["n"].dtype == np.int32
    assert meta == {"key": "tables", "v": 3}


def test_arrays_refuse_objects_and_moved_or_broken_files(private_cache):
    with pytest.raises(ValueError, match="numeric arrays only"):
        _cache.store_arrays("objects", {"o": np.array([object()])}, {})
    assert _cache.load_arrays("objects") is None
    _cache.store_arrays("first", {"x": np.ones(2)}, {})
    os.replace(private_cache / "first.npz", private_cache / "second.npz")  # moved under another key's name
    assert _cache.load_arrays("second") is None
    (private_cache / "broken.npz").write_bytes(b"not a zip")
    assert _cache.load_arrays("broken") is None


def test_arrays_are_not_read_from_a_shared_directory(private_cache):
    _cache.store_arrays("tables", {"x": np.ones(2)}, {})
    private_cache.chmod(0o770)
    try:
        with pytest.warns(ParplanWarning, match="not private"):
            assert _cache.load_arrays("tables") is None
    finally:
        private_cache.chmod(0o700)
