"""One finished problem: the best strategy and its figures, or why there is none.

A :class:`ProblemResult` is a finished record (never updated). It is what the
storage holds, what ``results/<problem>.json`` contains and one row of the
report. ``status`` is ``ok`` (a strategy fits), ``infeasible`` (the search ran,
nothing fits memory), ``invalid`` (the problem has no legal layout, e.g. the
batch does not split over the GPUs) or ``error`` (an unexpected exception: the
study goes on and the message is kept).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("ok", "infeasible", "invalid", "error")
VOLATILE = frozenset({"elapsed_s", "cpu_s", "worker"})
"""Fields that differ between two runs of the same problem (when and where it ran, not what it found)."""
BREAKDOWN_KEYS = ("compute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "pp_bubble_s",
                  "dp_comm_exposed_s", "optimizer_s", "other_s")
"""Step-time parts of ``costmodel.llm.step.StepPrediction.breakdown``, in plotting order."""


@dataclass(frozen=True, kw_only=True)
class ProblemResult:
    """The outcome of one problem's search.

    Figures are ``None`` unless ``status == "ok"``. Units: seconds, GiB, tokens/s;
    ``gpu_hours_per_billion_tokens`` is GPU-hours to train on 1e9 tokens at the
    predicted speed; ``mfu`` is a fraction of the GPU's peak for the precision.
    ``elapsed_s`` and ``cpu_s`` are the wall and CPU time the problem took (their
    ratio shows how contended the machine was).
    """

    key: str
    problem: str
    model: str
    gpu: str
    num_gpus: int
    global_batch_size: int
    seq_length: int
    tokens_per_step: int
    status: str
    reason: str = ""
    strategy: dict[str, Any] | None = None
    strategy_label: str = ""
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    mfu: float | None = None
    peak_memory_gib: float | None = None
    usable_memory_gib: float | None = None
    gpu_hours_per_billion_tokens: float | None = None
    breakdown: dict[str, float] = field(default_factory=dict)
    top: tuple[dict[str, Any], ...] = ()
    pareto: tuple[dict[str, Any], ...] = ()
    sampler: str = ""
    objective: str = ""
    trials: int = 0
    distinct: int = 0
    feasible: int = 0
    profile: str = ""
    warnings: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    cpu_s: float = 0.0
    worker: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"The 'status' parameter must be one of {', '.join(STATUSES)}. "
                             f"Got {self.status!r} instead.")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["top"], out["pareto"], out["warnings"] = list(self.top), list(self.pareto), list(self.warnings)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def comparable(self) -> dict[str, Any]:
        """Everything but the volatile fields: equal for two runs of the same problem with the same seed."""
        return {k: v for k, v in self.to_dict().items() if k not in VOLATILE}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProblemResult:
        known = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in data.items() if k in known}
        for name in ("top", "pareto", "warnings"):
            kwargs[name] = tuple(kwargs.get(name) or ())
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> ProblemResult:
        return cls.from_dict(json.loads(text))
