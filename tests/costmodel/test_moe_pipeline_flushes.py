"""Pipeline flushes per step (``strategy.pipeline_flushes``): PyTorch-pipelining frameworks (NeMo
Automodel, torchtitan) step the schedule once per local batch inside their gradient-accumulation loop,
so every flush fills and drains and syncs the gradients (costmodel/llm/step.py)."""

from __future__ import annotations

from typing import Any

import pytest

from costmodel.llm.step import predict_step
from costmodel.predict import timer_for
from costmodel.specs.errors import SpecError
from costmodel.specs.runspec import RunSpec, run_spec_from_mapping


def _run(**strategy: Any) -> RunSpec:
    base = {"tp": 1, "pp": 4, "dp": 16, "ep": 8, "vpp": 1, "micro_batch_size": 1, "global_batch_size": 512,
            "zero_stage": 3}
    base.update(strategy)
    return run_spec_from_mapping({"model": "mixtral-8x7b", "seq_length": 4096,
                                  "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 64},
                                  "strategy": base, "framework": "automodel"})


def _breakdown(run: RunSpec) -> dict[str, float]:
    return predict_step(run, timer_for(run.cluster.gpu)).breakdown


def test_each_flush_fills_and_drains_the_pipeline_again() -> None:
    one, four = _breakdown(_run()), _breakdown(_run(pipeline_flushes=4))
    # four flushes of 8 micro-batches: four warm-ups and cool-downs of the same shape...
    assert four["pp_bubble_s"] == pytest.approx(4 * one["pp_bubble_s"], rel=1e-9)
    # 1F1B exposes 2 (m + pp - 2) hand-offs per flush: 4 x 2 (8 + 2) against 2 (32 + 2)
    assert four["pp_comm_s"] == pytest.approx(one["pp_comm_s"] * 80 / 68, rel=1e-9)
    # ...while the micro-batches themselves are the same 32
    assert four["compute_s"] == pytest.approx(one["compute_s"], rel=1e-9)
    assert four["ep_comm_s"] == pytest.approx(one["ep_comm_s"], rel=1e-9)


def test_each_flush_syncs_the_gradients_again() -> None:
    one, four = _breakdown(_run()), _breakdown(_run(pipeline_flushes=4))
    assert one["dp_comm_exposed_s"] > 0
    assert four["dp_comm_exposed_s"] > 3 * one["dp_comm_exposed_s"]


def test_more_flushes_never_make_a_step_faster() -> None:
    times = [sum(_breakdown(_run(pipeline_flushes=f)).values()) for f in (1, 2, 4, 8)]
    assert times == sorted(times)
    assert times[-1] > times[0]


def test_flushes_change_nothing_without_a_pipeline() -> None:
    flat = {"pp": 1, "dp": 64}
    assert _breakdown(_run(**flat, pipeline_flushes=4)) == _breakdown(_run(**flat))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_bad_pipeline_flushes_name_the_field(bad: Any) -> None:
    with pytest.raises(SpecError, match="strategy.pipeline_flushes"):
        _run(pipeline_flushes=bad)


# The rule that each flush takes an equal share of the micro-batches (constraints/rules.py).

@pytest.mark.parametrize(("flushes", "ok"), [(1, True), (2, True), (4, True), (3, False), (64, False)])
def test_flushes_must_split_the_micro_batches_evenly(flushes: int, ok: bool) -> None:
    from constraints.rules import pipeline_flushes_split_the_batch

    run = _run(pipeline_flushes=flushes)
    m = run.strategy.num_microbatches
    assert m % 4 == 0 and m < 64  # the fixture's batch: 4 divides it, 64 does not
    message = pipeline_flushes_split_the_batch(run)
    assert (message is None) == ok, message
    if not ok:
        assert f"pipeline_flushes={flushes}" in message and str(m) in message


def test_a_flush_count_that_does_not_divide_is_a_violation_of_the_run() -> None:
    from constraints import check

    assert not any("pipeline_flushes" in v for v in check(_run(pipeline_flushes=4)).violations)
    assert any("pipeline_flushes=3" in v for v in check(_run(pipeline_flushes=3)).violations)


def test_without_a_pipeline_flushes_change_nothing_and_break_no_rule() -> None:
    from constraints.rules import pipeline_flushes_split_the_batch

    assert pipeline_flushes_split_the_batch(_run(pp=1, dp=64, pipeline_flushes=3)) is None
