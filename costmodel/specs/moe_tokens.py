"""Token rows of an MoE layer on one rank: the one formula the time model and the memory model share.

Read from github.com/NVIDIA/Megatron-LM @d98e8a64, megatron/core/transformer/moe/token_dispatcher.py:
under sequence parallelism a rank enters the MoE layer with its ``1/tp`` share of the micro-batch's
tokens (``[S/TP * B, H]``), sends ``top_k`` copies of each and, balanced, receives as many, then
all-gathers them within its expert-TP group. ``costmodel.llm.moe`` times what moves;
``constraints.moe_buffers`` and ``constraints.memory`` size what is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from costmodel.specs.model import ModelSpec
from costmodel.specs.strategy import Strategy

if TYPE_CHECKING:
    from costmodel.specs.runspec import RunSpec

__all__ = ["DEFAULT_LOAD_IMBALANCE", "dispatcher", "expert_rows", "load_factor", "load_imbalance", "local_tokens"]

# Balanced routing unless a measured max/mean expert load is given. Why: DeepSeek-V3's
# auxiliary-loss-free balancing "maintains balanced expert load during training" (DeepSeek-AI,
# arXiv 2412.19437, section 2.1.2), recipes train with an aux loss, and published Megatron-Core
# MoE benchmarks are often force-balanced (--moe-router-force-load-balancing). Real routing
# costs more: Megatron-LM issue 6757 (NVIDIA/Megatron-LM, 2026-09-18) measures a 1.35x spread of
# MoE forward+backward time over skewed workloads (1.3-3.1x for the dispatch alone).
DEFAULT_LOAD_IMBALANCE = 1.0


def dispatcher(run: RunSpec) -> str:
    """The token dispatcher: ``strategy.moe_token_dispatcher``, else the framework file's default."""
    return run.strategy.moe_token_dispatcher or run.framework.moe_token_dispatcher


def load_imbalance(strategy: Strategy) -> float:
    """Max/mean expert load of the busiest EP rank (1.0: balanced)."""
    value = strategy.moe_load_imbalance
    return DEFAULT_LOAD_IMBALANCE if value in (None, "balanced") else float(value)  # type: ignore[arg-type]


def load_factor(strategy: Strategy) -> float:
    """Rows the busiest rank's experts process over the balanced rows.

    Drop-less: the load imbalance. With a capacity factor every expert's input is padded to its
    capacity, ``factor x`` the balanced rows (``moe_pad_expert_input_to_capacity``), and tokens
    beyond it are dropped, so imbalance no longer sets the pace.
    """
    factor = strategy.moe_capacity_factor
    return float(factor) if factor is not None else load_imbalance(strategy)


def local_tokens(strategy: Strategy, seq_length: int) -> float:
    """Tokens one rank enters the MoE layer with: its ``1/tp`` share under sequence parallelism."""
    s = strategy
    tokens = s.micro_batch_size * seq_length / s.cp
    return tokens / s.tp if s.sequence_parallel and s.tp > 1 else tokens


def expert_rows(model: ModelSpec, strategy: Strategy, seq_length: int) -> float:
    """Token rows the experts of the busiest rank process per micro-batch (all its local experts).

    Balanced, a rank receives as many of the ``top_k`` copies as it sent, then all-gathers them
    within its expert-TP group; the load factor scales that for the busiest rank.
    """
    return local_tokens(strategy, seq_length) * model.moe_router_topk * strategy.expert_tensor_parallel_size \
        * load_factor(strategy)
