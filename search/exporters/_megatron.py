"""Megatron-LM ``pretrain_gpt.py`` arguments, one flag (with its value) per line."""

from __future__ import annotations

from costmodel.specs.framework import DEFAULT_FRAMEWORK, Framework, get_framework
from costmodel.specs.layout import layout_of
from costmodel.specs.model import ModelSpec
from costmodel.specs.strategy import Strategy
from search.exporters._base import Exporter, header
from search.space import SearchProblem

# ZeRO stage -> Megatron-Core sharding: the distributed optimizer shards optimizer states
# (ZeRO-1); Megatron-FSDP's --data-parallel-sharding-strategy adds gradients / parameters.
FSDP_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}
# Megatron-FSDP saves only in its own DTensor format: arguments.py validate_args asserts
# ckpt_format == "fsdp_dtensor" with --use-megatron-fsdp (Megatron-LM @d98e8a64, lines 1169-1170).
FSDP_CKPT_FORMAT = "fsdp_dtensor"
DEFAULT_CKPT_FORMAT = "torch_dist"  # Megatron-LM's default --ckpt-format
# What the data and tokenizer flags hold until the user fills them in (the sbatch export reads
# them from $DATA_PATH and $TOKENIZER_MODEL instead).
DATA_PLACEHOLDERS = [["--data-path", "DATA_PREFIX"], ["--tokenizer-type", "HuggingFaceTokenizer"],
                     ["--tokenizer-model", "TOKENIZER_MODEL"]]
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


def uses_megatron_fsdp(strategy: Strategy) -> bool:
    """ZeRO-2/3 run on Megatron-FSDP (``--use-megatron-fsdp``); ZeRO-1 is the distributed optimizer."""
    return strategy.zero_stage >= 2


def launch_env(strategy: Strategy, framework: Framework | None = None) -> dict[str, str | None]:
    """Environment variables the launch needs: a value to export, or None to unset.

    Megatron-LM's validate_args (@d98e8a64, lines 1166 and 1450-1479): with tp or cp > 1 on
    Hopper and earlier it asserts ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (one hardware queue keeps the
    TP/CP communication kernels ahead of the GEMMs they overlap), except under Megatron-FSDP, which
    asserts the opposite, and with the MoE all-to-all overlap, which wants more queues (a warning).
    """
    fw = framework or get_framework(DEFAULT_FRAMEWORK)
    if uses_megatron_fsdp(strategy):
        return {"CUDA_DEVICE_MAX_CONNECTIONS": None}
    a2a_overlap = strategy.moe_a2a_overlap if strategy.moe_a2a_overlap is not None else fw.moe_a2a_overlap
    if (strategy.tp > 1 or strategy.cp > 1) and not a2a_overlap:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    return {}


def gradient_accumulation_steps(strategy: Strategy) -> int:
    """Micro-batches per data-parallel rank and step, as Megatron-LM derives them from the batch flags."""
    return strategy.global_batch_size // (strategy.micro_batch_size * strategy.dp)


def megatron_refusal(strategy: Strategy) -> tuple[str, object, str] | None:
    """The first knob Megatron-LM's validate_args refuses for ``strategy`` (Megatron-LM @d98e8a64)."""
    s = strategy
    if s.tp_comm_overlap and not s.sequence_parallel:  # arguments.py 1178-1179
        return "tp_comm_overlap", True, "false without sequence_parallel (Megatron-LM requires it)"
    if s.overlap_param_gather and s.zero_stage >= 1 and not s.overlap_grad_reduce:  # arguments.py 1024-1029
        return "overlap_param_gather", True, "false without overlap_grad_reduce (Megatron-LM requires it)"
    return None


# Strategy.cuda_graphs -> --cuda-graph-impl (Megatron-LM @d98e8a64 docs/user-guide/features/cuda_graph.md):
# per-layer graphs through Transformer Engine's make_graphed_callables (what NeMo / Megatron-Bridge run),
# --cuda-graph-modules left unset so the whole layer is captured.
CUDA_GRAPH_IMPL = {"layers": "transformer_engine", "full_iteration": "full_iteration"}


