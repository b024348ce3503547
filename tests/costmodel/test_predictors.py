"""Operator predictors: scikit-learn conformance, held-out accuracy, range checks, disk cache.

Fitting uses a slice of the built-in H100 profile so that the whole module runs in seconds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from costmodel.predictors import (
    AttentionPredictor,
    CollectivePredictor,
    FittedProfile,
    GemmPredictor,
    MemoryPredictor,
    OperatorPredictor,
    _cache,
    cache_dir,
    fit_profile,
    fitted_profile,
    forget_fitted,
    light_sample,
)
from costmodel.predictors._fitted import cache_key
from costmodel.predictors._physics import gemm_roofline_s
from costmodel.profiles import DEFAULT_FIT_SAMPLING, Profile, builtin_profile, make_profile
from costmodel.specs.catalog import get_gpu

H100 = "h100-sxm5-80gb"


@parametrize_with_checks([GemmPredictor(max_iter=10, random_state=0), MemoryPredictor(),
                          AttentionPredictor(max_iter=10, random_state=0),
                          CollectivePredictor(n_estimators=10, random_state=0)])
def test_scikit_learn_conformance(estimator, check):
    check(estimator)


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("parplan-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PARPLAN_CACHE_DIR", str(root))
        yield root


def _rows(table: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {name: values[mask] for name, values in table.items()}


@pytest.fixture(scope="session")
def h100_slice() -> Profile:
    """The H100 tables cut to mid-sized GEMMs, head_dim 128 attention and all collectives."""
    full = builtin_profile(H100)
    assert full is not None
    gemm = full.tables["gemm_bf16"]
    attention = full.tables["attention_fwd"]
    tables = {
        "gemm_bf16": _rows(gemm, (gemm["m"] >= 64) & (gemm["n"] <= 16384) & (gemm["k"] <= 16384)),
        "attention_fwd": _rows(attention, attention["head_dim"] == 128),
        "nccl": dict(full.tables["nccl"]),
    }
    return make_profile("h100 slice", H100, {**full.metadata, "note": "test slice"}, tables)


@pytest.fixture(scope="session")
def fitted(cache_root, h100_slice) -> FittedProfile:
    return fitted_profile(h100_slice, get_gpu(H100))


def _held_out_mape(fitted: FittedProfile, family: str) -> tuple[float, float]:
    _, test = fitted.split(family)
    X, latency = fitted.shapes(family, test)
    predicted = fitted.predictor(family).predict(X)
    roofline = fitted.predictor(family).roofline_s(X)
    return (float(np.mean(np.abs(predicted - latency) / latency)),
            float(np.mean(np.abs(roofline - latency) / latency)))


def test_fitted_families(fitted):
    assert fitted.families == ("attention_fwd", "gemm_bf16", "nccl_all_gather", "nccl_all_reduce",
                               "nccl_all_to_all", "nccl_reduce_scatter")


@pytest.mark.parametrize(("family", "bound"), [("gemm_bf16", 0.08), ("attention_fwd", 0.10),
                                               ("nccl_all_reduce", 0.12)])
def test_held_out_error_beats_roofline(fitted, family, bound):
    mape, roofline_mape = _held_out_mape(fitted, family)
    assert mape < bound
    assert mape < roofline_mape / 3


def test_large_table_sample_is_at_most_ten_percent(fitted):
    train, test = fitted.split("gemm_bf16")
    assert train.size <= 0.10 * (train.size + test.size)
    assert np.intersect1d(train, test).size == 0


def test_sample_is_deterministic(h100_slice):
    table = h100_slice.tables["gemm_bf16"]
    X = np.column_stack([table[c] for c in "mnk"]).astype(float)
    first = light_sample(X, DEFAULT_FIT_SAMPLING)
    np.testing.assert_array_equal(first, light_sample(X, DEFAULT_FIT_SAMPLING))
    other = light_sample(X, {**DEFAULT_FIT_SAMPLING, "seed": 1})
    assert not np.array_equal(first, other)


def test_small_table_uses_staggered_lattice(fitted):
    train, _ = fitted.split("nccl_all_gather")
    X, _ = fitted.shapes("nccl_all_gather", train)
    assert DEFAULT_FIT_SAMPLING["min_rows"] <= train.size <= 63 // 2
    for group in (2, 4, 8):
        sizes = X[X[:, 0] == group, 1]
        assert sizes.min() == 512 and sizes.max() == 512 * 2**20  # both ends of every curve


def test_far_outside_is_flagged_not_extrapolated(fitted):
    seconds, inside = fitted.predict_gemm([4096, 4096 * 100], 4096, 4096, "bf16")
    assert inside.tolist() == [True, False]
    assert seconds[0] > 0 and np.isnan(seconds[1])
    _, inside = fitted.predict_collective("all_reduce", [8, 16], 2**20)
    assert inside.tolist() == [True, False]  # 16 GPUs: a group size the table lacks
    _, inside = fitted.predict_attention_fwd([1, 1, 256], [4096, 4096, 16384], 32, 8, [128, 1024, 128])
    assert inside.tolist() == [True, False, False]  # head_dim far out; batch x seq beyond the table


def test_predictions_broadcast(fitted):
    seconds, inside = fitted.predict_gemm(np.array([[1024], [2048]]), [1024, 4096, 8192], 4096, "bf16")
    assert seconds.shape == inside.shape == (2, 3)
    assert np.all(seconds > 0)
    assert seconds[1, 2] > seconds[0, 0]


def test_missing_dtype_or_op_raises(fitted):
    with pytest.raises(KeyError, match="gemm_fp8"):
        fitted.predict_gemm(1024, 1024, 1024, "fp8")
    with pytest.raises(ValueError, match="'op' parameter"):
        fitted.predict_collective("broadcast", 8, 2**20)


def test_sampled_range(fitted):
    ranges = fitted.sampled_range("gemm_bf16")
    assert ranges["m"] == (64.0, 32768.0)
    assert ranges["n"][1] == 16384.0


def _synthetic_gemm_latency(X: np.ndarray) -> np.ndarray:
    """70% of the H100 roofline plus a 5 us launch cost."""
    return gemm_roofline_s(*X.T, 989.4e12, 3350e9) / 0.7 + 5e-6


def test_efficiency_extrapolates_gracefully():
    """Beyond the sampled range the latency follows the roofline, not the edge's latency."""
    rng = np.random.default_rng(0)
    X = np.exp2(rng.uniform([6, 8, 8], [12, 13, 13], size=(300, 3))).round()
    model = GemmPredictor(max_iter=50, random_state=0).fit(X, _synthetic_gemm_latency(X))
    far = np.array([[65536.0, 8192.0, 8192.0]])  # 16x the largest m
    assert model.predict(far)[0] == pytest.approx(_synthetic_gemm_latency(far)[0], rel=0.05)


