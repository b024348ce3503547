"""Per-rank token counts and message sizes shared by the communication models.

One place for the few sizes that step, TP, CP (and MoE) communication each need: the tokens
one rank holds per micro-batch, and the bytes per element of what goes on the wire.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["BF16", "FP8", "activation_bytes", "activation_wire_bytes", "grad_reduce_bytes", "param_gather_bytes",
           "rank_tokens"]

BF16: Final = 2  # bytes per 16-bit element
FP8: Final = 1


def rank_tokens(run: Any) -> int:
    """Tokens of one micro-batch on one rank: ``micro_batch_size x seq_length // cp`` (context
    parallelism splits the sequence; tensor parallelism's sequence split is the caller's)."""
    s = run.strategy
    return s.micro_batch_size * run.seq_length // s.cp


def activation_wire_bytes(precision: str) -> int:
    """Bytes per element of a TP all-gather of activations or output gradients.

    FP8 recipes gather FP8 (Transformer Engine quantises before ``gather_along_first_dim(...,
    quantizer=...)``, github.com/NVIDIA/TransformerEngine @d0067d0d module/layernorm_linear.py);
    everything else, and every reduction, travels in bf16.
    """
    return FP8 if precision == "fp8" else BF16


def activation_bytes(run: Any, element_bytes: int = BF16) -> int:
    """Bytes of one ``[rank_tokens, hidden]`` activation at ``element_bytes`` per element."""
    return rank_tokens(run) * run.model.hidden_size * element_bytes


def grad_reduce_bytes(run: Any) -> int:
    """Bytes per gradient element on the data-parallel wire: the framework's reduce dtype
    (``Framework.grad_reduce_dtype``, each framework file gives its source)."""
    return int(run.framework.grad_reduce_bytes)


def param_gather_bytes(run: Any) -> int:
    """Bytes per parameter element of the distributed optimizer's parameter all-gather.

    With ``Framework.fp8_param_gather`` an FP8 run keeps its parameters as FP8 and gathers them
    so (Megatron-LM --fp8-param-gather: "Keep the compute param in fp8 (do not use any other
    intermediate dtype) and perform the param all-gather in fp8", megatron/training/arguments.py
    @d98e8a64; not yet in r0.8 @f2e5db40); otherwise the bf16 parameters travel.
    """
    return FP8 if run.strategy.precision == "fp8" and run.framework.fp8_param_gather else BF16
