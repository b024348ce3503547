"""DualPipe (DeepSeek-V3, arXiv 2412.19437 section 3.2.1) as a registered pipeline schedule."""

from __future__ import annotations

from typing import Any

import pytest

from costmodel.llm import moe
from constraints.rules import rule_violations
from costmodel.llm.dualpipe import dualpipe
from costmodel.llm.step import predict_step
from costmodel.llm.schedule import SCHEDULES, one_f_one_b, schedule_name
from costmodel.specs.errors import SpecError
from costmodel.specs.runspec import run_spec_from_mapping
from costmodel.specs.strategy import Strategy
from costmodel.timing import OperatorTimer


def test_bubble_is_table_2_s_closed_form() -> None:
    f, b, w = 1.0, 2.0, 0.7
    flush = dualpipe([f] * 16, [b] * 16, 32, 1, 0.0, wgrad=[w] * 16)
    # (PP/2 - 1)(F&B + B - 3W), F&B = F + B + W the overlapped pair, B the input-gradient part
    assert flush.bubble_s == pytest.approx((16 / 2 - 1) * ((f + b) + (b - w) - 3 * w))
    assert flush.steady_s == pytest.approx(32 * (f + b))


def test_without_a_weight_gradient_nothing_fills_the_bubble() -> None:
    assert dualpipe([1.0] * 4, [2.0] * 4, 8, 1, 0.0).bubble_s == pytest.approx((4 / 2 - 1) * (1.0 + 2 * 2.0))


def test_bubble_is_smaller_than_1f1b_s() -> None:
    plain = one_f_one_b([1.0] * 16, [2.0] * 16, 32, 1, 0.0)
    assert dualpipe([1.0] * 16, [2.0] * 16, 32, 1, 0.0, wgrad=[0.8] * 16).bubble_s < plain.bubble_s / 2


def test_two_stage_pipeline_has_no_bubble() -> None:
    assert dualpipe([1.0, 1.0], [2.0, 2.0], 8, 1, 0.0).bubble_s == 0.0


def _run(framework: str = "hai-llm", **strategy: Any) -> Any:
    base = {"tp": 1, "pp": 4, "ep": 8, "dp": 16, "micro_batch_size": 1, "global_batch_size": 256,
            "moe_token_dispatcher": "flex"}
    base.update(strategy)
    return run_spec_from_mapping({"model": "mixtral-8x7b", "seq_length": 4096, "framework": framework,
                                  "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 64}, "strategy": base})


def test_w_is_the_stages_timed_weight_gradient_gemms() -> None:
    """W is the wgrad GEMMs, not half the stage backward: recompute, attention-core backward and
    exposed communication stay in B, so the bubble stays above the collapsed (pp/2 - 1) F."""
    run = _run(recompute="full")
    step = predict_step(run, OperatorTimer(run.cluster.gpu, None))
    c = step.stage_computes[0]
    assert 0 < c.wgrad_s < 0.5 * c.backward_s
    assert step.breakdown["pp_bubble_s"] > (4 / 2 - 1) * max(s.forward_s for s in step.stage_computes) * 1.05


@pytest.mark.parametrize(("framework", "strategy", "expected"), [
    ("megatron-core", {"pp": 4}, "not offered by"),
    ("torchtitan", {"pp": 4}, "not offered by"),
    ("hai-llm", {"pp": 2, "dp": 32, "global_batch_size": 32}, "even number of micro-batches >= 2*pp"),
    ("hai-llm", {"pp": 4, "vpp": 2}, "vpp=1"),
])
def test_dualpipe_runs_only_where_its_framework_and_shape_allow(framework: str, strategy: dict,
                                                                expected: str) -> None:
    run = _run(framework, pipeline_schedule="dualpipe", **strategy)
    assert any(expected in v and "dualpipe" in v for v in rule_violations(run))


def test_dualpipe_needs_an_even_pipeline() -> None:
    run = run_spec_from_mapping({"model": "mixtral-8x7b", "seq_length": 4096, "framework": "hai-llm",
                                 "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 48},
                                 "strategy": {"tp": 1, "pp": 3, "dp": 16, "ep": 8, "micro_batch_size": 1,
                                              "global_batch_size": 256, "pipeline_schedule": "dualpipe"}})
    assert any("even pp" in v for v in rule_violations(run))


def test_dualpipe_under_hai_llm_at_an_even_pipeline_breaks_no_rule() -> None:
    assert rule_violations(_run(pipeline_schedule="dualpipe")) == []


def test_strategy_names_the_schedule() -> None:
    assert schedule_name(4, 1, "dualpipe") == "dualpipe" and "dualpipe" in SCHEDULES
    assert schedule_name(4, 2) == "interleaved"
    with pytest.raises(SpecError, match="strategy.pipeline_schedule"):
        Strategy(pipeline_schedule="zb-v")


def test_dualpipe_overlaps_the_all_to_all_unless_told_not_to() -> None:
    assert not moe.a2a_overlap(_run())
    assert moe.a2a_overlap(_run(pipeline_schedule="dualpipe"))
    assert not moe.a2a_overlap(_run(pipeline_schedule="dualpipe", moe_a2a_overlap=False))
