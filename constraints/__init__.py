"""Constraint layer: legality rules and the per-GPU memory model (pure functions of a RunSpec)."""

from constraints.feasibility import Verdict, check
from constraints.memory import StageMemory, peak_stage_memory, stage_memory
from constraints.rules import RULES, rule_violations

__all__ = ["RULES", "StageMemory", "Verdict", "check", "peak_stage_memory", "rule_violations", "stage_memory"]
