"""The training framework a run launches under, as data (one YAML file per framework).

The same strategy runs differently under Megatron-Core, NeMo, torchtitan,
DeepSpeed and MaxText: gradient dtype, FP8 weight caches, FSDP prefetch, MoE
dispatcher, and which combinations they refuse. Each behaviour is one field of
``Framework``; its value for each framework, with the source file and argument
it was read from, lives in ``costmodel/catalog/frameworks/<name>.yaml``. A file
may ``inherit`` another and change only some fields (NeMo from Megatron-Core).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from costmodel.specs.errors import SpecError, reject_unknown_keys, require_bool, require_choice, require_int
from costmodel.specs.hashing import hash_once
from costmodel.specs.strategy import CUDA_GRAPH_SCOPES, PIPELINE_SCHEDULES, RECOMPUTE

DEFAULT_FRAMEWORK = "megatron-core"
FRAMEWORK_NAMES = ("megatron-core", "nemo", "megatron-bridge", "torchtitan", "deepspeed", "maxtext", "automodel",
                   "hai-llm", "megatron-lm-2021", "megatron-lm-2022", "nemo1", "megatron-core-r0.8")
DTYPES = ("fp32", "bf16")
# Megatron-LM before Megatron-Core reduced fp16 runs' gradients in the parameter dtype (fp16).
GRAD_DTYPES = (*DTYPES, "fp16")
# Apex DistributedFusedAdam ``store_param_remainders``: the bf16 parameter is the master's high half,
# the optimizer keeps only the low 16 bits (NeMo 1, constraints/memory.py).
BF16_REMAINDER = "bf16+int16-remainder"
MASTER_WEIGHT_DTYPES = (*DTYPES, BF16_REMAINDER)
FSDP_IMPLEMENTATIONS = ("none", "megatron-fsdp", "fsdp2", "deepspeed-zero3", "gspmd")
DISPATCHERS = ("alltoall", "allgather", "flex", "hybridep")  # hybridep: flex with the HybridEP backend
ATTENTION_KERNELS = ("flash", "flex", "fa2")  # flex: PyTorch FlexAttention (costmodel.llm.flex_attention);
# fa2: PyTorch SDPA's FlashAttention-2 backend (costmodel.llm.fa2_attention)
# Megatron-Core ``--fp8-recipe`` names (TransformerConfig.fp8_recipe); "tensorwise" is per-tensor
# current scaling. "rowwise" is torchao's float8 recipe (torchtitan), "aqt" MaxText's.
FP8_RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise", "rowwise", "aqt")
# What ``recompute: selective`` keeps: Megatron's (all but the attention core), torchtitan's
# op-level policy ("op") or its every-other-layer full checkpointing ("layer").
SELECTIVE_RECOMPUTE = ("megatron", "op", "layer", "deepseek-v3")
# When FSDP frees a layer's gathered parameters after its forward: always, never (kept until its
# backward), or unless pipeline parallel (torchtitan's reshard_after_forward = not pp_enabled).
RESHARD_AFTER_FORWARD = ("always", "never", "not_pp")
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, BF16_REMAINDER: 2}  # the remainder: int16 beside the bf16 weight
CP_EXCHANGES = ("p2p", "all_gather", "a2a")  # costmodel.specs.strategy.CP_COMM_TYPES
# Data-parallel (ZeRO-0/1/2) bucket implementations (costmodel.llm.dp_buckets), and those whose
# parameter all-gather can run under the next forward (``Strategy.overlap_param_gather``).
DP_BUCKET_SCHEMES = ("megatron-core", "deepspeed", "apex", "per-layer")
FORWARD_PARAM_GATHER_SCHEMES = ("megatron-core", "apex")


@hash_once
@dataclass(frozen=True, kw_only=True)
class Framework:
    """Defaults and behaviours of one training framework (frozen; each value's source is in its file)."""

    name: str
    """Catalog name (``megatron-core``, ``nemo``, ...)."""
    display_name: str
    """Human name, printed by ``predict``."""
    exporter: str
    """The launcher exporter (``search/exporters``) that writes this framework's flags (``none``: no exporter)."""
    tp_comm_overlap: bool = False
    """Default of TP-communication overlap (Transformer Engine userbuffers): hides the TP
    all-gather / reduce-scatter under the GEMM it is split with, at the cost of SMs and
    userbuffer workspace. Megatron-Core ``ModelParallelConfig.tp_comm_overlap`` = False."""
    grad_reduce_dtype: str = "fp32"
    """dtype of the data-parallel gradient all-reduce / reduce-scatter: fp32 halves nothing but
    keeps accumulation exact; bf16 halves the bytes on the wire. Megatron-LM: fp32 for bf16 runs
    unless ``--grad-reduce-in-bf16`` (``accumulate_allreduce_grads_in_fp32``); fp16: Megatron-LM 2021-22
    reduced fp16 runs' gradients in the parameter dtype (fp16 runs only, ``constraints.rules``)."""
    main_grad_dtype: str = "fp32"
    """dtype of the gradients a rank keeps between backward and the optimizer step (bytes per
    parameter in memory). Megatron DDP: fp32 ``main_grad`` in a contiguous buffer, bf16 with
    ``--grad-reduce-in-bf16``."""
    main_grad_follows_reduce_dtype: bool = True
    """Whether the kept gradient takes the reduce dtype (Megatron DDP: the grad buffer *is* the
    reduce buffer) rather than staying ``main_grad_dtype``."""
    separate_master_weights: bool = True
    """Whether the fp32 master weights are a copy beside the 16-bit weights (Megatron, DeepSpeed:
    2 + 12 bytes/param) or are the sharded parameters themselves (FSDP2 and MaxText keep fp32
    parameters and cast to bf16 per layer for compute: 4 + 8 bytes/param)."""
    distributed_optimizer: bool = True
    """Default of optimizer-state sharding over data-parallel ranks (ZeRO-1)."""
    fsdp_implementation: str = "none"
    """How parameters are sharded at ZeRO-3: none, megatron-fsdp, fsdp2, deepspeed-zero3, gspmd."""
    fsdp_prefetch_layers: int = 1
    """Layers whose parameters are all-gathered ahead of the one computing (the prefetch window);
    each costs one unsharded layer of gather buffer."""
    moe_token_dispatcher: str = "allgather"
    """Default MoE token dispatcher (Megatron-Core ``moe_token_dispatcher_type``)."""
    moe_shared_expert_overlap: bool = False
    """Default of overlapping the shared experts with the dispatch/combine communication (alltoall
    and flex dispatchers only): hides the all-to-all under the shared-expert GEMMs."""
    moe_a2a_overlap: bool = False
    """Default of overlapping the expert-parallel all-to-all of one micro-batch with the compute of
    another in the 1F1B steady state (Megatron-Core ``overlap_moe_expert_parallel_comm``)."""
    selective_recompute: str = "megatron"
    """What ``recompute: selective`` saves for backward: ``megatron`` (Korthikanti et al. 2022: all but
    the attention scores), ``op`` (torchtitan's op-level policy: only the saved-op outputs) or
    ``layer`` (torchtitan: full checkpointing of every other layer)."""
    master_weights_dtype: str = "fp32"
    """dtype of the weights the optimizer steps: the separate master copy, or the parameters
    themselves when there is none (``bf16``: parameters kept in bf16 and stepped in place, no
    fp32 copy at all, as NeMo Automodel's MoE models are).
    ``bf16+int16-remainder``: apex ``DistributedFusedAdam(store_param_remainders=True)`` (NeMo 1) keeps
    only the low 16 bits of the fp32 master beside the bf16 parameter (2 bytes, bf16 parameters only)."""
    adam_moments_dtype: str = "fp32"
    """dtype of Adam's first and second moments (``bf16`` halves them: DeepSeek-V3's
    low-precision optimizer states; ``torch.optim.Adam`` on bf16 parameters)."""
    fsdp_reshard_after_forward: str = "always"
    """When ZeRO-3 frees a layer's gathered parameters after its forward (``RESHARD_AFTER_FORWARD``):
    ``never`` keeps every layer of the stage unsharded until its backward (no re-gather, more memory)."""
    fsdp_defer_grad_sync: bool = False
    """Whether FSDP2 without pipelining keeps a step's gradients unreduced and its parameters gathered
    until the last micro-batch (``set_requires_gradient_sync(False)``, ``set_reshard_after_backward(False)``
    on the others: NeMo Automodel's ``backend.enable_fsdp_optimizations``), reducing once per step as
    ``torch.distributed.pipelining`` does (``costmodel.llm.sharding.pipelined_fsdp2``); off: every
    micro-batch re-gathers and reduce-scatters."""
    fp8_activation_cache: bool = False
    """Whether FP8 runs keep the inputs of the linear layers for backward in FP8 (1 byte) rather
    than 16-bit (DeepSeek-V3 report section 3.3.4, "Low-Precision Activation")."""
    pipeline_schedules: tuple[str, ...] = ("1f1b", "interleaved")
    """Pipeline schedules it implements (``Strategy.pipeline_schedule``): Megatron-Core's 1F1B and
    interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py); DualPipe only where the
    framework's file says so (its parameter copies: ``Strategy.pipeline_parameter_copies``)."""
    rope_fusion: bool = True
    """Whether RoPE runs as one fused kernel streaming q and k once (Megatron-Core
    ``apply_rope_fusion``, Transformer Engine's fused RoPE) rather than as eager element-wise
    ops (torchtitan's complex multiply)."""
    moe_expert_fusion: bool = True
    """Whether expert biases and the gated activation run fused (Transformer Engine GroupedLinear
    bias epilogue, Megatron-Core ``bias_activation_fusion``) rather than as eager per-expert
    element-wise kernels (NeMo Automodel's DeepEP experts), which stream the expert activations
    several more times through HBM."""
    attention_kernel: str = "flash"
    """Which kernel runs the attention core: ``flash`` (FlashAttention / Transformer Engine's fused
    attention, what the attention tables time), ``flex`` (PyTorch FlexAttention, slower and
    block-sparse, ``costmodel.llm.flex_attention``) or ``fa2`` (FlashAttention-2 as PyTorch SDPA's
    flash backend runs it, below the H100 table's cuDNN level, ``costmodel.llm.fa2_attention``)."""
    cpu_offloading_num_layers: int = 0
    """Transformer layers whose activations are offloaded to host memory between forward and
    backward (Megatron-Core ``TransformerConfig.cpu_offloading_num_layers``): trades PCIe traffic
    for HBM."""
    fp8_recipe: str = "delayed"
    """Default FP8 scaling recipe (Megatron-Core ``TransformerConfig.fp8_recipe``)."""
    fp8_weight_cache: bool = True
    """Whether FP8 copies of the weights persist across micro-batches (Transformer Engine's weight
    workspace, refreshed on the first micro-batch) rather than being cast per forward."""
    fp8_param_gather: bool = False
    """Whether FP8 runs keep the GEMM weights themselves in FP8 (no 16-bit copy; the fp32 master
    stays in the optimizer) and all-gather them in FP8. Megatron-LM ``--fp8-param-gather``."""
    zero_stages: tuple[int, ...] = (0, 1, 3)
    """ZeRO stages the framework implements (1 = distributed optimizer, 3 = FSDP)."""
    zero_stages_with_pp: tuple[int, ...] = (0, 1, 3)
    """ZeRO stages it accepts together with pipeline parallelism (pp > 1)."""
    cp_comm_types: tuple[str, ...] = ("p2p", "all_gather", "a2a")
    """Context-parallel exchanges it implements (``Strategy.cp_comm_type``): the K/V ring ``p2p``,
    the K/V ``all_gather`` (Llama 3) and the head all-to-all ``a2a`` (Ulysses)."""
    hsdp_zero_stages: tuple[int, ...] = ()
    """ZeRO stages it can shard within a group of data-parallel ranks and replicate across groups
    (``Strategy.hsdp_shard_size``, hybrid sharded data parallelism); empty: none."""
    supports_fp16: bool = True
    """Whether fp16 (loss-scaled) training is supported."""
    supports_tp_comm_overlap: bool = True
    """Whether the framework implements userbuffer TP-comm overlap at all."""
    tp_comm_sm_margin: bool = True
    """Whether userbuffers' ``pipeline`` and ``bulk`` overlaps launch their GEMM on the SMs the comm
    kernel leaves, slower for the GEMM's whole length (``set_sm_margin``: Transformer Engine >= 2.0's
    default for every method but ring exchange), rather than on all SMs, sharing them only while
    the comm kernel runs (``set_sm_margin`` 0: Transformer Engine 1.x's default)."""
    supports_fp8: bool = True
    """Whether FP8 GEMMs exist in the framework (Transformer Engine or its own recipe)."""
    supports_flash_attention: bool = True
    """Whether a fused (flash) attention kernel exists (``Strategy.flash_attention``); without it the
    scores are materialised (baddbmm + softmax), as in Megatron-LM before 2022-12."""
    supports_grad_reduce_overlap: bool = True
    """Whether the data-parallel gradient reduce can overlap the backward (``Strategy.overlap_grad_reduce``);
    without it the reduce runs after the last backward (Megatron-LM's early local DDP)."""
    dp_bucket_scheme: str = "megatron-core"
    """The data-parallel implementation that buckets ZeRO-0/1/2 gradients and parameters
    (``DP_BUCKET_SCHEMES``, ``costmodel.llm.dp_buckets``): ``megatron-core`` (max(40M, 1M x dp)
    buckets on pipeline rank 0 only, parameters gathered one bucket ahead in the next forward),
    ``deepspeed`` (5e8-element buckets on every stage, parameters gathered inside the optimizer
    step), ``apex`` (DistributedFusedAdam: 100 MiB buckets on every stage, gathered in forward
    pre-hooks with ``overlap_param_sync``) or ``per-layer`` (one bucket per transformer block)."""
    supports_sequence_parallel: bool = True
    """Whether Megatron sequence parallelism exists (``Strategy.sequence_parallel``)."""
    supports_context_parallel: bool = True
    """Whether context parallelism exists (``Strategy.cp`` > 1)."""
    supports_moe_tensor_parallel: bool = True
    """Whether tensor parallelism (``Strategy.tp`` > 1) can shard a mixture-of-experts model."""
    recompute_modes: tuple[str, ...] = RECOMPUTE
    cuda_graph_scopes: tuple[str, ...] = ()
    """CUDA-graph scopes it captures in training (``Strategy.cuda_graphs`` other than ``none``;
    ``layers``, ``full_iteration``); empty: it runs eager kernels only."""
    """Activation-recompute modes it implements (``Strategy.recompute``; ``selective`` is Korthikanti et al.
    2022's, absent before it)."""

    def __post_init__(self) -> None:
        where = f"framework {self.name}"
        require_choice(f"{where}.grad_reduce_dtype", self.grad_reduce_dtype, GRAD_DTYPES)
        require_choice(f"{where}.main_grad_dtype", self.main_grad_dtype, GRAD_DTYPES)
        require_choice(f"{where}.master_weights_dtype", self.master_weights_dtype, MASTER_WEIGHT_DTYPES)
        if self.master_weights_dtype == BF16_REMAINDER and not self.separate_master_weights:
            raise SpecError(f"{where}.master_weights_dtype", self.master_weights_dtype,
                            "fp32 or bf16 without separate_master_weights (a remainder completes a separate master)")
        require_choice(f"{where}.adam_moments_dtype", self.adam_moments_dtype, DTYPES)
        require_choice(f"{where}.fsdp_reshard_after_forward", self.fsdp_reshard_after_forward,
                       RESHARD_AFTER_FORWARD)
        require_choice(f"{where}.fsdp_implementation", self.fsdp_implementation, FSDP_IMPLEMENTATIONS)
        require_choice(f"{where}.moe_token_dispatcher", self.moe_token_dispatcher, DISPATCHERS)
        require_choice(f"{where}.attention_kernel", self.attention_kernel, ATTENTION_KERNELS)
        require_choice(f"{where}.fp8_recipe", self.fp8_recipe, FP8_RECIPES)
        require_int(f"{where}.fsdp_prefetch_layers", self.fsdp_prefetch_layers, minimum=0)
        require_choice(f"{where}.selective_recompute", self.selective_recompute, SELECTIVE_RECOMPUTE)
        require_choice(f"{where}.dp_bucket_scheme", self.dp_bucket_scheme, DP_BUCKET_SCHEMES)
        require_int(f"{where}.cpu_offloading_num_layers", self.cpu_offloading_num_layers, minimum=0)
        for name in ("tp_comm_overlap", "main_grad_follows_reduce_dtype", "separate_master_weights",
                     "distributed_optimizer", "fp8_weight_cache", "fp8_param_gather", "supports_fp16", "supports_tp_comm_overlap",
                     "tp_comm_sm_margin",
                     "moe_shared_expert_overlap", "moe_a2a_overlap", "fp8_activation_cache", "fsdp_defer_grad_sync",
                     "rope_fusion", "moe_expert_fusion", "supports_fp8", "supports_flash_attention",
                     "supports_grad_reduce_overlap", "supports_sequence_parallel", "supports_context_parallel",
                     "supports_moe_tensor_parallel"):
            require_bool(f"{where}.{name}", getattr(self, name))
        if not isinstance(self.cp_comm_types, tuple) or not self.cp_comm_types \
                or not set(self.cp_comm_types) <= set(CP_EXCHANGES):
            raise SpecError(f"{where}.cp_comm_types", self.cp_comm_types, "a list among " + ", ".join(CP_EXCHANGES))
        if not isinstance(self.pipeline_schedules, tuple) or not self.pipeline_schedules \
                or not set(self.pipeline_schedules) <= set(PIPELINE_SCHEDULES):
            raise SpecError(f"{where}.pipeline_schedules", self.pipeline_schedules,
                            "a list among " + ", ".join(PIPELINE_SCHEDULES))
        if not isinstance(self.recompute_modes, tuple) or "none" not in self.recompute_modes \
                or not set(self.recompute_modes) <= set(RECOMPUTE):
            raise SpecError(f"{where}.recompute_modes", self.recompute_modes,
                            "a list among " + ", ".join(RECOMPUTE) + " holding none")
        graphed = set(CUDA_GRAPH_SCOPES) - {"none"}
        if not isinstance(self.cuda_graph_scopes, tuple) or not set(self.cuda_graph_scopes) <= graphed:
            raise SpecError(f"{where}.cuda_graph_scopes", self.cuda_graph_scopes,
                            "a list among " + ", ".join(sorted(graphed)) + " (empty: none)")
        for name in ("zero_stages", "zero_stages_with_pp", "hsdp_zero_stages"):
            stages = getattr(self, name)
            if not isinstance(stages, tuple) or not set(stages) <= {0, 1, 2, 3}:
                raise SpecError(f"{where}.{name}", stages, "a list of ZeRO stages among 0, 1, 2, 3")

    @property
    def supports_param_gather_overlap(self) -> bool:
        """Whether ZeRO-1/2's parameter all-gather can overlap the next forward (``overlap_param_gather``)."""
        return self.supports_grad_reduce_overlap and self.dp_bucket_scheme in FORWARD_PARAM_GATHER_SCHEMES

    @property
    def grad_reduce_bytes(self) -> int:
        """Bytes per gradient element on the data-parallel wire."""
        return BYTES[self.grad_reduce_dtype]

    @property
    def main_grad_bytes(self) -> int:
        """Bytes per parameter of the gradients kept until the optimizer step."""
        return BYTES[self.grad_reduce_dtype if self.main_grad_follows_reduce_dtype else self.main_grad_dtype]


FIELD_NAMES = frozenset(f.name for f in fields(Framework))
_FILE_KEYS = FIELD_NAMES | {"inherits", "sources", "aliases"}
_TUPLE_FIELDS = ("zero_stages", "zero_stages_with_pp", "hsdp_zero_stages", "cp_comm_types", "pipeline_schedules",
                 "recompute_modes", "cuda_graph_scopes")


def _read_file(name: str) -> dict[str, Any]:
    path = resources.files("costmodel.catalog").joinpath("frameworks", f"{name}.yaml")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):  # pragma: no cover - shipped file
        raise RuntimeError(f"framework file {name}.yaml must be a mapping")
    return data


