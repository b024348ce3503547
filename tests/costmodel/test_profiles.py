"""Profiles: the built-in aiconfigurator-core tables and user profile directories."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from costmodel.profiles import FAMILY_COLUMNS, Profile, builtin_profile, load_profile, make_profile, save_profile
from costmodel.specs.errors import SpecError

H100 = "h100-sxm5-80gb"


@pytest.fixture(scope="module")
def h100() -> Profile:
    profile = builtin_profile(H100)
    assert profile is not None
    return profile


@pytest.fixture
def small() -> Profile:
    """A user-style profile measured on a CPU."""
    tables = {
        "gemm_bf16": {"m": [1, 64, 4096], "n": [128, 128, 4096], "k": [256, 256, 4096],
                      "latency_s": [1.5e-6, 2.25e-6, 0.1]},
        "nccl": {"op": ["all_reduce", "all_to_all"], "num_gpus": [2, 8], "message_bytes": [1024, 2**20],
                 "latency_s": [1e-5, 3.3333333333333335e-4]},
    }
    return make_profile("laptop", "cpu", {"source": "parplan profile", "torch": "2.5.1"}, tables)


def test_builtin_h100_loads(h100):
    assert h100.name == "aiconfigurator-core 0.12.0: h100-sxm5-80gb"
    assert h100.device == H100
    assert h100.families == ("attention_fwd", "gemm_bf16", "gemm_fp8", "nccl")
    for family, columns in h100.tables.items():
        assert list(columns) == list(FAMILY_COLUMNS[family])
        assert columns["latency_s"].size > 100 and np.all(columns["latency_s"] > 0)
    assert h100.metadata["source"] == "aiconfigurator-core 0.12.0"
    assert h100.metadata["fit_sampling"]["fraction"] == 0.10
    assert builtin_profile(H100) is h100  # memoised


def test_builtin_tables_are_read_only(h100):
    with pytest.raises(ValueError):
        h100.tables["gemm_bf16"]["m"][0] = 7


def test_content_hash_is_stable_across_processes(h100):
    code = "from costmodel.profiles import builtin_profile; print(builtin_profile('h100-sxm5-80gb').content_hash)"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == h100.content_hash
    assert len(h100.content_hash) == 64


def test_content_hash_follows_content(small):
    tables = {family: dict(columns) for family, columns in small.tables.items()}
    same = make_profile("other name", "cpu", dict(small.metadata), tables)
    assert same.content_hash == small.content_hash
    tables["gemm_bf16"]["latency_s"] = small.tables["gemm_bf16"]["latency_s"] * 1.01
    assert make_profile("laptop", "cpu", dict(small.metadata), tables).content_hash != small.content_hash
    changed = make_profile("laptop", "cpu", {**small.metadata, "torch": "2.6.0"}, small.tables)
    assert changed.content_hash != small.content_hash


@pytest.mark.parametrize("device", ["a100-sxm4-40gb", "mi300x", "no-such-gpu"])
def test_device_without_data_has_no_builtin_profile(device):
    assert builtin_profile(device) is None


def test_save_load_round_trip(small, tmp_path):
    target = tmp_path / "laptop"
    save_profile(small, target)
    loaded = load_profile(target)
    assert loaded == small
    assert loaded.content_hash == small.content_hash
    assert loaded.metadata == small.metadata
    for family, columns in small.tables.items():
        for name, values in columns.items():
            assert loaded.tables[family][name].dtype == values.dtype
            np.testing.assert_array_equal(loaded.tables[family][name], values)


def test_save_replaces_existing_directory_and_leaves_no_temporaries(small, tmp_path):
    target = tmp_path / "laptop"
    save_profile(small, target)
    (target / "gemm_fp8.csv").write_text("m,n,k,latency_s\n1,1,1,1e-6\n")
    save_profile(small, target)
    assert sorted(p.name for p in target.iterdir()) == ["gemm_bf16.csv", "metadata.yaml", "nccl.csv"]
    assert [p.name for p in tmp_path.iterdir()] == ["laptop"]


def test_missing_directory_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="'profile' parameter must be a directory"):
        load_profile(tmp_path / "absent")


def test_directory_without_metadata_is_a_spec_error(tmp_path):
    (tmp_path / "gemm_bf16.csv").write_text("m,n,k,latency_s\n1,1,1,1e-6\n")
    with pytest.raises(SpecError, match="metadata.yaml"):
        load_profile(tmp_path)


@pytest.mark.parametrize(("filename", "text", "message"), [
    ("gemm_bf16.csv", "m,n,latency_s\n1,1,1e-6\n", "header"),
    ("gemm_bf16.csv", "m,n,k,latency_s\n1,x,1,1e-6\n", "an integer"),
    ("gemm_bf16.csv", "m,n,k,latency_s\n1,1,1,-1\n", "a positive finite number"),
    ("gemm_bf16.csv", "m,n,k,latency_s\n", "at least one row"),
    ("attention_fwd.csv", "batch,seq_len,num_heads,num_kv_heads,head_dim,causal,latency_s\n1,2,3,4,5,maybe,1e-6\n",
     "true or false"),
    ("conv2d.csv", "a,b\n1,2\n", "a known family"),
])
def test_invalid_table_is_a_spec_error(tmp_path, filename, text, message):
    (tmp_path / "metadata.yaml").write_text("device: cpu\n")
    (tmp_path / filename).write_text(text)
    with pytest.raises(SpecError, match=message) as info:
        load_profile(tmp_path)
    assert "\n" not in str(info.value)


def test_make_profile_rejects_wrong_columns():
    with pytest.raises(SpecError, match="gemm_bf16 columns"):
        make_profile("x", "cpu", {}, {"gemm_bf16": {"m": [1], "n": [1], "latency_s": [1.0]}})
