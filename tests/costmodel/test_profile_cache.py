"""The built-in profile's tables cached as data (costmodel/profiles/_builtin_cache.py)."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from costmodel.profiles import _builtin_cache, builtin_profile
from costmodel.profiles import aiconfigurator_adapter as adapter

H100 = "h100-sxm5-80gb"


@pytest.fixture(scope="module")
def h100_raw() -> dict[str, Any]:
    """The adapter's own output, read from the package (no cache)."""
    return adapter.load_tables(H100)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty private cache directory for this test; returns where the cached files go."""
    monkeypatch.setenv("PARPLAN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "predictors"


@pytest.fixture
def reads(h100_raw: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the adapter's package read return ``h100_raw`` and record each call."""
    calls: list[str] = []

    def load_tables(device: str) -> dict[str, Any]:
        calls.append(device)
        return h100_raw

    monkeypatch.setattr(adapter, "load_tables", load_tables)
    return calls


def _uncached_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    monkeypatch.setenv("PARPLAN_CACHE_DIR", str(tmp_path / "elsewhere"))
    os.makedirs(tmp_path / "elsewhere" / "predictors", mode=0o755)
    os.chmod(tmp_path / "elsewhere" / "predictors", 0o777)  # not private: the cache is neither read nor written
    return builtin_profile.__wrapped__(H100)


def test_a_profile_from_the_cache_is_identical_to_the_uncached_one(cache, monkeypatch, tmp_path):
    first = builtin_profile.__wrapped__(H100)  # reads the package, fills the cache
    assert len(list(cache.glob("builtin-profile-h100-sxm5-80gb-*.npz"))) == 1

    def no_package_read(device: str) -> None:
        raise AssertionError("read the package instead of the cache")

    monkeypatch.setattr(adapter, "load_tables", no_package_read)
    cached = builtin_profile.__wrapped__(H100)
    monkeypatch.undo()
    uncached = _uncached_profile(monkeypatch, tmp_path)
    for profile in (first, cached):
        assert profile.content_hash == uncached.content_hash
        assert profile.metadata == uncached.metadata
        assert profile.name == uncached.name and profile.device == uncached.device
        assert list(profile.tables) == list(uncached.tables)
        for family, columns in uncached.tables.items():
            assert list(profile.tables[family]) == list(columns)
            for name, values in columns.items():
                got = profile.tables[family][name]
                assert got.dtype == values.dtype and np.array_equal(got, values), f"{family}.{name}"
                assert not got.flags.writeable


def test_the_merge_notes_int_keys_survive_the_cache(cache, h100_raw, reads):
    _builtin_cache.load_tables(H100)
    note = _builtin_cache.load_tables(H100)["metadata"]["gemm_bf16_merge"]
    assert reads == [H100]  # the second call came from the cache
    assert note == h100_raw["metadata"]["gemm_bf16_merge"]
    assert all(isinstance(count, int) for count in note["shapes_by_measurements"])


def test_a_broken_cache_file_falls_back_to_the_package_and_is_rewritten(cache, h100_raw, reads):
    _builtin_cache.load_tables(H100)
    (path,) = cache.glob("builtin-profile-*.npz")
    path.write_bytes(b"PK\x03\x04 not a zip archive")
    raw = _builtin_cache.load_tables(H100)
    assert reads == [H100, H100]
    assert raw["metadata"] == h100_raw["metadata"]
    _builtin_cache.load_tables(H100)
    assert reads == [H100, H100]  # the rewritten file is good


def test_a_cache_file_lacking_a_column_counts_as_a_miss(cache, h100_raw, reads):
    from costmodel.predictors import _cache

    key = _builtin_cache.cache_key(H100)
    arrays, meta = _builtin_cache.encode(h100_raw)
    del arrays["gemm_bf16.latency_s"]
    _cache.store_arrays(key, arrays, meta)
    assert _builtin_cache.load_tables(H100)["metadata"] == h100_raw["metadata"]
    assert reads == [H100]


