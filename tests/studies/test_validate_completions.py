"""validate's completion of unstated knobs: interleaving degree and the pipeline split it needs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from constraints import check
from costmodel.specs.layout import layout_of
from costmodel.specs.runspec import run_spec_from_mapping
from studies.validate import (_completions, _with_split, load_validation_set, nearest_fitting_completion,
                              unstated_knobs)

PUBLIC = Path(__file__).resolve().parents[2] / "studies" / "validation" / "public.yaml"
# 48 layers, 12 per rank on pp 4: vpp 2 and 4 split evenly, vpp 8 needs first/last-stage counts.
MODEL = {"name": "gpt-48l", "num_layers": 48, "hidden_size": 6144, "num_attention_heads": 48,
         "ffn_hidden_size": 24576, "vocab_size": 50257, "seq_length": 36864}


def _run(vpp: int, num_layers: int = 48, pp: int = 4):
    return run_spec_from_mapping({
        "model": {**MODEL, "num_layers": num_layers}, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8 * pp},
        "strategy": {"tp": 8, "pp": pp, "vpp": vpp, "micro_batch_size": 1, "global_batch_size": 16,
                     "zero_stage": 1, "sequence_parallel": True, "recompute": "none"}})


def test_unstated_entries_name_their_knob_by_the_leading_word() -> None:
    assert unstated_knobs(["vpp (interleaved schedule, V not stated)", "micro_batch_size", "recompute"]) == [
        "vpp", "micro_batch_size", "recompute"]


def test_an_interleaved_run_completes_only_to_other_interleavings() -> None:
    values = {c.get("vpp") for _, c in _completions(_run(2), ["vpp (V not stated)"])}
    assert values == {None, 4, 8}


def test_a_non_interleaved_run_tries_interleaving() -> None:
    values = {c.get("vpp") for _, c in _completions(_run(1), ["vpp"])}
    assert {2, 4, 8} <= values


def test_a_larger_interleave_is_the_nearest_fit_when_the_stated_one_does_not_fit() -> None:
    # Interleaved 1F1B's first stage holds p + (p - 1) / v stages' worth: more chunks, less memory.
    run = _run(2)
    assert not check(run).fits and check(_run(1)).fits  # vpp 1 would fit, but the source interleaves
    found = nearest_fitting_completion(run, ["vpp"])
    assert found is not None
    completed, changes = found
    assert changes == {"vpp": 4} and completed.strategy.vpp == 4 and check(completed).fits


def test_a_completed_vpp_takes_the_split_megatron_builds() -> None:
    # 126 layers on pp 16 split as 7, 8 x 14, 7 at vpp 1 only; at vpp 2 the accounted split lays them out.
    run = _run(1, num_layers=126, pp=16)
    options = [c for _, c in _completions(run, ["vpp"]) if c.get("vpp") == 2]
    assert options == [{"vpp": 2}]
    changes = _with_split(run, options[0])
    assert changes["account_for_embedding"] and changes["account_for_loss"]
    assert not layout_of(run.model, replace(run.strategy, **changes)).problems


@pytest.mark.skipif(not PUBLIC.exists(), reason="public validation set absent")
def test_llama3_rows_hold_the_papers_pipeline_layout() -> None:
    # arXiv 2407.21783 Sec. 3.3.2: "the first model chunk on the first stage has only the embedding, and the
    # last model chunk on the last stage has only output projection and loss calculation".
    rows = [e for e in load_validation_set(PUBLIC) if e["id"].startswith("llama3paper-")]
    assert len(rows) == 3
    for entry in rows:
        run = run_spec_from_mapping(entry["run"], PUBLIC.parent)
        layout = layout_of(run.model, run.strategy)
        assert run.strategy.vpp > 1 and not layout.problems
        assert layout.chunks[0] == "E" and layout.chunks[-1] == "L"
        assert layout.stage_layers == (7,) + (8,) * 14 + (7,)
        # FSDP "shards the optimizer states and gradients": zero_stage 2, which the row's framework override admits
        assert run.strategy.zero_stage == 2
        assert not [v for v in check(run).violations if "zero_stage" in v]
