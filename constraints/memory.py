"""Per-GPU memory of a training run, per pipeline stage (the worst stage is reported).

Terms and where they come from
------------------------------
Model states (bytes per parameter, mixed precision with Adam), read from the run's
``Framework`` (costmodel/catalog/frameworks/*.yaml holds each value's source):
    Megatron-Core / NeMo / DeepSpeed keep 16-bit weights (2) beside an fp32 master copy,
    so the optimizer holds master + Adam m and v (12); FSDP2 (torchtitan) and MaxText keep
    the fp32 parameters themselves as the master (4) and the optimizer only m and v (8).
    Main gradients take ``Framework.main_grad_bytes``: Megatron DDP's contiguous buffer is
    fp32 (4) unless ``--grad-reduce-in-bf16`` makes it bf16 (2); DeepSpeed keeps 16-bit
    gradients (ZeRO paper 2 + 2 + 12); FSDP2 keeps fp32 sharded gradients (reduce_dtype).
    The optimizer's weights and Adam's moments take ``Framework.master_weights_dtype`` and
    ``adam_moments_dtype``: NeMo Automodel keeps bf16 parameters stepped in place by torch Adam
    with bf16 moments (2 + 2 + 4), DeepSeek-V3 bf16 moments beside fp32 master weights; NeMo 1's apex
    DistributedFusedAdam keeps only the master's int16 low half beside the bf16 weights
    (``bf16+int16-remainder``: 2 + 2 + 8, store_param_remainders; nemo1.yaml has the source).
    ``Strategy.pipeline_parameter_copies`` (DualPipe: 2) multiplies the weights (its sources state
    parameters only; gradients and optimizer states are counted once).
    Megatron's bf16-params / fp32-grads total is 18 bytes/param (Megatron-LM
    docs/user-guide/features/dist_optimizer.md). ZeRO stage 1 (= Megatron distributed
    optimizer) shards the optimizer bytes over the data-parallel ranks (dp * cp), stage 2
    also the gradients, stage 3 (FSDP) also the weights (Rajbhandari et al. 2020, arXiv
    1910.02054, Figure 1). HSDP (``hsdp_shard_size``) shards the dense states over the shard
    group only; the replicas each hold a full copy of that shard.
    FP8: Transformer Engine caches FP8 copies of the GEMM weights across micro-batches
    (``fp8_weight_copy_bytes``) beside the 16-bit weights, when the framework keeps that
    workspace (Megatron-Core does; torchao / torchtitan casts per forward).
    Expert parameters are split by ep and etp (expert TP, default tp) and sharded over tp * dp * cp / (etp * ep) ranks
    (Megatron-LM ``report_theoretical_memory``).
Activations per transformer layer: Korthikanti et al. 2022 (arXiv 2205.05198)
    Section 4, generalised term by term (GQA widths, SwiGLU, no dropout, flash
    attention drops the 5as^2b score term and keeps an fp32 log-sum-exp, an MoE layer's
    shared experts keep a dense MLP's inner activations), divided by cp. Pipeline stages hold the activations of their in-flight micro-batches:
    stage i of 1F1B holds min(m, pp - i); the interleaved schedule's rank i warms
    up with 2(pp - i - 1) + (vpp - 1) N + 1 model chunks, N = pp unless pp does not divide
    the m micro-batches (Llama 3's flexible N, ``microbatches_per_round``) (Narayanan et al. 2021,
    and Korthikanti et al. 2022 Section 4.2.3: the first stage holds
    L (1 + (pp - 1) / (pp vpp)) layers' worth).
    MTP layers (``m`` in the layout) count as one more layer of their stage, each with its own logits.
    ``recompute: selective`` keeps what the framework's ``selective_recompute`` says:
    Megatron's (above), torchtitan's op-level policy (``op``: the layer input and the
    outputs of every other matmul, attention and reduce-scatter, torchtitan @3faaa1a0
    parallelize_llama.py ``_save_list``) or torchtitan's default (``layer``: every other
    layer fully checkpointed, selective_ac_option "2") or DeepSeek-V3's (``deepseek-v3``: norms, MLA
    up-projections and SwiGLU outputs recomputed, linear inputs cached in FP8 with
    ``fp8_activation_cache``). Under FP8 with ``fp8_activation_cache`` (Transformer Engine) every
    GEMM keeps the FP8 cast of its input for the weight gradient, not the 16-bit input
    (``fp8_linear_input_bytes``). ``cpu_offloading_num_layers``
    moves those layers' activations to the host, one layer's worth staying as the copy
    buffer (Megatron-Core TransformerConfig.cpu_offloading_num_layers, Transformer Engine
    cpu_offload.py get_cpu_offload_context).
Other (peak-time buffers): fp32 + 16-bit logits on the last stage (6 bytes x b x s x
    V / tp, ml-engineering "performance" chapter), the embedding output on the first,
    ZeRO-3 gather buffers for the computing layer plus the framework's prefetch window
    (``fsdp_prefetch_layers``), or the whole stage when FSDP keeps parameters unsharded
    between forward and backward (``fsdp_reshard_after_forward``: torchtitan ``not_pp``,
    NeMo Automodel ``never``), the whole stage's unsharded gradients in the reduce dtype while FSDP2 defers
    its gradient sync to the step's last backward (``deferred_unsharded_grad_bytes``),
    MoE dispatch/combine tokens and DeepEP's fixed buffers (``constraints.moe_buffers``, sized by the
    capacity factor or the drop-less load imbalance), Transformer Engine's TP-overlap userbuffers
    (``constraints.workspace``), one layer's working set during full-recompute backward, without
    flash attention or recompute the two score-sized gradients of an attention backward, and with CUDA
    graphs their static buffers and private pool (``constraints.cuda_graphs``).
A runtime reserve (capacity CUDA hides, CUDA context, NCCL buffers) is not part of the
peak: it is taken from the capacity instead (``ClusterSpec.usable_memory_bytes``).

Korthikanti et al. 2022 Figure 1 ("parameters + optimizer" and "activations" of the
first stage) counts 18 bytes x 12 l h^2 / (tp pp) for the former (transformer layers
only, no embeddings or biases: ``StageMemory.layer_states_bytes``) and, for the latter,
the transformer-layer activations of the first stage including in-flight micro-batches
and the interleaving factor but no embedding or logits buffers
(``StageMemory.layer_activation_bytes``). ``tests/constraints/test_memory_korthikanti.py``
checks both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from constraints.cuda_graphs import private_pool_bytes, static_batch_bytes, static_input_bytes
from constraints.workspace import userbuffer_bytes
from constraints.moe_buffers import deepep_buffer_bytes, dispatched_token_bytes
from costmodel.run_memo import by_reads
from costmodel.specs.framework import BYTES, Framework
from costmodel.specs.gpu import GiB
from costmodel.specs.model import ModelSpec
from costmodel.specs.moe_tokens import dispatcher, expert_rows, load_factor
from costmodel.specs.runspec import RunSpec
from costmodel.specs.layout import MTP, PipelineLayout, layout_of, stage_layer_counts
from costmodel.specs.strategy import Strategy
from costmodel.specs.reads import LAYOUT_FIELDS, reads, replaced

BYTES_WEIGHT_16BIT = 2
# Transformer Engine's MXFP8 block: one E8M0 scale byte per 32 elements
# (transformer_engine/pytorch/constants.py MXFP8_BLOCK_SCALING_SIZE = 32).
MXFP8_BLOCK = 32
# GPUs whose FP8 GEMMs take non-TN layouts (compute capability >= 10, Blackwell): TE keeps one
# FP8 buffer for row- and column-wise use (TE float8_tensor.py is_non_tn_fp8_gemm_supported).
NON_TN_FP8_GPUS = frozenset({"b200", "gb200", "b300", "gb300"})
# Transformer Engine's blockwise FP8 quantises activations in 1 x 128 blocks with one fp32 scale each
# (transformer_engine/pytorch/tensor/float8_blockwise_tensor.py, block_scaling_dim = 1).
FP8_BLOCKWISE_ACTIVATION_BLOCK = 128
BYTES_LOGITS = 6  # 16-bit logits plus their fp32 copy for the loss
BYTES_FP8 = 1
# DeepSeek-V3 report 3.3.4: the inputs of the Linear after attention are cached in E5M6 (12 bits).
BYTES_E5M6 = 1.5


@dataclass(frozen=True)
class StageMemory:
    """Peak bytes on one GPU of pipeline stage ``stage``."""

    stage: int
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    other_bytes: float
    layer_states_bytes: float
    layer_activation_bytes: float

    @property
    def total_bytes(self) -> float:
        return stage_total_bytes(self.weights_bytes, self.grads_bytes, self.optimizer_bytes, self.activations_bytes,
                                 self.other_bytes)

    def as_gib(self) -> dict[str, float]:
        """The contract's ``memory`` mapping, in GiB."""
        return {
            "weights_gib": self.weights_bytes / GiB,
            "grads_gib": self.grads_bytes / GiB,
            "optimizer_gib": self.optimizer_bytes / GiB,
            "activations_gib": self.activations_bytes / GiB,
            "other_gib": self.other_bytes / GiB,
        }


