"""Compute time per pipeline stage: the decomposed operators timed and summed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from constraints.memory import model_state_bytes, state_bytes_per_param
from costmodel.llm import moe
from costmodel.llm.decompose import optimizer_op, stage_ops
from costmodel.llm.recompute import recompute_policy
from costmodel.ops import Op
from costmodel.run_memo import by_reads, for_last_run
from costmodel.specs.reads import reads
from costmodel.specs.layout import layout_of, stage_layer_counts
from costmodel.specs.runspec import RunSpec
from costmodel.timing import OperatorTimer


@dataclass(frozen=True)
class StageCompute:
    """Seconds one GPU of pipeline stage ``stage`` computes.

    ``forward_s`` / ``backward_s`` are per micro-batch over all of the stage's
    layers (backward includes recomputation, ``recompute_s`` of it);
    ``optimizer_s`` is once per step.
    """

    stage: int
    forward_s: float
    backward_s: float
    recompute_s: float
    optimizer_s: float
    attention_s: float  # forward attention kernels per micro-batch (what CP's ring exchange overlaps)
    notes: tuple[str, ...]
    wgrad_s: float = 0.0  # the weight-gradient GEMMs of backward_s (what DualPipe's W defers into the bubble)

    def per_step_s(self, num_microbatches: int) -> float:
        """Forward and backward of every micro-batch plus the optimizer step."""
        return num_microbatches * (self.forward_s + self.backward_s) + self.optimizer_s

    def to_dict(self, num_microbatches: int) -> dict[str, float | int]:
        return {"stage": self.stage, "forward_s": self.forward_s, "backward_s": self.backward_s,
                "recompute_s": self.recompute_s, "optimizer_s": self.optimizer_s,
                "compute_s": self.per_step_s(num_microbatches)}


@by_reads  # ZeRO stage, precision and recompute variants of one layout share it
@reads(*model_state_bytes.reads)
def optimizer_params_on_gpu(run: RunSpec, stage: int) -> float:
    """Parameters whose Adam update this GPU runs (its ZeRO shard when zero_stage >= 1)."""
    return model_state_bytes(run, stage)[2] / state_bytes_per_param(run.framework)[1]


@for_last_run  # the stages' compute, launch overheads and TP / CP exchanges of one prediction ask again
def layer_ops_key(run: RunSpec) -> tuple[Any, ...]:
    """Everything one layer's operators (``decompose.layer_ops`` as ``stage_ops`` calls it) depend on.

    The model, the sequence length, the strategy fields ``costmodel.llm.decompose`` reads
    (cp_comm_type for the p2p ring's attention kernels; recompute as the framework's policy,
    ``costmodel.llm.recompute``; the MoE fields of ``moe.ops_key``), the framework's RoPE fusion and
    attention kernel. The GPU is the timer's (memos live on a timer). dp, the global batch, ZeRO,
    the overlap switches and the pipeline knobs shape no layer operator.
    """
    s = run.strategy
    return (run.model, run.seq_length, s.tp, s.cp, s.cp_comm_type, s.ep, s.micro_batch_size,
            s.sequence_parallel, recompute_policy(run), s.precision, s.flash_attention,
            moe.ops_key(run), run.framework.rope_fusion, run.framework.attention_kernel)


def stage_ops_key(run: RunSpec, stage: int) -> tuple[Any, ...]:
    """Everything ``stage_ops(run, stage)`` depends on: equal keys give equal operator lists.

    ``layer_ops_key``, the stage's (dense, MoE) layer counts, and the embedding, MTP layers and
    loss it holds (``PipelineLayout.rank_key``; a stage's index does not matter): pp and vpp
    shape operators only through these.
    """
    s = run.strategy
    return layer_ops_key(run) + (stage_layer_counts(run.model, s, stage), layout_of(run.model, s).rank_key(stage)[1:])


def stage_totals(timer: OperatorTimer, ops: list[Any]) -> tuple[Any, ...]:
    """One stage's operators ``ops`` timed: (forward, backward with recomputation, recomputation,
    forward attention, notes, weight-gradient GEMMs) seconds per micro-batch, as ``stage_compute`` memoises them."""
    timed = timer.time_ops(ops)
    wgrad = sum(sec * op.count for op, sec in zip(timed.ops, timed.seconds)
                if op.phase == "bwd" and op.name.endswith(".wgrad"))  # decompose's weight-gradient GEMMs
    return (timed.total(("fwd",)), timed.total(("bwd", "recompute")), timed.total(("recompute",)),
            timed.total_family("attention_fwd", ("fwd",)), tuple(timed.notes), float(wgrad))


def stage_compute(run: RunSpec, stage: int, timer: OperatorTimer, ops: list[Op] | None = None,
                  key: tuple[Any, ...] | None = None) -> StageCompute:
    """Time the operators of one pipeline stage (layer work memoised on ``timer`` by ``stage_ops_key``);
    ``ops``, ``key``: ``stage_ops(run, stage)`` and ``stage_ops_key(run, stage)`` where the caller has them."""
    key = stage_ops_key(run, stage) if key is None else key
    totals = timer.stage_memo.get(key)
    if totals is None:
        totals = timer.stage_memo[key] = stage_totals(timer, stage_ops(run, stage) if ops is None else ops)
    forward, backward, recompute, attention, notes, wgrad = totals
    params = optimizer_params_on_gpu(run, stage)
    opt_key = ("optimizer", params, notes)
    optimizer = timer.stage_memo.get(opt_key)
    if optimizer is None:
        opt = timer.time_ops([optimizer_op(params)])
        optimizer = timer.stage_memo[opt_key] = (opt.total(), tuple(sorted(set(notes) | set(opt.notes))))
    return StageCompute(stage=stage, forward_s=forward, backward_s=backward, recompute_s=recompute,
                        optimizer_s=optimizer[0], attention_s=attention, notes=optimizer[1], wgrad_s=wgrad)


def distinct_stages(run: RunSpec) -> list[int]:
    """The stages whose work differs (``PipelineLayout.rank_key``): the first of each kind, in order."""
    return sorted(set(layout_of(run.model, run.strategy).first_alike))


def pipeline_compute(run: RunSpec, timer: OperatorTimer) -> dict[int, StageCompute]:
    """Compute time of every pipeline stage; stages holding the same layers (``PipelineLayout.rank_key``)
    share one result, that of the first of them (an even split's middle stages share stage 1's)."""
    keys = {st: stage_ops_key(run, st) for st in distinct_stages(run)}
    new = {st: stage_ops(run, st) for st, key in keys.items() if key not in timer.stage_memo}
    if len(new) > 1:  # the stages' new shapes in one predictor call (~0.2 ms each, whatever its rows)
        timer.time_ops([op for ops in new.values() for op in ops])
    computed = {st: stage_compute(run, st, timer, new.get(st), key) for st, key in keys.items()}
    return {st: computed[first] for st, first in enumerate(layout_of(run.model, run.strategy).first_alike)}
