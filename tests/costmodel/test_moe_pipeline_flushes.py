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
