"""Profiles: sampled operator timings of one device, as tables plus metadata.

A profile holds one table per operator family. A table is a mapping of column
name to a 1-D numpy array, all of one length; ``latency_s`` is the measured
time of one execution in seconds. The columns of each family are fixed by
``FAMILY_COLUMNS`` (the schema of the aiconfigurator adapter):

=================  ================================================================
family             shape columns (then ``latency_s``)
=================  ================================================================
``gemm_bf16``      ``m``, ``n``, ``k``: ``Y[m, n] = X[m, k] @ W[n, k]^T``
``gemm_fp16``      as ``gemm_bf16``
``gemm_fp8``       as ``gemm_bf16``
``attention_fwd``  ``batch``, ``seq_len``, ``num_heads``, ``num_kv_heads``,
                   ``head_dim``, ``causal``
``attention_bwd``  as ``attention_fwd`` (the backward kernel alone)
``memory``         ``kind`` (norm, activation, residual, softmax, optimizer, ...:
                   the kinds of ``costmodel.analytic.MEMORY_KERNEL_FITS``),
                   ``phase`` (fwd, bwd, step), ``elements``, ``bytes`` (read plus
                   written by the measured kernel)
``nccl``           ``op`` (all_reduce, all_gather, reduce_scatter, all_to_all,
                   send_recv), ``num_gpus``, ``message_bytes`` (nccl-tests size
                   convention; send_recv: the bytes one send moves)
=================  ================================================================

Built-in profiles come from ``aiconfigurator-core`` through
``costmodel.profiles.aiconfigurator_adapter``. A user profile is a directory
with ``metadata.yaml`` (a mapping) and one ``<family>.csv`` per family whose
header names that family's columns. ``metadata["fit_sampling"]`` holds the
recipe the predictors use to draw their light training sample (see
``DEFAULT_FIT_SAMPLING``); a user profile may override any of its keys.
``metadata["physics"]`` (optional, see ``PHYSICS_KEYS``) holds figures of the
measured device that its predictors use instead of the run's GPU catalog entry:
a profile measured on a CPU or an uncatalogued accelerator describes itself.
``metadata["use_worse_fits"]`` (optional, default false) keeps a family's fit
in use even where it misses its held-out rows by more than the roofline.
The format is documented for users in ``costmodel/profiles/README.md``.

Trust: a profile directory is data. Only ``metadata.yaml`` (a bounded safe loader)
and the ``<family>.csv`` tables are read from it, nothing is unpickled or
imported, so a profile from a shared or untrusted folder can give wrong timings
but cannot run code.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Final

import numpy as np
import yaml

from costmodel.profiles import _builtin_cache
from costmodel.profiles import aiconfigurator_adapter as adapter
from costmodel.specs.errors import SpecError
from costmodel.specs.userfile import read_user_file

__all__ = [
    "COLLECTIVE_OPS",
    "DEFAULT_FIT_SAMPLING",
    "FAMILY_COLUMNS",
    "PHYSICS_KEYS",
    "Profile",
    "builtin_profile",
    "device_mismatch",
    "load_profile",
    "make_profile",
    "save_profile",
    "write_profile_files",
]

_GEMM: Final = {"m": "int", "n": "int", "k": "int", "latency_s": "float"}
_ATTENTION: Final = {"batch": "int", "seq_len": "int", "num_heads": "int", "num_kv_heads": "int",
                     "head_dim": "int", "causal": "bool", "latency_s": "float"}
# Column kinds per family, in file order. "int" columns are int64, "float" float64,
# "bool" bool (written as true/false), "str" numpy unicode.
FAMILY_COLUMNS: Final[dict[str, dict[str, str]]] = {
    "gemm_bf16": _GEMM,
    "gemm_fp16": _GEMM,
    "gemm_fp8": _GEMM,
    "attention_fwd": _ATTENTION,
    "attention_bwd": _ATTENTION,
    "memory": {"kind": "str", "phase": "str", "elements": "int", "bytes": "int", "latency_s": "float"},
    "nccl": {"op": "str", "num_gpus": "int", "message_bytes": "int", "latency_s": "float"},
}
COLLECTIVE_OPS: Final = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
# metadata["physics"]: GPUSpec attribute names (SI units) a profile may give for its own device.
# peak_flops maps a dtype to FLOP/s; hbm_bandwidth_bytes_per_s is the main-memory bandwidth
# (DRAM on a CPU); num_sms the parallel compute units (threads on a CPU).
PHYSICS_KEYS: Final = ("peak_flops", "hbm_bandwidth_bytes_per_s", "num_sms",
                       "intra_node_bandwidth_bytes_per_s", "intra_node_latency_s")

# The light-sample recipe (implemented in costmodel.predictors._sampling). A 10% sample
# of the built-in tables (capped at max_rows) holds the held-out bf16 GEMM MAPE under 5% on
# A100 and H100 (benchmarks/predictors.py); the <= 3% target on GEMMs of >= 1 GFLOP is not met
# (3.9% H100, 4.1% A100 on the merged tables; even a 40% sample reaches only 3.2% and 3.5%,
# the limit being the tables' per-shape scatter);
# min_rows keeps tiny tables (63 rows per NCCL op) learnable, at a larger fraction.
DEFAULT_FIT_SAMPLING: Final[dict[str, Any]] = {
    "design": "maximin-core+random (large tables), staggered lattice (small tables)",
    "fraction": 0.10,
    "max_rows": 4000,
    "min_rows": 24,
    "core_fraction": 0.25,
    "outlier_factor": 2.0,
    "seed": 0,
}

_DTYPES: Final = {"int": np.int64, "float": np.float64, "bool": np.bool_, "str": np.str_}
_TRUE: Final = {"true", "1", "yes"}
_FALSE: Final = {"false", "0", "no"}


@dataclass(frozen=True)
class Profile:
    """Sampled operator timings of one device.

    Parameters
    ----------
    name : str
        e.g. ``"aiconfigurator-core 0.12.0: h100-sxm5-80gb"`` or a user directory name.
    device : str
        GPU catalog name, or free text for user profiles (e.g. ``"cpu"``).
    metadata : dict
        Device, dtype, software versions, source, collection and fit-sampling design.
    tables : dict
        Family -> column -> read-only 1-D array (schema: ``FAMILY_COLUMNS``).
    content_hash : str
        SHA-256 over the tables' values and the metadata; equal content, equal hash.
    path : Path or None
        The directory a user profile was loaded from (where ``parplan profile fit``
        stores its fitted predictors); None for built-in profiles. Not hashed.
    """

    name: str
    device: str
    metadata: dict[str, Any] = field(compare=False, repr=False)
    tables: dict[str, dict[str, np.ndarray]] = field(compare=False, repr=False)
    content_hash: str
    path: Path | None = field(default=None, compare=False, repr=False)

    @property
    def families(self) -> tuple[str, ...]:
        """Families with a table, sorted."""
        return tuple(sorted(self.tables))

    @property
    def fit_sampling(self) -> dict[str, Any]:
        """The light-sample recipe: ``DEFAULT_FIT_SAMPLING`` updated by the metadata's."""
        return {**DEFAULT_FIT_SAMPLING, **dict(self.metadata.get("fit_sampling") or {})}

    @property
    def physics(self) -> dict[str, Any]:
        """The device figures the profile carries (``metadata["physics"]``), validated; may be empty.

        Raises
        ------
        SpecError
            If a key is unknown or a value is not a positive number (latency: >= 0).
        """
        return _physics(self.metadata.get("physics"))

    @property
    def use_worse_fits(self) -> bool:
        """Whether fits worse than the roofline on their held-out rows are used (``metadata["use_worse_fits"]``).

        Raises
        ------
        SpecError
            If the value is not a bool.
        """
        return _use_worse_fits(self.metadata.get("use_worse_fits", False))


