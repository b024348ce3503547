"""Legality rules a Megatron-style launch enforces, each a pure function of a run spec.

The ``framework_*`` rules read the run's ``Framework`` (costmodel/specs/framework.py):
combinations its implementation refuses are violations naming the framework, so the
search never proposes them.

Every rule returns ``None`` when the run obeys it, or a sentence that names the
numbers. Add a rule by writing a function here, declaring the strategy fields it reads with
``@reads(...)`` (a table check refuses a rule that reads an undeclared one), and listing it in ``RULES``.
"""

from __future__ import annotations

from collections.abc import Callable

from costmodel.specs.framework import BF16_REMAINDER
from costmodel.specs.layout import layout_of
from costmodel.specs.runspec import RunSpec
from costmodel.specs.reads import LAYOUT_FIELDS, reads

Rule = Callable[[RunSpec], "str | None"]
"""A rule; each declares the strategy fields it reads (``reads``), so a table of strategies is checked once
per distinct combination of them (``constraints.table``)."""
MICROBATCHES = ("global_batch_size", "micro_batch_size", "dp")  # what Strategy.num_microbatches reads


@reads("tp", "pp", "cp", "dp")
def world_size_matches(run: RunSpec) -> str | None:
    s, n = run.strategy, run.cluster.num_gpus
    if s.world_size != n:
        return (f"tp*pp*cp*dp = {s.tp}*{s.pp}*{s.cp}*{s.dp} = {s.world_size} must equal "
                f"num_gpus={n}")
    return None


@reads("tp")
def tp_divides_heads(run: RunSpec) -> str | None:
    tp, heads = run.strategy.tp, run.model.num_attention_heads
    if heads % tp:
        return f"tp={tp} must divide num_attention_heads={heads}"
    return None


@reads("tp")
def tp_fits_kv_heads(run: RunSpec) -> str | None:
    """KV heads split over tp, or replicate when tp exceeds them (Megatron-LM)."""
    tp, kv = run.strategy.tp, run.model.num_query_groups
    assert kv is not None
    if kv % tp and tp % kv:
        return (f"tp={tp} must divide num_query_groups={kv} or be a multiple of it "
                f"(KV heads replicate when tp exceeds them)")
    return None


@reads("tp")
def tp_divides_ffn(run: RunSpec) -> str | None:
    tp, model = run.strategy.tp, run.model
    for name in ("ffn_hidden_size", "moe_ffn_hidden_size"):
        size = getattr(model, name)
        if name == "moe_ffn_hidden_size" and not model.is_moe:
            continue
        if size % tp:
            return f"tp={tp} must divide {name}={size}"
    return None


@reads("tp", "allow_tp_across_nodes")
def tp_within_nvlink_domain(run: RunSpec) -> str | None:
    tp, domain = run.strategy.tp, run.cluster.gpu.nvlink_domain_size
    if tp > domain and not run.strategy.allow_tp_across_nodes:
        return (f"tp={tp} exceeds the NVLink domain of {domain} GPUs of {run.cluster.gpu.name} "
                f"(set allow_tp_across_nodes: true to allow it)")
    if tp > 1 and domain % tp and tp <= domain and not run.strategy.allow_tp_across_nodes:
        return f"tp={tp} must divide the NVLink domain size {domain} so that no TP group straddles two domains"
    return None


@reads(*LAYOUT_FIELDS)
def pipeline_layout_builds(run: RunSpec) -> str | None:
    """The pipeline layout (``costmodel.specs.layout``) is one Megatron-Core builds for this model.

    Only what Megatron-Core itself refuses: an explicit layout may leave stages empty or hold more
    stages than layers (``"E||t|L"``).
    """
    problems = layout_of(run.model, run.strategy).problems
    return "; ".join(problems) if problems else None


@reads("micro_batch_size", "dp", "global_batch_size")
def batch_divisible(run: RunSpec) -> str | None:
    s = run.strategy
    unit = s.micro_batch_size * s.dp
    if s.global_batch_size % unit:
        return (f"global_batch_size={s.global_batch_size} must be divisible by "
                f"micro_batch_size*dp = {s.micro_batch_size}*{s.dp} = {unit}")
    return None


@reads("vpp", "pp", *MICROBATCHES)
def interleaving_needs_pipeline(run: RunSpec) -> str | None:
    s = run.strategy
    if s.vpp > 1 and s.pp == 1:
        return f"vpp={s.vpp} (interleaved 1F1B) needs pp > 1, got pp=1"
    if s.vpp > 1 and s.num_microbatches % s.pp:
        return (f"interleaved 1F1B needs the number of micro-batches ({s.num_microbatches}) "
                f"to be divisible by pp={s.pp}")
    return None


