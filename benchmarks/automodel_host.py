"""Is NeMo Automodel's eager MoE layer host-bound? Host issue time against parplan's GPU time (issue 13).

Automodel runs eager PyTorch (no CUDA graphs): the host dispatches every kernel and the GPU idles
whenever the host falls behind. Between host syncs the host runs ahead, so a segment costs
max(host, GPU); a sync (DeepEP's normal-mode dispatch returns ``num_recv_tokens_per_expert_list``
to the host, nemo_automodel/components/moe/megatron/fused_a2a.py @01926a5c) drains the queue and
the GPU waits while the host issues the next kernel.

For every Automodel row of studies/validation/public.yaml this prints one MoE layer's forward and
backward GPU time (parplan's operators), the kernels Automodel launches there (counted from its
code, below), the per-kernel host cost at which the layer would turn host-bound (GPU time /
kernels), and the host cost this machine's CPU measures for one eager op with autograd
(CPU tensors: dispatcher + autograd, no CUDA launch) beside the sourced 5 us of
``costmodel.llm.overheads.LAUNCH_S_PER_KERNEL``. It also bounds the syncs' refill cost: one per MoE
forward (and recomputed forward) at one host op each.

Kernel counts, forward of one MoE layer (nemo_automodel @01926a5c; backward taken as twice the
forward, autograd's one to two kernels per differentiable op):
- GPT-OSS (gpt_oss/layers.py, rope_utils.py, attention/flex_attention.py, moe/layers.py
  GroupedExpertsDeepEP with expert bias): attention 30 (TE RMSNorm 1, q/k/v 3, eager RoPE 9 per q and
  k, compiled flex 1, sink rescale 4, transpose-contiguous 1, o_proj 1, residual 1), MoE 23 outside the
  experts (norm, token mask, FakeBalancedGate 6, index mask 2, dispatch layout + notify + dispatch 3,
  fused permute 3, compiled activation 1, unpermute + combine 3, residual ...), and 5 per local expert
  (grouped_gemm v1.1.4 on SM90 loops one cuBLAS GEMM per expert, twice; the eager bias add per expert,
  twice with the probs multiply, plus two cats).
- Others (TE attention, no expert bias): 30 + 23 + 2 per local expert (estimate by the same rules).

Usage: ``python benchmarks/automodel_host.py`` (CPU only; not run in CI).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costmodel.llm.overheads import LAUNCH_S_PER_KERNEL, _layer_ops  # noqa: E402
from costmodel.llm.recompute import layer_recompute_fraction, recompute_policy  # noqa: E402
from costmodel.predict import timer_for  # noqa: E402
from costmodel.specs.layout import stage_layer_counts  # noqa: E402
from costmodel.specs.runspec import RunSpec, run_spec_from_mapping  # noqa: E402
from studies.validate import load_validation_set, with_row_framework  # noqa: E402

PUBLIC = Path(__file__).resolve().parents[1] / "studies" / "validation" / "public.yaml"
NON_EXPERT_KERNELS = 30 + 23
KERNELS_PER_LOCAL_EXPERT = {True: 5, False: 2}  # with expert bias (GPT-OSS) / without


def measured_dispatch_s(ops: int = 2000, reps: int = 15) -> float:
    """Median CPU seconds of one eager ``torch.add`` with autograd on tiny CPU tensors (best of ``reps``)."""
    import torch

    torch.set_num_threads(1)
    x, y = torch.ones(8, requires_grad=True), torch.ones(8)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(ops):
            torch.add(x, y)
        times.append((time.perf_counter() - start) / ops)
    return min(times)


def forward_kernels(run: RunSpec) -> int:
    local = run.model.num_experts // max(run.strategy.ep, 1)
    return NON_EXPERT_KERNELS + KERNELS_PER_LOCAL_EXPERT[run.model.add_bias_linear] * local


def main() -> int:
    dispatch = measured_dispatch_s()
    print(f"this CPU: one eager op with autograd {dispatch * 1e6:.1f} us (CPU tensors, no CUDA launch); "
          f"sourced per-kernel issue cost {LAUNCH_S_PER_KERNEL * 1e6:.0f} us (costmodel.llm.overheads)")
    print(f"{'row':40s} {'GPU fwd':>8s} {'GPU bwd':>8s} {'kern f/b':>9s} {'break-even':>11s} {'syncs/step':>10s}"
          f" {'refill':>7s}")
    for entry in load_validation_set(PUBLIC):
        if entry.get("family") != "moe" or not entry["id"].startswith("automodel-"):
            continue
        run = run_spec_from_mapping(with_row_framework(entry), PUBLIC.parent)
        timed = timer_for(run.cluster.gpu).time_ops(_layer_ops(run, moe=True))
        fwd, bwd = timed.total(("fwd",)), timed.total(("bwd", "recompute"))
        kf = forward_kernels(run)
        kb = 2 * kf + (kf if recompute_policy(run) == "full" else 0)
        even_us = 1e6 * min(fwd / kf, bwd / kb)
        moe_layers = max(stage_layer_counts(run.model, run.strategy, st)[1] for st in range(run.strategy.pp))
        syncs = moe_layers * run.strategy.num_microbatches * (1 + layer_recompute_fraction(recompute_policy(run)))
        refill = syncs * max(dispatch, LAUNCH_S_PER_KERNEL) / entry["measured"]["step_time_s"]
        print(f"{entry['id'][10:50]:40s} {fwd * 1e3:6.2f}ms {bwd * 1e3:6.2f}ms {kf:4d}/{kb:<4d} "
              f"{even_us:8.0f} us {syncs:10.0f} {100 * refill:6.2f}%")
    print("break-even: host cost per kernel at which the layer would be host-bound (GPU time / kernels); "
          "refill: syncs x one op's issue time, share of the published step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
