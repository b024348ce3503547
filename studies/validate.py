"""Validation: predict published runs and compare with their measured step times.

A validation file is a YAML list of ``{id, source, unstated, framework, family, run,
measured: {step_time_s, how}}`` (docs/run_spec.md). Runs that cannot be
predicted are listed with their reason and left out of the MAPE, never dropped.
The MAPE is also reported per framework and per parallelism family, each beside the
constant-MFU floor fitted on that group alone (``groups``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from constraints import check
from costmodel.llm.flops import model_flops_per_step
from costmodel.predict import predict_run
from costmodel.specs.errors import SpecError
from costmodel.specs.framework import framework_for_label
from costmodel.specs.layout import layout_of, pipeline_splits
from costmodel.specs.runspec import RunSpec, run_spec_from_mapping
from costmodel.specs.userfile import read_user_file

ENTRY_KEYS = {"id", "source", "unstated", "framework", "family", "run", "measured"}
GROUP_KEYS = ("framework", "family")
"""Row fields the MAPE is broken down by (``groups`` in the output)."""
UNLABELLED = "unlabelled"


def load_validation_set(path: str | Path) -> list[dict[str, Any]]:
    """Entries of a validation file, checked for shape (runs are parsed later, one by one)."""
    data = read_user_file(path, field="validation set")
    if not isinstance(data, list):
        raise SpecError("validation set", str(path), "a YAML list of runs")
    seen: set[str] = set()
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or not {"id", "run", "measured"} <= set(entry):
            raise SpecError(f"validation set[{i}]", entry if not isinstance(entry, dict) else sorted(entry),
                            "a mapping with id, run and measured")
        unknown = set(entry) - ENTRY_KEYS
        if unknown:
            raise SpecError(f"validation set[{i}].{sorted(unknown)[0]}", sorted(unknown)[0],
                            "one of " + ", ".join(sorted(ENTRY_KEYS)))
        if entry["id"] in seen:
            raise SpecError(f"validation set[{i}].id", entry["id"], "unique")
        seen.add(entry["id"])
        measured = entry["measured"].get("step_time_s") if isinstance(entry["measured"], dict) else None
        if not isinstance(measured, (int, float)) or not math.isfinite(measured) or measured <= 0:
            raise SpecError(f"validation set[{i}].measured.step_time_s", measured, "a positive finite number")
    return data


def with_row_framework(entry: dict[str, Any]) -> Any:
    """The entry's run, launched under the framework its ``framework`` label names (the run's own wins)."""
    run = entry["run"]
    name = framework_for_label(entry.get("framework"))
    if not isinstance(run, dict) or "framework" in run or name is None:
        return run
    return {**run, "framework": name}


# Unstated knobs a completion may set, each with the values tried (the run spec's value first).
COMPLETABLE = {"recompute": ("none", "selective", "full"), "sequence_parallel": (True, False),
               "zero_stage": (1, 0), "micro_batch_size": (1, 2, 4, 8),  # no ZeRO-3: a different launcher
               "vpp": (1, 2, 4, 8)}


def unstated_knobs(unstated: Sequence[str]) -> list[str]:
    """The knob each ``unstated`` entry names: its leading word (``"vpp (V not stated)"`` -> ``vpp``)."""
    return [str(item).strip().split(" ", 1)[0].split("(", 1)[0] for item in unstated]


def _knob_values(run: RunSpec, knob: str) -> list[Any]:
    """The values a completion tries for ``knob``, the run's own first.

    A run that interleaves (``vpp`` > 1) keeps interleaving: its source states the schedule and
    leaves only V out (Llama 3, arXiv 2407.21783 Sec. 3.3.2), so ``vpp`` = 1 is not tried for it.
    """
    current = getattr(run.strategy, knob)
    values = [current, *[v for v in COMPLETABLE[knob] if v != current]]
    if knob == "vpp" and current > 1:
        values = [v for v in values if v > 1]
    return values


def _completions(run: RunSpec, unstated: Sequence[str]) -> list[tuple[tuple[int, int], dict[str, Any]]]:
    """Every setting of the completable ``unstated`` knobs, with its distance from the defaults.

    The distance is (knobs changed, positions moved along each knob's list): fewer changes
    first, and among one change the value listed first (less recomputation, less sharding).
    """
    named = unstated_knobs(unstated)
    knobs = [k for k in COMPLETABLE if k in named]
    options: list[tuple[tuple[int, int], dict[str, Any]]] = [((0, 0), {})]
    for knob in knobs:
        values = _knob_values(run, knob)
        options = [((d[0] + (i > 0), d[1] + i), {**c, **({knob: v} if i else {})})
                   for d, c in options for i, v in enumerate(values)]
    return sorted(options, key=lambda o: o[0])


def _with_split(run: RunSpec, changes: dict[str, Any]) -> dict[str, Any]:
    """``changes`` plus the pipeline split Megatron-Core builds at the completed ``vpp``, where one is needed.

    The run's own layout knobs are kept when they still lay out the layers; where they do not (parplan's
    default uneven split exists only at vpp 1), the accounted split (embedding and loss counted as a
    layer each: Llama 3's "one Transformer layer [fewer] each from the first and the last stages") or
    else the first/last-stage counts of ``costmodel.specs.layout.pipeline_splits`` are taken.
    """
    s = run.strategy
    vpp = changes.get("vpp", s.vpp)
    if vpp == s.vpp or s.pipeline_layout is not None:
        return changes
    if not layout_of(run.model, replace(s, vpp=vpp)).problems:
        return changes
    splits = pipeline_splits(run.model.num_layers, run.model.mtp_num_layers, s.pp, vpp)
    split = splits.get("accounted", splits.get("ends"))
    if split is None:
        return changes
    cleared = {"first_stage_layers": None, "last_stage_layers": None,
               "account_for_embedding": False, "account_for_loss": False}
    moved = {k: v for k, v in {**cleared, **split}.items() if getattr(s, k) != v}
    return {**changes, **moved}


def completion_changes(run: RunSpec, unstated: Sequence[str]) -> list[dict[str, Any]]:
    """Every completion of ``run``'s completable ``unstated`` knobs as strategy changes (pipeline split
    included where the completed ``vpp`` needs one), nearest to the defaults first; ``{}`` is the run as written."""
    return [_with_split(run, option) for _, option in _completions(run, unstated)]


def nearest_fitting_completion(run: RunSpec, unstated: Sequence[str]) -> tuple[RunSpec, dict[str, Any]] | None:
    """The completion of ``run``'s unstated knobs nearest to the defaults that fits, or None.

    A published run ran, so a completion that does not fit is not what was launched; the
    search covers only the knobs the source leaves out (``COMPLETABLE``), and a completed
    ``vpp`` takes the pipeline split that lays the layers out at it (``_with_split``).
    """
    for _, changes in _completions(run, unstated):
        if not changes:
            continue
        changes = _with_split(run, changes)
        try:
            candidate = run.with_strategy(replace(run.strategy, **changes))
        except SpecError:
            continue
        if check(candidate).fits:
            return candidate, changes
    return None


def _memory_fields(entry: dict[str, Any], pred: dict[str, Any]) -> dict[str, Any]:
    """The row's predicted memory, OOM probability and, where the source gives one, the memory error."""
    out: dict[str, Any] = {"peak_memory_gib": pred.get("peak_memory_gib"), "oom_probability": pred.get("oom_probability")}
    measured = entry["measured"].get("memory_gib")
    if isinstance(measured, (int, float)) and measured > 0 and out["peak_memory_gib"] is not None:
        out["measured_memory_gib"] = float(measured)
        out["memory_error"] = (out["peak_memory_gib"] - measured) / measured
    return out


