"""Which operator timer a run uses: its GPU's built-in profile, a user profile, or the roofline alone."""

from __future__ import annotations

import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

from constraints import Verdict, check
from constraints.memory import layers_per_stage
from costmodel.calibration import step_time_interval
from costmodel.specs.catalog import get_gpu
from costmodel.specs.errors import SpecError
from costmodel.specs.gpu import GiB, GPUSpec
from costmodel.specs.notices import ParplanWarning
from costmodel.specs.runspec import RunSpec
from costmodel.specs.layout import layout_of
from costmodel.llm.step import predict_step, throughput
from costmodel.timing import OperatorTimer


def catalog_reference(gpu: GPUSpec) -> GPUSpec:
    """The catalog entry ``gpu`` was built from, before run-spec overrides (``gpu`` if uncatalogued)."""
    try:
        return get_gpu(gpu.name)
    except SpecError:
        return gpu


@lru_cache(maxsize=32)
def _timer(gpu: GPUSpec, profile_dir: str | None) -> OperatorTimer:
    from costmodel.profiles.factors import read_factor_profile
    from costmodel.profiles.profile import builtin_profile, device_mismatch, load_profile

    if profile_dir is not None and (factors := read_factor_profile(profile_dir)) is not None:
        return _factored(gpu, factors)
    profile = load_profile(profile_dir) if profile_dir is not None else builtin_profile(gpu.name)
    from costmodel.predictors import fitted_profile  # scikit-learn: only once the profile is known good
    if profile is None:
        return OperatorTimer(gpu, None)
    if (mismatch := device_mismatch(profile, gpu.name)) is not None:
        warnings.warn(mismatch, ParplanWarning, stacklevel=2)  # once per GPU and profile: memoised
    # The tables were measured under the catalog figures: the predictors are fitted against those
    # (one fit whatever the overrides) and the timer scales their times to the overridden ones.
    reference = catalog_reference(gpu)
    return OperatorTimer(gpu, fitted_profile(profile, reference), reference=reference)


def _factored(gpu: GPUSpec, factors: Any) -> OperatorTimer:
    """The base profile's timer with a trace-fitted factor profile's family factors (``parplan replay fit``)."""
    from costmodel.factored_timing import factored_timer

    if factors.device != gpu.name:
        warnings.warn(f"factor profile {factors.name!r} was fitted against parplan's {factors.device!r} times, not "
                      f"the run's GPU {gpu.name!r}: its factors are applied as they are", ParplanWarning, stacklevel=3)
    return factored_timer(_timer(gpu, factors.base_profile), factors)


def _profile_warnings(timer: OperatorTimer, gpu: GPUSpec) -> list[str]:
    """Oddities of the timer's profile for this GPU: another device, fits not used (``FittedProfile.notes``)."""
    from costmodel.profiles.profile import device_mismatch

    if timer.predictors is None:
        return []
    mismatch = device_mismatch(timer.predictors.profile, gpu.name)
    return ([] if mismatch is None else [mismatch]) + list(getattr(timer.predictors, "notes", ()))


def timer_for(gpu: GPUSpec, profile_dir: str | Path | None = None) -> OperatorTimer:
    """A memoised timer for ``gpu``: the user profile in ``profile_dir`` if given, else the built-in one.

    With neither, every operator falls back to the analytic models and says so.
    """
    return _timer(gpu, None if profile_dir is None else str(Path(profile_dir).resolve()))


def predict_run(run: RunSpec, profile_dir: str | Path | None = None,
                timer: OperatorTimer | None = None) -> dict[str, Any]:
    """Prediction of one run in the shape of ``parplan predict --json`` (contract version 1).

    ``timer`` overrides the one ``profile_dir`` selects (a search passes its own, so the
    reported numbers are exactly those it ranked by).
    """
    # One BLAS/OpenMP thread: predictor calls are tiny and a thread pool costs more than it saves.
    with threadpool_limits(1):
        out = _predict_run(run, timer if timer is not None else timer_for(run.cluster.gpu, profile_dir))
    out["warnings"] = [*run.notes, *out["warnings"]]  # what the spec's files state but is not modelled
    out["defaults_assumed"] = [d.to_dict() for d in run.defaults_assumed]
    return out


def _predict_run(run: RunSpec, timer: OperatorTimer) -> dict[str, Any]:
    verdict = check(run)
    out: dict[str, Any] = {"fits": verdict.fits, "oom_probability": verdict.oom_probability}
    profile_warnings = _profile_warnings(timer, run.cluster.gpu)
    if run.strategy.world_size != run.cluster.num_gpus:
        # No rank layout exists, so no communication or schedule can be timed: report memory only.
        out.update(_memory_fields(verdict, timer))
        out["warnings"] = [*profile_warnings,
                           "step time not predicted: the parallel degrees do not lay out the cluster's GPUs"]
        return out
    step = predict_step(run, timer)
    out["step_time_s"] = step.step_time_s
    out.update(throughput(run, step.step_time_s))
    out.update(_memory_fields(verdict, timer))
    out.update({
        "breakdown": step.breakdown,
        "schedule": step.schedule,
        "pipeline_layers": _pipeline_layers(run),
        "stages": [{**c.to_dict(run.strategy.num_microbatches), "stage": st,
                    "layers": round(layers_per_stage(run.model, run.strategy, st))}
                   for st, c in enumerate(step.stage_computes)],
        "warnings": profile_warnings + _warnings(step.notes, timer),
    })
    interval = step_time_interval(step.step_time_s)
    if interval is not None:
        out["step_time_s_interval"] = interval
    return out


def _pipeline_layers(run: RunSpec) -> list[int]:
    """Decoder layers of each pipeline rank; empty where the layout is one Megatron-Core refuses."""
    layout = layout_of(run.model, run.strategy)
    return [] if layout.problems else list(layout.stage_layers)


def _warnings(notes: tuple[str, ...], timer: OperatorTimer) -> list[str]:
    """The step's notes, and the what-if label wherever measured times were scaled (collectives too)."""
    what_if = timer.what_if_note
    return list(notes) + ([what_if] if what_if is not None and what_if not in notes else [])


def _memory_fields(verdict: Verdict, timer: OperatorTimer) -> dict[str, Any]:
    return {
        "peak_memory_gib": verdict.peak_memory_gib,
        "usable_memory_gib": verdict.usable_bytes / GiB,
        "headroom_gib": verdict.headroom_gib,
        "oom_probability": verdict.oom_probability,
        "peak_memory_stage": verdict.memory.stage,
        "memory": verdict.memory.as_gib(),
        "profile": timer.profile_name,
        "violations": list(verdict.violations),
    }
