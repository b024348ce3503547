"""Megatron-LM ``pretrain_gpt.py`` arguments, one flag (with its value) per line."""

from __future__ import annotations

from costmodel.specs.framework import DEFAULT_FRAMEWORK, Framework, get_framework
from costmodel.specs.model import ModelSpec
from costmodel.specs.layout import layout_of
from costmodel.specs.strategy import Strategy
from search.exporters._base import Exporter, header
from search.space import SearchProblem

# ZeRO stage -> Megatron-Core sharding: the distributed optimizer shards optimizer states
# (ZeRO-1); Megatron-FSDP's --data-parallel-sharding-strategy adds gradients / parameters.
FSDP_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}
# Transformer Engine recipes Megatron-LM's --fp8-recipe accepts (TransformerConfig.fp8_recipe).
TE_FP8_RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise")
# ZeRO stages whose HSDP Megatron-LM expresses: --num-distributed-optimizer-instances (arguments.py)
# with the distributed optimizer, and with Megatron-FSDP plus --outer-dp-sharding-strategy no_shard.
HSDP_STAGES = (1, 3)


def framework_args(strategy: Strategy, model: ModelSpec, framework: Framework) -> list[list[str]]:
    """The flags of the framework behaviours the prediction assumed (gradient dtype, FP8 recipe, dispatcher).

    Written even where they equal Megatron-LM's defaults, so the launch does not depend on them.
    """
    args: list[list[str]] = []
    if strategy.precision != "fp16" and framework.grad_reduce_dtype == "bf16":
        args.append(["--grad-reduce-in-bf16"])
    if strategy.precision == "fp8" and framework.fp8_recipe in TE_FP8_RECIPES:
        args.append(["--fp8-recipe", framework.fp8_recipe])
        if framework.fp8_param_gather:
            args.append(["--fp8-param-gather"])
    if model.is_moe:
        args += moe_args(strategy, framework)
    return args


def moe_args(strategy: Strategy, framework: Framework) -> list[list[str]]:
    """Dispatcher (hybridep is flex with the HybridEP backend), expert TP, capacity and MoE overlaps."""
    s = strategy
    name = s.moe_token_dispatcher or framework.moe_token_dispatcher
    args = [["--moe-token-dispatcher-type", "flex" if name == "hybridep" else name],
            ["--expert-tensor-parallel-size", str(s.expert_tensor_parallel_size)]]
    if name in ("flex", "hybridep"):
        args.append(["--moe-flex-dispatcher-backend", "hybridep" if name == "hybridep" else "deepep"])
    if s.moe_capacity_factor is not None:  # the padded capacity the expert compute was timed at
        args += [["--moe-expert-capacity-factor", f"{s.moe_capacity_factor:g}"], ["--moe-pad-expert-input-to-capacity"]]
    if s.moe_shared_expert_overlap if s.moe_shared_expert_overlap is not None else framework.moe_shared_expert_overlap:
        args.append(["--moe-shared-expert-overlap"])
    if s.moe_a2a_overlap if s.moe_a2a_overlap is not None else framework.moe_a2a_overlap:
        args.append(["--overlap-moe-expert-parallel-comm"])
    return args


def hsdp_args(strategy: Strategy) -> list[list[str]]:
    """HSDP as Megatron-LM spells it: the replicas are distributed-optimizer instances (ZeRO-1), or
    Megatron-FSDP's outer data-parallel groups that replicate the shard (ZeRO-3, ``no_shard``)."""
    s = strategy
    if s.shard_replicas == 1 or s.zero_stage not in HSDP_STAGES:
        return []
    args = [["--num-distributed-optimizer-instances", str(s.shard_replicas)]]
    if s.zero_stage == 3:
        args.append(["--outer-dp-sharding-strategy", "no_shard"])
    return args


def strategy_args(strategy: Strategy, model: ModelSpec, framework: Framework | None = None) -> list[list[str]]:
    """The parallelism, batch, recompute, precision and framework arguments, grouped per flag."""
    s = strategy
    args = [
        ["--tensor-model-parallel-size", str(s.tp)],
        ["--pipeline-model-parallel-size", str(s.pp)],
        ["--context-parallel-size", str(s.cp)],
        ["--expert-model-parallel-size", str(s.ep)],
        ["--micro-batch-size", str(s.micro_batch_size)],
        ["--global-batch-size", str(s.global_batch_size)],
    ]
    args += pipeline_layout_args(s, model)
    if s.sequence_parallel:
        args.append(["--sequence-parallel"])
    if s.recompute != "none":
        args.append(["--recompute-granularity", s.recompute])
        if s.recompute == "full":
            args.append(["--recompute-method", "uniform"])
            args.append(["--recompute-num-layers", "1"])
    if s.zero_stage >= 1:
        args.append(["--use-distributed-optimizer"])
    if s.zero_stage >= 2:
        args.append(["--use-megatron-fsdp"])
        args.append(["--data-parallel-sharding-strategy", FSDP_SHARDING[s.zero_stage]])
    args += hsdp_args(s)
    if s.precision == "fp16":
        args.append(["--fp16"])
    else:
        args.append(["--bf16"])
    if s.precision == "fp8":
        args.append(["--fp8-format", "hybrid"])
    if s.flash_attention:
        args.append(["--attention-backend", "flash"])
    if s.cp > 1:  # passed verbatim to TE (megatron/core/transformer/transformer_config.py cp_comm_type)
        args.append(["--cp-comm-type", s.cp_comm_type])
    if s.tp_comm_overlap:
        args.append(["--tp-comm-overlap"])
    if s.overlap_grad_reduce:
        args.append(["--overlap-grad-reduce"])
    if s.overlap_param_gather and s.zero_stage >= 1:
        args.append(["--overlap-param-gather"])
    return args + framework_args(s, model, framework or get_framework(DEFAULT_FRAMEWORK))