def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PARPLAN_CACHE_DIR", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x" / "predictors"
    monkeypatch.delenv("PARPLAN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "parplan" / "predictors"


def _count_fits(monkeypatch) -> list[str]:
    calls: list[str] = []
    original = OperatorPredictor.fit

    def counting_fit(self, X, y):
        calls.append(type(self).__name__)
        return original(self, X, y)

    monkeypatch.setattr(OperatorPredictor, "fit", counting_fit)
    return calls


def test_second_load_starts_from_disk_cache(fitted, h100_slice, monkeypatch):
    forget_fitted()
    calls = _count_fits(monkeypatch)
    again = fitted_profile(h100_slice, get_gpu(H100))
    assert calls == []
    assert again is not fitted
    X, _ = fitted.shapes("gemm_bf16")
    np.testing.assert_array_equal(again.predictor("gemm_bf16").predict(X[:50]),
                                  fitted.predictor("gemm_bf16").predict(X[:50]))
    assert fitted_profile(h100_slice, get_gpu(H100)) is again  # then memoised in-process


def test_the_cache_holds_compiled_arrays_not_pickles(fitted):
    files = sorted(p.name for p in cache_dir().iterdir())
    assert [name for name in files if name.startswith("fitted-")] == [f"{cache_key(fitted.profile, fitted.gpu)}.npz"]
    assert not any(name.endswith((".joblib", ".pkl", ".key")) for name in files)


def test_a_broken_cache_file_is_refit(fitted, h100_slice, monkeypatch):
    data = cache_dir() / f"{cache_key(fitted.profile, fitted.gpu)}.npz"
    blob = bytearray(data.read_bytes())
    data.write_bytes(bytes(blob[: len(blob) // 2]))  # truncated: a zip without its directory
    forget_fitted()
    calls = _count_fits(monkeypatch)
    refit = fitted_profile(h100_slice, get_gpu(H100))
    assert len(calls) == len(refit.fitted_families)
    monkeypatch.undo()
    assert _cache.load_arrays(data.name.removesuffix(".npz")) is not None  # rewritten whole


def test_a_cache_entry_of_another_code_version_is_refit(fitted, h100_slice, monkeypatch):
    key = cache_key(fitted.profile, fitted.gpu)
    arrays, meta = _cache.load_arrays(key)
    _cache.store_arrays(key, arrays, {**meta, "code": "0"})
    forget_fitted()
    calls = _count_fits(monkeypatch)
    fitted_profile(h100_slice, get_gpu(H100))
    assert len(calls) == len(fitted.fitted_families)


def test_compiled_predictors_match_their_estimators_on_every_table_row(h100_slice):
    """What the cache stores and every prediction uses is what scikit-learn predicts, bit for bit."""
    fresh = fit_profile(h100_slice, get_gpu(H100))
    for family in fresh.fitted_families:
        X, _ = fresh.shapes(family)
        X = np.vstack([X, X * 10.0, X / 10.0])  # and beyond the sampled range on both sides
        np.testing.assert_array_equal(fresh.predictor(family).predict(X), fresh.estimator(family).predict(X),
                                      err_msg=family)


def test_estimators_are_kept_only_for_a_fit_in_this_process(fitted, h100_slice):
    fresh = fit_profile(h100_slice, get_gpu(H100))
    X, _ = fresh.shapes("gemm_bf16")
    np.testing.assert_array_equal(fresh.estimator("gemm_bf16").predict(X[:50]),
                                  fresh.predictor("gemm_bf16").predict(X[:50]))
    forget_fitted()
    cached = fitted_profile(h100_slice, get_gpu(H100))
    with pytest.raises(KeyError, match="not fitted in this process"):
        cached.estimator("gemm_bf16")