def _with_tuples(values: dict[str, Any]) -> dict[str, Any]:
    out = dict(values)
    for key in _TUPLE_FIELDS:
        if isinstance(out.get(key), list):
            out[key] = tuple(out[key])
    return out


@lru_cache(maxsize=None)
def get_framework(name: str) -> Framework:
    """Catalog framework ``name`` (its file, after what it inherits); the error lists the names."""
    if name not in FRAMEWORK_NAMES:
        raise SpecError("framework", name, "a known framework (" + ", ".join(FRAMEWORK_NAMES) + ")")
    data = _read_file(name)
    reject_unknown_keys(f"frameworks/{name}.yaml", data, _FILE_KEYS)
    values = {k: v for k, v in data.items() if k in FIELD_NAMES}
    parent = data.get("inherits")
    if parent is not None:
        return replace(get_framework(parent), name=name, **_with_tuples(values))
    return Framework(name=name, **_with_tuples({k: v for k, v in values.items() if k != "name"}))


def framework_sources(name: str) -> dict[str, str]:
    """The ``sources`` mapping of a framework file (field -> where its value was read)."""
    get_framework(name)
    sources = _read_file(name).get("sources", {})
    return dict(sources) if isinstance(sources, dict) else {}


def framework_for_label(label: Any) -> str | None:
    """The framework a free-text label names (``"NeMo 24.07 (Megatron-Core)"`` -> ``nemo``), or None.

    A catalog name, or a label that starts with one of a file's ``aliases`` (the longest wins).
    """
    if not isinstance(label, str):
        return None
    if label in FRAMEWORK_NAMES:
        return label
    text = label.strip().lower()
    matches = [(len(alias), name) for name in FRAMEWORK_NAMES
               for alias in _read_file(name).get("aliases", []) if text.startswith(str(alias).lower())]
    return max(matches)[1] if matches else None


def resolve_framework(value: Any) -> Framework:
    """The run spec's ``framework:``: a name, or ``{name: ..., <field>: <override>, ...}``."""
    if value is None:
        return get_framework(DEFAULT_FRAMEWORK)
    if isinstance(value, str):
        return get_framework(value)
    if not isinstance(value, dict):
        raise SpecError("framework", value, "a framework name or a mapping with name and field overrides")
    overridable = FIELD_NAMES - {"name", "display_name", "exporter"}
    reject_unknown_keys("framework", value, overridable | {"name"})
    base = get_framework(str(value.get("name", DEFAULT_FRAMEWORK)))
    overrides = {k: v for k, v in value.items() if k != "name"}
    try:
        return replace(base, **_with_tuples(overrides))
    except SpecError as exc:  # name the run-spec field, not the catalog entry
        raise SpecError("framework." + exc.field.split(".", 1)[-1], exc.value, exc.allowed) from None
