"""Launch knobs of the public validation rows: each one set is read from the row's source or said to be unstated.

A row that leaves out a knob its source states times a different run than the one measured
(issue 12: the Megatron-Core r0.8.0 weak-scaling rows ran ``--tp-comm-overlap``; the 2021-22
Megatron-LM rows had no flash attention and reduced gradients after the backward).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studies.validate import load_validation_set, unstated_knobs

PUBLIC = Path(__file__).resolve().parents[2] / "studies" / "validation" / "public.yaml"
ENTRIES = load_validation_set(PUBLIC)

# Words a source uses when it states the knob (the Megatron-LM flag, the parplan field, or the mechanism).
EVIDENCE: dict[str, tuple[str, ...]] = {
    "tp_comm_overlap": ("--tp-comm-overlap", "tp_comm_overlap"),
    "flash_attention": ("flash",),
    "overlap_grad_reduce": ("--overlap-grad-reduce", "overlap_grad_reduce", "allreduce_gradients", "--ddp-impl"),
    "overlap_param_gather": ("--overlap-param-gather", "overlap_param_gather"),
    "cp_comm_type": ("all-gather", "all_gather", "p2p", "ring", "all-to-all", "a2a", "ulysses"),
}


def _launch_knobs(entry: dict[str, Any]) -> list[str]:
    return [k for k in EVIDENCE if k in entry["run"].get("strategy", {})]


@pytest.mark.parametrize("entry", [e for e in ENTRIES if _launch_knobs(e)], ids=lambda e: e["id"])
def test_every_launch_knob_set_is_quoted_or_unstated(entry: dict[str, Any]) -> None:
    source = str(entry.get("source", "")).lower()
    unstated = set(unstated_knobs(entry.get("unstated") or []))
    missing = [k for k in _launch_knobs(entry)
               if k not in unstated and not any(word in source for word in EVIDENCE[k])]
    assert not missing, f"{entry['id']} sets {missing} without quoting them in source or listing them in unstated"


def _strategy(entry: dict[str, Any]) -> dict[str, Any]:
    return entry["run"]["strategy"]


@pytest.mark.parametrize("entry", [e for e in ENTRIES if "--tp-comm-overlap" in str(e.get("source", ""))],
                         ids=lambda e: e["id"])
def test_a_source_that_states_tp_comm_overlap_runs_it_wherever_tp_is_split(entry: dict[str, Any]) -> None:
    s = _strategy(entry)
    assert s.get("tp_comm_overlap") is (s["tp"] > 1)
    assert s.get("sequence_parallel") is (s["tp"] > 1)  # Megatron-LM asserts it with --tp-comm-overlap


@pytest.mark.parametrize("entry", [e for e in ENTRIES if "allreduce_gradients()" in str(e.get("source", ""))],
                         ids=lambda e: e["id"])
def test_a_source_quoting_the_local_ddp_all_reduce_runs_it_after_the_backward(entry: dict[str, Any]) -> None:
    assert _strategy(entry).get("overlap_grad_reduce") is False


def test_the_2021_and_2022_megatron_lm_rows_run_without_flash_attention() -> None:
    # FlashAttention (arXiv 2205.14135) postdates both codebases; git grep -i flash in megatron/ at
    # github.com/NVIDIA/Megatron-LM @50a4b5fa and @2e90a342 finds nothing.
    old = [e for e in ENTRIES if str(e.get("framework", "")).startswith(("Megatron-LM (2021)", "Megatron-LM (2022)"))]
    assert len(old) >= 18
    assert all(_strategy(e).get("flash_attention") is False for e in old)