def constant_mfu_step(run: RunSpec, mfu: float) -> float:
    """Baseline: model FLOPs / (GPUs x dense peak x one constant MFU)."""
    flops = model_flops_per_step(run.model, run.seq_length, run.strategy.global_batch_size)
    gpu = run.cluster.gpu
    peak = gpu.peak(run.strategy.precision) if gpu.supports(run.strategy.precision) else gpu.peak("bf16")
    return flops / (run.cluster.num_gpus * peak * mfu)


def best_constant_mfu(runs: Sequence[RunSpec], measured: Sequence[float]) -> tuple[float, float]:
    """(MFU, MAPE) of the single MFU that minimises MAPE on these runs (grid search)."""
    ones = np.array([constant_mfu_step(r, 1.0) for r in runs])
    meas = np.asarray(measured)
    grid = np.linspace(0.05, 0.95, 1801)
    mapes = np.array([np.mean(np.abs(ones / g / meas - 1)) for g in grid])
    i = int(np.argmin(mapes))
    return float(grid[i]), float(mapes[i])


def group_errors(rows: Sequence[dict[str, Any]], runs: Sequence[RunSpec], key: str) -> dict[str, dict[str, Any]]:
    """Per value of row field ``key``: runs, MAPE and the constant MFU fitted on that group alone.

    ``rows`` are the predicted rows (an ``error`` each) and ``runs`` their run specs, in order.
    """
    by: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by.setdefault(str(row.get(key) or UNLABELLED), []).append(i)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(by):
        idx = by[name]
        mfu, floor = best_constant_mfu([runs[i] for i in idx], [rows[i]["measured_step_time_s"] for i in idx])
        out[name] = {"n": len(idx), "mape": float(np.mean([abs(rows[i]["error"]) for i in idx])),
                     "constant_mfu": mfu, "constant_mfu_mape": floor}
    return out