def cuda_graph_args(strategy: Strategy) -> list[list[str]]:
    """``--cuda-graph-impl``; full-iteration graphs also need ``--no-check-for-nan-in-loss-and-grad``.

    megatron/training/arguments.py @d98e8a64 validate_args: "--no-check-for-nan-in-loss-and-grad should be
    set with --cuda-graph-impl=full_iteration for training."
    """
    impl = CUDA_GRAPH_IMPL.get(strategy.cuda_graphs)
    if impl is None:
        return []
    args = [["--cuda-graph-impl", impl]]
    if impl == "full_iteration":
        args.append(["--no-check-for-nan-in-loss-and-grad"])
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
    if uses_megatron_fsdp(s):
        args.append(["--use-megatron-fsdp"])
        args.append(["--data-parallel-sharding-strategy", FSDP_SHARDING[s.zero_stage]])
    args.append(["--ckpt-format", FSDP_CKPT_FORMAT if uses_megatron_fsdp(s) else DEFAULT_CKPT_FORMAT])
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
    args += cuda_graph_args(s)
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
    if model.head_dim is not None and model.head_dim * model.num_attention_heads != model.hidden_size:
        args.append(["--kv-channels", str(model.head_dim)])
    if model.is_mla:  # DeepSeek's multi-latent attention (TransformerConfig / MLATransformerConfig)
        args += [["--multi-latent-attention"], ["--kv-lora-rank", str(model.kv_lora_rank)],
                 ["--qk-head-dim", str(model.qk_nope_head_dim)], ["--qk-pos-emb-head-dim", str(model.qk_rope_head_dim)],
                 ["--v-head-dim", str(model.v_head_dim or model.qk_nope_head_dim)]]
        if model.q_lora_rank:
            args.append(["--q-lora-rank", str(model.q_lora_rank)])
    if model.qk_norm:
        args.append(["--qk-layernorm"])
    if model.add_qkv_bias:
        args.append(["--add-qkv-bias"])
    if not model.dropout:
        args += [["--attention-dropout", "0"], ["--hidden-dropout", "0"]]
    if model.sliding_window:  # window (left, right); every full_attention_every-th layer attends fully
        args.append(["--window-size", f"{model.sliding_window},0"])
        if model.full_attention_every:
            args.append(["--window-attn-skip-freq", str(model.full_attention_every)])
    if model.mtp_num_layers:
        args.append(["--mtp-num-layers", str(model.mtp_num_layers)])
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
        if model.num_shared_experts:
            args.append(["--moe-shared-expert-intermediate-size",
                         str(model.num_shared_experts * model.moe_ffn_hidden_size)])
        if model.first_k_dense_layers:  # dense MLPs first (DeepSeek's first_k_dense_replace)
            k = model.first_k_dense_layers
            args.append(["--moe-layer-freq", f"([0]*{k}+[1]*{model.num_layers - k})"])
    return args


def megatron_argv(strategy: Strategy, problem: SearchProblem) -> list[list[str]]:
    """Every argument of the recommended ``pretrain_gpt.py`` command, grouped per flag."""
    return strategy_args(strategy, problem.model, problem.framework) + model_args(problem.model, problem.seq_length)


def env_comment(env: dict[str, str | None]) -> str:
    """The environment a Megatron-LM launch needs, as header comment lines."""
    return "".join(f"# Required environment: export {k}={v}\n" if v is not None else
                   f"# Required environment: unset {k} (Megatron-FSDP refuses {k}=1)\n" for k, v in env.items())


class MegatronExporter(Exporter):
    """``megatron_args.txt``: pass as ``pretrain_gpt.py $(grep -v '^#' megatron_args.txt)``.

    Replace ``DATA_PREFIX`` and ``TOKENIZER_MODEL``, and set the environment its header names.
    """

    name = "megatron"
    filename = "megatron_args.txt"
    framework = "megatron-core"

    def refusal(self, strategy: Strategy, problem: SearchProblem) -> tuple[str, object, str] | None:
        return megatron_refusal(strategy)

    def carried(self, strategy: Strategy) -> frozenset[str]:
        return frozenset({"tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "global_batch_size",
                          "sequence_parallel", "recompute", "zero_stage", "precision", "flash_attention",
                          "tp_comm_overlap", "overlap_grad_reduce", "cp_comm_type", "etp", "moe_token_dispatcher",
                          "moe_capacity_factor", "moe_shared_expert_overlap", "moe_a2a_overlap", "cuda_graphs"}
                         | ({"overlap_param_gather"} if strategy.zero_stage >= 1 else set())
                         | ({"hsdp_shard_size"} if strategy.shard_replicas > 1 and strategy.zero_stage in HSDP_STAGES
                            else set()))

    def render(self, strategy: Strategy, problem: SearchProblem) -> str:
        lines = [" ".join(group) for group in megatron_argv(strategy, problem) + DATA_PLACEHOLDERS]
        return (header(problem, strategy)
                + f"# Launch {problem.num_gpus} ranks (dp={strategy.dp} is implied by the world size); "
                  f"{gradient_accumulation_steps(strategy)} micro-batches of {strategy.micro_batch_size} "
                  f"per rank and step.\n"
                + env_comment(launch_env(strategy, problem.framework))
                + "# Replace DATA_PREFIX and TOKENIZER_MODEL with your data prefix and tokenizer.\n"
                + ("# The pipeline layout holds shell glob characters: run `set -f` before expanding this file.\n"
                   if strategy.pipeline_layout is not None else "")
                + "\n".join(lines) + "\n")