def stage_total_bytes(weights: Any, grads: Any, optimizer: Any, activations: Any, other: Any) -> Any:
    """A stage's peak: its terms added in this order (floats, or numpy arrays of them in ``constraints.table``)."""
    return weights + grads + optimizer + activations + other


# -- parameters per GPU ---------------------------------------------------------
def layers_per_stage(model: ModelSpec, strategy: Strategy, stage: int) -> float:
    """Transformer layers pipeline rank ``stage`` holds (all its virtual chunks), from ``layout_of``."""
    return float(layout_of(model, strategy).layers(stage))


def dense_layer_params_per_gpu(model: ModelSpec, tp: int) -> float:
    """Parameters of one dense layer on one GPU: projections split by tp, norms replicated."""
    return (model.attention_params() + model.mlp_params(model.ffn_hidden_size)) / tp \
        + 2 * model.norm_params()  # type: ignore[arg-type]


def moe_layer_params_per_gpu(model: ModelSpec, strategy: Strategy) -> tuple[float, float]:
    """(non-expert, expert) parameters of one MoE layer on one GPU."""
    experts = model.num_experts * model.mlp_params(model.moe_ffn_hidden_size)  # type: ignore[arg-type]
    shared = model.num_shared_experts * model.mlp_params(model.moe_ffn_hidden_size)  # type: ignore[arg-type]
    non_expert = (model.attention_params() + shared) / strategy.tp + 2 * model.norm_params() \
        + model.hidden_size * model.num_experts
    return non_expert, experts / (strategy.ep * strategy.expert_tensor_parallel_size)  # folding: EP x ETP


def embedding_params_per_gpu(model: ModelSpec, strategy: Strategy, stage: int) -> float:
    """Word / position embeddings (first stage) and LM head (last stage), vocab split by tp."""
    vocab = model.vocab_size * model.hidden_size / strategy.tp
    n = 0.0
    if stage == 0:
        n += vocab
        if model.position_embedding == "learned":
            n += model.max_position_embeddings * model.hidden_size  # type: ignore[operator]
    if stage == strategy.pp - 1:
        n += model.norm_params()
        # Untied: the LM head. Tied with pp > 1: Megatron keeps a copy of the embedding there.
        if not model.tie_embeddings or strategy.pp > 1:
            n += vocab
    return n


