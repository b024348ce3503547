"""An operator timer whose times are a base timer's times times trace-fitted family factors.

The factors come from a factor profile (``costmodel/profiles/factors.py``, written by
``parplan replay fit``): GEMMs, attention (forward and backward), memory-bound kernels and the
optimizer step ("elementwise"), and collectives (:func:`collective_factor_for`, applied by
``costmodel.llm.step`` where every collective of a step is timed: the group's tier, inside one
scale-up domain or across domains, picks its factor where the fit saw both).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from costmodel.ops import Op
from costmodel.profiles.factors import FactorProfile
from costmodel.timing import OperatorTimer, TimedOps

__all__ = ["FactoredTimer", "collective_factor_for", "factor_family", "factored_timer"]

# Op.family -> the factor family whose measured kernels correct it.
_FACTOR_OF_OP: dict[str, str] = {"gemm": "gemm", "attention_fwd": "attention", "attention_bwd": "attention",
                                 "memory": "elementwise", "optimizer": "elementwise"}


def factor_family(op: Op) -> str:
    """The factor family (``gemm``, ``attention``, ``elementwise``) an operator's time is corrected by."""
    return _FACTOR_OF_OP[op.family]


@dataclass
class FactoredTimer(OperatorTimer):
    """``OperatorTimer`` with each op family's seconds multiplied by ``factors``' factor."""

    factors: FactorProfile | None = field(default=None, kw_only=True)

    @property
    def collective_factor(self) -> float:
        return 1.0 if self.factors is None else self.factors.factor("collective")

    @property
    def profile_name(self) -> str | None:
        base = super().profile_name or "roofline"
        return base if self.factors is None else f"{base} x trace factors {self.factors.name}"

    def time_ops(self, ops: Sequence[Op]) -> TimedOps:
        timed = super().time_ops(ops)
        if self.factors is None:
            return timed
        scale = np.array([self.factors.factor(factor_family(op)) for op in ops])
        note = (f"times x trace-fitted factors of {self.factors.name} ("
                + ", ".join(f"{k} {v:.3g}" for k, v in sorted(self.factors.factors.items())) + ")")
        return TimedOps(timed.ops, timed.seconds * scale, timed.sources, sorted({*timed.notes, note}))


def collective_factor_for(timer: OperatorTimer, placement: object) -> float:
    """The factor of a collective on ``placement`` (a ``GroupPlacement``): its tier's where ``timer`` carries
    trace factors, else ``timer.collective_factor``."""
    crosses = getattr(placement, "crosses_nodes", None)
    if isinstance(timer, FactoredTimer) and timer.factors is not None and isinstance(crosses, bool):
        return timer.factors.collective(crosses)
    return timer.collective_factor


def factored_timer(base: OperatorTimer, factors: FactorProfile) -> FactoredTimer:
    """A timer like ``base`` (same GPU, predictors and reference) whose times carry ``factors``."""
    return FactoredTimer(base.gpu, base.predictors, base.reference, factors=factors)