def device_mismatch(profile: Profile, gpu_name: str) -> str | None:
    """A one-line warning when ``profile`` was measured on another device than the run's GPU, else None.

    The profile's timings describe its own device (with a profile's own
    physics, exactly that device's speed), so that a CPU profile used for an
    H100 run predicts CPU step times.
    """
    if profile.device == gpu_name:
        return None
    return (f"profile {profile.name!r} was measured on {profile.device!r}, not on the run's GPU {gpu_name!r}: its "
            f"timings describe that device (if it is the same device, set device: {gpu_name} in its metadata.yaml)")


def make_profile(name: str, device: str, metadata: dict[str, Any],
                 tables: dict[str, dict[str, Any]], path: str | Path | None = None) -> Profile:
    """Build a ``Profile``: check the schema and physics, normalise dtypes, compute the hash.

    Raises
    ------
    SpecError
        If a family is unknown, a column is missing or extra, lengths differ, or
        ``metadata["physics"]`` is invalid.
    """
    normal = {family: _normalise_table(family, columns) for family, columns in sorted(tables.items())}
    metadata = {**metadata, "device": device}
    _physics(metadata.get("physics"))
    _use_worse_fits(metadata.get("use_worse_fits", False))
    return Profile(name=name, device=device, metadata=metadata, tables=normal,
                   content_hash=_content_hash(normal, metadata), path=None if path is None else Path(path))


