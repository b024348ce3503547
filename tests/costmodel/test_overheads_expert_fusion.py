"""The launch term sees the framework's expert fusion: eager per-expert kernels (NeMo Automodel) launch more."""

from __future__ import annotations

from dataclasses import replace

from costmodel.llm.overheads import kernels_per_layer
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.specs.framework import get_framework

MODEL = "gpt-oss-20b"  # biased experts: the case Automodel runs eager


def _run(fused: bool) -> RunSpec:
    g = get_gpu("h100-sxm5-80gb")
    strategy = Strategy(tp=1, pp=1, dp=8, ep=8, micro_batch_size=1, global_batch_size=16)
    framework = replace(get_framework("megatron-core"), moe_expert_fusion=fused)
    return RunSpec(model=get_model(MODEL), cluster=ClusterSpec(gpu=g, num_gpus=8, gpus_per_node=8),
                   strategy=strategy, seq_length=4096, framework=framework)


def test_unfused_experts_launch_more_kernels_per_moe_layer() -> None:
    fused, eager = kernels_per_layer(_run(True), moe=True), kernels_per_layer(_run(False), moe=True)
    assert eager[0] > fused[0] and eager[1] > fused[1]


def test_dense_layers_do_not_depend_on_expert_fusion() -> None:
    assert kernels_per_layer(_run(True), moe=False) == kernels_per_layer(_run(False), moe=False)
