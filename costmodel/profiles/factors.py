"""Factor profiles: per-family correction factors of parplan's operator times, fitted from a trace.

``parplan replay fit TRACE --gpu G --out DIR`` compares the kernels a profiler trace measured with
the times parplan predicts for the same operators on ``G`` and writes ``DIR/metadata.yaml``:

.. code-block:: yaml

    kind: trace-factors
    name: my-job
    device: h100-sxm5-80gb        # the GPU whose predictions were compared
    base_profile: null            # null: that GPU's built-in profile; else the profile directory used
    factors: {gemm: 1.2, attention: 1.05, elementwise: 0.9, collective: 1.1,
              collective_intra: 1.3, collective_inter: 0.95}   # tiers: only where the traces held both
    spread: {gemm: {operators: 96, p10: 1.18, median: 1.2, p90: 1.22}, ...}   # documentation only
    source: {traces: [...], fitted: 2026-12-01T13:00:00+00:00}                 # documentation only

A run predicted with ``--profile DIR`` is timed by the base profile with each family's times
multiplied by its factor (``costmodel.factored_timing``); a family without a factor keeps 1. A
collective inside one scale-up domain takes ``collective_intra``, one across domains (the scale-out
network) ``collective_inter``, each where the fit saw both tiers, else ``collective``.
The directory is data: only ``metadata.yaml`` is read, with the bounded safe YAML reader.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from costmodel.specs.errors import SpecError
from costmodel.specs.userfile import read_user_file

__all__ = ["COLLECTIVE_TIERS", "FACTOR_FAMILIES", "FACTOR_KIND", "FactorProfile", "profile_content_hash", "read_factor_profile",
           "write_factor_profile"]

FACTOR_KIND: Final = "trace-factors"
FACTOR_FAMILIES: Final = ("gemm", "attention", "elementwise", "collective")
COLLECTIVE_TIERS: Final = ("collective_intra", "collective_inter")
"""Collective factors per tier: inside one scale-up domain (NVLink), across domains (the network)."""
MAX_FACTOR: Final = 1e3
"""Largest factor accepted: a kernel 1000x off parplan's time is a wrong match, not a calibration."""


@dataclass(frozen=True)
class FactorProfile:
    """Per-family multipliers of parplan's operator times (``FACTOR_FAMILIES``), fitted on ``device``."""

    name: str
    device: str
    factors: dict[str, float]
    base_profile: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    path: Path | None = field(default=None, compare=False)

    def factor(self, family: str) -> float:
        """The factor of ``family`` (1 where the trace gave none)."""
        return self.factors.get(family, 1.0)

    def collective(self, crosses_nodes: bool) -> float:
        """The collective factor of a group inside one domain or across domains (``collective`` where the
        fit saw one tier only)."""
        return self.factors.get(COLLECTIVE_TIERS[1 if crosses_nodes else 0], self.factor("collective"))

    @property
    def content_hash(self) -> str:
        """SHA-256 of what changes predictions: device, factors and base profile."""
        text = json.dumps({"device": self.device, "factors": self.factors, "base": self.base_profile},
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def _metadata(directory: Path) -> Any:
    path = directory / "metadata.yaml"
    if not path.is_file():
        return None
    return read_user_file(path, field="profile metadata", fmt="yaml")


def read_factor_profile(path: str | Path) -> FactorProfile | None:
    """The factor profile in ``path``; None when ``path`` holds another kind of profile (or none).

    Raises
    ------
    SpecError
        Naming the key: a factor profile whose factors, device or base profile are invalid.
    """
    directory = Path(path)
    metadata = _metadata(directory) if directory.is_dir() else None
    if not isinstance(metadata, dict) or metadata.get("kind") != FACTOR_KIND:
        return None
    where = f"{directory / 'metadata.yaml'}"
    raw = metadata.get("factors")
    if not isinstance(raw, dict) or not raw:
        raise SpecError(f"{where}: factors", raw, "a mapping of " + ", ".join(FACTOR_FAMILIES) + " to numbers")
    factors = {}
    for family, value in raw.items():
        if family not in FACTOR_FAMILIES + COLLECTIVE_TIERS:
            raise SpecError(f"{where}: factors", family, "one of " + ", ".join(FACTOR_FAMILIES + COLLECTIVE_TIERS))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0 < value <= MAX_FACTOR:
            raise SpecError(f"{where}: factors.{family}", value, f"a number > 0 and <= {MAX_FACTOR:g}")
        factors[str(family)] = float(value)
    device = metadata.get("device")
    if not isinstance(device, str) or not device:
        raise SpecError(f"{where}: device", device, "the GPU catalog name the factors were fitted for")
    base = metadata.get("base_profile")
    if base is not None and (not isinstance(base, str) or not Path(base).is_dir()):
        raise SpecError(f"{where}: base_profile", base, "null (the GPU's built-in profile) or a profile directory")
    if base is not None and read_factor_profile(base) is not None:
        raise SpecError(f"{where}: base_profile", base, "a profile of measured tables, not another factor profile")
    return FactorProfile(str(metadata.get("name", directory.name)), device, factors,
                         None if base is None else str(Path(base).resolve()), dict(metadata), directory.resolve())


def write_factor_profile(profile: FactorProfile, path: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Write ``profile`` as ``path/metadata.yaml`` (atomically; ``path`` is created, or must be a factor profile).

    ``extra`` (spread, sources) is stored beside the factors as documentation.

    Raises
    ------
    SpecError
        If ``path`` exists and holds anything but a factor profile (it is never overwritten).
    """
    directory = Path(path)
    if directory.exists() and (not directory.is_dir() or (any(directory.iterdir())
                                                          and read_factor_profile(directory) is None)):
        raise SpecError("--out", str(path), "a new directory or a factor profile from `parplan replay fit`")
    directory.mkdir(parents=True, exist_ok=True)
    body = {"kind": FACTOR_KIND, "name": profile.name, "device": profile.device,
            "base_profile": profile.base_profile, "factors": dict(profile.factors), **(extra or {})}
    handle, name = tempfile.mkstemp(prefix=".metadata.yaml.", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            yaml.safe_dump(body, out, sort_keys=False, allow_unicode=True)
        os.chmod(name, 0o644)  # mkstemp makes it private; a profile is ordinary data
        os.replace(name, directory / "metadata.yaml")
    finally:
        Path(name).unlink(missing_ok=True)
    return directory


def profile_content_hash(path: str | Path) -> str:
    """Content hash of any profile directory: a factor profile's (with its base's), else the tables'.

    Raises
    ------
    SpecError
        If the directory is not a valid profile of either kind.
    """
    from costmodel.profiles.profile import load_profile

    factors = read_factor_profile(path)
    if factors is None:
        return load_profile(path).content_hash
    base = "" if factors.base_profile is None else load_profile(factors.base_profile).content_hash
    return hashlib.sha256((factors.content_hash + base).encode()).hexdigest()
