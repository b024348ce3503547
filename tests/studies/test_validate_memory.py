"""validate reports memory: false OOMs, the memory error, and completions of unstated knobs."""

from __future__ import annotations

import pytest

from studies.validate import validate

MODEL = {"name": "gpt-20b", "num_layers": 44, "hidden_size": 6144, "num_attention_heads": 48,
         "ffn_hidden_size": 24576, "vocab_size": 50257, "seq_length": 2048}


def _entry(rid: str, unstated: list[str], gpus: int = 8, **measured: float) -> dict:
    return {"id": rid, "unstated": unstated, "measured": {"step_time_s": 1.0, **measured},
            "run": {"model": MODEL, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": gpus},
                    "strategy": {"tp": 8, "micro_batch_size": 16, "global_batch_size": 128, "zero_stage": 0}}}


def test_false_oom_counts_runs_predicted_not_to_fit() -> None:
    out = validate([_entry("too-big", [])])
    assert out["runs"][0]["fits"] is False
    assert out["false_oom"] == 1 and out["false_oom_runs"] == ["too-big"]


def test_unstated_knobs_complete_to_the_nearest_fitting_setting() -> None:
    row = validate([_entry("completed", ["recompute"])])["runs"][0]
    assert row["fits"] is True
    assert row["completed"] == {"recompute": "selective"} or row["completed"] == {"recompute": "full"}
    assert "nearest" in row["note"]


def test_memory_error_where_a_source_gives_memory() -> None:
    out = validate([_entry("with-memory", ["recompute"], memory_gib=60.0)])
    row = out["runs"][0]
    assert row["memory_error"] == pytest.approx((row["peak_memory_gib"] - 60.0) / 60.0)
    assert out["memory_n"] == 1
