"""Named step-time overheads that the timed operators and collectives do not hold.

Two mechanisms, each with its source, replace the flat "other" scale that the
calibration used to carry:

- **kernel launch**: the host issues every kernel of a layer one after another;
  when the GPU work of the layer is shorter than the host's issue time the GPU
  waits (``launch_exposed_s``).
- **data-parallel stragglers**: replicas meet at the gradient sync every step,
  so the step runs at the pace of the slowest of them; with independent per-rank
  jitter that slowest one drifts further from the mean as replicas are added
  (``straggler_fraction``).

The optimizer step is not here: it is an operator (``costmodel.llm.decompose.optimizer_op``,
timed in ``StageCompute.optimizer_s``) and the global calibration factor does not
stretch it. What the mechanisms leave is one global factor
(``costmodel.calibration.compute_scale``).
"""

from __future__ import annotations

from statistics import NormalDist

from costmodel.llm.compute import layer_ops_key
from costmodel.llm.decompose import run_layer_ops
from costmodel.ops import Op
from costmodel.specs.runspec import RunSpec
from costmodel.timing import OperatorTimer

# Host time to issue one kernel from an eager PyTorch training loop (Python op dispatch,
# autograd bookkeeping, cudaLaunchKernel). Sources: PyTorch's operator micro-benchmarks put a
# trivial CUDA op's eager forward at ~3.3 us of CPU time (github.com/pytorch/pytorch PR #32194,
# "split_M8_N8_parts2_cuda Forward Execution Time (us): 3.333"); NVIDIA's "Getting Started with
# CUDA Graphs" (developer.nvidia.com/blog/cuda-graphs/) measures a few us of launch overhead
# per kernel on top of a 2.9 us kernel. 5 us is inside that range, not fitted.
LAUNCH_S_PER_KERNEL = 5e-6
# Under CUDA graphs (Strategy.cuda_graphs) the host issues one cudaGraphLaunch per captured pass instead of
# each kernel (the graph runs as one launch, NVIDIA "Getting Started with CUDA Graphs"); "layers" captures
# each layer's forward and backward (Megatron-LM @d98e8a64 docs/user-guide/features/cuda_graph.md),
# "full_iteration" all of them at once, so one launch per layer pass bounds both.
GRAPH_LAUNCHES_PER_PASS = 1

# Coefficient of variation of one replica's step time (independent jitter: clocks under power
# and thermal limits, OS noise, link retries). Source: Llama 3 (arXiv 2407.21783, section 3.3.4)
# reports 1-2% diurnal throughput variation of a whole job from temperature alone; the low end
# is taken, a judgement, not a fit.
STRAGGLER_CV = 0.01


def launch_exposed_s(kernels: float, gpu_s: float, launch_s: float = LAUNCH_S_PER_KERNEL) -> float:
    """Seconds the GPU waits for the host while ``kernels`` kernels of ``gpu_s`` total work are issued.

    The host runs ahead of the GPU asynchronously, so issue time is hidden unless it is
    longer than the work it issues: exposed = max(0, kernels x launch_s - gpu_s).
    """
    return max(0.0, kernels * launch_s - gpu_s)


def _layer_ops(run: RunSpec, moe: bool) -> list[Op]:
    """One layer's operators as ``costmodel.llm.decompose.stage_ops`` builds them for ``run``'s framework."""
    return run_layer_ops(run, moe)


def kernels_per_layer(run: RunSpec, moe: bool = False) -> tuple[int, int]:
    """(forward, backward incl. recompute) kernels of one transformer layer of ``run``.

    One kernel per operator of the decomposition (a grouped expert GEMM or a batched
    attention is one launch); real layers launch a few more (casts, bias), so this is a
    lower bound on the issue time.
    """
    ops = _layer_ops(run, moe)
    forward = sum(1 for op in ops if op.phase == "fwd")
    return forward, len(ops) - forward


def layer_launch_exposed_s(run: RunSpec, timer: OperatorTimer, dense_layers: float, moe_layers: float) -> float:
    """Exposed launch seconds of one micro-batch (forward, then backward) over a stage's layers.

    Each layer's GPU work is its own operators timed by ``timer`` (memoised on the timer by
    ``costmodel.llm.compute.layer_ops_key``, the CUDA-graph capture and the layer kind). Captured
    layers (``Strategy.cuda_graphs``) issue one graph launch per pass.
    """
    exposed = 0.0
    for count, moe in ((dense_layers, False), (moe_layers, True)):
        if count > 0:
            key = ("launch_exposed", layer_ops_key(run), run.strategy.cuda_graphs, moe)
            hit = timer.stage_memo.get(key)
            if hit is None:
                timed = timer.time_ops(_layer_ops(run, moe))
                fwd_kernels, bwd_kernels = kernels_per_layer(run, moe)
                if run.strategy.cuda_graphs != "none":  # a captured layer is one graph launch per pass
                    fwd_kernels = bwd_kernels = GRAPH_LAUNCHES_PER_PASS
                hit = timer.stage_memo[key] = (
                    launch_exposed_s(fwd_kernels, timed.total(("fwd",)))
                    + launch_exposed_s(bwd_kernels, timed.total(("bwd", "recompute"))))
            exposed += count * hit
    return exposed


def expected_max_standard_normal(n: int) -> float:
    """E[max of n independent standard normals], Blom's approximation Phi^-1((n - 0.375) / (n + 0.25)).

    Exact at n = 1 (0); a few percent from the exact values for n >= 2 (Blom 1958,
    "Statistical Estimates and Transformed Beta-Variables"; checked by simulation in the tests).
    """
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def straggler_fraction(replicas: int, cv: float = STRAGGLER_CV) -> float:
    """Step-time fraction lost waiting for the slowest of ``replicas`` data-parallel replicas.

    The synchronous step takes the maximum of the replicas' times: mean x (1 + cv x E[max of n]).
    It grows like sqrt(2 ln n), so each doubling costs less than the one before
    (cv = 1%: 0.6% at 2 replicas, 2.4% at 64, 3.2% at 1024).
    """
    return cv * expected_max_standard_normal(int(replicas))