@cache
def builtin_profile(device: str) -> Profile | None:
    """The aiconfigurator-core profile of GPU catalog ``device``; memoised, its tables cached on disk.

    The adapter's tables are kept in parplan's private cache (``_builtin_cache``), keyed by
    everything they are read from, so a later process skips the parquet read.

    Returns
    -------
    Profile or None
        None when the pinned aiconfigurator-core ships no measurements for
        ``device`` (or does not know it).

    Raises
    ------
    ProfileDataError
        If the package is missing, of another version, or its files are broken.
    """
    if device not in adapter.available_devices():
        return None
    raw = _builtin_cache.load_tables(device)  # the adapter's tables, cached by their inputs
    metadata = {**raw.pop("metadata"), "fit_sampling": dict(DEFAULT_FIT_SAMPLING)}
    return make_profile(f"{adapter.PACKAGE_NAME} {adapter.PACKAGE_VERSION}: {device}", device, metadata, raw)


def load_profile(path: str | Path) -> Profile:
    """Read a user profile directory (``metadata.yaml`` + ``<family>.csv``).

    ``metadata.yaml`` may give the profile's ``name`` and ``device`` (both
    default to the directory name); every key but ``name`` is kept as metadata.

    Raises
    ------
    SpecError
        If the directory, its metadata or a table is missing or invalid.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise SpecError("profile", str(path), "a directory holding metadata.yaml and <family>.csv files")
    metadata_path = directory / "metadata.yaml"
    if not metadata_path.is_file():
        raise SpecError("profile", str(path), "a directory with a metadata.yaml file")
    metadata = read_user_file(metadata_path, field="profile metadata", fmt="yaml")  # bounded, no aliases
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise SpecError(str(metadata_path), type(metadata).__name__, "a YAML mapping")
    tables = {}
    for csv_path in sorted(directory.glob("*.csv")):
        family = csv_path.stem
        if family not in FAMILY_COLUMNS:
            raise SpecError(f"{csv_path}", family, "a known family (" + ", ".join(FAMILY_COLUMNS) + ")")
        tables[family] = _read_csv(csv_path, family)
    if not tables:
        raise SpecError("profile", str(path), "a directory with at least one <family>.csv table")
    name = str(metadata.pop("name", directory.name))
    device = str(metadata.get("device", directory.name))
    return make_profile(name, device, metadata, tables, path=directory.resolve())


def save_profile(profile: Profile, path: str | Path) -> None:
    """Write ``profile`` as a user profile directory, atomically.

    The directory is written under a temporary name beside ``path`` and
    renamed into place; an existing profile directory at ``path`` is replaced.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; a profile directory is ordinary data
    try:
        metadata = {**profile.metadata, "name": profile.name, "device": profile.device}
        text = yaml.safe_dump(_plain(metadata), sort_keys=True, allow_unicode=True)
        (staging / "metadata.yaml").write_text(text, encoding="utf-8")
        for family, columns in profile.tables.items():
            _write_csv(staging / f"{family}.csv", family, columns)
        if target.exists():
            # os.replace cannot replace a non-empty directory: move the old one aside first.
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
            os.replace(target, old / target.name)
            os.replace(staging, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_profile_files(profile: Profile, path: str | Path) -> None:
    """Write ``metadata.yaml`` and the tables of ``profile`` into ``path``, each file atomically.

    Unlike :func:`save_profile`, other files in the directory (a sampler's
    journal, fitted predictors) are kept: each file is written under a
    temporary name and moved over the old one, so that a reader (or a crash)
    sees either the old or the new file, never a torn one.
    """
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    metadata = {**profile.metadata, "name": profile.name, "device": profile.device}
    text = yaml.safe_dump(_plain(metadata), sort_keys=True, allow_unicode=True)
    _replace_file(directory / "metadata.yaml", lambda target: target.write_text(text, encoding="utf-8"))
    for family, columns in profile.tables.items():
        _replace_file(directory / f"{family}.csv",
                      lambda target, family=family, columns=columns: _write_csv(target, family, columns))


def _replace_file(target: Path, write: Any) -> None:
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(handle)
    temporary = Path(name)
    try:
        write(temporary)
        temporary.chmod(0o644)  # mkstemp makes it private; a profile is ordinary data
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def _physics(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError("metadata.physics", value, "a mapping of " + ", ".join(PHYSICS_KEYS))
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key == "source":
            continue
        if key not in PHYSICS_KEYS:
            raise SpecError(f"metadata.physics.{key}", key, "one of " + ", ".join((*PHYSICS_KEYS, "source")))
        if key == "peak_flops":
            if not isinstance(item, dict) or not item:
                raise SpecError("metadata.physics.peak_flops", item, "a mapping of dtype to FLOP/s")
            out[key] = {str(dtype): _positive(f"metadata.physics.peak_flops.{dtype}", flops)
                        for dtype, flops in item.items()}
        elif key == "num_sms":
            out[key] = max(1, round(_positive("metadata.physics.num_sms", item)))
        else:
            out[key] = _positive(f"metadata.physics.{key}", item, strict=key != "intra_node_latency_s")
    return out


def _use_worse_fits(value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError("metadata.use_worse_fits", value, "true or false")
    return value


def _positive(where: str, value: Any, strict: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) \
            or value < 0 or (strict and value == 0):
        raise SpecError(where, value, "a positive finite number" if strict else "a finite number >= 0")
    return float(value)


def _normalise_table(family: str, columns: dict[str, Any]) -> dict[str, np.ndarray]:
    if family not in FAMILY_COLUMNS:
        raise SpecError("profile family", family, "one of " + ", ".join(FAMILY_COLUMNS))
    schema = FAMILY_COLUMNS[family]
    missing = [name for name in schema if name not in columns]
    extra = [name for name in columns if name not in schema]
    if missing or extra:
        raise SpecError(f"{family} columns", sorted(columns), "exactly " + ", ".join(schema))
    out = {}
    for name, kind in schema.items():
        values: np.ndarray = np.array(columns[name], dtype=_DTYPES[kind])
        if values.ndim != 1:
            raise SpecError(f"{family}.{name}", values.shape, "a 1-D column")
        values.setflags(write=False)
        out[name] = values
    lengths = {values.size for values in out.values()}
    if len(lengths) != 1:
        raise SpecError(f"{family} column lengths", sorted(lengths), "one length for every column")
    return out


def _content_hash(tables: dict[str, dict[str, np.ndarray]], metadata: dict[str, Any]) -> str:
    digest = hashlib.sha256()
    for family in sorted(tables):
        for name in sorted(tables[family]):
            values = tables[family][name]
            digest.update(f"{family}.{name}:{values.dtype.kind}:{values.size}\n".encode())
            if values.dtype.kind == "U":
                # Unicode arrays pad to their longest item; hash the text, not the padding.
                digest.update("\x1f".join(values.tolist()).encode())
            else:
                digest.update(np.ascontiguousarray(values).tobytes())
    digest.update(json.dumps(_plain(metadata), sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _plain(value: Any) -> Any:
    """``value`` as YAML/JSON-safe builtins (tuples to lists, numpy scalars to Python)."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _read_csv(path: Path, family: str) -> dict[str, np.ndarray]:
    schema = FAMILY_COLUMNS[family]
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or sorted(header) != sorted(schema):
            raise SpecError(f"{path} header", header, "the columns " + ", ".join(schema))
        raw: dict[str, list[Any]] = {name: [] for name in header}
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(header):
                raise SpecError(f"{path}:{line}", row, f"{len(header)} comma-separated values")
            for name, text in zip(header, row, strict=True):
                raw[name].append(_parse(f"{path}:{line} {name}", text.strip(), schema[name]))
    if not raw[header[0]]:
        raise SpecError(str(path), "no rows", "a table with at least one row")
    return {name: np.array(raw[name], dtype=_DTYPES[schema[name]]) for name in schema}


def _parse(where: str, text: str, kind: str) -> Any:
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            value = float(text)
            if not np.isfinite(value) or value <= 0:
                raise ValueError
            return value
    except ValueError:
        allowed = "an integer" if kind == "int" else "a positive finite number"
        raise SpecError(where, text, allowed) from None
    if kind == "bool":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise SpecError(where, text, "true or false")
    return text


def _write_csv(path: Path, family: str, columns: dict[str, np.ndarray]) -> None:
    schema = FAMILY_COLUMNS[family]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(list(schema))
        rows = zip(*(columns[name].tolist() for name in schema), strict=True)
        for row in rows:
            writer.writerow([_format(value) for value in row])


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # shortest round-tripping text, so the hash survives save/load
    return str(value)
