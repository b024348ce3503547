"""The timing loop and the journal: torn lines, tables rebuilt from it, one device per directory (no torch)."""

from __future__ import annotations

import time

import pytest

from costmodel.profiles import load_profile
from costmodel.profiling.journal import Journal, build_profile, check_session, rebuild
from costmodel.profiling.measure import TimingPolicy, measure
from costmodel.specs.errors import SpecError


def _session(device: str = "cpu") -> dict:
    return {"record": "session", "device": device, "label": f"{device} (test)", "source": "test"}


def _gemm(m: int, seconds: float) -> dict:
    return {"record": "sample", "table": "gemm_bf16", "key": f"gemm_bf16||{m},64,64",
            "row": {"m": m, "n": 64, "k": 64}, "median_s": seconds, "q25_s": seconds, "q75_s": seconds}


def test_measure_takes_median_and_spread_with_repeats():
    result = measure(lambda: sum(range(2000)), device="cpu", deadline=time.monotonic() + 5,
                     policy=TimingPolicy(min_repeats=7, target_s=0.01))
    assert result is not None
    assert result.repeats >= 7 and result.inner >= 1 and result.timer == "perf_counter"
    assert result.min_s <= result.q25_s <= result.median_s <= result.q75_s <= result.max_s
    assert result.spread >= 0


def test_measure_returns_none_when_the_deadline_has_passed():
    assert measure(lambda: None, device="cpu", deadline=time.monotonic() - 1) is None


def test_timing_policy_is_validated():
    with pytest.raises(ValueError, match="min_repeats"):
        TimingPolicy(min_repeats=5, max_repeats=2)


def test_a_torn_last_line_is_skipped_and_the_next_record_starts_clean(tmp_path):
    journal = Journal(tmp_path)
    journal.append(_session())
    journal.append(_gemm(64, 1e-5))
    with journal.path.open("a") as handle:
        handle.write('{"record": "sample", "table": "gemm_bf16", "key": "half')  # a crash mid-write
    assert [r["record"] for r in journal.records()] == ["session", "sample"]
    journal.append(_gemm(128, 2e-5))
    assert journal.measured_keys() == {"gemm_bf16||64,64,64", "gemm_bf16||128,64,64"}


def test_tables_rebuilt_from_the_journal_load_as_a_profile(tmp_path):
    journal = Journal(tmp_path / "p")
    journal.append(_session())
    assert build_profile(tmp_path / "p") is None  # no sample yet
    journal.append({"record": "physics", "physics": {"peak_flops": {"bf16": 1e11},
                                                    "hbm_bandwidth_bytes_per_s": 1e10, "num_sms": 1}})
    for m in (64, 128, 256):
        journal.append(_gemm(m, m * 1e-7))
    journal.append(_gemm(64, 9e-6))  # measured again: the latest wins
    rebuild(tmp_path / "p")
    profile = load_profile(tmp_path / "p")
    assert profile.name == "p: cpu (test)" and profile.device == "cpu"
    assert sorted(profile.tables["gemm_bf16"]["m"].tolist()) == [64, 128, 256]
    assert 9e-6 in profile.tables["gemm_bf16"]["latency_s"].tolist()
    assert profile.physics["peak_flops"] == {"bf16": 1e11}
    assert profile.fit_sampling["fraction"] == 0.75
    assert (tmp_path / "p" / "samples.jsonl").is_file()  # the journal survives the rebuild


def test_link_figures_come_from_the_collective_rows(tmp_path):
    journal = Journal(tmp_path)
    journal.append(_session())
    for size, seconds in ((1024, 1e-5), (2**20, 1e-3)):
        journal.append({"record": "sample", "table": "nccl", "key": f"nccl||all_reduce,2,{size}",
                        "row": {"op": "all_reduce", "num_gpus": 2, "message_bytes": size}, "median_s": seconds})
    physics = build_profile(tmp_path).physics
    assert physics["intra_node_bandwidth_bytes_per_s"] == pytest.approx(2**20 / 1e-3)  # bus factor 1 at 2 ranks
    assert physics["intra_node_latency_s"] == pytest.approx(1e-5 / 2)  # two ring steps


def test_a_directory_holds_one_device(tmp_path):
    journal = Journal(tmp_path)
    journal.append(_session("cpu"))
    check_session(journal.records(), "cpu", tmp_path)
    with pytest.raises(SpecError, match="'out' parameter") as info:
        check_session(journal.records(), "h100-sxm5-80gb", tmp_path)
    assert "\n" not in str(info.value)
