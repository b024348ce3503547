"""The rule that each pipeline flush (``strategy.pipeline_flushes``) takes an equal share of the micro-batches."""

from __future__ import annotations

from typing import Any

import pytest

from costmodel.specs.runspec import RunSpec, run_spec_from_mapping


def _run(**strategy: Any) -> RunSpec:
    base = {"tp": 1, "pp": 4, "dp": 16, "ep": 8, "vpp": 1, "micro_batch_size": 1, "global_batch_size": 512,
            "zero_stage": 3}
    base.update(strategy)
    return run_spec_from_mapping({"model": "mixtral-8x7b", "seq_length": 4096,
                                  "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 64},
                                  "strategy": base, "framework": "automodel"})


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
