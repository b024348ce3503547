"""``parplan replay fit``: per-family correction factors of parplan's operator times against a trace.

Every operator the trace's ``record_shapes`` dims identify (``costmodel.replay.operators``)
has a measured time (its kernels, summed) and parplan's time for it on the chosen GPU. A
family's factor is the ratio of their sums, measured / predicted: the factor that makes
parplan's total for the trace's operators equal the measured one (big operators count by
their time). The spread is that of the per-operator ratios (10th, 50th and 90th percentile)
and, with several traces, the range of the per-trace factors.

Collectives are also fitted per tier (``collective_intra``: a group inside one scale-up domain of
the chosen GPU; ``collective_inter``: across domains) where the traces hold both: NVLink and the
network are different links, one factor would average them by their time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from costmodel.profiles.factors import COLLECTIVE_TIERS, FACTOR_FAMILIES, FactorProfile, write_factor_profile
from costmodel.replay.operators import TraceOperators, family_of, operator_seconds, placement_of
from costmodel.specs.errors import SpecError
from costmodel.timing import OperatorTimer

__all__ = ["FamilyFit", "TraceFit", "fit_factors", "save_fit"]


@dataclass(frozen=True)
class FamilyFit:
    """One family's factor (measured / predicted seconds, summed) and the spread of its operators' ratios."""

    family: str
    factor: float
    operators: int
    shapes: int
    measured_s: float
    predicted_s: float
    p10: float
    median: float
    p90: float
    per_trace: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "operators": self.operators, "shapes": self.shapes,
                "measured_s": self.measured_s, "predicted_s": self.predicted_s,
                "p10": self.p10, "median": self.median, "p90": self.p90, "per_trace": list(self.per_trace)}


@dataclass
class TraceFit:
    """The factors of every family the traces hold, and what the recogniser could not use."""

    device: str
    profile: str | None
    families: dict[str, FamilyFit]
    traces: list[str]
    unsupported: Counter[str] = field(default_factory=Counter)
    unknown: Counter[str] = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "base_profile": self.profile, "traces": self.traces,
                "factors": {k: v.factor for k, v in self.families.items()},
                "families": {k: v.to_dict() for k, v in self.families.items()},
                "unsupported": dict(self.unsupported.most_common(20)), "unknown": dict(self.unknown.most_common(20))}


def fit_factors(traces: list[TraceOperators], names: list[str], timer: OperatorTimer,
                profile: str | None = None) -> TraceFit:
    """Factors of parplan's times on ``timer`` against the operators of ``traces``.

    Raises
    ------
    SpecError
        If no trace holds a recognised operator with a measured time.
    """
    rows: dict[str, list[tuple[int, str, float, float]]] = {f: [] for f in FACTOR_FAMILIES + COLLECTIVE_TIERS}
    out = TraceFit(timer.gpu.name, profile, {}, names)
    for index, trace in enumerate(traces):
        out.unsupported.update(trace.report.unsupported)
        out.unknown.update(trace.report.unknown)
        predicted = operator_seconds(trace.operators, timer)
        for instance, seconds in zip(trace.operators, predicted):
            if seconds > 0:
                key = instance.table + repr(sorted(instance.row.items())) + str(instance.backward)
                row = (index, key, instance.seconds, seconds)
                rows[family_of(instance.table)].append(row)
                if instance.table == "nccl":
                    crosses = placement_of(int(instance.row["num_gpus"]), timer.gpu).crosses_nodes
                    rows[COLLECTIVE_TIERS[1 if crosses else 0]].append(row)
    if not all(rows[tier] for tier in COLLECTIVE_TIERS):  # one tier: it is the collective factor already
        for tier in COLLECTIVE_TIERS:
            rows[tier] = []
    for family, members in rows.items():
        if members:
            out.families[family] = _family(family, members, len(traces))
    if not out.families:
        raise SpecError("traces", ", ".join(names), "traces recorded with record_shapes=True holding GEMMs, "
                        "attention, element-wise operators or collectives with their kernels")
    return out


def _family(family: str, members: list[tuple[int, str, float, float]], count: int) -> FamilyFit:
    measured = np.array([m[2] for m in members])
    predicted = np.array([m[3] for m in members])
    ratios = measured / predicted
    p10, median, p90 = (float(v) for v in np.quantile(ratios, [0.1, 0.5, 0.9]))
    traces = np.array([m[0] for m in members])
    per_trace = tuple(float(measured[traces == t].sum() / predicted[traces == t].sum())
                      for t in range(count) if np.any(traces == t))
    return FamilyFit(family, float(measured.sum() / predicted.sum()), len(members), len({m[1] for m in members}),
                     float(measured.sum()), float(predicted.sum()), p10, median, p90, per_trace)


def save_fit(fit: TraceFit, out: str | Path, name: str | None = None) -> Path:
    """Write ``fit`` as a factor profile directory (``costmodel/profiles/factors.py``)."""
    directory = Path(out)
    profile = FactorProfile(name or directory.name, fit.device, {k: v.factor for k, v in fit.families.items()},
                            fit.profile)
    spread = {k: {key: value for key, value in v.to_dict().items() if key != "factor"}
              for k, v in fit.families.items()}
    return write_factor_profile(profile, directory, {
        "spread": spread,
        "source": {"traces": fit.traces, "fitted": datetime.now(UTC).isoformat(timespec="seconds"),
                   "how": "measured / parplan-predicted seconds of the operators the traces' record_shapes "
                          "identify, summed per family (parplan replay fit)"}})
