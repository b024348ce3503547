"""The parallelism strategy of one training run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from typing import Any

from costmodel.specs.errors import SpecError, require_bool, require_choice, require_int

RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp16", "fp8")
ZERO_STAGES = (0, 1, 2, 3)
# Transformer Engine cp_comm_type values (context_parallel.py attn_forward_func_with_cp): K/V ring,
# K/V all-gather (Llama 3), head all-to-all (Ulysses).
CP_COMM_TYPES = ("p2p", "all_gather", "a2a")


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

    def __post_init__(self) -> None:
        if self.sequence_parallel is None:  # Megatron-Core / NeMo recipes turn it on whenever tp > 1
            object.__setattr__(self, "sequence_parallel", isinstance(self.tp, int) and self.tp > 1)
        for name in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "global_batch_size"):
            require_int(f"strategy.{name}", getattr(self, name))
        require_choice("strategy.recompute", self.recompute, RECOMPUTE)
        require_choice("strategy.precision", self.precision, PRECISIONS)
        require_choice("strategy.cp_comm_type", self.cp_comm_type, CP_COMM_TYPES)
        if isinstance(self.zero_stage, bool) or self.zero_stage not in ZERO_STAGES:
            raise SpecError("strategy.zero_stage", self.zero_stage, "one of 0, 1, 2, 3")
        for name in ("sequence_parallel", "flash_attention", "allow_tp_across_nodes", "tp_comm_overlap",
                     "overlap_grad_reduce", "overlap_param_gather"):
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
    def expert_data_parallel_size(self) -> int:
        """Ranks that hold the same expert shard (dp * cp / ep, at least 1)."""
        return max(1, (self.dp * self.cp) // self.ep)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


STRATEGY_KEYS = frozenset(f.name for f in fields(Strategy))


@lru_cache(maxsize=4096)  # the memory model, decomposition and step time ask once per stage
def pipeline_layers(num_layers: int, pp: int, vpp: int = 1) -> tuple[int, ...] | None:
    """Transformer layers each pipeline rank holds (all its virtual chunks), or None if unsupported.

    Even when ``pp * vpp`` divides ``num_layers``. Otherwise, with ``vpp == 1``,
    Megatron-Core's uneven split (``--decoder-first-pipeline-num-layers`` /
    ``--decoder-last-pipeline-num-layers``, TransformerConfig
    ``num_layers_in_{first,last}_pipeline_stage``): every middle rank holds
    ``ceil(num_layers / pp)`` layers and the first and last ranks, which also
    hold the embedding and the LM head, give up the shortfall between them (the
    last one more when it is odd), each keeping at least one layer. Llama 3
    405B's 126 layers on pp 16 give 7, 14 x 8, 7 (the layout of Dubey et al.
    2024, section 3.3.2: one layer fewer on the first and the last stage).
    Interleaving (``vpp > 1``) with an uneven split is not modelled.
    """
    if pp < 1 or vpp < 1 or num_layers < pp:
        return None
    if num_layers % (pp * vpp) == 0:
        return (num_layers // pp,) * pp
    if vpp > 1 or pp == 1:
        return None
    base = -(-num_layers // pp)
    shortfall = base * pp - num_layers
    first, last = base - shortfall // 2, base - (shortfall + 1) // 2
    if first < 1 or last < 1:
        return None
    return (first, *(base,) * (pp - 2), last)


def uneven_ends(num_layers: int, pp: int, vpp: int = 1) -> tuple[int, int] | None:
    """(first, last) stage layers of an uneven ``pipeline_layers`` split; None when even or unsupported."""
    split = pipeline_layers(num_layers, pp, vpp)
    if split is None or len(set(split)) == 1:
        return None
    return split[0], split[-1]