def mtp_layer_params_per_gpu(model: ModelSpec, strategy: Strategy) -> tuple[float, float]:
    """(non-expert, expert) parameters of one MTP layer on one GPU (``ModelSpec.mtp_layer_params``).

    Three norms, the ``2h -> h`` projection (split by tp) and one transformer layer, MoE when the
    model is; the embedding and LM head are shared with the main model (DeepSeek-V3 report 2.2).
    """
    h = model.hidden_size
    extra = 3 * model.norm_params() + 2 * h * h / strategy.tp
    if model.is_moe:
        non_expert, expert = moe_layer_params_per_gpu(model, strategy)
        return extra + non_expert, expert
    return extra + dense_layer_params_per_gpu(model, strategy.tp), 0.0


@by_reads  # asked again by one prediction's optimizer, shard groups, ZeRO gathers and DP tail, and by its variants
@reads(*LAYOUT_FIELDS, "tp", "ep", "etp")
def params_on_gpu(run: RunSpec, stage: int) -> tuple[float, float]:
    """(dense, expert) parameters one GPU of ``stage`` holds before any ZeRO sharding (MTP layers included)."""
    model, s = run.model, run.strategy
    dense_layers, moe_layers = stage_layer_counts(model, s, stage)
    dense = dense_layers * dense_layer_params_per_gpu(model, s.tp) + embedding_params_per_gpu(model, s, stage)
    expert = 0.0
    if moe_layers:
        non_expert, expert_per_layer = moe_layer_params_per_gpu(model, s)
        dense += moe_layers * non_expert
        expert = moe_layers * expert_per_layer
    mtp = layout_of(model, s).count(stage, MTP)
    if mtp:
        non_expert, expert_per_layer = mtp_layer_params_per_gpu(model, s)
        dense += mtp * non_expert
        expert += mtp * expert_per_layer
    return dense, expert


def fp8_weight_copy_bytes(framework: Framework, gpu_name: str) -> float:
    """Bytes per GEMM-weight parameter of the FP8 copies kept across micro-batches.

    Transformer Engine (github.com/NVIDIA/TransformerEngine @d0067d0d) quantises each
    weight with row- and column-wise usage in training (module/linear.py) and keeps it as
    the weight workspace. Per-tensor recipes (delayed, tensorwise = current scaling) hold
    ``_data`` plus an FP8 ``_transpose`` on Hopper, one ``_data`` on Blackwell
    (tensor/float8_tensor.py); MXFP8 holds row- and column-wise data, each with one scale
    byte per 32 elements (tensor/mxfp8_tensor.py); blockwise (1x128 / 128x128 fp32 scales)
    is counted as row- and column-wise data. Frameworks without the workspace keep none.
    Transformer Engine 1.8 (@7d576ed2, NeMo 24.07's pin) keeps the same two bytes on Hopper: Linear's
    ``get_fp8_workspace(cache_name="weight", with_transpose=torch.is_grad_enabled())`` (module/linear.py
    L966-999) caches FP8 data and transpose across micro-batches whenever Megatron-Core passes
    ``is_first_microbatch`` (unless ``disable_parameter_transpose_cache``; Megatron-Core @01945b98
    transformer_engine.py L176-180).
    """
    if not framework.fp8_weight_cache:
        return 0.0
    recipe = framework.fp8_recipe
    if recipe == "mxfp8":
        return 2 * (1 + 1 / MXFP8_BLOCK)
    if recipe in ("delayed", "tensorwise"):
        return 1.0 if gpu_name in NON_TN_FP8_GPUS else 2.0
    return 2.0


def fp8_linear_input_bytes(framework: Framework, precision: str) -> float:
    """Bytes per element a GEMM keeps of its input for the weight gradient.

    Transformer Engine's Linear under FP8 saves the FP8 cast of its input instead of the
    16-bit input: TE v1.8 module/linear.py ``saved_inputmat_t = inputmat_t`` (the FP8
    transpose from ``fp8_cast_transpose_fused``, or the FP8 ``inputmat`` under sequence
    parallelism), layernorm_linear.py ``ln_out`` cast to FP8 by the norm kernel, and
    grouped_linear.py ``saved_inputmats_t``; TE @d0067d0d linear.py keeps only the
    column-wise copy (``update_usage(rowwise_usage=False, columnwise_usage=True)``). One
    byte per element for the per-tensor recipes, plus one E8M0 scale per 32 (MXFP8) or
    one fp32 scale per 1x128 block (blockwise). Frameworks whose FP8 linear keeps the
    high-precision input (torchao's Float8Linear) have ``fp8_activation_cache`` off.
    """
    if precision != "fp8" or not framework.fp8_activation_cache:
        return float(BYTES_WEIGHT_16BIT)
    if framework.fp8_recipe == "mxfp8":
        return BYTES_FP8 * (1 + 1 / MXFP8_BLOCK)
    if framework.fp8_recipe == "blockwise":
        return BYTES_FP8 + 4 / FP8_BLOCKWISE_ACTIVATION_BLOCK
    return float(BYTES_FP8)


def state_bytes_per_param(framework: Framework) -> tuple[float, float]:
    """(weight, optimizer) bytes per parameter before FP8 copies and sharding.

    Adam keeps two moments in ``adam_moments_dtype``; the weights the optimizer steps are in
    ``master_weights_dtype``, either a copy beside 16-bit weights (Megatron: 2 + 4 + 8) or the
    parameters themselves (FSDP2: 4 + 8; NeMo Automodel's bf16 parameters: 2 + 4); NeMo 1's remainder
    master: 2 + (2 + 8).
    """
    master = float(BYTES[framework.master_weights_dtype])
    moments = 2.0 * BYTES[framework.adam_moments_dtype]
    if framework.separate_master_weights:
        return float(BYTES_WEIGHT_16BIT), master + moments
    return master, moments


