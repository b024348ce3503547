"""The constraint layer's verdict on one run: legality rules plus the memory budget."""

from __future__ import annotations

from dataclasses import dataclass

from constraints.memory import StageMemory, peak_stage_memory
from constraints.rules import rule_violations
from costmodel.specs.gpu import GiB
from costmodel.specs.runspec import RunSpec


@dataclass(frozen=True)
class Verdict:
    """Whether a run can launch, why not, and its worst-stage memory."""

    violations: tuple[str, ...]
    memory: StageMemory
    usable_bytes: float

    @property
    def fits(self) -> bool:
        return not self.violations

    @property
    def peak_memory_gib(self) -> float:
        return self.memory.total_bytes / GiB


def memory_violation(memory: StageMemory, usable_bytes: float, gpu_name: str) -> str | None:
    if memory.total_bytes > usable_bytes:
        return (f"needs {memory.total_bytes / GiB:.1f} GiB per GPU on pipeline stage {memory.stage}, "
                f"{usable_bytes / GiB:.1f} GiB usable on {gpu_name}")
    return None


def check(run: RunSpec) -> Verdict:
    """Apply every rule and the memory model to ``run``."""
    violations = rule_violations(run)
    memory = peak_stage_memory(run)
    usable = run.cluster.usable_memory_bytes
    if (msg := memory_violation(memory, usable, run.cluster.gpu.name)) is not None:
        violations.append(msg)
    return Verdict(violations=tuple(violations), memory=memory, usable_bytes=usable)
