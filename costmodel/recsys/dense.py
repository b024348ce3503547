"""The dense part of a DLRM on one rank: bottom MLP, feature interaction, top MLP and their optimizer step.

Everything here is data-parallel: each rank runs it on its local batch. The ops go through the shared
``OperatorTimer`` (measured GEMM profiles where one covers them, labelled fall-backs elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.ops import Op, gemm, memory_op
from costmodel.specs.recsys import DLRMSpec
from costmodel.timing import OperatorTimer

ELEMENT_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0}
DENSE_OPTIMIZER_BYTES_PER_PARAM = 20.0
"""Dense Adagrad step (the MLPerf DLRM-DCNv2 reference trains the dense part with Adagrad, ``--adagrad``):
read param, grad and state, write param and state, 5 x 4 B in fp32."""


def _mlp_ops(prefix: str, widths: tuple[int, ...], batch: int, dtype: str, first_needs_dgrad: bool) -> list[Op]:
    ops = []
    size = ELEMENT_BYTES[dtype]
    for i, (k, n) in enumerate(zip(widths[:-1], widths[1:])):
        ops.append(gemm(f"{prefix}{i}.fwd", "fwd", batch, n, k, dtype, bytes_per_element=size))
        if i > 0 or first_needs_dgrad:
            ops.append(gemm(f"{prefix}{i}.dgrad", "bwd", batch, k, n, dtype, bytes_per_element=size))
        ops.append(gemm(f"{prefix}{i}.wgrad", "bwd", n, k, batch, dtype, bytes_per_element=size))
        ops.append(memory_op(f"mlp_residual.{prefix}{i}.act", "fwd", batch * n, 2 * batch * n * size))
        ops.append(memory_op(f"mlp_residual.{prefix}{i}.act_bwd", "bwd", batch * n, 3 * batch * n * size))
    return ops


def interaction_ops(spec: DLRMSpec, batch: int) -> list[Op]:
    """The feature interaction's kernels for ``batch`` samples (forward and backward)."""
    size = ELEMENT_BYTES[spec.dense_dtype]
    dim = spec.bottom_mlp[-1]
    vectors = spec.num_sparse_features + 1
    width = spec.interaction_width
    if spec.interaction == "dot":
        # one batched (F+1) x d x (F+1) product per sample: memory-bound (reads the vectors, writes the dots)
        moved = batch * (vectors * dim + vectors * vectors) * size
        flops = 2.0 * batch * vectors * vectors * dim
        return [memory_op("mlp_residual.interaction.dot", "fwd", batch * vectors * dim, moved, flops),
                memory_op("mlp_residual.interaction.dot_bwd", "bwd", batch * vectors * dim, 2 * moved, 2 * flops)]
    ops = [memory_op("mlp_residual.interaction.cat", "fwd", batch * width, 2 * batch * width * size),
           memory_op("mlp_residual.interaction.cat_bwd", "bwd", batch * width, 2 * batch * width * size)]
    if spec.interaction == "dcnv2":  # x_{l+1} = x_0 * (U (V x_l) + b) + x_l, low rank r (arXiv 2008.13535)
        rank = spec.dcn_low_rank_dim
        for layer in range(spec.dcn_num_layers):
            ops += _mlp_ops(f"dcn{layer}.v", (width, rank), batch, spec.dense_dtype, True)
            ops += _mlp_ops(f"dcn{layer}.u", (rank, width), batch, spec.dense_dtype, True)
            ops.append(memory_op(f"mlp_residual.dcn{layer}.cross", "fwd", batch * width, 4 * batch * width * size))
            ops.append(memory_op(f"mlp_residual.dcn{layer}.cross_bwd", "bwd", batch * width,
                                 6 * batch * width * size))
    return ops


def dense_params(spec: DLRMSpec) -> int:
    """Parameters of the MLPs and the cross network (weights and biases)."""
    def mlp(widths: tuple[int, ...]) -> int:
        return sum(k * n + n for k, n in zip(widths[:-1], widths[1:]))

    total = mlp(spec.bottom_mlp) + mlp((spec.interaction_width, *spec.top_mlp))
    if spec.interaction == "dcnv2":
        width, rank = spec.interaction_width, spec.dcn_low_rank_dim
        total += spec.dcn_num_layers * (2 * width * rank + width)
    return total


@dataclass(frozen=True)
class DenseTimes:
    """Seconds on one rank: bottom MLP and interaction + top MLP, forward and backward; the optimizer step."""

    bottom_fwd: float
    bottom_bwd: float
    top_fwd: float
    top_bwd: float
    optimizer: float
    notes: tuple[str, ...] = ()


def dense_times(spec: DLRMSpec, local_batch: int, timer: OperatorTimer) -> DenseTimes:
    """Time the dense part of one step on one rank (``local_batch`` samples)."""
    bottom = _mlp_ops("bottom", spec.bottom_mlp, local_batch, spec.dense_dtype, first_needs_dgrad=False)
    top = interaction_ops(spec, local_batch) + _mlp_ops("top", (spec.interaction_width, *spec.top_mlp),
                                                         local_batch, spec.dense_dtype, first_needs_dgrad=True)
    params = dense_params(spec)
    step = [Op("adam.dense", "optimizer", "step", (params,), 0.0, params * DENSE_OPTIMIZER_BYTES_PER_PARAM, "fp32")]
    timed_bottom, timed_top, timed_step = timer.time_ops(bottom), timer.time_ops(top), timer.time_ops(step)
    notes = tuple(sorted(set(timed_bottom.notes) | set(timed_top.notes) | set(timed_step.notes)))
    return DenseTimes(bottom_fwd=timed_bottom.total(("fwd",)), bottom_bwd=timed_bottom.total(("bwd",)),
                      top_fwd=timed_top.total(("fwd",)), top_bwd=timed_top.total(("bwd",)),
                      optimizer=timed_step.total(), notes=notes)
