"""Megatron-Bridge recipe overrides (YAML, nested as the recipe's ConfigContainer).

Targets Megatron-Bridge @067f987d (0.7.0, August 2026): ``scripts/training/run_recipe.py --model STEM``
builds the recipe, and ``megatron.bridge.training.utils.omegaconf_utils.process_config_with_overrides``
merges this file into it (unknown keys are skipped with a warning, so every key here is one the
ConfigContainer has).
"""

from __future__ import annotations

from typing import Any

import yaml

from costmodel.specs.layout import layout_of
from costmodel.specs.model import ModelSpec
from costmodel.specs.strategy import Strategy
from search.exporters._base import Exporter, catalog_match, header
from search.exporters._megatron import (
    CUDA_GRAPH_IMPL,
    DEFAULT_CKPT_FORMAT,
    FSDP_CKPT_FORMAT,
    FSDP_SHARDING,
    HSDP_STAGES,
    launch_env,
    megatron_refusal,
    uses_megatron_fsdp,
)
from search.space import SearchProblem

MIXED_PRECISION = {"bf16": "bf16_mixed", "fp16": "fp16_mixed"}
# FP8 presets by recipe: github.com/NVIDIA/NeMo @8cfedd72 nemo/collections/llm/recipes/precision/mixed_precision.py
# (bf16_with_fp8_mixed sets fp8_recipe = "delayed"; Megatron-Bridge keeps the preset names).
FP8_PRECISION = {"delayed": "bf16_with_fp8_mixed", "tensorwise": "bf16_with_fp8_current_scaling_mixed",
                 "mxfp8": "bf16_with_mxfp8_mixed", "blockwise": "bf16_with_fp8_subchannel_scaling_mixed"}


# Catalog model -> Megatron-Bridge recipe stem (``--model STEM``: ``STEM_pretrain_config`` in
# src/megatron/bridge/recipes/{llama,qwen,deepseek,gpt_oss}/__init__.py @067f987d).
RECIPES = {"llama2-7b": "llama2_7b", "llama3.1-8b": "llama31_8b", "llama3.1-70b": "llama31_70b",
           "llama3.1-405b": "llama31_405b", "qwen2.5-7b": "qwen25_7b", "qwen2.5-72b": "qwen25_72b",
           "qwen3-30b-a3b": "qwen3_30b_a3b", "qwen3-235b-a22b": "qwen3_235b_a22b", "deepseek-v2": "deepseek_v2",
           "deepseek-v3": "deepseek_v3", "gpt-oss-20b": "gpt_oss_20b", "gpt-oss-120b": "gpt_oss_120b"}
# ConfigContainer.comm_overlap is Optional (None in recipes without overlap): a plain mapping would
# be set as a dict, so the file instantiates the dataclass (omegaconf_utils._apply_overrides, _target_).
COMM_OVERLAP_TARGET = "megatron.bridge.training.comm_overlap.CommOverlapConfig"


def recipe_stem(model: ModelSpec) -> str | None:
    """The Megatron-Bridge recipe that builds ``model``'s architecture, or None."""
    name = catalog_match(model, RECIPES)
    return None if name is None else RECIPES[name]


def model_refusal(model: ModelSpec) -> tuple[str, object, str] | None:
    """Why no Megatron-Bridge recipe builds ``model``, or None."""
    if recipe_stem(model) is None:
        return "model", model.name, "one with a Megatron-Bridge recipe (" + ", ".join(RECIPES) + ")"
    return None


# The layout fields of costmodel.specs.layout.PipelineLayout -> Megatron-Core TransformerConfig keys.
LAYOUT_KEYS = {"layout_string": "pipeline_model_parallel_layout",
               "first_stage_layers": "num_layers_in_first_pipeline_stage",
               "last_stage_layers": "num_layers_in_last_pipeline_stage",
               "account_for_embedding": "account_for_embedding_in_pipeline_split",
               "account_for_loss": "account_for_loss_in_pipeline_split"}


def layout_keys(strategy: Strategy, problem: SearchProblem) -> dict[str, Any]:
    """The pipeline layout's TransformerConfig keys (only those it sets)."""
    layout = layout_of(problem.model, strategy)
    return {key: getattr(layout, name) for name, key in LAYOUT_KEYS.items()
            if getattr(layout, name) not in (None, False)}


