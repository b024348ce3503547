"""A cached fit whose arrays are out of range or of the wrong shape is refitted, never predicted from.

The private cache holds data only, but its numbers may still be wrong (a
truncated write, a file from a buggy version): ``from_arrays`` checks indices,
shapes and dtypes, and a file that fails is a cache miss.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from costmodel.predictors import _cache, _fitted, fitted_profile, forget_fitted
from costmodel.predictors._fitted import cache_key
from costmodel.profiles import Profile, make_profile
from costmodel.specs import get_gpu

H100 = "h100-sxm5-80gb"
PEAK, BANDWIDTH = 2e11, 2e10  # a CPU core
PHYSICS = {"peak_flops": {"bf16": PEAK}, "hbm_bandwidth_bytes_per_s": BANDWIDTH, "num_sms": 1, "source": "synthetic"}
Arrays = dict[str, np.ndarray]
Corruption = Callable[[Arrays, dict[str, Any]], None]


@pytest.fixture(scope="module")
def profile() -> Profile:
    rng = np.random.default_rng(0)
    m, n, k = (np.round(np.exp(rng.uniform(np.log(64), np.log(2048), (600, 3))) / 16) * 16).astype(int).T
    elements = (2 ** rng.uniform(14, 24, 30)).astype(int) // 1024 * 1024
    noise = rng.uniform(0.8, 1.2, m.size)  # an efficiency that varies, so the trees split
    tables = {
        "gemm_bf16": {"m": m, "n": n, "k": k, "latency_s": noise * (
            2.0 * m * n * k / (0.7 * PEAK) + 2.0 * (m * k + n * k + m * n) / BANDWIDTH) + 5e-6},
        "memory": {"kind": np.array(["norm"] * elements.size), "phase": np.array(["fwd"] * elements.size),
                   "elements": elements, "bytes": 4 * elements, "latency_s": 4.0 * elements / (0.6 * BANDWIDTH) + 3e-6},
    }
    return make_profile("corrupt", "cpu", {"physics": PHYSICS}, tables)


@pytest.fixture
def stored(profile, tmp_path, monkeypatch) -> tuple[str, Arrays, dict[str, Any], np.ndarray, np.ndarray]:
    """A fit in a fresh private cache: its key, stored arrays and metadata, and its GEMM and memory predictions."""
    monkeypatch.setenv("PARPLAN_CACHE_DIR", str(tmp_path / "cache"))
    forget_fitted()
    fitted = fitted_profile(profile, get_gpu(H100))
    key = cache_key(profile, get_gpu(H100))
    loaded = _cache.load_arrays(key)
    assert loaded is not None
    gemm = fitted.predictor("gemm_bf16").predict(fitted.shapes("gemm_bf16")[0])
    memory = fitted.predictor("memory_norm_fwd").predict(fitted.shapes("memory_norm_fwd")[0])
    forget_fitted()
    yield key, *loaded, gemm, memory
    forget_fitted()


def _refits(profile: Profile, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[int]]:
    """``fitted_profile`` from the cache, and how many times it had to fit."""
    calls: list[int] = []
    real = _fitted.fit_profile

    def counting(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(_fitted, "fit_profile", counting)
    return fitted_profile(profile, get_gpu(H100)), calls


def _set(name: str, change: Callable[[np.ndarray], np.ndarray]) -> Corruption:
    def corrupt(arrays: Arrays, meta: dict[str, Any]) -> None:
        arrays[name] = change(arrays[name].copy())
    return corrupt


def _first_inner_node(arrays: Arrays) -> int:
    children = arrays["gemm_bf16.children"]
    own = np.arange(children.size // 2)
    return int(np.flatnonzero((children[0::2] != own) | (children[1::2] != own))[0])


def _child_out_of_range(arrays: Arrays, meta: dict[str, Any]) -> None:
    arrays["gemm_bf16.children"] = arrays["gemm_bf16.children"].copy()
    arrays["gemm_bf16.children"][2 * _first_inner_node(arrays)] = arrays["gemm_bf16.value"].size + 5


def _cycle(arrays: Arrays, meta: dict[str, Any]) -> None:
    """An inner node whose left child is the tree's root: a walk that never reaches a leaf."""
    arrays["gemm_bf16.children"] = arrays["gemm_bf16.children"].copy()
    inner = _first_inner_node(arrays)
    arrays["gemm_bf16.children"][2 * inner + 1] = arrays["gemm_bf16.roots"][0]