STATE_READS = (*LAYOUT_FIELDS, "tp", "ep", "etp", "dp", "cp", "hsdp_shard_size", "zero_stage", "precision",
               "pipeline_schedule")
"""The strategy fields the model states of a stage depend on (``StrategyTable.evaluate`` groups by them)."""
LAYER_READS = ("tp", "cp", "micro_batch_size", "sequence_parallel", "recompute", "precision", "flash_attention",
               "etp", "moe_capacity_factor", "moe_load_imbalance")
"""What one layer's stored activations depend on; a stage's also on its layout and in-flight micro-batches."""
INFLIGHT_READS = ("pp", "vpp", "global_batch_size", "micro_batch_size", "dp")


@reads(*STATE_READS)
def model_state_bytes(run: RunSpec, stage: int) -> tuple[float, float, float, float]:
    """(weights, grads, optimizer, layer-states) bytes on one GPU of ``stage``."""
    model, s, fw = run.model, run.strategy, run.framework
    dense, expert = params_on_gpu(run, stage)
    shards_dense = s.shard_group_size  # dp * cp, or the HSDP shard group
    shards_expert = s.expert_data_parallel_size
    weight_bytes, optim_bytes = state_bytes_per_param(fw)
    grad_bytes = fw.main_grad_bytes

    def sharded(params: float, bytes_per: float, shards: int, from_stage: int) -> float:
        return params * bytes_per / (shards if s.zero_stage >= from_stage else 1)

    weights = sharded(dense, weight_bytes, shards_dense, 3) + sharded(expert, weight_bytes, shards_expert, 3)
    if s.precision == "fp8" and s.zero_stage < 3:
        # TE's cached FP8 copies of the transformer GEMM weights; embeddings and LM head stay 16-bit.
        # Under ZeRO-3 the copies are of gathered weights and freed with them (Megatron-FSDP
        # keep_fp8_transpose_cache = False), so they are not persistent.
        gemm = dense - embedding_params_per_gpu(model, s, stage) + expert
        fp8 = fp8_weight_copy_bytes(fw, run.cluster.gpu.name)
        # --fp8-param-gather: the FP8 tensor *is* the parameter, replacing its 16-bit copy
        weights += gemm * (fp8 - weight_bytes if fw.fp8_param_gather and fw.separate_master_weights else fp8)
    grads = sharded(dense, grad_bytes, shards_dense, 2) + sharded(expert, grad_bytes, shards_expert, 2)
    optim = sharded(dense, optim_bytes, shards_dense, 1) + sharded(expert, optim_bytes, shards_expert, 1)
    # DualPipe holds a second stage's parameters (Strategy.pipeline_parameter_copies). Its sources state
    # parameters only, so gradients and optimizer states are counted once.
    weights *= s.pipeline_parameter_copies
    # Korthikanti et al. 2022 Figure 1 convention: 18 bytes x 12 l h^2 / (tp pp), unsharded.
    layer_states = 18 * 12 * model.num_layers * model.hidden_size**2 / (s.tp * s.pp)
    return weights, grads, optim, layer_states


# -- activations ---------------------------------------------------------------
def activation_bytes_per_layer(model: ModelSpec, strategy: Strategy, seq_length: int, moe: bool = False,
                               linear_input_bytes: float = BYTES_WEIGHT_16BIT) -> float:
    """Bytes one transformer layer keeps for backward, per micro-batch, on one GPU.

    Korthikanti et al. 2022 Section 4 with 16-bit activations and 1-byte dropout
    masks; ``s`` is the per-GPU sequence (``seq_length / cp``). ``linear_input_bytes``
    is what each GEMM keeps of its input for the weight gradient (QKV, projection, fc1
    and fc2 inputs, the experts' permuted tokens): 2 in 16-bit, ``fp8_linear_input_bytes``
    where Transformer Engine keeps the FP8 cast instead. Norm inputs, the attention
    core's q, k, v and output, and the activation function's input stay 16-bit.
    """
    t, b = strategy.tp, strategy.micro_batch_size
    s = seq_length / strategy.cp
    h = model.hidden_size
    sp = strategy.sequence_parallel and t > 1
    replicated = t if sp else 1  # what SP shards that plain TP replicates
    drop = 1 if model.dropout else 0
    if strategy.recompute == "full":
        return 2 * s * b * h / replicated  # the layer input only
    lin = linear_input_bytes
    # Attention block: LN input, QKV input, Q and K, V, projection input, output dropout mask.
    attn = (2 * s * b * h + lin * s * b * h) / replicated
    attn += 2 * s * b * (model.q_size + model.kv_size) / t + 2 * s * b * model.kv_size / t
    attn += lin * s * b * model.q_size / t + drop * s * b * h / replicated
    a = model.num_attention_heads
    if strategy.flash_attention or strategy.recompute == "selective":
        if strategy.flash_attention and strategy.recompute != "selective":
            # Flash attention keeps its output O and the fp32 log-sum-exp. O is also the projection's input:
            # one tensor (a view) when that input is kept in 16 bits, so it counts once; an FP8 projection
            # keeps its own FP8 cast beside the 16-bit O.
            o_extra = 0 if lin == BYTES_WEIGHT_16BIT else 2 * s * b * model.q_size / t
            attn += o_extra + 4 * a * s * b / t
    else:
        # Korthikanti's 5as^2b: the softmax output (2), the dropout mask (1) and output (2). Without dropout the
        # softmax output is the value matmul's input itself (torch dropout at p = 0 returns its input): 2as^2b.
        attn += (2 + 3 * drop) * a * s * s * strategy.cp * b / t
    # MLP block: LN input, fc1 input, inner activations (fc1 output, 16-bit, and fc2 input), output dropout mask.
    ffn = model.moe_ffn_hidden_size if moe else model.ffn_hidden_size
    inner = mlp_inner_bytes(model, s * b, ffn / t, lin)  # type: ignore[operator]
    tokens_factor = model.moe_router_topk * load_factor(strategy) if moe else 1
    # An MoE layer's pre-MLP norm output feeds the (16-bit) router and the permutation, not a TE GEMM.
    fc1_in = 2 if moe else lin
    mlp = (2 * s * b * h + fc1_in * s * b * h) / replicated + inner * tokens_factor + drop * s * b * h / replicated
    if moe:
        # permuted tokens kept for the expert GEMMs: the rank's expert rows, gathered over expert TP
        mlp += lin * h * expert_rows(model, strategy, seq_length)
        mlp += shared_expert_activation_bytes(model, s * b, t, replicated, lin)
    return attn + mlp


