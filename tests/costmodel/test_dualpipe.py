"""DualPipe (DeepSeek-V3, arXiv 2412.19437 section 3.2.1) as a registered pipeline schedule."""

from __future__ import annotations

from typing import Any

import pytest

from costmodel.llm import moe
from costmodel.llm.dualpipe import WGRAD_SHARE, dualpipe
from costmodel.llm.schedule import SCHEDULES, one_f_one_b, schedule_name
from costmodel.specs.errors import SpecError
from costmodel.specs.runspec import run_spec_from_mapping
from costmodel.specs.strategy import Strategy


def test_bubble_is_table_2_s_closed_form() -> None:
    f, b = 1.0, 2.0
    w = WGRAD_SHARE * b
    flush = dualpipe([f] * 16, [b] * 16, 32, 1, 0.0)
    # (PP/2 - 1)(F&B + B - 3W), F&B = F + B + W the overlapped pair, B the input-gradient part
    assert flush.bubble_s == pytest.approx((16 / 2 - 1) * ((f + b) + (b - w) - 3 * w))
    assert flush.steady_s == pytest.approx(32 * (f + b))


def test_bubble_is_smaller_than_1f1b_s() -> None:
    plain = one_f_one_b([1.0] * 16, [2.0] * 16, 32, 1, 0.0)
    assert dualpipe([1.0] * 16, [2.0] * 16, 32, 1, 0.0).bubble_s < plain.bubble_s / 4


def test_two_stage_pipeline_has_no_bubble() -> None:
    assert dualpipe([1.0, 1.0], [2.0, 2.0], 8, 1, 0.0).bubble_s == 0.0


def _run(**strategy: Any) -> Any:
    base = {"tp": 1, "pp": 4, "ep": 8, "dp": 16, "micro_batch_size": 1, "global_batch_size": 256,
            "moe_token_dispatcher": "flex"}
    base.update(strategy)
    return run_spec_from_mapping({"model": "mixtral-8x7b", "seq_length": 4096,
                                  "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 64}, "strategy": base})


def test_strategy_names_the_schedule() -> None:
    assert schedule_name(4, 1, "dualpipe") == "dualpipe" and "dualpipe" in SCHEDULES
    assert schedule_name(4, 2) == "interleaved"
    with pytest.raises(SpecError, match="strategy.pipeline_schedule"):
        Strategy(pipeline_schedule="zb-v")


def test_dualpipe_overlaps_the_all_to_all_unless_told_not_to() -> None:
    assert not moe.a2a_overlap(_run())
    assert moe.a2a_overlap(_run(pipeline_schedule="dualpipe"))
    assert not moe.a2a_overlap(_run(pipeline_schedule="dualpipe", moe_a2a_overlap=False))
