"""The parallelism strategy of one training run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from costmodel.specs.errors import MAX_INT, SpecError, require_bool, require_choice, require_int, require_number
from costmodel.specs.hashing import hash_once
from costmodel.specs.layout import parse_layout

RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp16", "fp8")
ZERO_STAGES = (0, 1, 2, 3)
# Transformer Engine cp_comm_type values (context_parallel.py attn_forward_func_with_cp): K/V ring,
# K/V all-gather (Llama 3), head all-to-all (Ulysses).
CP_COMM_TYPES = ("p2p", "all_gather", "a2a")
# Megatron-Core --moe-token-dispatcher-type, with "hybridep" for flex + --moe-flex-dispatcher-backend hybridep.
MOE_DISPATCHERS = ("allgather", "alltoall", "flex", "hybridep")
# Which experts a token's top-k lands on (costmodel.llm.moe.holders_reached): "uniform", top_k distinct
# experts at random (a trained, balanced router; Megatron-Core --moe-router-force-load-balancing draws
# random logits); "round_robin", token i to experts k*i ... k*i+k-1 mod E (NeMo Automodel FakeBalancedGate).
MOE_ROUTINGS = ("uniform", "round_robin")
# costmodel.llm.schedule.SCHEDULES: Megatron-Core's 1F1B and interleaved 1F1B, DeepSeek-V3's DualPipe.
PIPELINE_SCHEDULES = ("1f1b", "interleaved", "dualpipe")
# Parameter copies each pipeline rank holds under a schedule (1 unless listed). DualPipe: 2, arXiv 2412.19437
# Sec. 3.2.1 ("requires keeping two copies of the model parameters") and Table 2 / github.com/deepseek-ai/DualPipe
# README ("Parameter Per Device 2x"); both state parameters only.
PARAMETER_COPIES = {"dualpipe": 2}
# What CUDA graphs capture (constraints/cuda_graphs.py), as Megatron-LM @d98e8a64 names its scopes
# (docs/user-guide/features/cuda_graph.md): "layers", one graph per transformer layer and micro-batch
# (--cuda-graph-impl transformer_engine|local, --cuda-graph-modules unset: the whole layer);
# "full_iteration", the forward-backward of the whole step (--cuda-graph-impl full_iteration).
CUDA_GRAPH_SCOPES = ("none", "layers", "full_iteration")


_POSITIVE_INTS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "global_batch_size")
_BOOLS = ("sequence_parallel", "flash_attention", "allow_tp_across_nodes", "tp_comm_overlap", "overlap_grad_reduce",
          "overlap_param_gather", "account_for_embedding", "account_for_loss")


@hash_once
@dataclass(frozen=True, kw_only=True)
class Strategy:
    """How one training step is split over GPUs (frozen and hashable).

    Degrees multiply as ``tp * pp * cp * dp = num_gpus``; expert parallelism
    ``ep`` is carved out of the ``dp * cp`` ranks, as Megatron-LM does.
    ``vpp`` > 1 selects the interleaved 1F1B schedule. ``zero_stage`` 1 is the
    Megatron distributed optimizer; 3 shards parameters too (FSDP).

    Defaults follow current Megatron-Core / NeMo recipes: the distributed
    optimizer (``zero_stage=1``) and sequence parallelism whenever ``tp > 1``.
    Launch knobs beyond the contract's core keys (optional, with the defaults of
    current Megatron-LM / NeMo recipes): ``flash_attention``, ``tp_comm_overlap``
    (TP communication hidden behind GEMMs), ``overlap_grad_reduce`` (bucketed
    gradient sync during the last backward), ``overlap_param_gather`` (ZeRO
    parameter all-gather during the next forward), ``allow_tp_across_nodes`` and
    ``cp_comm_type`` (how context parallelism exchanges K/V: the ``p2p`` ring, the default
    of Megatron-Core ``--cp-comm-type``; ``all_gather``, Llama 3; ``a2a``, Ulysses).

    MoE knobs (None: the framework's default, ``costmodel.llm.moe``): ``etp``, the
    expert-tensor-parallel size (Megatron-Core parallel folding: the expert
    layers lay ``etp * ep * edp`` over the same ``tp * cp * dp`` ranks; None =
    ``tp``, as Megatron-LM defaults ``--expert-tensor-parallel-size``);
    ``moe_token_dispatcher``; ``moe_capacity_factor`` (None: drop-less; a
    factor pads every expert's input to its capacity); ``moe_load_imbalance``
    (``"balanced"`` or the measured max/mean expert load, >= 1); ``moe_routing``
    (``MOE_ROUTINGS``; None: ``uniform``), which experts a token's top-k lands on, so how
    many EP ranks and domains its copies reach;
    ``moe_shared_expert_overlap`` and ``moe_a2a_overlap``
    (``--overlap-moe-expert-parallel-comm``).

    Pipeline layout knobs (Megatron-Core's, read through ``costmodel.specs.layout.layout_of``;
    at most one kind may be set, as TransformerConfig requires): ``pipeline_layout``, a
    ``--pipeline-model-parallel-layout`` string whose stage count sets ``vpp``;
    ``first_stage_layers`` / ``last_stage_layers`` (``--decoder-first/last-pipeline-num-layers``);
    ``account_for_embedding`` / ``account_for_loss`` (``--account-for-embedding/loss-in-pipeline-split``).
    With none set, a ``pp`` that does not divide the layers takes the default first/last-stage split.
    ``pipeline_schedule`` (``PIPELINE_SCHEDULES``; None: the one Megatron-LM runs for ``pp`` and
    ``vpp``) names the schedule, e.g. ``dualpipe`` (DeepSeek-V3, ``costmodel.llm.dualpipe``).
    ``pipeline_flushes`` (default 1): with ``pp > 1``, how many times the schedule runs per optimizer
    step, each over ``num_microbatches / pipeline_flushes`` micro-batches with its own fill and drain
    (PyTorch-pipelining frameworks step the schedule once per local batch inside their
    gradient-accumulation loop: NeMo Automodel's ``GA``, torchtitan); Megatron runs all in one.

    ``cuda_graphs`` (``CUDA_GRAPH_SCOPES``; default ``none``, eager): what CUDA graphs capture, per
    layer or the whole iteration; where the framework runs them (``Framework.cuda_graph_scopes``) it
    adds the graphs' static buffers and private pool to memory and removes the captured kernels' host
    launch time (``constraints.cuda_graphs``, ``costmodel.llm.overheads``).

    ``hsdp_shard_size`` (hybrid sharded data parallelism): the data-parallel ranks (of the
    ``dp * cp`` gradient-sync group) one ZeRO shard spans; the ``dp * cp / hsdp_shard_size``
    groups replicate it. 0 (default): shard over all of them. Smaller groups keep the
    parameter gathers inside a node and add an all-reduce of the gradient shard across the
    replicas (torchtitan ``data_parallel_shard_degree``, Megatron-LM
    ``--num-distributed-optimizer-instances``, DeepSpeed ``mics_shard_size``).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    micro_batch_size: int = 1
    global_batch_size: int = 1
    sequence_parallel: bool | None = None
    recompute: str = "none"
    zero_stage: int = 1
    precision: str = "bf16"
    flash_attention: bool = True
    allow_tp_across_nodes: bool = False
    tp_comm_overlap: bool = False
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    cp_comm_type: str = "p2p"
    etp: int | None = None
    moe_token_dispatcher: str | None = None
    moe_capacity_factor: float | None = None
    moe_load_imbalance: str | float | None = None
    moe_routing: str | None = None
    moe_shared_expert_overlap: bool | None = None
    moe_a2a_overlap: bool | None = None
    pipeline_layout: str | None = None
    pipeline_schedule: str | None = None
    pipeline_flushes: int = 1
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    account_for_embedding: bool = False
    account_for_loss: bool = False
    hsdp_shard_size: int = 0
    cuda_graphs: str = "none"

    def __post_init__(self) -> None:
        if self.sequence_parallel is None:  # Megatron-Core / NeMo recipes turn it on whenever tp > 1
            object.__setattr__(self, "sequence_parallel", isinstance(self.tp, int) and self.tp > 1)
        # a sweep builds every strategy of its space: the plain valid case costs no message formatting
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if type(value) is not int or not 1 <= value <= MAX_INT:
                require_int(f"strategy.{name}", value)
        require_choice("strategy.recompute", self.recompute, RECOMPUTE)
        require_choice("strategy.precision", self.precision, PRECISIONS)
        require_choice("strategy.cp_comm_type", self.cp_comm_type, CP_COMM_TYPES)
        require_choice("strategy.cuda_graphs", self.cuda_graphs, CUDA_GRAPH_SCOPES)
        require_int("strategy.hsdp_shard_size", self.hsdp_shard_size, minimum=0)
        require_int("strategy.pipeline_flushes", self.pipeline_flushes)
        if isinstance(self.zero_stage, bool) or self.zero_stage not in ZERO_STAGES:
            raise SpecError("strategy.zero_stage", self.zero_stage, "one of 0, 1, 2, 3")
        for name in _BOOLS:
            value = getattr(self, name)
            if value is not True and value is not False:
                require_bool(f"strategy.{name}", value)
        self._check_moe_knobs()
        self._check_pipeline_layout()

    def _check_pipeline_layout(self) -> None:
        """Layout knobs Megatron-Core refuses without knowing the model (TransformerConfig __post_init__)."""
        ends = ("first_stage_layers", "last_stage_layers")
        for name in ends:
            if getattr(self, name) is not None:
                require_int(f"strategy.{name}", getattr(self, name))
                if self.pp == 1:
                    raise SpecError(f"strategy.{name}", getattr(self, name),
                                    "unset when strategy.pp=1 (one stage is both the first and the last)")
                if getattr(self, name) % self.vpp:
                    raise SpecError(f"strategy.{name}", getattr(self, name),
                                    f"divisible by strategy.vpp={self.vpp} (each virtual stage holds a share)")
        accounted = self.account_for_embedding or self.account_for_loss
        if accounted and any(getattr(self, name) is not None for name in ends):
            raise SpecError("strategy.account_for_embedding/account_for_loss", True,
                            "false when strategy.first_stage_layers or strategy.last_stage_layers is set "
                            "(Megatron-Core refuses both)")
        if self.pipeline_layout is None:
            return
        if accounted or any(getattr(self, name) is not None for name in ends):
            raise SpecError("strategy.pipeline_layout", self.pipeline_layout,
                            "unset when strategy.first_stage_layers, last_stage_layers, account_for_embedding or "
                            "account_for_loss is set (Megatron-Core refuses both)")
        stages = len(parse_layout(self.pipeline_layout))
        if stages % self.pp:
            raise SpecError("strategy.pipeline_layout", self.pipeline_layout,
                            f"a layout whose {stages} stages are a multiple of strategy.pp={self.pp}")
        if self.vpp not in (1, stages // self.pp):
            raise SpecError("strategy.vpp", self.vpp,
                            f"{stages // self.pp} (the virtual stages per rank strategy.pipeline_layout gives "
                            f"pp={self.pp}) or left out")
        object.__setattr__(self, "vpp", stages // self.pp)  # Megatron-Core derives vpp from the layout

    def _check_moe_knobs(self) -> None:
        if self.etp is not None:
            require_int("strategy.etp", self.etp)
        if self.moe_token_dispatcher is not None:
            require_choice("strategy.moe_token_dispatcher", self.moe_token_dispatcher, MOE_DISPATCHERS)
        if self.moe_capacity_factor is not None:
            require_number("strategy.moe_capacity_factor", self.moe_capacity_factor)
        imbalance = self.moe_load_imbalance
        if imbalance is not None and imbalance != "balanced":
            if isinstance(imbalance, str):
                raise SpecError("strategy.moe_load_imbalance", imbalance, "balanced, or a number >= 1")
            require_number("strategy.moe_load_imbalance", imbalance, minimum=1.0, strict=False)
        if self.pipeline_schedule is not None:
            require_choice("strategy.pipeline_schedule", self.pipeline_schedule, PIPELINE_SCHEDULES)
        if self.moe_routing is not None:
            require_choice("strategy.moe_routing", self.moe_routing, MOE_ROUTINGS)
        for name in ("moe_shared_expert_overlap", "moe_a2a_overlap"):
            if getattr(self, name) is not None:
                require_bool(f"strategy.{name}", getattr(self, name))

    @property
    def model_parallel_size(self) -> int:
        """GPUs one model replica spans (tp * pp * cp)."""
        return self.tp * self.pp * self.cp

    @property
    def world_size(self) -> int:
        return self.model_parallel_size * self.dp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches each DP replica runs per step (floored; rules flag a remainder)."""
        return max(1, self.global_batch_size // (self.micro_batch_size * self.dp))

    @property
    def shard_group_size(self) -> int:
        """Data-parallel ranks one ZeRO shard spans: ``hsdp_shard_size``, or all ``dp * cp``."""
        return self.hsdp_shard_size or self.dp * self.cp

    @property
    def shard_replicas(self) -> int:
        """Groups that hold the same ZeRO shard (HSDP replicas; 1 without HSDP)."""
        return max(1, (self.dp * self.cp) // self.shard_group_size)

    @property
    def pipeline_parameter_copies(self) -> int:
        """Copies of its stage's parameters a pipeline rank holds (``PARAMETER_COPIES``; 1 unless DualPipe)."""
        return PARAMETER_COPIES.get(self.pipeline_schedule or "", 1)

    @property
    def expert_tensor_parallel_size(self) -> int:
        """``etp``, or ``tp`` when unset (Megatron-LM arguments.py: expert_tensor_parallel_size = tp)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_data_parallel_size(self) -> int:
        """Ranks that hold the same expert shard: tp * dp * cp / (etp * ep), at least 1 (dp * cp / ep at etp = tp)."""
        return max(1, (self.tp * self.dp * self.cp) // (self.expert_tensor_parallel_size * self.ep))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


STRATEGY_KEYS = frozenset(f.name for f in fields(Strategy))


def pipeline_layers(num_layers: int, pp: int, vpp: int = 1) -> tuple[int, ...] | None:
    """Decoder layers per rank of the layout with no layout knob set, or None where the rules refuse it.

    Kept for callers that know only the degrees; ``costmodel.specs.layout.layout_of`` is the source.
    """
    from costmodel.specs.layout import _layout

    if pp < 1 or vpp < 1:
        return None
    layout = _layout(num_layers, 0, pp, vpp, None, None, None, False, False)
    return None if layout.problems else layout.stage_layers