def mlp_inner_bytes(model: ModelSpec, tokens: float, width: float, linear_input_bytes: float) -> float:
    """An MLP's inner activations kept for backward: the fc1 output (16-bit, both SwiGLU halves) and the
    fc2 input (``linear_input_bytes``), for ``tokens`` rows of ``width`` (the per-GPU inner width)."""
    fc1_out = (4 if model.activation == "swiglu" else 2) * tokens * width
    return fc1_out + linear_input_bytes * tokens * width


def shared_expert_activation_bytes(model: ModelSpec, tokens: float, tp: int, replicated: int,
                                   linear_input_bytes: float) -> float:
    """What an MoE layer's shared experts keep for backward, per micro-batch (0 without them).

    The shared experts are one dense MLP of ``num_shared_experts x moe_ffn_hidden_size`` over every
    token of the layer, tensor-parallel like a dense MLP: Megatron-LM @d98e8a64
    megatron/core/transformer/moe/shared_experts.py ``SharedExpertMLP(MLP)``; NeMo Automodel @01926a5c
    nemo_automodel/components/moe/layers.py ``MoE.__init__`` (``self.shared_experts = MLP(dim,
    n_shared_experts * moe_inter_dim)``, run on a side stream in ``MoE.forward``). Their input is the
    pre-MLP norm output the router already keeps (16-bit, counted once); an FP8 fc1 keeps its own
    FP8 cast of it beside (``linear_input_bytes`` < 2).
    """
    if not model.num_shared_experts:
        return 0.0
    width = model.num_shared_experts * (model.moe_ffn_hidden_size or 0) / tp
    fp8_input = linear_input_bytes * tokens * model.hidden_size / replicated \
        if linear_input_bytes < BYTES_WEIGHT_16BIT else 0.0
    return mlp_inner_bytes(model, tokens, width, linear_input_bytes) + fp8_input


def op_saved_activation_bytes_per_layer(model: ModelSpec, strategy: Strategy, seq_length: int) -> float:
    """Bytes one dense layer keeps under torchtitan's op-level selective checkpointing, per micro-batch.

    torchtitan @3faaa1a0 torchtitan/parallelisms/parallelize_llama.py ``_custom_policy``: the
    outputs of ops in ``_save_list`` (mm, flash / efficient attention, reduce-scatter) are
    saved, "except every second mm"; everything else is recomputed. The matmuls of a block
    run wq, wk, wv, wo, w1 (, w3), w2, so the odd ones are kept. The checkpointed region's
    input (the layer input) is always kept.
    """
    t, b = strategy.tp, strategy.micro_batch_size
    s = seq_length / strategy.cp
    h = model.hidden_size
    sp = strategy.sequence_parallel and t > 1
    ffn = model.ffn_hidden_size
    mm_widths = [model.q_size / t, model.kv_size / t, model.kv_size / t, h,  # wq wk wv wo
                 ffn / t] + ([ffn / t] if model.activation == "swiglu" else []) + [h]  # type: ignore[operator]
    kept = 2 * s * b * sum(mm_widths[0::2])
    attention = 2 * s * b * model.q_size / t + 4 * model.num_attention_heads * s * b / t  # output + fp32 LSE
    scatters = 2 * (2 * s * b * h / t) if sp else 0.0  # SP reduce-scatter outputs of wo and w2
    return 2 * s * b * h / (t if sp else 1) + kept + attention + scatters


def deepseek_v3_saved_activation_bytes_per_layer(model: ModelSpec, strategy: Strategy, seq_length: int,
                                                 moe: bool = False, fp8_cache: bool = False) -> float:
    """Bytes one MLA layer keeps under DeepSeek-V3's recomputation, per micro-batch (arXiv 2412.19437).

    Section 3.2.3: every RMSNorm and the MLA up-projections are recomputed in backward, so the layer
    keeps the two norm inputs (the residual stream, 16-bit) and the q / kv latents (the
    up-projections' inputs, 16-bit) instead of the norm outputs and the per-head q, k, v; the
    attention core keeps its output (the input of the Linear after attention, E5M6 with the FP8
    cache) and its fp32 log-sum-exp. Section 3.3.4: the SwiGLU output is recomputed from its cached
    input, so an MLP keeps its fc1 input (the dispatched tokens, top-k copies for routed experts) and
    the SwiGLU input, both FP8 with the cache. The router keeps its fp32 scores. The routing
    probabilities are applied in the recomputed SwiGLU (Megatron-Core ``activation_func_with_probs``),
    so no expert output is kept for their gradient. Models without MLA keep Megatron's selective set.
    """
    if not model.is_mla:
        return activation_bytes_per_layer(model, replaced(strategy, recompute="selective"), seq_length, moe=moe)
    t, b = strategy.tp, strategy.micro_batch_size
    s = seq_length / strategy.cp
    h = model.hidden_size
    replicated = t if strategy.sequence_parallel and t > 1 else 1
    linear_in = BYTES_FP8 if fp8_cache else BYTES_WEIGHT_16BIT
    attn_out = BYTES_E5M6 if fp8_cache else BYTES_WEIGHT_16BIT
    residuals = 2 * BYTES_WEIGHT_16BIT * s * b * h / replicated
    latents = BYTES_WEIGHT_16BIT * s * b * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
    attention = attn_out * s * b * model.out_proj_size / t + 4 * model.num_attention_heads * s * b / t

    def mlp(ffn: int, copies: float) -> float:  # fc1 input and SwiGLU input (2 x ffn wide)
        return copies * s * b * linear_in * (h / replicated + 2 * ffn / t)

    if moe:
        ffn = model.moe_ffn_hidden_size or 0
        ffn_part = mlp(ffn, model.moe_router_topk * load_factor(strategy)) + mlp(ffn, model.num_shared_experts)
        ffn_part += 4 * s * b * model.num_experts / replicated
    else:
        ffn_part = mlp(model.ffn_hidden_size or 0, 1)
    return residuals + latents + attention + ffn_part


