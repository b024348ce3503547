"""Strategy labels: every knob that differs from its default shows, so two listed rows never read the same."""

from __future__ import annotations

from costmodel.specs import Strategy
from search.result import strategy_label

BASE = {"tp": 1, "dp": 256, "zero_stage": 3, "global_batch_size": 512}


def test_strategies_differing_only_in_a_newer_knob_get_different_labels():
    variants = [Strategy(**BASE), Strategy(**BASE, hsdp_shard_size=64), Strategy(**BASE, hsdp_shard_size=128),
                Strategy(**BASE, overlap_param_gather=False), Strategy(**BASE, tp_comm_overlap=True)]
    labels = [strategy_label(v) for v in variants]
    assert len(set(labels)) == len(labels), labels


def test_default_knobs_keep_the_compact_label():
    assert strategy_label(Strategy(tp=8, pp=4, dp=8, global_batch_size=512)) == "tp8 pp4 cp1 ep1 dp8 mbs1 sp rc-none z1 bf16"


def test_cp_exchange_is_named_only_with_context_parallelism():
    with_cp = [strategy_label(Strategy(tp=8, cp=2, dp=8, global_batch_size=512, cp_comm_type=kind))
               for kind in ("p2p", "all_gather", "a2a")]
    assert len(set(with_cp)) == 3
