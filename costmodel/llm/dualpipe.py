"""DualPipe, DeepSeek-V3's bidirectional pipeline schedule (arXiv 2412.19437, section 3.2.1).

Micro-batches enter the pipeline from both ends; each rank holds two stages (the first and last
of the pipeline share a rank, hence two parameter copies, ``Strategy.pipeline_parameter_copies``). In the steady
state a forward chunk of one micro-batch and a backward chunk of another run as one overlapped
pair: each chunk's attention, all-to-all dispatch, MLP and all-to-all combine interleave with the
other's, "so both all-to-all and PP communication can be fully hidden during execution" (ibid.).
The backward splits into input-gradient (B) and weight-gradient (W) parts, as in ZeroBubble
(Qi et al. 2023, arXiv 2401.10241), and W fills the bubble. Table 2 of the report gives the bubble

    (PP/2 - 1) (F&B + B - 3W)

against 1F1B's ``(PP - 1)(F + B)``, with F&B the time of an overlapped forward/backward pair. With
the communication hidden, F&B is the pair's compute, F + B + W here. W is the stage's timed
weight-gradient GEMMs (``costmodel.llm.compute.StageCompute.wgrad_s``), not a share of the whole
backward: recomputation, the attention core's backward and exposed communication stay in B.

Not a Megatron-Core schedule; HAI-LLM's (DeepSeek in-house), and open-sourced as
github.com/deepseek-ai/DualPipe. Chosen with ``strategy.pipeline_schedule: dualpipe``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # schedule.py registers this module, so it is imported at call time
    from costmodel.llm.schedule import PipelineTime

def dualpipe(forward: Sequence[float], backward: Sequence[float], m: int, vpp: int,
             p2p_s: float, *, wgrad: Sequence[float] | None = None) -> PipelineTime:
    """DualPipe flush: ``m`` micro-batches on the slowest rank plus Table 2's bubble.

    ``forward`` / ``backward`` are each rank's per-micro-batch seconds (backward = B + W, with
    its recomputation, exposed communication and overhead in B); ``wgrad`` is W, each rank's
    timed weight-gradient GEMMs (``StageCompute.wgrad_s``; None: no W to defer). The bubble is
    ``(pp/2 - 1)(F + 2(B + W) - 4W)`` on the slowest rank. The send/recv of warm-up and
    cool-down (``2 (pp - 1)`` hand-offs) stay exposed; the steady state's are hidden under the
    paired chunk (section 3.2.1). ``vpp`` is unused: each rank always holds two chunks.
    """
    from costmodel.llm.schedule import PipelineTime

    per_rank = [f + b for f, b in zip(forward, backward)]
    k = max(range(len(per_rank)), key=per_rank.__getitem__)
    pp = len(per_rank)
    f, b = forward[k], backward[k]
    w = min(wgrad[k], b) if wgrad is not None else 0.0
    bubble = max(pp / 2 - 1, 0.0) * (f + 2 * b - 4 * w)
    p2p = 2 * (pp - 1) * p2p_s if pp > 1 else 0.0
    return PipelineTime(steady_s=m * per_rank[k], bubble_s=max(bubble, 0.0), p2p_s=p2p, bottleneck=k)
