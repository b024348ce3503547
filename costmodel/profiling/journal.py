"""The sampler's append-only journal and the profile tables rebuilt from it.

Every measurement is appended to ``<out>/samples.jsonl`` as one JSON line,
flushed and fsync'ed before the next one starts: a run that is interrupted
(Ctrl-C, a killed job, a lost node) loses at most the line being written, and
a torn last line is skipped on reading. The profile's tables
(``<family>.csv``) and ``metadata.yaml`` are rebuilt from the journal every
second and at the end, each file written atomically, so that the
directory is a loadable profile at any moment. A later run into the same
directory reads the journal and measures only the points it lacks.

Record kinds (``"record"`` field): ``session`` (one per invocation: device,
software, design, budget), ``physics`` (measured peak figures), ``sample``
(one operator: ``table``, ``key``, ``row`` with the table's shape columns,
``median_s`` and the spread fields of ``Measurement``, ``source``).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Final

import numpy as np

from costmodel.profiles.profile import FAMILY_COLUMNS, Profile, make_profile, write_profile_files
from costmodel.specs.errors import SpecError

__all__ = ["JOURNAL_NAME", "USER_FIT_SAMPLING", "Journal", "build_profile", "check_session", "rebuild"]

JOURNAL_NAME: Final = "samples.jsonl"
# A measured profile holds hundreds of scattered rows, not a 10 000-row grid: fit on three
# quarters (maximin core plus random) and hold out a quarter for the error `profile fit` prints.
USER_FIT_SAMPLING: Final = {"design": "maximin-core+random on 75% of the rows; 25% held out", "fraction": 0.75,
                            "min_rows": 8, "max_rows": 20000}


class Journal:
    """``<directory>/samples.jsonl``: read it, append to it."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / JOURNAL_NAME

    def records(self) -> list[dict[str, Any]]:
        """Every complete record, in order (a torn or garbled line is skipped)."""
        if not self.path.is_file():
            return []
        out = []
        with self.path.open(encoding="utf-8") as handle:
            for line in handle:
                if not line.endswith("\n"):
                    break  # the line a crash cut short
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict) and "record" in record:
                    out.append(record)
        return out

    def append(self, record: dict[str, Any]) -> None:
        """Append ``record`` durably (flushed and fsync'ed)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record, sort_keys=True, default=_plain) + "\n"
        with self.path.open("a", encoding="utf-8") as handle:
            if handle.tell() > 0 and not self._ends_with_newline():
                handle.write("\n")  # close a torn line so that this record starts clean
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def measured_keys(self) -> set[str]:
        """Keys of the samples already in the journal."""
        return {r["key"] for r in self.records() if r["record"] == "sample" and "key" in r}

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def build_profile(directory: str | Path) -> Profile | None:
    """The profile the journal in ``directory`` describes; None before its first sample.

    The latest sample of a key wins; metadata gathers the sessions, the latest
    physics (plus link figures derived from the collective rows) and the
    fit-sampling recipe of measured profiles.
    """
    directory = Path(directory)
    records = Journal(directory).records()
    sessions = [r for r in records if r["record"] == "session"]
    if not sessions:
        return None
    latest: dict[str, dict[str, Any]] = {}
    for record in records:
        if record["record"] == "sample":
            latest[record["key"]] = record
    if not latest:
        return None
    tables: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for record in latest.values():
        table = record["table"]
        for column in FAMILY_COLUMNS[table]:
            value = record["median_s"] if column == "latency_s" else record["row"][column]
            tables[table][column].append(value)
    first = sessions[0]
    physics = dict(next((r["physics"] for r in reversed(records) if r["record"] == "physics"), {}))
    if "nccl" in tables:
        physics.update(_link_physics(tables["nccl"]))
    metadata: dict[str, Any] = {
        "source": first.get("source", "parplan profile run"),
        "device_name": first.get("device_name"),
        "sessions": [{k: v for k, v in s.items() if k != "record"} for s in sessions],
        "fit_sampling": dict(USER_FIT_SAMPLING),
        "samples": {table: len(columns["latency_s"]) for table, columns in sorted(tables.items())},
    }
    if physics:
        metadata["physics"] = physics
    name = f"{directory.name}: {first.get('label', first['device'])}"
    return make_profile(name, str(first["device"]), metadata, {t: dict(c) for t, c in tables.items()},
                        path=directory.resolve())


def rebuild(directory: str | Path) -> Profile | None:
    """Write the profile's tables and metadata from the journal (each file atomically)."""
    profile = build_profile(directory)
    if profile is not None:
        write_profile_files(profile, directory)
    return profile


def _link_physics(nccl: dict[str, list[Any]]) -> dict[str, float]:
    """Link bandwidth and per-step latency implied by the measured collectives (best over the rows)."""
    from costmodel.predictors._physics import bus_factor, ring_steps

    ops = np.asarray(nccl["op"])
    gpus = np.asarray(nccl["num_gpus"], dtype=float)
    size = np.asarray(nccl["message_bytes"], dtype=float)
    latency = np.asarray(nccl["latency_s"], dtype=float)
    bandwidth, step = 0.0, np.inf
    for op in np.unique(ops):
        rows = ops == op
        bandwidth = max(bandwidth, float(np.max(bus_factor(op, gpus[rows]) * size[rows] / latency[rows])))
        step = min(step, float(np.min(latency[rows] / ring_steps(op, gpus[rows]))))
    return {"intra_node_bandwidth_bytes_per_s": bandwidth, "intra_node_latency_s": step}


def check_session(records: list[dict[str, Any]], device: str, out: Path) -> None:
    """Refuse to mix devices in one profile directory.

    Raises
    ------
    SpecError
        If ``out`` already holds samples of another device.
    """
    for record in records:
        if record["record"] == "session" and record["device"] != device:
            raise SpecError("out", str(out), f"a new directory, or one holding a profile of {device!r} "
                                             f"(it holds {record['device']!r})")
