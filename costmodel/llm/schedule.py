"""Pipeline schedules: per-stage micro-batch times -> the time of one pipeline flush.

Each schedule is a small function chosen by name from ``SCHEDULES``. It gets the
forward and backward seconds of one micro-batch on every pipeline rank (all of the
rank's layers; with interleaving, all of its virtual chunks together), the number of
micro-batches, the interleaving degree and the time of one point-to-point
activation transfer, and returns the flush time split into its parts. The keyword
``wgrad`` gives each rank's weight-gradient seconds inside its backward; only a
schedule that defers them (DualPipe) reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PipelineTime:
    """One pipeline flush: ``steady_s`` + ``bubble_s`` + ``p2p_s`` = ``total_s``.

    ``steady_s`` is ``m`` micro-batches on the slowest rank (``bottleneck``);
    ``bubble_s`` the warm-up / cool-down idle time and stage imbalance on the
    critical path; ``p2p_s`` the activation transfers left exposed.
    """

    steady_s: float
    bubble_s: float
    p2p_s: float
    bottleneck: int

    @property
    def total_s(self) -> float:
        return self.steady_s + self.bubble_s + self.p2p_s


Schedule = Callable[..., PipelineTime]  # (forward, backward, m, vpp, p2p_s, *, wgrad=None)


def one_f_one_b(forward: Sequence[float], backward: Sequence[float], m: int, vpp: int,
                p2p_s: float, *, wgrad: Sequence[float] | None = None) -> PipelineTime:
    """Non-interleaved 1F1B (PipeDream-Flush; Narayanan et al. 2021, Section 2.2).

    The first micro-batch crosses every rank forward and backward (the fill and
    drain), then the slowest rank paces the other ``m - 1``: with equal ranks
    this is the familiar ``(m + p - 1)(f + b)``. Megatron's 1F1B send/recv calls
    block, so each of the ``m + p - 2`` forward and backward hand-offs on the
    critical path is exposed.
    """
    per_rank = [f + b for f, b in zip(forward, backward)]
    k = max(range(len(per_rank)), key=per_rank.__getitem__)
    steady = m * per_rank[k]
    total = (m - 1) * per_rank[k] + sum(per_rank)
    pp = len(per_rank)
    p2p = 2 * (m + pp - 2) * p2p_s if pp > 1 else 0.0
    return PipelineTime(steady_s=steady, bubble_s=total - steady, p2p_s=p2p, bottleneck=k)


def interleaved_one_f_one_b(forward: Sequence[float], backward: Sequence[float], m: int, vpp: int,
                            p2p_s: float, *, wgrad: Sequence[float] | None = None) -> PipelineTime:
    """Interleaved 1F1B with ``vpp`` model chunks per rank (Narayanan et al. 2021, Section 2.2.1).

    The fill and drain shrink by ``vpp``: the bubble is ``(p - 1)(f + b) / v``
    for equal ranks, generalised here to the sum of the other ranks' chunk
    times. Megatron overlaps the steady-state send/recv with compute in this
    schedule, so only the ``2 (p v - 1)`` hand-offs of warm-up and cool-down
    remain exposed.
    """
    per_rank = [f + b for f, b in zip(forward, backward)]
    k = max(range(len(per_rank)), key=per_rank.__getitem__)
    steady = m * per_rank[k]
    bubble = (sum(per_rank) - per_rank[k]) / vpp
    pp = len(per_rank)
    p2p = 2 * (pp * vpp - 1) * p2p_s if pp > 1 else 0.0
    return PipelineTime(steady_s=steady, bubble_s=bubble, p2p_s=p2p, bottleneck=k)


from costmodel.llm.dualpipe import dualpipe  # noqa: E402  (it builds on PipelineTime above)

SCHEDULES: dict[str, Schedule] = {"1f1b": one_f_one_b, "interleaved": interleaved_one_f_one_b, "dualpipe": dualpipe}


def schedule_name(pp: int, vpp: int, requested: str | None = None) -> str:
    """The schedule ``strategy.pipeline_schedule`` names, else the one Megatron-LM runs for this shape."""
    if requested is not None:
        return requested
    return "interleaved" if pp > 1 and vpp > 1 else "1f1b"
