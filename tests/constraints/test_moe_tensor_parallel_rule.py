"""A framework whose MoE parallelizer has no tensor parallelism (NeMo Automodel:
components/moe/parallelizer.py asserts tp == 1 @01926a5c) rejects tp > 1 for MoE models only."""

from __future__ import annotations

from constraints.rules import framework_runs_parallelism
from costmodel.specs.framework import get_framework
from costmodel.specs.runspec import run_spec_from_mapping


def _run(model: str, framework: str, tp: int) -> object:
    return run_spec_from_mapping({"model": model, "seq_length": 4096, "framework": framework,
                                  "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
                                  "strategy": {"tp": tp, "dp": 8 // tp, "ep": 8 // tp if "qwen3" in model else 1,
                                               "micro_batch_size": 1, "global_batch_size": 64}})


def test_automodel_refuses_tensor_parallel_moe() -> None:
    assert not get_framework("automodel").supports_moe_tensor_parallel
    message = framework_runs_parallelism(_run("qwen3-30b-a3b", "automodel", 2))
    assert message is not None and "tp=2" in message and "automodel" in message


def test_automodel_keeps_tensor_parallel_for_dense_models_and_tp_1_for_moe() -> None:
    assert framework_runs_parallelism(_run("llama3.1-8b", "automodel", 2)) is None
    assert framework_runs_parallelism(_run("qwen3-30b-a3b", "automodel", 1)) is None


def test_megatron_core_runs_tensor_parallel_moe() -> None:
    assert framework_runs_parallelism(_run("qwen3-30b-a3b", "megatron-core", 2)) is None
