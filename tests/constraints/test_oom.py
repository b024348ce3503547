"""OOM probability, the memory margin, torchtitan's selective AC and activation offloading."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constraints import check
from constraints.memory import peak_stage_memory
from constraints.oom import default_memory_margin, oom_probability
from costmodel.specs import run_spec_from_mapping

LLAMA2_70B = {"name": "llama2-70b", "num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
              "num_query_groups": 8, "ffn_hidden_size": 28672, "vocab_size": 32000, "seq_length": 4096,
              "activation": "swiglu", "normalization": "rmsnorm", "position_embedding": "rope"}


def _titan(mbs: int, mode: str) -> object:
    """torchtitan docs/performance.md @3faaa1a0: Llama 2 70B on 64 A100-80GB, FSDP2, selective AC."""
    return run_spec_from_mapping({
        "model": LLAMA2_70B, "cluster": {"gpu": "a100-sxm4-80gb", "num_gpus": 64},
        "framework": {"name": "torchtitan", "selective_recompute": mode},
        "strategy": {"dp": 64, "micro_batch_size": mbs, "global_batch_size": 64 * mbs, "recompute": "selective",
                     "zero_stage": 3, "sequence_parallel": False}})


def test_torchtitan_selective_op_fits_at_batch_1_and_not_at_2() -> None:
    """The source ran local batch 1 and reports an OOM at 2 with selective op AC (its footnote 3)."""
    assert check(_titan(1, "op")).fits
    assert not check(_titan(2, "op")).fits


def test_op_policy_keeps_less_than_megatron_selective() -> None:
    assert peak_stage_memory(_titan(1, "op")).activations_bytes < peak_stage_memory(_titan(1, "megatron")).activations_bytes


@settings(max_examples=30, deadline=None)
@given(peak=st.floats(1.0, 200.0), extra=st.floats(0.01, 50.0), usable=st.floats(10.0, 200.0))
def test_oom_probability_in_unit_interval_and_falls_with_headroom(peak: float, extra: float, usable: float) -> None:
    p_more = oom_probability(peak, usable)
    p_less = oom_probability(peak + extra, usable)
    assert 0.0 <= p_more <= p_less <= 1.0


def test_oom_probability_is_one_half_at_the_limit_and_reported() -> None:
    assert oom_probability(70.0, 70.0) == pytest.approx(0.5)
    verdict = check(_titan(1, "op"))
    assert 0.0 < verdict.oom_probability < 0.5
    assert verdict.headroom_gib > 0


def test_memory_margin_changes_feasibility() -> None:
    run = _titan(1, "op")
    verdict = check(run)
    tight = 1 - verdict.memory.total_bytes / verdict.usable_bytes + 0.01
    assert verdict.fits and not check(run, memory_margin=tight).fits
    assert 0 < default_memory_margin() < 0.2


@settings(max_examples=20, deadline=None)
@given(fewer=st.integers(0, 40), more=st.integers(0, 40), mode=st.sampled_from(["none", "selective", "full"]))
def test_more_offload_never_more_memory(fewer: int, more: int, mode: str) -> None:
    fewer, more = sorted((fewer, more))
    base = _titan(1, "megatron")
    base = replace(base, strategy=replace(base.strategy, recompute=mode))
    mems = [peak_stage_memory(replace(base, framework=replace(base.framework, cpu_offloading_num_layers=k))).total_bytes
            for k in (fewer, more)]
    assert mems[1] <= mems[0]
