"""What each ``--ops`` group measures, and the byte conventions of the memory-bound kernels (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from costmodel.specs.errors import SpecError

__all__ = ["MEMORY_KERNELS", "OP_GROUPS", "SAMPLED_DTYPES", "MemoryKernel", "memory_kernel", "parse_ops"]

# --ops group -> the profile tables it fills.
OP_GROUPS: Final[dict[str, tuple[str, ...]]] = {
    "gemm": ("gemm",),
    "attention": ("attention_fwd", "attention_bwd"),
    "norm": ("memory",),
    "elementwise": ("memory",),
    "optimizer": ("memory",),
    "comm": ("nccl",),
    "embedding_bag": ("embedding_bag",),  # costmodel.profiling.embedding: its own table file, not the journal
}
# GEMM dtypes the sampler times (fp8 needs torch._scaled_mm with per-tensor scales: not sampled yet).
SAMPLED_DTYPES: Final = ("bf16", "fp16")


@dataclass(frozen=True)
class MemoryKernel:
    """One memory-bound kernel the sampler times.

    ``reads`` and ``writes`` count tensors of ``elements`` elements, so that
    ``bytes = elements x element_bytes x (reads + writes)``: the ideal
    single-pass convention of ``costmodel.llm.decompose`` for the same op.
    """

    group: str  # the --ops group that measures it
    kind: str  # a kind of costmodel.analytic.MEMORY_KERNEL_FITS
    phase: str  # fwd, bwd or step
    variant: str  # rmsnorm / layernorm, swiglu / gelu, add, softmax, adamw
    reads: int
    writes: int
    element_bytes: int  # 2: bf16 activations; 4: fp32 optimizer state
    implementation: str  # what torch runs, for the metadata

    def bytes(self, elements: int) -> int:
        """Bytes read plus written over ``elements`` elements."""
        return int(elements) * self.element_bytes * (self.reads + self.writes)


_KERNELS: Final = (
    MemoryKernel("norm", "norm", "fwd", "rmsnorm", 1, 1, 2, "torch.nn.functional.rms_norm over the last dim"),
    MemoryKernel("norm", "norm", "bwd", "rmsnorm", 2, 1, 2, "autograd of rms_norm: d(input), d(weight)"),
    MemoryKernel("norm", "norm", "fwd", "layernorm", 1, 1, 2, "torch.nn.functional.layer_norm over the last dim"),
    MemoryKernel("norm", "norm", "bwd", "layernorm", 2, 1, 2, "autograd of layer_norm: d(input), d(weight), d(bias)"),
    MemoryKernel("elementwise", "activation", "fwd", "swiglu", 2, 1, 2, "silu(gate) * up"),
    MemoryKernel("elementwise", "activation", "bwd", "swiglu", 3, 2, 2, "autograd of silu(gate) * up"),
    MemoryKernel("elementwise", "activation", "fwd", "gelu", 1, 1, 2, "torch.nn.functional.gelu (tanh)"),
    MemoryKernel("elementwise", "activation", "bwd", "gelu", 2, 1, 2, "autograd of gelu (tanh)"),
    MemoryKernel("elementwise", "residual", "fwd", "add", 2, 1, 2, "torch.add(x, y, out=z)"),
    MemoryKernel("elementwise", "softmax", "fwd", "softmax", 1, 1, 2, "torch.softmax over the last dim"),
    MemoryKernel("elementwise", "softmax", "bwd", "softmax", 2, 1, 2, "autograd of torch.softmax"),
    # AdamW reads param, grad, exp_avg, exp_avg_sq and writes param, exp_avg, exp_avg_sq: 28 B/param in fp32.
    MemoryKernel("optimizer", "optimizer", "step", "adamw", 4, 3, 4,
                 "torch.optim.AdamW.step on one fp32 tensor (fused on CUDA, foreach on CPU)"),
)
MEMORY_KERNELS: Final[dict[tuple[str, str, str], MemoryKernel]] = {
    (kernel.kind, kernel.phase, kernel.variant): kernel for kernel in _KERNELS}


def memory_kernel(kind: str, phase: str, variant: str) -> MemoryKernel:
    """The kernel of ``(kind, phase, variant)``.

    Raises
    ------
    SpecError
        If the sampler has no such kernel.
    """
    kernel = MEMORY_KERNELS.get((kind, phase, variant))
    if kernel is None:
        known = ", ".join(".".join(key) for key in MEMORY_KERNELS)
        raise SpecError("memory kernel", f"{kind}.{phase}.{variant}", f"one of {known}")
    return kernel


def parse_ops(text: str) -> tuple[str, ...]:
    """``"gemm,comm"`` -> ``("gemm", "comm")`` in ``OP_GROUPS`` order.

    Raises
    ------
    SpecError
        If a name is not an op group, or none is given.
    """
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in OP_GROUPS:
            raise SpecError("ops", name, "a comma-separated list of " + ", ".join(OP_GROUPS))
    if not names:
        raise SpecError("ops", text, "a comma-separated list of " + ", ".join(OP_GROUPS))
    return tuple(group for group in OP_GROUPS if group in names)