def stored_activation_bytes_per_layer(run: RunSpec, moe: bool = False) -> float:
    """Bytes one layer keeps for backward, per micro-batch, averaged over the stage's layers.

    The framework's ``selective_recompute`` decides what ``recompute: selective`` keeps (MoE
    layers under ``op`` are counted as Megatron's selective: the policy was read for dense blocks).
    """
    model, s = run.model, run.strategy
    mode = run.framework.selective_recompute if s.recompute == "selective" else "megatron"
    lin = fp8_linear_input_bytes(run.framework, s.precision)
    if mode == "deepseek-v3":
        fp8_cache = run.framework.fp8_activation_cache and s.precision == "fp8"
        return deepseek_v3_saved_activation_bytes_per_layer(model, s, run.seq_length, moe=moe, fp8_cache=fp8_cache)
    if mode == "op" and not moe:
        return op_saved_activation_bytes_per_layer(model, s, run.seq_length)
    if mode == "layer":  # torchtitan checkpoints layers 2, 4, ...: half full recompute, half none
        full = activation_bytes_per_layer(model, replaced(s, recompute="full"), run.seq_length, moe=moe)
        none = activation_bytes_per_layer(model, replaced(s, recompute="none"), run.seq_length, moe=moe,
                                          linear_input_bytes=lin)
        return (full + none) / 2
    return activation_bytes_per_layer(model, s, run.seq_length, moe=moe, linear_input_bytes=lin)


def offloaded_layers(run: RunSpec, layers: float) -> float:
    """Layers of a stage whose activations sit on the host (``cpu_offloading_num_layers``, at most all)."""
    return min(float(run.framework.cpu_offloading_num_layers), layers)


def microbatches_per_round(pp: int, num_microbatches: int) -> int:
    """Micro-batches the interleaved schedule runs through one virtual stage before the next (N).

    Llama 3 (arXiv 2407.21783 Sec. 3.3.2) lets N differ from pp, so a batch may hold any number of
    micro-batches; PyTorch's interleaved 1F1B takes N = m // max(1, m // pp)
    (torch/distributed/pipelining/schedules.py ScheduleInterleaved1F1B ``microbatches_per_round``),
    which is pp when pp divides m, as Megatron-Core's ``microbatch_group_size_per_vp_stage`` default.
    """
    return num_microbatches // max(1, num_microbatches // pp)


def inflight_chunks(strategy: Strategy, stage: int) -> float:
    """Model chunks whose activations stage ``stage`` holds at its peak (in layers-of-a-stage units).

    Interleaved: the warm-up forwards ``(vpp - 1) N + 2 (pp - stage - 1)``, capped at ``m vpp``, plus the
    first steady-state one (PyTorch ``_get_warmup_ops``; Megatron-Core schedules.py
    ``num_warmup_microbatches`` with N = ``microbatch_group_size_per_vp_stage``).
    """
    p, v, m = strategy.pp, strategy.vpp, strategy.num_microbatches
    if v == 1:
        return float(min(m, p - stage))
    n = microbatches_per_round(p, m)
    chunks = min(m * v, 2 * (p - stage - 1) + (v - 1) * n + 1)
    return chunks / v


@reads(*LAYOUT_FIELDS, *LAYER_READS, *INFLIGHT_READS)
def layer_activation_bytes(run: RunSpec, stage: int) -> float:
    """Transformer-layer activations held by one GPU of ``stage`` at its peak."""
    model, s = run.model, run.strategy
    dense_layers, moe_layers = stage_layer_counts(model, s, stage)
    dense_each = stored_activation_bytes_per_layer(run)
    per_chunk = dense_layers * dense_each
    if moe_layers:
        per_chunk += moe_layers * stored_activation_bytes_per_layer(run, moe=True)
    mtp = layout_of(model, s).count(stage, MTP)
    if mtp:  # each MTP layer: one transformer layer plus the concatenated [embedding; hidden] projection input
        mtp_each = stored_activation_bytes_per_layer(run, moe=model.is_moe) + 4 * run.seq_length / s.cp \
            * s.micro_batch_size * model.hidden_size
        per_chunk += mtp * mtp_each
    layers = dense_layers + moe_layers + mtp
    held = per_chunk * inflight_chunks(s, stage)
    off = offloaded_layers(run, layers)
    if off <= 0 or layers <= 0:
        return held
    # Offloaded layers leave HBM for every in-flight micro-batch; one layer of one micro-batch stays as the copy
    # buffer, of the same (average) size the saving counts, so offloading more never adds memory.
    return held * (1 - off / layers) + per_chunk / layers