def test_a_cache_dir_others_can_write_is_neither_read_nor_written(cache, h100_raw, reads, recwarn):
    cache.mkdir(parents=True)
    cache.chmod(0o777)
    assert _builtin_cache.load_tables(H100) is h100_raw
    assert _builtin_cache.load_tables(H100) is h100_raw
    assert reads == [H100, H100]
    assert list(cache.iterdir()) == []


def test_no_cache_when_the_package_is_missing(monkeypatch):
    def missing(device: str) -> None:
        raise adapter.ProfileDataError("not installed")

    monkeypatch.setattr(adapter, "source_files", missing)
    assert _builtin_cache.cache_key(H100) is None


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Stand-in source files and code files, so that a test can change them."""
    files = [tmp_path / "gemm_perf.parquet", tmp_path / "nccl_perf.parquet"]
    code = [tmp_path / "adapter.py", tmp_path / "cache.py"]
    for path in (*files, *code):
        path.write_text("data", encoding="utf-8")
    monkeypatch.setattr(adapter, "source_files", lambda device: tuple(files))
    monkeypatch.setattr(_builtin_cache, "_CODE", tuple(code))
    return [*files, *code]


def test_the_key_is_stable_while_nothing_changes(sources):
    assert _builtin_cache.cache_key(H100) == _builtin_cache.cache_key(H100)


def test_the_key_names_the_device_and_is_file_name_safe(sources):
    key = _builtin_cache.cache_key(H100)
    assert key.startswith("builtin-profile-h100-sxm5-80gb-")
    assert key != _builtin_cache.cache_key("a100-sxm4-80gb")


@pytest.mark.parametrize("change", ["mtime", "size", "removed", "adapter code", "cache code"])
def test_the_key_changes_with_a_source_file_or_the_code(sources, change):
    before = _builtin_cache.cache_key(H100)
    data, _, adapter_code, cache_code = sources
    stat = data.stat()
    if change == "mtime":
        os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    elif change == "size":
        data.write_text("data!", encoding="utf-8")
        os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # only the size differs
    elif change == "removed":
        data.unlink()
    elif change == "adapter code":
        adapter_code.write_text("datb", encoding="utf-8")
    else:
        cache_code.write_text("datb", encoding="utf-8")
    assert _builtin_cache.cache_key(H100) != before


@pytest.mark.parametrize("package", ["aiconfigurator-core", "pyarrow", "numpy"])
def test_the_key_changes_with_a_package_version(sources, monkeypatch, package):
    before = _builtin_cache.cache_key(H100)
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "0.0.0-other" if name == package else real(name))
    assert _builtin_cache.cache_key(H100) != before


def test_encode_round_trips_tuples_int_keys_and_tag_like_keys():
    metadata = {"counts": {1: 5, 3: 7}, "pair": (1, "a"), "__items__": [1], "nested": [{"__tuple__": None}]}
    raw = {"metadata": metadata, "nccl": {"op": np.array(["all_reduce", "send_recv"]),
                                          "latency_s": np.array([1e-5, 2e-5])}}
    arrays, meta = _builtin_cache.encode(raw)
    assert arrays["nccl.op"].dtype.kind == "U"
    decoded = _builtin_cache.decode(arrays, meta)
    assert decoded["metadata"] == metadata and isinstance(decoded["metadata"]["pair"], tuple)
    assert np.array_equal(decoded["nccl"]["op"], raw["nccl"]["op"])


def test_encode_refuses_object_columns_and_metadata_json_cannot_hold():
    with pytest.raises(ValueError, match="data-only"):
        _builtin_cache.encode({"metadata": {}, "nccl": {"op": np.array([object()], dtype=object)}})
    with pytest.raises(ValueError, match="JSON"):
        _builtin_cache.encode({"metadata": {"when": object()}})
