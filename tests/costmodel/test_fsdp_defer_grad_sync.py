"""FSDP2 without pipelining that defers the gradient sync to the step's last micro-batch
(``Framework.fsdp_defer_grad_sync``; NeMo Automodel's ``backend.enable_fsdp_optimizations``)."""

from __future__ import annotations

import pytest

import parplan
from costmodel.llm.sharding import pipelined_fsdp2
from costmodel.specs.errors import SpecError
from costmodel.specs.framework import get_framework
from costmodel.specs.runspec import RunSpec, run_spec_from_mapping


def _run(defer: bool, global_batch: int = 64, pp: int = 1) -> RunSpec:
    return run_spec_from_mapping({
        "model": "qwen3-30b-a3b", "seq_length": 4096, "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
        "strategy": {"dp": 8 // pp, "pp": pp, "ep": 8 // pp, "micro_batch_size": 1,
                     "global_batch_size": global_batch, "zero_stage": 3, "recompute": "full",
                     "moe_token_dispatcher": "flex"},
        "framework": {"name": "automodel", "fsdp_defer_grad_sync": defer}})


def _dp(run: RunSpec) -> float:
    return parplan.predict(run).to_dict()["breakdown"]["dp_comm_exposed_s"]


def test_automodel_syncs_every_micro_batch_by_default() -> None:
    # BackendConfig.enable_fsdp_optimizations = False (nemo_automodel/components/moe/utils.py @01926a5c)
    assert get_framework("automodel").fsdp_defer_grad_sync is False


def test_deferral_makes_pp1_fsdp2_sync_once_per_step() -> None:
    assert pipelined_fsdp2(_run(True))
    assert not pipelined_fsdp2(_run(False))
    assert pipelined_fsdp2(_run(False, pp=2))  # torch.distributed.pipelining defers anyway


def test_deferred_sync_costs_no_more_than_one_per_micro_batch() -> None:
    every = _dp(_run(False))
    once = _dp(_run(True))
    assert once < every


def test_deferred_sync_does_not_grow_with_the_micro_batches() -> None:
    # gathered by the first forward and reduce-scattered after the last backward: more micro-batches add none
    small = _dp(_run(True, 64))
    large = _dp(_run(True, 128))
    assert large == pytest.approx(small, rel=1e-9)
    grows = _dp(_run(False, 128))
    assert grows > _dp(_run(False, 64))


def test_a_non_boolean_deferral_is_a_one_line_error_naming_the_field() -> None:
    with pytest.raises(SpecError, match="fsdp_defer_grad_sync"):
        _run("sometimes")  # type: ignore[arg-type]