def _feature_past_the_features(arrays: Arrays, meta: dict[str, Any]) -> None:
    """An index the flat feature array holds for a batch, but that reads another sample's value."""
    arrays["gemm_bf16.feature"] = arrays["gemm_bf16.feature"].copy()
    arrays["gemm_bf16.feature"][_first_inner_node(arrays)] = 500


def _physics_not_a_number(arrays: Arrays, meta: dict[str, Any]) -> None:
    meta["families"]["gemm_bf16"]["predictor"]["physics"]["peak_flops"] = "fast"


CORRUPTIONS: dict[str, Corruption] = {
    "child-out-of-range": _child_out_of_range,
    "child-negative": _set("gemm_bf16.children", lambda a: np.where(a == a.max(), -1, a)),
    "child-cycle": _cycle,
    "root-out-of-range": _set("gemm_bf16.roots", lambda a: a + 10**6),
    "feature-negative": _set("gemm_bf16.feature", lambda a: a - 1),
    "feature-past-the-features": _feature_past_the_features,
    "depth-too-small": _set("gemm_bf16.depths", lambda a: np.maximum(a - 1, 0)),
    "depth-too-large": _set("gemm_bf16.depths", lambda a: a + 10**9),
    "children-as-floats": _set("gemm_bf16.children", lambda a: a.astype(np.float64)),
    "values-truncated": _set("gemm_bf16.value", lambda a: a[:-1]),
    "values-not-finite": _set("gemm_bf16.value", lambda a: np.full_like(a, np.nan)),
    "divisor-zero": _set("gemm_bf16.scalars", lambda a: np.array([a[0], 0.0, a[2]])),
    "no-trees": _set("gemm_bf16.roots", lambda a: a[:0]),
    "overhead-nan": _set("gemm_bf16.overhead_s", lambda a: np.full_like(a, np.nan)),
    "physics-not-a-number": _physics_not_a_number,
    "knots-one-dimensional": _set("memory_norm_fwd.knots", lambda a: a.ravel()),
    "knots-decreasing": _set("memory_norm_fwd.knots", lambda a: a[:, ::-1].copy()),
    "knots-fewer-than-the-features": _set("memory_norm_fwd.knots", lambda a: a[:1]),
    "coef-truncated": _set("memory_norm_fwd.coef", lambda a: a[:-1]),
    "degree-fractional": _set("memory_norm_fwd.scalars", lambda a: np.array([a[0], 2.5])),
    "degree-too-large": _set("memory_norm_fwd.scalars", lambda a: np.array([a[0], 50.0])),
}


def test_an_intact_cache_file_is_used(profile, stored, monkeypatch):
    """The control: without corruption nothing is refitted (so a refit below is the check's doing)."""
    again, calls = _refits(profile, monkeypatch)
    assert calls == []
    _, _, _, gemm, _ = stored
    np.testing.assert_array_equal(again.predictor("gemm_bf16").predict(again.shapes("gemm_bf16")[0]), gemm)


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupted_cache_file_is_refitted(profile, stored, monkeypatch, corruption):
    key, arrays, meta, gemm, memory = stored
    arrays, meta = dict(arrays), copy.deepcopy(meta)
    CORRUPTIONS[corruption](arrays, meta)
    assert _cache.store_arrays(key, arrays, meta) is not None
    again, calls = _refits(profile, monkeypatch)
    assert calls == [1]
    np.testing.assert_array_equal(again.predictor("gemm_bf16").predict(again.shapes("gemm_bf16")[0]), gemm)
    np.testing.assert_array_equal(
        again.predictor("memory_norm_fwd").predict(again.shapes("memory_norm_fwd")[0]), memory)
    # The refit replaced the bad file: the next process reads it without fitting.
    forget_fitted()
    _, calls = _refits(profile, monkeypatch)
    assert calls == []
