"""DeepSpeed JSON config: batch sizes, ZeRO stage, precision and AutoTP degree (DeepSpeed 0.19.8)."""

from __future__ import annotations

import json

from costmodel.specs.model import ModelSpec
from costmodel.specs.strategy import Strategy
from search.exporters._base import Exporter
from search.space import SearchProblem


class DeepSpeedExporter(Exporter):
    """``deepspeed_config.json`` for ``deepspeed.initialize(config=...)``.

    DeepSpeed's JSON has no pipeline, context or expert degree (they are set in
    code: ``PipelineModule(num_stages=...)``, the sequence-parallel ``mpu``, the
    MoE layer's ``ep_size``); those come back as notes.
    """

    name = "deepspeed"
    filename = "deepspeed_config.json"
    framework = "deepspeed"

    def carried(self, strategy: Strategy) -> frozenset[str]:
        out = {"tp", "dp", "micro_batch_size", "global_batch_size", "zero_stage"}
        if strategy.precision != "fp8":
            out.add("precision")
        return frozenset(out)

    def allowed(self, model: ModelSpec) -> dict[str, tuple[object, ...]]:
        return {"hsdp_shard_size": (0,)}

    def refusal(self, strategy: Strategy, problem: SearchProblem) -> tuple[str, object, str] | None:
        s = strategy
        if s.pp > 1 and s.zero_stage >= 2:  # deepspeed/runtime/pipe/engine.py (0.19.8) asserts it
            return "zero_stage", s.zero_stage, "0 or 1 with pp > 1 (DeepSpeed's pipeline engine)"
        if s.cuda_graphs != "none":  # costmodel/catalog/frameworks/deepspeed.yaml cuda_graph_scopes
            return "cuda_graphs", s.cuda_graphs, "none (no training CUDA graphs are offered for DeepSpeed)"
        if s.shard_replicas > 1:  # DeepSpeedConfig rejects zero_optimization.mics_shard_size (0.19.8)
            return "hsdp_shard_size", s.hsdp_shard_size, "unset: DeepSpeed 0.19 removed MiCS hybrid sharding"
        return None

    def render(self, strategy: Strategy, problem: SearchProblem) -> str:
        s = strategy
        config = {
            "train_batch_size": s.global_batch_size,
            "train_micro_batch_size_per_gpu": s.micro_batch_size,
            "gradient_accumulation_steps": s.global_batch_size // (s.micro_batch_size * s.dp),
            "zero_optimization": {"stage": s.zero_stage, "overlap_comm": s.overlap_grad_reduce},
            "bf16": {"enabled": s.precision in ("bf16", "fp8")},
            "fp16": {"enabled": s.precision == "fp16"},
            "tensor_parallel": {"autotp_size": s.tp},
            # the gradient-reduce dtype the prediction assumed (DeepSpeed's default is the training dtype)
            "communication_data_type": problem.framework.grad_reduce_dtype if s.precision != "fp16" else "fp16",
            "gradient_clipping": 1.0,
        }
        if s.recompute != "none":
            config["activation_checkpointing"] = {"partition_activations": s.tp > 1,
                                                  "contiguous_memory_optimization": False}
        return json.dumps(config, indent=2) + "\n"