@reads("pipeline_flushes", "pp", "vpp", *MICROBATCHES)
def pipeline_flushes_split_the_batch(run: RunSpec) -> str | None:
    """Each schedule run (``strategy.pipeline_flushes``) takes an equal share of the micro-batches.

    PyTorch pipelining steps the schedule once per local batch of ``n_microbatches`` (torch
    ``torch/distributed/pipelining/schedules.py`` ``PipelineSchedule.step`` splits the batch it is given
    into that many chunks), so the flushes split the step's micro-batches evenly; with interleaving each
    flush's share must still divide by pp, as for one flush.
    """
    s = run.strategy
    flushes, m = s.pipeline_flushes, s.num_microbatches
    if flushes == 1 or s.pp == 1:  # without a pipeline there is no schedule to flush (the cost model ignores it)
        return None
    if m % flushes:
        return (f"pipeline_flushes={flushes} must divide the number of micro-batches "
                f"(global_batch_size / (micro_batch_size*dp) = {m})")
    if s.vpp > 1 and (m // flushes) % s.pp:
        return (f"interleaved 1F1B needs each flush's micro-batches ({m} / {flushes} = {m // flushes}) "
                f"to be divisible by pp={s.pp}")
    return None


@reads("sequence_parallel", "tp", "cp")
def sequence_parallel_needs_tp(run: RunSpec) -> str | None:
    s = run.strategy
    if s.sequence_parallel and s.tp == 1:
        return "sequence_parallel needs tp > 1, got tp=1"
    if s.sequence_parallel and (run.seq_length // s.cp) % s.tp:
        return (f"sequence_parallel needs the per-rank sequence seq_length/cp = {run.seq_length // s.cp} "
                f"to be divisible by tp={s.tp}")
    return None


@reads("cp")
def cp_divides_sequence(run: RunSpec) -> str | None:
    cp, seq = run.strategy.cp, run.seq_length
    if cp > 1 and seq % (2 * cp):
        return (f"cp={cp} needs seq_length={seq} divisible by 2*cp = {2 * cp} "
                f"(causal load balancing splits the sequence in 2*cp chunks)")
    return None


@reads("cp", "cp_comm_type", "tp")
def ulysses_divides_heads(run: RunSpec) -> str | None:
    """``cp_comm_type: a2a`` shards heads over cp after tp: both head counts must divide by tp * cp.

    Transformer Engine asserts ``num_heads % cp_size == 0`` for Q, K and V of the rank's
    (tensor-parallel) heads (context_parallel.py AttnFuncWithCPAndQKVOA2A.forward, @d0067d0d).
    """
    s, m = run.strategy, run.model
    if s.cp == 1 or s.cp_comm_type != "a2a":
        return None
    for name, heads in (("num_attention_heads", m.num_attention_heads), ("num_query_groups", m.num_query_groups)):
        if heads % (s.tp * s.cp):
            return (f"cp_comm_type=a2a needs {name}={heads} divisible by tp*cp = {s.tp}*{s.cp} = {s.tp * s.cp} "
                    f"(Ulysses splits each rank's heads over cp)")
    return None


@reads("hsdp_shard_size", "dp", "cp", "zero_stage")
def hsdp_shard_fits(run: RunSpec) -> str | None:
    """``hsdp_shard_size`` shards ZeRO states over whole cp blocks of dp ranks: replicas divide dp.

    Megatron-LM (arguments.py) requires data_parallel_size % num_distributed_optimizer_instances == 0;
    torchtitan shards over dp_shard * cp (ParallelDims: dp_replicate * dp_shard * cp * tp * pp = world).
    """
    s = run.strategy
    shard = s.hsdp_shard_size
    if shard == 0:
        return None
    ranks = s.dp * s.cp
    if shard < 2 or ranks % shard or s.dp % (ranks // shard):
        return (f"hsdp_shard_size={shard} needs to be >= 2 and cp times a divisor of dp (dp={s.dp}, cp={s.cp}), "
                f"so that the dp*cp = {ranks} ranks split into whole replicas")
    if s.zero_stage == 0:
        return f"hsdp_shard_size={shard} needs zero_stage >= 1 (zero_stage 0 shards nothing to replicate)"
    return None


@reads("ep", "etp", "tp", "dp", "cp")
def expert_parallel_fits(run: RunSpec) -> str | None:
    s, model = run.strategy, run.model
    if s.ep == 1:
        return None
    if not model.is_moe:
        return f"ep={s.ep} needs a mixture-of-experts model; {model.name} is dense"
    if model.num_experts % s.ep:
        return f"ep={s.ep} must divide num_experts={model.num_experts}"
    etp = s.expert_tensor_parallel_size
    if etp == s.tp and (s.dp * s.cp) % s.ep:
        return f"ep={s.ep} must divide dp*cp = {s.dp}*{s.cp} = {s.dp * s.cp}"
    if (s.tp * s.dp * s.cp) % (etp * s.ep):
        return (f"etp*ep = {etp}*{s.ep} must divide tp*dp*cp = {s.tp}*{s.dp}*{s.cp} = {s.tp * s.dp * s.cp} "
                f"(Megatron-Core MoE parallel folding)")
    return None


@reads("etp")
def expert_tensor_parallel_fits(run: RunSpec) -> str | None:
    """Expert TP splits the expert FFN evenly; it is an MoE knob (Megatron-Core parallel folding)."""
    s, model = run.strategy, run.model
    if s.etp is None:
        return None
    if not model.is_moe:
        return f"etp={s.etp} needs a mixture-of-experts model; {model.name} is dense"
    if model.moe_ffn_hidden_size % s.etp:  # type: ignore[operator]
        return f"etp={s.etp} must divide moe_ffn_hidden_size={model.moe_ffn_hidden_size}"
    return None


@reads("moe_token_dispatcher", "moe_shared_expert_overlap", "moe_a2a_overlap", "ep", "recompute", "pp", "vpp")
def moe_overlap_supported(run: RunSpec) -> str | None:
    """Megatron-Core's conditions on the MoE overlaps (transformer_config.py __post_init__)."""
    s = run.strategy
    name = s.moe_token_dispatcher or run.framework.moe_token_dispatcher
    if s.moe_shared_expert_overlap and name == "allgather":
        return "moe_shared_expert_overlap needs the alltoall or flex token dispatcher, got allgather"
    if not s.moe_a2a_overlap:
        return None
    if s.ep == 1:
        return "moe_a2a_overlap (--overlap-moe-expert-parallel-comm) needs ep > 1"
    if name == "allgather":
        return "moe_a2a_overlap needs the alltoall or flex token dispatcher, got allgather"
    if s.recompute == "full":
        return "moe_a2a_overlap cannot be combined with recompute=full"
    if s.pp > 1 and s.vpp == 1:
        return f"moe_a2a_overlap with pp={s.pp} needs interleaving (vpp > 1)"
    if s.moe_shared_expert_overlap:
        return "moe_a2a_overlap and moe_shared_expert_overlap cannot both be on"
    return None


@reads("zero_stage", "pp")
def framework_runs_zero_stage(run: RunSpec) -> str | None:
    """The framework implements this ZeRO stage, also together with pipeline parallelism."""
    fw, s = run.framework, run.strategy
    if s.zero_stage not in fw.zero_stages:
        return (f"zero_stage={s.zero_stage} is not offered by {fw.display_name} (framework {fw.name} runs "
                f"ZeRO stages {', '.join(map(str, fw.zero_stages))})")
    if s.pp > 1 and s.zero_stage not in fw.zero_stages_with_pp:
        return (f"zero_stage={s.zero_stage} with pp={s.pp} is refused by {fw.display_name} (framework {fw.name} "
                f"runs ZeRO stages {', '.join(map(str, fw.zero_stages_with_pp))} with pipeline parallelism)")
    return None


@reads("hsdp_shard_size", "zero_stage")
def framework_runs_hsdp(run: RunSpec) -> str | None:
    """The framework implements hybrid sharding (``hsdp_shard_size``) at this ZeRO stage."""
    fw, s = run.framework, run.strategy
    if s.hsdp_shard_size == 0 or s.zero_stage == 0 or s.zero_stage in fw.hsdp_zero_stages:
        return None
    offered = ", ".join(map(str, fw.hsdp_zero_stages)) or "none"
    return (f"hsdp_shard_size with zero_stage={s.zero_stage} is not offered by {fw.display_name} "
            f"(framework {fw.name} shards hybrid at ZeRO stages: {offered})")


@reads("cp", "cp_comm_type")
def framework_runs_cp_comm_type(run: RunSpec) -> str | None:
    """The framework implements this context-parallel exchange (``Framework.cp_comm_types``)."""
    fw, s = run.framework, run.strategy
    if s.cp == 1 or s.cp_comm_type in fw.cp_comm_types:
        return None
    return (f"cp_comm_type={s.cp_comm_type} is not offered by {fw.display_name} (framework {fw.name} runs "
            f"{', '.join(fw.cp_comm_types)})")


@reads("precision")
def framework_runs_precision(run: RunSpec) -> str | None:
    """The precision exists in the framework, and the framework's reduce and master dtypes go with it.

    An fp16 gradient reduce is Megatron-LM 2021-22's for fp16 parameters; a bf16 run there reduces in
    fp32 (megatron/arguments.py @50a4b5fa: "bfloat16 requires gradient accumulation and all-reduce to be
    done in fp32"). Apex's parameter remainders need bf16 parameters (distributed_fused_adam.py @f3f04924
    L665 "requires BF16 params and FP32 optimizer state").
    """
    fw, precision = run.framework, run.strategy.precision
    if precision == "fp16" and not fw.supports_fp16:
        return f"precision=fp16 is not supported by {fw.display_name} (framework {fw.name}: bf16 or fp8)"
    if precision == "fp8" and not fw.supports_fp8:
        return f"precision=fp8 is not supported by {fw.display_name} (framework {fw.name} has no FP8 GEMMs)"
    if fw.grad_reduce_dtype == "fp16" and precision != "fp16":
        return (f"framework.grad_reduce_dtype=fp16 (framework {fw.name}) needs precision=fp16, got {precision} "
                f"(Megatron-LM reduces bf16 gradients in fp32: set framework.grad_reduce_dtype: fp32)")
    if fw.master_weights_dtype == BF16_REMAINDER and precision == "fp16":
        return (f"framework.master_weights_dtype={BF16_REMAINDER} (framework {fw.name}) needs bf16 parameters, "
                f"got precision=fp16 (set framework.master_weights_dtype: fp32)")
    return None


@reads("flash_attention", "overlap_grad_reduce")
def framework_runs_attention_and_overlap(run: RunSpec) -> str | None:
    """Flash attention and the overlapped gradient reduce exist in the framework (Megatron-LM 2021-22: neither)."""
    fw, s = run.framework, run.strategy
    if s.flash_attention and not fw.supports_flash_attention:
        return (f"flash_attention is not implemented by {fw.display_name} (framework {fw.name}: "
                f"set flash_attention: false)")
    if s.overlap_grad_reduce and not fw.supports_grad_reduce_overlap:
        return (f"overlap_grad_reduce is not implemented by {fw.display_name} (framework {fw.name} reduces "
                f"gradients after the backward: set overlap_grad_reduce: false)")
    return None


@reads("tp", "sequence_parallel", "cp")
def framework_runs_parallelism(run: RunSpec) -> str | None:
    """Sequence, context and (for MoE models) tensor parallelism exist in the framework."""
    fw, s = run.framework, run.strategy
    if s.tp > 1 and run.model.is_moe and not fw.supports_moe_tensor_parallel:
        return f"tp={s.tp} is not implemented by {fw.display_name} for MoE models (framework {fw.name}: set tp: 1)"
    if s.sequence_parallel and not fw.supports_sequence_parallel:
        return f"sequence_parallel is not implemented by {fw.display_name} (framework {fw.name})"
    if s.cp > 1 and not fw.supports_context_parallel:
        return f"cp={s.cp} is not implemented by {fw.display_name} (framework {fw.name} has no context parallelism)"
    return None


@reads("recompute")
def framework_runs_recompute(run: RunSpec) -> str | None:
    """The recompute mode exists in the framework (``Framework.recompute_modes``)."""
    fw, s = run.framework, run.strategy
    if s.recompute in fw.recompute_modes:
        return None
    return (f"recompute={s.recompute} is not offered by {fw.display_name} (framework {fw.name} runs "
            f"{', '.join(fw.recompute_modes)})")


@reads("tp_comm_overlap", "sequence_parallel")
def framework_runs_tp_comm_overlap(run: RunSpec) -> str | None:
    """Userbuffer TP overlap exists in the framework and, as in Megatron-LM, needs sequence parallelism."""
    fw, s = run.framework, run.strategy
    if not s.tp_comm_overlap:
        return None
    if not fw.supports_tp_comm_overlap:
        return f"tp_comm_overlap is not implemented by {fw.display_name} (framework {fw.name})"
    # Megatron-LM arguments.py: assert args.sequence_parallel when --tp-comm-overlap
    if not s.sequence_parallel:
        return f"tp_comm_overlap needs sequence_parallel in {fw.display_name} (framework {fw.name})"
    return None


@reads("cuda_graphs", "recompute", "moe_capacity_factor")
def framework_runs_cuda_graphs(run: RunSpec) -> str | None:
    """The framework captures the CUDA-graph scope, at a shape Megatron-Core captures.

    Megatron-LM @d98e8a64 megatron/core/transformer/transformer_config.py ``__post_init__``: "full recompute
    is only supported with full iteration CUDA graph"; a whole MoE layer is captured only with drop-and-pad
    ("moe cuda graph is only supported with drop-padding MoE"; docs/user-guide/features/cuda_graph.md: the
    default whole-layer capture is "not working for MoE dynamic shapes", and full-iteration graphs of MoE
    models need the dev branch's paged stash). Capturing only attention and router is not modelled.
    """
    fw, s = run.framework, run.strategy
    scope = s.cuda_graphs
    if scope == "none":
        return None
    if scope not in fw.cuda_graph_scopes:
        runs = ", ".join(fw.cuda_graph_scopes) or "none"
        return f"cuda_graphs={scope} is not offered by {fw.display_name} (framework {fw.name} captures {runs})"
    if scope == "layers" and s.recompute == "full":
        return "cuda_graphs=layers with recompute=full: Megatron-Core graphs full recompute only as full_iteration"
    if run.model.is_moe and (scope == "full_iteration" or s.moe_capacity_factor is None):
        return (f"cuda_graphs={scope} captures a whole MoE layer only with drop-and-pad (set "
                f"moe_capacity_factor; full_iteration needs Megatron-Core's dev paged stash)")
    return None


@reads("pipeline_schedule", "pp", "vpp", *MICROBATCHES)
def pipeline_schedule_runs(run: RunSpec) -> str | None:
    """The framework implements the named schedule (``Framework.pipeline_schedules``), at a shape it runs.

    DualPipe: github.com/deepseek-ai/DualPipe dualpipe/dualpipe.py ``DualPipe.step`` asserts
    ``num_ranks % 2 == 0`` and ``num_chunks % 2 == 0 and num_chunks >= num_ranks * 2`` (the
    micro-batches split half per direction); each rank holds exactly two stages (arXiv 2412.19437
    Sec. 3.2.1), so no further interleaving (vpp 1).
    """
    fw, s = run.framework, run.strategy
    name = s.pipeline_schedule
    if name is None:
        return None
    if name not in fw.pipeline_schedules:
        return (f"pipeline_schedule={name} is not offered by {fw.display_name} (framework {fw.name} runs "
                f"{', '.join(fw.pipeline_schedules)})")
    if name != "dualpipe":
        return None
    m = s.num_microbatches
    if s.pp < 2 or s.pp % 2:
        return f"pipeline_schedule=dualpipe needs an even pp >= 2, got pp={s.pp}"
    if s.vpp != 1:
        return f"pipeline_schedule=dualpipe holds two stages per rank itself and needs vpp=1, got vpp={s.vpp}"
    if m % 2 or m < 2 * s.pp:
        return (f"pipeline_schedule=dualpipe needs an even number of micro-batches >= 2*pp = {2 * s.pp}, "
                f"got {m}")
    return None


@reads("precision")
def precision_supported(run: RunSpec) -> str | None:
    gpu, precision = run.cluster.gpu, run.strategy.precision
    if not gpu.supports(precision):
        return f"precision={precision} is not supported by {gpu.name} (it supports {', '.join(dict(gpu.peak_flops))})"
    return None


RULES: tuple[Rule, ...] = (
    world_size_matches,
    tp_divides_heads,
    tp_fits_kv_heads,
    tp_divides_ffn,
    tp_within_nvlink_domain,
    pipeline_layout_builds,
    batch_divisible,
    interleaving_needs_pipeline,
    pipeline_flushes_split_the_batch,
    sequence_parallel_needs_tp,
    cp_divides_sequence,
    ulysses_divides_heads,
    hsdp_shard_fits,
    expert_parallel_fits,
    expert_tensor_parallel_fits,
    moe_overlap_supported,
    precision_supported,
    framework_runs_zero_stage,
    framework_runs_hsdp,
    framework_runs_cp_comm_type,
    framework_runs_precision,
    framework_runs_attention_and_overlap,
    framework_runs_parallelism,
    framework_runs_recompute,
    framework_runs_tp_comm_overlap,
    framework_runs_cuda_graphs,
    pipeline_schedule_runs,
)


def rule_violations(run: RunSpec) -> list[str]:
    """Every broken legality rule of ``run``, as sentences."""
    return [msg for rule in RULES if (msg := rule(run)) is not None]
