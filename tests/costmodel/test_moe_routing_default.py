"""An unset ``moe_routing`` is ``moe.routing()``'s default (uniform) in the operators and in their memo key alike."""

from __future__ import annotations

from typing import Any

from costmodel.specs.runspec import run_spec_from_mapping


def _run(**routing: Any) -> Any:
    return run_spec_from_mapping({"model": "gpt-oss-20b", "seq_length": 4096, "framework": "automodel",
                                  "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
                                  "strategy": {"ep": 8, "dp": 8, "micro_batch_size": 1, "global_batch_size": 64,
                                               **routing}})


def test_unset_routing_prices_and_keys_as_uniform() -> None:
    from costmodel.llm.compute import stage_ops_key
    from costmodel.llm.decompose import stage_ops

    unset, uniform, rr = _run(), _run(moe_routing="uniform"), _run(moe_routing="round_robin")
    assert unset.strategy.moe_routing is None
    assert stage_ops(unset, 0) == stage_ops(uniform, 0) != stage_ops(rr, 0)
    assert stage_ops_key(unset, 0) == stage_ops_key(uniform, 0)
