"""The constraint layer's verdict on one run: legality rules plus the memory budget."""

from __future__ import annotations

from dataclasses import dataclass

from constraints.memory import StageMemory, peak_stage_memory
from constraints.oom import oom_probability
from constraints.rules import rule_violations
from costmodel.specs.gpu import GiB
from costmodel.specs.runspec import RunSpec


@dataclass(frozen=True)
class Verdict:
    """Whether a run can launch, why not, and its worst-stage memory."""

    violations: tuple[str, ...]
    memory: StageMemory
    usable_bytes: float
    memory_margin: float = 0.0
    """Fraction of ``usable_bytes`` kept free when judging the memory budget (``--memory-margin``)."""

    @property
    def fits(self) -> bool:
        return not self.violations

    @property
    def peak_memory_gib(self) -> float:
        return self.memory.total_bytes / GiB

    @property
    def headroom_gib(self) -> float:
        """Usable memory left at the peak (negative: over the limit), margin not subtracted."""
        return (self.usable_bytes - self.memory.total_bytes) / GiB

    @property
    def oom_probability(self) -> float:
        """P(the true peak exceeds usable memory), ``constraints.oom``."""
        return oom_probability(self.memory.total_bytes, self.usable_bytes)


def memory_violation(total_bytes: float, stage: int, usable_bytes: float, gpu_name: str,
                     margin: float = 0.0) -> str | None:
    """The sentence for a peak of ``total_bytes`` on pipeline ``stage`` over the budget, or None when it fits."""
    budget = usable_bytes * (1.0 - margin)
    if total_bytes > budget:
        kept = f" less a {margin:.1%} memory margin" if margin > 0 else ""
        return (f"needs {total_bytes / GiB:.1f} GiB per GPU on pipeline stage {stage}, "
                f"{budget / GiB:.1f} GiB usable on {gpu_name}{kept}")
    return None


def check(run: RunSpec, memory_margin: float = 0.0) -> Verdict:
    """Apply every rule and the memory model to ``run``, keeping ``memory_margin`` of usable memory free."""
    violations = rule_violations(run)
    memory = peak_stage_memory(run)
    usable = run.cluster.usable_memory_bytes
    if (msg := memory_violation(memory.total_bytes, memory.stage, usable, run.cluster.gpu.name,
                                memory_margin)) is not None:
        violations.append(msg)
    return Verdict(violations=tuple(violations), memory=memory, usable_bytes=usable, memory_margin=memory_margin)
