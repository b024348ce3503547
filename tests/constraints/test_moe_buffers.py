"""MoE dispatch memory (constraints.moe_buffers) and TE userbuffers (constraints.workspace)."""

from __future__ import annotations

import pytest

from constraints.memory import stage_memory
from constraints.moe_buffers import deepep_buffer_bytes, dispatched_token_bytes
from constraints.workspace import userbuffer_bytes
from costmodel.llm import moe
from costmodel.specs import Strategy
from costmodel.specs.moe_tokens import load_factor
from costmodel.specs.runspec import run_spec_from_mapping

MIXTRAL = {"model": "mixtral-8x7b", "seq_length": 4096, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 64},
           "strategy": {"tp": 1, "pp": 1, "dp": 64, "ep": 8, "micro_batch_size": 1, "global_batch_size": 64}}


def _run(**strategy: object):  # type: ignore[no-untyped-def]
    return run_spec_from_mapping({**MIXTRAL, "strategy": {**MIXTRAL["strategy"], **strategy}})


def test_rows_factor_is_the_capacity_factor_else_the_stated_imbalance() -> None:
    assert load_factor(Strategy()) == 1.0
    assert load_factor(Strategy(moe_load_imbalance=1.5)) == 1.5
    assert load_factor(Strategy(moe_capacity_factor=1.25, moe_load_imbalance=3.0)) == 1.25


def test_dispatched_tokens_are_the_time_models_expert_rows_under_sp_and_etp() -> None:
    """Mixtral tp4 / etp1 / SP: a rank dispatches its 1/4 share (2048 rows at top-2), not 8192."""
    for knobs in ({"tp": 4, "dp": 16, "etp": 1, "sequence_parallel": True},
                  {"tp": 2, "dp": 32, "etp": 2, "ep": 8, "sequence_parallel": True}):
        run = _run(**knobs)
        rows = moe.expert_rows(run.model, run.strategy, 4096)
        assert dispatched_token_bytes(run.model, run.strategy, 4096) == 2 * 2 * rows * 4096
    run = _run(tp=4, dp=16, etp=1, sequence_parallel=True)
    assert moe.expert_rows(run.model, run.strategy, 4096) == 4096 / 4 * 2


def test_dispatched_tokens_are_two_16bit_copies_of_topk_tokens() -> None:
    run = _run()
    # Mixtral: top-2, h 4096; 4096 tokens -> 2 buffers x 2 bytes x 2 x 4096 x 4096
    assert dispatched_token_bytes(run.model, run.strategy, 4096) == 2 * 2 * 2 * 4096 * 4096


@pytest.mark.parametrize("knob", [{"moe_capacity_factor": 2.0}, {"moe_load_imbalance": 2.0}])
def test_more_rows_on_the_busiest_rank_never_lowers_its_memory(knob: dict) -> None:
    assert stage_memory(_run(**knob), 0).total_bytes > stage_memory(_run(), 0).total_bytes


def test_deepep_buffer_matches_its_size_hints_by_hand() -> None:
    # ep 8 (one NVLink domain, no RDMA): 10 channels x 8 ranks x (5 ints + 256 tokens x (2h + 8 + 128 x 12 + 512))
    h = 7168
    per_rank = 5 * 4 + 256 * (2 * h + 8 + 128 * 12 + 128 * 4)
    assert deepep_buffer_bytes(h, 8) == -(-(10 * 8 * per_rank) // 128) * 128
    assert deepep_buffer_bytes(h, 1) == 0.0
    assert deepep_buffer_bytes(h, 64) > deepep_buffer_bytes(h, 16) > deepep_buffer_bytes(h, 8)


def test_flex_dispatcher_adds_the_deepep_buffer() -> None:
    flex = stage_memory(_run(moe_token_dispatcher="flex"), 0).other_bytes
    a2a = stage_memory(_run(moe_token_dispatcher="alltoall"), 0).other_bytes
    assert flex - a2a == pytest.approx(deepep_buffer_bytes(4096, 8))


def test_userbuffers_only_with_tp_comm_overlap_and_fp8_halves_the_all_gather_ones() -> None:
    base = {"model": "llama3.1-70b", "seq_length": 8192, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 64},
            "strategy": {"tp": 8, "pp": 1, "dp": 8, "micro_batch_size": 1, "global_batch_size": 64,
                         "sequence_parallel": True}}
    off = run_spec_from_mapping(base)
    on = run_spec_from_mapping({**base, "strategy": {**base["strategy"], "tp_comm_overlap": True}})
    fp8 = run_spec_from_mapping({**base, "strategy": {**base["strategy"], "tp_comm_overlap": True,
                                                      "precision": "fp8"}})
    elements = 8192 * 8192
    assert userbuffer_bytes(off) == 0.0
    assert userbuffer_bytes(on) == 12 * 2 * elements
    assert userbuffer_bytes(fp8) == (8 * 1 + 4 * 2) * elements
    assert stage_memory(on, 0).other_bytes - stage_memory(off, 0).other_bytes == pytest.approx(12 * 2 * elements)


def test_kept_expert_inputs_are_the_rows_gathered_over_expert_tp() -> None:
    """Under SP, etp 2 gathers twice the rows etp 1 keeps; only that term differs (same inner widths per row)."""
    from constraints.memory import activation_bytes_per_layer
    one, two = _run(tp=2, dp=32, etp=1, sequence_parallel=True), _run(tp=2, dp=32, etp=2, sequence_parallel=True)
    diff = (activation_bytes_per_layer(two.model, two.strategy, 4096, moe=True)
            - activation_bytes_per_layer(one.model, one.strategy, 4096, moe=True))
    rows = moe.expert_rows(one.model, one.strategy, 4096)  # 4096 / 2 tokens x top-2
    assert rows == 4096
    assert diff == pytest.approx(2 * one.model.hidden_size * rows)  # 16-bit, one more rank's rows