def unfused_attention_backward_bytes(model: ModelSpec, strategy: Strategy, seq_length: int) -> float:
    """Score-sized gradients an unfused attention's backward allocates beside its saved probabilities.

    The value matmul's backward writes grad(probabilities) and Transformer Engine's softmax backward a new
    grad(scores) (TE @d0067d0d pytorch/csrc/extensions/softmax.cpp L183 ``input_grads = torch::empty``), both
    16-bit ``a/tp x s x s x b``, alive with everything still held when the first backward starts at the peak.
    Flash attention never materialises them.
    """
    s = seq_length / strategy.cp
    return 2 * 2 * model.num_attention_heads * s * s * strategy.cp * strategy.micro_batch_size / strategy.tp


@reads(*INFLIGHT_READS, "cp")
def embedding_output_bytes(run: RunSpec, stage: int) -> float:
    """The first stage's embedding output and token ids of every in-flight micro-batch."""
    s = run.strategy
    if stage != 0:
        return 0.0
    b, seq, h = s.micro_batch_size, run.seq_length / s.cp, run.model.hidden_size
    return inflight_chunks(s, 0) * (2 * seq * b * h + 8 * seq * b)


@reads(*LAYOUT_FIELDS, "micro_batch_size", "cp", "tp")
def logits_bytes(run: RunSpec, stage: int) -> float:
    """16-bit logits and their fp32 copy on the last stage, and one set per MTP layer (each computes its own loss)."""
    model, s = run.model, run.strategy
    b, seq = s.micro_batch_size, run.seq_length / s.cp
    heads = (stage == s.pp - 1) + layout_of(model, s).count(stage, MTP)
    return heads * BYTES_LOGITS * b * seq * model.vocab_size / s.tp


@reads(*LAYOUT_FIELDS, "zero_stage", "tp", "ep", "etp", "dp", "cp")
def zero3_buffer_bytes(run: RunSpec, stage: int) -> float:
    """ZeRO-3's gathered layers and FSDP2's deferred unsharded gradients (0 below stage 3)."""
    if run.strategy.zero_stage != 3:
        return 0.0
    return zero3_gather_bytes(run, stage) + deferred_unsharded_grad_bytes(run, stage)


@reads("micro_batch_size", "cp", "sequence_parallel", "tp", "etp", "moe_capacity_factor", "moe_load_imbalance")
def moe_token_buffer_bytes(run: RunSpec, stage: int) -> float:
    """An MoE layer's dispatched and combined tokens (0 for a dense model)."""
    if not run.model.is_moe:
        return 0.0
    return dispatched_token_bytes(run.model, run.strategy, run.seq_length)


@reads("moe_token_dispatcher", "ep", "etp", "tp")
def deepep_bytes(run: RunSpec, stage: int) -> float:
    """DeepEP's fixed buffers under the flex / HybridEP dispatchers (0 otherwise)."""
    s = run.strategy
    if not run.model.is_moe or dispatcher(run) not in ("flex", "hybridep"):
        return 0.0
    return deepep_buffer_bytes(run.model.hidden_size, s.ep * s.expert_tensor_parallel_size)


@reads("tp_comm_overlap", "tp", "micro_batch_size", "cp", "precision")
def tp_overlap_buffer_bytes(run: RunSpec, stage: int) -> float:
    """Transformer Engine's TP-overlap userbuffers (``constraints.workspace``)."""
    return userbuffer_bytes(run)


@reads("flash_attention", "recompute", "cp", "micro_batch_size", "tp")
def attention_backward_bytes(run: RunSpec, stage: int) -> float:
    """Without flash attention or recompute, the two score-sized gradients of an attention backward
    (recompute rebuilds the layer: ``recompute_working_set_bytes``)."""
    s = run.strategy
    if s.flash_attention or s.recompute != "none":
        return 0.0
    return unfused_attention_backward_bytes(run.model, s, run.seq_length)


@reads(*LAYER_READS)
def recompute_working_set_bytes(run: RunSpec, stage: int) -> float:
    """A checkpointed layer's forward rebuilt in its backward: one layer's working set (0 without recompute)."""
    s = run.strategy
    layer_sac = s.recompute == "selective" and run.framework.selective_recompute == "layer"
    if s.recompute == "full" or layer_sac:
        return layer_working_set_bytes(run)
    return 0.0


EAGER_BUFFERS = (embedding_output_bytes, logits_bytes, zero3_buffer_bytes, moe_token_buffer_bytes, deepep_bytes,
                 tp_overlap_buffer_bytes, attention_backward_bytes, recompute_working_set_bytes)
"""The peak-time buffers of an eager step, in the order ``other_bytes`` adds them."""


@reads(*LAYER_READS, *INFLIGHT_READS, "cuda_graphs")
def cuda_graph_bytes(run: RunSpec, stage: int, eager_bytes: float) -> float:
    """CUDA graphs' static buffers and private pool beside ``eager_bytes`` of buffers (``constraints.cuda_graphs``)."""
    s = run.strategy
    if s.cuda_graphs == "none":
        return 0.0
    return private_pool_bytes(run, layer_working_set_bytes(run), eager_bytes) + static_batch_bytes(run, stage) \
        + static_input_bytes(run, inflight_chunks(s, stage) * s.vpp)


def other_bytes(run: RunSpec, stage: int) -> float:
    """Peak-time buffers beyond stored layer activations (see the module docstring)."""
    out = 0.0
    for term in EAGER_BUFFERS:
        out += term(run, stage)
    return out + cuda_graph_bytes(run, stage, out)


def layer_working_set_bytes(run: RunSpec) -> float:
    """One layer's activations of one micro-batch without recompute: what its backward works on at once."""
    model, s = run.model, run.strategy
    return activation_bytes_per_layer(model, replaced(s, recompute="none"), run.seq_length, moe=model.is_moe,
                                      linear_input_bytes=fp8_linear_input_bytes(run.framework, s.precision))