# The layout fields of costmodel.specs.layout.PipelineLayout -> Megatron-LM arguments.py flags.
LAYOUT_FLAGS = {"first_stage_layers": "--decoder-first-pipeline-num-layers",
                "last_stage_layers": "--decoder-last-pipeline-num-layers"}
ACCOUNT_FLAGS = {"account_for_embedding": "--account-for-embedding-in-pipeline-split",
                 "account_for_loss": "--account-for-loss-in-pipeline-split"}


def pipeline_layout_args(strategy: Strategy, model: ModelSpec) -> list[list[str]]:
    """The pipeline layout (``costmodel.specs.layout``) as the one set of flags arguments.py accepts for it.

    A layout string carries vpp itself; with first/last-stage counts vpp must be given as
    ``--num-virtual-stages-per-pipeline-rank`` (arguments.py refuses the per-stage layer count there);
    otherwise ``--num-layers-per-virtual-pipeline-stage`` counts the accounted embedding/loss as layers.
    """
    layout = layout_of(model, strategy)
    if layout.layout_string is not None:
        return [["--pipeline-model-parallel-layout", layout.layout_string]]
    args: list[list[str]] = []
    uneven = layout.first_stage_layers is not None or layout.last_stage_layers is not None
    if strategy.vpp > 1 and uneven:
        args.append(["--num-virtual-stages-per-pipeline-rank", str(strategy.vpp)])
    elif strategy.vpp > 1:
        units = model.num_layers + layout.account_for_embedding + layout.account_for_loss
        args.append(["--num-layers-per-virtual-pipeline-stage", str(units // (strategy.pp * strategy.vpp))])
    for name, flag in LAYOUT_FLAGS.items():
        if getattr(layout, name) is not None:
            args.append([flag, str(getattr(layout, name))])
    args += [[flag] for name, flag in ACCOUNT_FLAGS.items() if getattr(layout, name)]
    return args


def model_args(model: ModelSpec, seq_length: int) -> list[list[str]]:
    """Architecture arguments of ``model`` (the run's shape, so the command is complete)."""
    args = [
        ["--num-layers", str(model.num_layers)],
        ["--hidden-size", str(model.hidden_size)],
        ["--ffn-hidden-size", str(model.ffn_hidden_size)],
        ["--num-attention-heads", str(model.num_attention_heads)],
        ["--seq-length", str(seq_length)],
        ["--max-position-embeddings", str(max(seq_length, model.max_position_embeddings or 0))],
        ["--normalization", "RMSNorm" if model.normalization == "rmsnorm" else "LayerNorm"],
        ["--position-embedding-type", "rope" if model.position_embedding == "rope" else "learned_absolute"],
    ]
    if model.num_query_groups != model.num_attention_heads:
        args += [["--group-query-attention"], ["--num-query-groups", str(model.num_query_groups)]]
    if model.activation == "swiglu":
        args.append(["--swiglu"])
    if not model.tie_embeddings:
        args.append(["--untie-embeddings-and-output-weights"])
    if not model.add_bias_linear:
        args.append(["--disable-bias-linear"])
    if model.is_moe:
        args += [["--num-experts", str(model.num_experts)], ["--moe-router-topk", str(model.moe_router_topk)]]
        if model.moe_ffn_hidden_size != model.ffn_hidden_size:
            args.append(["--moe-ffn-hidden-size", str(model.moe_ffn_hidden_size)])
    return args


def megatron_argv(strategy: Strategy, problem: SearchProblem) -> list[list[str]]:
    """Every argument of the recommended ``pretrain_gpt.py`` command, grouped per flag."""
    return strategy_args(strategy, problem.model, problem.framework) + model_args(problem.model, problem.seq_length)


class MegatronExporter(Exporter):
    """``megatron_args.txt``: pass as ``pretrain_gpt.py $(grep -v '^#' megatron_args.txt)``."""

    name = "megatron"
    filename = "megatron_args.txt"

    def carried(self, strategy: Strategy) -> frozenset[str]:
        return frozenset({"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "global_batch_size",
                          "sequence_parallel", "recompute", "zero_stage", "precision", "flash_attention",
                          "tp_comm_overlap", "overlap_grad_reduce", "cp_comm_type", "etp", "moe_token_dispatcher",
                          "moe_capacity_factor", "moe_shared_expert_overlap", "moe_a2a_overlap"}
                         | ({"overlap_param_gather"} if strategy.zero_stage >= 1 else set())
                         | ({"hsdp_shard_size"} if strategy.shard_replicas > 1 and strategy.zero_stage in HSDP_STAGES
                            else set()))

    def render(self, strategy: Strategy, problem: SearchProblem) -> str:
        lines = [" ".join(group) for group in megatron_argv(strategy, problem)]
        return (header(problem, strategy)
                + f"# Launch {problem.num_gpus} ranks (dp={strategy.dp} is implied by the world size).\n"
                + ("# The pipeline layout holds shell glob characters: run `set -f` before expanding this file.\n"
                   if strategy.pipeline_layout is not None else "")
                + "\n".join(lines) + "\n")
