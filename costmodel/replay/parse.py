"""Reading Kineto (PyTorch profiler) Chrome traces for replay: bounded, data only.

A trace is read as JSON and nothing else (never unpickled). Unlike run specs
(``costmodel/specs/userfile.py``, 16 MiB), profiler traces of real jobs run to
hundreds of megabytes, so they have their own cap, :data:`MAX_TRACE_BYTES`,
applied to the file and, for ``.json.gz``, to the decompressed text too (a
gzip bomb stops there). Only a regular file is opened.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from costmodel.specs.errors import SpecError

__all__ = ["MAX_TRACE_BYTES", "RawEvent", "RawTrace", "read_trace"]

MAX_TRACE_BYTES: Final = 2 * 1024**3
"""Largest trace read, file and decompressed text alike (2 GiB; the shared test traces are under 60 MB
decompressed, a 512-GPU Lumos trace of one rank a few hundred MB)."""


@dataclass(frozen=True)
class RawEvent:
    """One complete (``ph: X``) event: times in microseconds, as recorded."""

    name: str
    cat: str
    pid: str
    tid: str
    ts: float
    dur: float
    args: dict[str, Any]


@dataclass
class RawTrace:
    """The events of one rank's trace and its distributed facts."""

    path: Path
    events: list[RawEvent]
    rank: int
    world_size: int
    device_name: str | None
    distributed: dict[str, Any] = field(default_factory=dict)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _read_bytes(path: Path) -> bytes:
    name = str(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise SpecError("trace", name, "a regular file (not a folder, FIFO or device)")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SpecError("trace", name, f"a readable file ({exc.__class__.__name__})") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise SpecError("trace", name, "a regular file (not a folder, FIFO or device)")
        raw = handle.read(MAX_TRACE_BYTES + 1)
    if len(raw) > MAX_TRACE_BYTES:
        raise SpecError("trace", name, f"a file of at most {MAX_TRACE_BYTES // 1024**3} GiB")
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as unzipped:
                raw = unzipped.read(MAX_TRACE_BYTES + 1)
        except (OSError, EOFError) as exc:
            raise SpecError("trace", name, f"a readable .json.gz file ({exc.__class__.__name__})") from None
        if len(raw) > MAX_TRACE_BYTES:
            raise SpecError("trace", name, f"a trace of at most {MAX_TRACE_BYTES // 1024**3} GiB decompressed")
    return raw


def read_chrome_json(path: str | Path) -> dict[str, Any]:
    """The JSON object of a Chrome trace file (``.json`` or ``.json.gz``), within this module's bounds.

    Raises
    ------
    SpecError
        Naming the file: not a regular file, too large, not JSON, nested too deeply, or without traceEvents.
    """
    path = Path(path)
    raw = _read_bytes(path)
    try:
        data = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        raise SpecError("trace", str(path), "a Chrome trace JSON file (nested too deeply)") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise SpecError("trace", str(path), f"a readable Chrome trace JSON file ({str(exc)[:80]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise SpecError("trace", str(path), "a Chrome trace (a JSON object with a traceEvents list)")
    return data


def read_trace(path: str | Path) -> RawTrace:
    """Read one rank's Chrome trace (``.json`` or ``.json.gz``).

    Raises
    ------
    SpecError
        Naming the file: unreadable, too large, not JSON, or not a Chrome trace with complete events.
    """
    path = Path(path)
    data = read_chrome_json(path)
    events = []
    for item in data["traceEvents"]:
        if not isinstance(item, dict) or item.get("ph") != "X":
            continue
        ts, dur = item.get("ts"), item.get("dur", 0.0)
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or dur < 0:
            continue  # counted by the graph builder as malformed through the missing kinds
        args = item.get("args") if isinstance(item.get("args"), dict) else {}
        events.append(RawEvent(str(item.get("name", "")), str(item.get("cat", "")), str(item.get("pid")),
                               str(item.get("tid")), float(ts), float(dur), args))
    info = data.get("distributedInfo") if isinstance(data.get("distributedInfo"), dict) else {}
    devices = [d for d in data.get("deviceProperties") or [] if isinstance(d, dict)]
    rank, world = info.get("rank", 0), info.get("world_size", 1)
    return RawTrace(path=path, events=events, rank=rank if isinstance(rank, int) else 0,
                    world_size=world if isinstance(world, int) and world > 0 else 1,
                    device_name=str(devices[0].get("name")) if devices else None, distributed=info)