class NeMoExporter(Exporter):
    """``megatron_bridge_overrides.yaml``: merged into the recipe its header names.

    Replace ``DATA_PREFIX`` (``dataset.blend``) with the data prefix, or pick a ``--dataset`` preset.
    """

    name = "nemo"
    filename = "megatron_bridge_overrides.yaml"
    framework = "megatron-bridge"

    def allowed(self, model: ModelSpec) -> dict[str, tuple[object, ...]]:
        self.refuse(model_refusal(model))
        return {}

    def refusal(self, strategy: Strategy, problem: SearchProblem) -> tuple[str, object, str] | None:
        return model_refusal(problem.model) or megatron_refusal(strategy)

    def carried(self, strategy: Strategy) -> frozenset[str]:
        return frozenset({"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "global_batch_size",
                          "sequence_parallel", "recompute", "zero_stage", "precision", "tp_comm_overlap",
                          "overlap_grad_reduce", "overlap_param_gather", "cp_comm_type", "etp",
                          "moe_token_dispatcher", "moe_capacity_factor", "moe_shared_expert_overlap",
                          "moe_a2a_overlap", "cuda_graphs"}
                         | ({"hsdp_shard_size"} if strategy.shard_replicas > 1 and strategy.zero_stage in HSDP_STAGES
                            else set()))

    def render(self, strategy: Strategy, problem: SearchProblem) -> str:
        s, fw = strategy, problem.framework
        model = {
            "tensor_model_parallel_size": s.tp,
            "pipeline_model_parallel_size": s.pp,
            "virtual_pipeline_model_parallel_size": s.vpp if s.vpp > 1 else None,
            "context_parallel_size": s.cp,
            "cp_comm_type": s.cp_comm_type if s.cp > 1 else None,  # TransformerConfig.cp_comm_type
            "expert_model_parallel_size": s.ep,
            "sequence_parallel": s.sequence_parallel,
            "seq_length": problem.seq_length,
            "recompute_granularity": None if s.recompute == "none" else s.recompute,
        }
        if problem.model.is_moe:
            dispatcher = s.moe_token_dispatcher or fw.moe_token_dispatcher
            model["moe_token_dispatcher_type"] = "flex" if dispatcher == "hybridep" else dispatcher
            if dispatcher in ("flex", "hybridep"):
                model["moe_flex_dispatcher_backend"] = "hybridep" if dispatcher == "hybridep" else "deepep"
            model["expert_tensor_parallel_size"] = s.expert_tensor_parallel_size
            if s.moe_capacity_factor is not None:
                model.update({"moe_expert_capacity_factor": s.moe_capacity_factor,
                              "moe_pad_expert_input_to_capacity": True})
            model["moe_shared_expert_overlap"] = bool(fw.moe_shared_expert_overlap if s.moe_shared_expert_overlap
                                                      is None else s.moe_shared_expert_overlap)
            model["overlap_moe_expert_parallel_comm"] = bool(fw.moe_a2a_overlap if s.moe_a2a_overlap is None
                                                             else s.moe_a2a_overlap)
        if s.recompute == "full":
            model.update({"recompute_method": "uniform", "recompute_num_layers": 1})
        if s.cuda_graphs != "none":  # TransformerConfig.cuda_graph_impl (Megatron-Core @d98e8a64)
            model["cuda_graph_impl"] = CUDA_GRAPH_IMPL[s.cuda_graphs]
        model.update(layout_keys(s, problem))
        ddp: dict[str, Any] = {
            "use_distributed_optimizer": s.zero_stage >= 1,
            "overlap_grad_reduce": s.overlap_grad_reduce,
            "overlap_param_gather": s.overlap_param_gather,
            "grad_reduce_in_fp32": fw.grad_reduce_dtype == "fp32",  # the gradient buffer the memory assumed
        }
        if s.cuda_graphs == "full_iteration":  # Megatron-LM training/arguments.py: check_for_nan_in_grad from
            ddp["check_for_nan_in_grad"] = False  # --no-check-for-nan-in-loss-and-grad, required by the graph
        if uses_megatron_fsdp(s):
            ddp.update({"use_megatron_fsdp": True, "data_parallel_sharding_strategy": FSDP_SHARDING[s.zero_stage]})
        if s.shard_replicas > 1 and s.zero_stage in HSDP_STAGES:  # DistributedDataParallelConfig (HSDP)
            ddp["num_distributed_optimizer_instances"] = s.shard_replicas
            if s.zero_stage == 3:
                ddp["outer_dp_sharding_strategy"] = "no_shard"
        data = {
            "model": model,
            "train": {"micro_batch_size": s.micro_batch_size, "global_batch_size": s.global_batch_size},
            "dataset": {"seq_length": problem.seq_length, "blend": [["DATA_PREFIX"], None]},
            "checkpoint": {"ckpt_format": FSDP_CKPT_FORMAT if uses_megatron_fsdp(s) else DEFAULT_CKPT_FORMAT},
            "ddp": ddp,
            "optimizer": {"use_distributed_optimizer": s.zero_stage >= 1},
            "mixed_precision": (FP8_PRECISION.get(fw.fp8_recipe, FP8_PRECISION["delayed"]) if s.precision == "fp8"
                                else MIXED_PRECISION[s.precision]),
            "comm_overlap": {"_target_": COMM_OVERLAP_TARGET, "tp_comm_overlap": s.tp_comm_overlap},
        }
        env = {k: v for k, v in launch_env(s, fw).items() if v is not None}
        if env:  # ConfigContainer.env_vars: set before the process groups start
            data["env_vars"] = env
        stem = recipe_stem(problem.model)
        nodes, per_node = problem.cluster.num_nodes, min(problem.num_gpus, problem.cluster.gpus_per_node)
        return (header(problem, s)
                + f"# Recipe {stem}_pretrain_config: torchrun --nnodes {nodes} --nproc-per-node {per_node} "
                  f"scripts/training/run_recipe.py --model {stem} --mode pretrain, with this file merged by\n"
                  f"# omegaconf_utils.process_config_with_overrides(recipe, config_filepath=...). "
                  f"Replace DATA_PREFIX.\n"
                + ("# Unset CUDA_DEVICE_MAX_CONNECTIONS (Megatron-FSDP refuses 1).\n"
                   if "CUDA_DEVICE_MAX_CONNECTIONS" in launch_env(s, fw) and not env else "")
                + yaml.safe_dump(data, sort_keys=False))