def validate(entries: Sequence[dict[str, Any]], base_dir: Path | None = None,
             profile_dir: str | Path | None = None) -> dict[str, Any]:
    """Predict every entry; per-run signed error, MAPE and the constant-MFU baseline."""
    rows: list[dict[str, Any]] = []
    predicted_rows: list[dict[str, Any]] = []
    specs: list[RunSpec] = []
    measured: list[float] = []
    for entry in entries:
        meas = float(entry["measured"]["step_time_s"])
        row: dict[str, Any] = {"id": entry["id"], "source": entry.get("source", ""),
                               "measured_step_time_s": meas, "family": entry.get("family")}
        try:
            run = run_spec_from_mapping(with_row_framework(entry), base_dir)
            pred = predict_run(run, profile_dir)
        except (SpecError, KeyError, ValueError) as exc:
            row.update({"predicted_step_time_s": None, "error": None, "fits": None, "reason": str(exc)})
            rows.append(row)
            continue
        row["framework"] = run.framework.name
        if not pred["fits"] and entry.get("unstated"):
            found = nearest_fitting_completion(run, entry["unstated"])
            if found is not None:
                run, changes = found
                pred = predict_run(run, profile_dir)
                row["completed"] = changes
                row["note"] = ("fits with unstated " + ", ".join(f"{k}={v}" for k, v in changes.items())
                               + " (the fitting completion nearest to the defaults)")
        row.update(_memory_fields(entry, pred))
        predicted = pred.get("step_time_s")
        if predicted is None or not math.isfinite(predicted):  # e.g. degrees that do not lay out the cluster
            why = [w for w in pred.get("warnings", []) if "not predicted" in w] or ["no finite step time predicted"]
            row.update({"predicted_step_time_s": None, "error": None, "fits": pred["fits"], "reason": why[0]})
            rows.append(row)
            continue
        row.update({"predicted_step_time_s": pred["step_time_s"],
                    "error": (pred["step_time_s"] - meas) / meas, "fits": pred["fits"]})
        if "step_time_s_interval" in pred:
            lo, hi = pred["step_time_s_interval"]
            row["step_time_s_interval"] = [lo, hi]
            row["inside_interval"] = lo <= meas <= hi
        rows.append(row)
        specs.append(run)
        measured.append(meas)
        predicted_rows.append(row)
    errors = [abs(r["error"]) for r in rows if r["error"] is not None]
    out: dict[str, Any] = {"runs": rows, "n": len(errors), "mape": float(np.mean(errors)) if errors else None}
    # Every row is a run that ran: one predicted not to fit is a false OOM.
    out["false_oom"] = sum(1 for r in rows if r.get("fits") is False)
    out["false_oom_runs"] = [r["id"] for r in rows if r.get("fits") is False]
    memory_errors = [abs(r["memory_error"]) for r in rows if "memory_error" in r]
    if memory_errors:
        out["memory_mape"] = float(np.mean(memory_errors))
        out["memory_n"] = len(memory_errors)
    if specs:
        mfu, base_mape = best_constant_mfu(specs, measured)
        out["baseline"] = {"kind": "one constant MFU fitted on this set", "mfu": mfu, "mape": base_mape}
        out["groups"] = {key: group_errors(predicted_rows, specs, key) for key in GROUP_KEYS}
        covered = [r["inside_interval"] for r in rows if "inside_interval" in r]
        if covered:
            out["interval_coverage"] = float(np.mean(covered))
    return out


def validate_file(path: str | Path, profile_dir: str | Path | None = None) -> dict[str, Any]:
    return validate(load_validation_set(path), Path(path).resolve().parent, profile_dir)