def zero3_gather_layers(run: RunSpec, stage: int) -> float:
    """Unsharded layers a ZeRO-3 rank holds at once: the computing one plus the prefetch window.

    ``Framework.fsdp_prefetch_layers`` is the window (torchtitan, Megatron-FSDP and DeepSpeed
    files give its source). FSDP2 under pipeline parallelism keeps every layer of the stage
    unsharded between a micro-batch's forward and backward (torchtitan @b5bcd76c
    torchtitan/distributed/fsdp.py: reshard_after_forward = not pp_enabled).
    """
    fw, s = run.framework, run.strategy
    layers = layers_per_stage(run.model, s, stage)
    keep = fw.fsdp_reshard_after_forward
    if keep == "never" or (keep == "not_pp" and s.pp > 1):
        return layers
    return min(layers, 1.0 + fw.fsdp_prefetch_layers)


def fsdp_grad_sync_deferred(run: RunSpec) -> bool:
    """Whether ``run``'s ZeRO-3 is FSDP2 that skips the per-micro-batch reduce-scatter and reduces once per step.

    True for ``pp`` > 1 with the ``fsdp2`` implementation (``torch.distributed.pipelining`` turns the sync off
    for every backward but the schedule's last: ``costmodel.llm.sharding`` module docstring), and at any
    ``pp`` where the framework defers it the same way (``Framework.fsdp_defer_grad_sync``). Without a
    framework: FSDP2.
    """
    framework = getattr(run, "framework", None)
    implementation = framework.fsdp_implementation if framework is not None else "fsdp2"
    deferred = bool(getattr(framework, "fsdp_defer_grad_sync", False))
    return implementation == "fsdp2" and (run.strategy.pp > 1 or deferred)


def deferred_unsharded_grad_bytes(run: RunSpec, stage: int) -> float:
    """Unsharded gradients FSDP2 accumulates from a stage's first backward to its one reduce-scatter.

    With the gradient sync off, FSDP2's post-backward neither reduce-scatters nor frees a parameter's
    unsharded gradient: it upcasts it to the reduce dtype and keeps it as ``unsharded_accumulated_grad``,
    to which every later micro-batch adds (PyTorch torch/distributed/fsdp/_fully_shard/_fsdp_param.py
    ``to_accumulated_grad_if_needed`` / ``accumulate_unsharded_grad_if_needed``, called from
    _fsdp_param_group.py ``post_backward`` when ``reduce_grads`` is off; PyTorch 2.4+). So every
    FSDP-managed parameter of the stage holds a full gradient in ``Framework.grad_reduce_bytes``
    while the stage's in-flight activations are held (the 1F1B steady state). Expert weights are
    FSDP-managed only where sharded (more than one expert-data-parallel rank; NeMo Automodel leaves
    them out of FSDP otherwise, and their gradients are the ordinary ones ``model_state_bytes`` counts).
    """
    s = run.strategy
    if s.zero_stage != 3 or s.dp * s.cp <= 1 or not fsdp_grad_sync_deferred(run):
        return 0.0
    dense, expert = params_on_gpu(run, stage)
    managed = dense + (expert if s.expert_data_parallel_size > 1 else 0.0)
    return managed * run.framework.grad_reduce_bytes


def zero3_gather_bytes(run: RunSpec, stage: int) -> float:
    """16-bit all-gather buffers of the layers ``zero3_gather_layers`` counts.

    A layer's gathered parameters are its average share of the stage's (dense and MoE layers alike,
    embeddings excluded); expert weights are gathered only where they are sharded over more than
    one expert-data-parallel rank (NeMo Automodel: FSDP over the ``ep_shard`` mesh, else not wrapped).
    """
    model, s = run.model, run.strategy
    dense_layers, moe_layers = stage_layer_counts(model, s, stage)
    layers = dense_layers + moe_layers
    if layers <= 0:
        return 0.0
    gathered = dense_layers * dense_layer_params_per_gpu(model, s.tp)
    if moe_layers:
        non_expert, expert = moe_layer_params_per_gpu(model, s)
        gathered += moe_layers * (non_expert + (expert if s.expert_data_parallel_size > 1 else 0.0))
    return zero3_gather_layers(run, stage) * BYTES_WEIGHT_16BIT * gathered / layers


def stage_memory(run: RunSpec, stage: int) -> StageMemory:
    """Memory of one GPU in pipeline stage ``stage``."""
    weights, grads, optim, layer_states = model_state_bytes(run, stage)
    acts = layer_activation_bytes(run, stage)
    return StageMemory(stage=stage, weights_bytes=weights, grads_bytes=grads, optimizer_bytes=optim,
                       activations_bytes=acts, other_bytes=other_bytes(run, stage),
                       layer_states_bytes=layer_states, layer_activation_bytes=acts)


def peak_stage_memory(run: RunSpec) -> StageMemory:
    """The pipeline stage with the highest per-GPU memory.

    Of ranks that hold the same layers (``PipelineLayout.rank_key``) the earliest holds the most
    in-flight micro-batches, so only the first of each kind is evaluated: the first, the second
    and the last rank of an even or first/last-stage split.
    """
    stages = peak_candidate_stages(layout_of(run.model, run.strategy))
    return max((stage_memory(run, st) for st in stages), key=lambda m: m.total_bytes)


def peak_candidate_stages(layout: PipelineLayout) -> list[int]:
    """The first rank of each kind of ``layout`` (``PipelineLayout.rank_key``), in rank order: the ranks
    whose memory can be the peak (a later rank of the same kind holds fewer in-flight micro-batches)."""
    return sorted({layout.rank_key(st): st for st in reversed(range(layout.pp))}.values())
