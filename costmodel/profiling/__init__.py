"""``parplan profile``: measure operator timings on the user's own hardware, or harvest them from a trace.

Modules: ``kinds`` (what each ``--ops`` group measures), ``design`` (which
shapes, in which order), ``measure`` (the timing loop), ``kernels`` (the
operators in PyTorch), ``journal`` (append-only samples, tables rebuilt
from them), ``sampler`` (``profile run``), ``comm`` and ``comm_worker``
(the collective sweep), ``trace`` (``profile import-trace``) and ``fit``
(``profile fit``). The names below are re-exported lazily, so that a spawned
collective rank imports only the journal and torch (it starts in seconds,
inside the budget), and trace import and fitting work without torch. (The
timing loop itself is ``costmodel.profiling.measure.measure``: the package
attribute ``measure`` is that module.)
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CPU_BOUNDS": "design", "CUDA_BOUNDS": "design", "DesignBounds": "design", "SamplePoint": "design",
    "design_streams": "design", "targeted_points": "design",
    "FamilyError": "fit", "FitReport": "fit", "fit_directory": "fit",
    "JOURNAL_NAME": "journal", "Journal": "journal", "build_profile": "journal", "rebuild": "journal",
    "OP_GROUPS": "kinds", "parse_ops": "kinds",
    "Measurement": "measure", "TimingPolicy": "measure",
    "SamplerConfig": "sampler", "SamplerReport": "sampler", "run_profile": "sampler",
    "TraceImport": "trace", "import_trace": "trace",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'costmodel.profiling' has no attribute {name!r}")
    return getattr(importlib.import_module(f"costmodel.profiling.{_EXPORTS[name]}"), name)
