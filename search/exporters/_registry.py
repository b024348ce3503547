"""Exporters by name."""

from __future__ import annotations

from pathlib import Path

from costmodel.specs.errors import SpecError
from costmodel.specs.model import ModelSpec
from costmodel.specs.strategy import Strategy
from search.exporters._base import Exporter
from search.exporters._deepspeed import DeepSpeedExporter
from search.exporters._megatron import MegatronExporter
from search.exporters._nemo import NeMoExporter
from search.exporters._slurm import SlurmExporter
from search.exporters._torchtitan import TorchtitanExporter
from search.space import SearchProblem

EXPORTERS: dict[str, Exporter] = {e.name: e for e in (MegatronExporter(), TorchtitanExporter(), DeepSpeedExporter(),
                                                     NeMoExporter(), SlurmExporter())}


def get_exporter(name: str) -> Exporter:
    if name not in EXPORTERS:
        raise SpecError("export", name, "one of " + ", ".join(EXPORTERS))
    return EXPORTERS[name]


def implied_framework(names: list[str]) -> str | None:
    """The framework every one of the ``names`` exports runs under, or None when they differ."""
    frameworks = {get_exporter(name).framework for name in names}
    return frameworks.pop() if len(frameworks) == 1 else None


def launcher_restrictions(names: list[str], model: ModelSpec) -> tuple[tuple[str, tuple[object, ...]], ...]:
    """``SearchProblem.allowed`` entries limiting the space to what every one of the ``names`` launchers
    runs for ``model``; a one-line :class:`SpecError` before any search when one cannot build ``model``."""
    return tuple((knob, values) for name in names for knob, values in get_exporter(name).allowed(model).items())


def export(name: str, strategy: Strategy, problem: SearchProblem, out_dir: str | Path) -> Path:
    """Write the ``name`` export of ``strategy`` into ``out_dir``; returns the file's path."""
    return get_exporter(name).write(strategy, problem, out_dir)


