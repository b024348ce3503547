"""The built-in profiles' tables, cached as data in parplan's private cache.

Reading aiconfigurator-core's parquet tables (pyarrow, which imports pandas to
convert string columns) and merging the bf16 GEMM backends takes about 1.5 s
per device; the cached arrays load in milliseconds. The cache holds exactly
what :func:`aiconfigurator_adapter.load_tables` returns: every column as a
numpy array (strings as fixed-width unicode ``<U..`` arrays) and the metadata
as JSON, in one ``.npz`` of the data-only store
(``costmodel.predictors._cache.store_arrays``: ``allow_pickle=False``, the
private directory only), so a cache file can hold wrong numbers at worst, never
code.

The key is a SHA-256 over everything the tables are made from: the device; the
installed versions of aiconfigurator-core, pyarrow and numpy; the path, size
and ``mtime_ns`` of every file the adapter may read for the device (absent ones
too, since the bf16 merge skips a missing backend); and the source text of the
adapter and of this module (no version constant to forget). A miss, a broken or
mismatched file, or a cache directory that is not private falls back to
reading the package; a cache that cannot be written is skipped silently (the
predictor cache, used next in the same command, warns about a non-private one).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import warnings
import zipfile
from pathlib import Path
from typing import Any, Final

import numpy as np

from costmodel.profiles import aiconfigurator_adapter as adapter
from costmodel.specs.notices import ParplanWarning

__all__ = ["cache_key", "decode", "encode", "load_tables"]

_KEY_PREFIX: Final = "builtin-profile"
_VERSIONED: Final = (adapter.PACKAGE_NAME, "pyarrow", "numpy")
_CODE: Final = (Path(adapter.__file__), Path(__file__))
# JSON has string keys and no tuples; these tags carry the metadata's other dict keys
# (e.g. gemm_bf16_merge.shapes_by_measurements counts by int) and tuples through unchanged.
_ITEMS: Final = "__items__"
_TUPLE: Final = "__tuple__"


def load_tables(device: str) -> dict[str, Any]:
    """``aiconfigurator_adapter.load_tables(device)``, from the cache when its inputs are unchanged.

    Raises
    ------
    ProfileDataError
        As the adapter, on a miss whose package read fails.
    """
    key = cache_key(device)
    if key is not None:
        cached = _load(key)
        if cached is not None:
            return cached
    raw = adapter.load_tables(device)
    if key is not None:
        _store(key, raw)
    return raw


def cache_key(device: str) -> str | None:
    """The cache key of ``device``'s tables; None when the package cannot be found (no caching)."""
    try:
        files = adapter.source_files(device)
        versions = [importlib.metadata.version(name) for name in _VERSIONED]
        code = [hashlib.sha256(path.read_bytes()).hexdigest() for path in _CODE]
    except (adapter.ProfileDataError, importlib.metadata.PackageNotFoundError, OSError):
        return None
    inputs = {"device": device, "versions": versions, "code": code, "files": [_file_state(path) for path in files]}
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    return f"{_KEY_PREFIX}-{device}-{digest[:32]}"


def encode(raw: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The adapter's output as arrays named ``<family>.<column>`` and JSON-able metadata.

    Raises
    ------
    ValueError
        If a column is not a 1-D numeric, bool or unicode array, or the metadata does not survive JSON unchanged.
    """
    arrays: dict[str, np.ndarray] = {}
    columns: dict[str, list[str]] = {}
    for family, table in raw.items():
        if family == "metadata":
            continue
        columns[family] = list(table)
        for name, values in table.items():
            values = np.asarray(values)
            if values.ndim != 1 or values.dtype.kind not in "biufU":
                raise ValueError(f"{family}.{name}: {values.dtype} {values.shape} is not a data-only 1-D column")
            arrays[f"{family}.{name}"] = values
    metadata = _tagged(raw["metadata"])
    try:
        same = _untagged(json.loads(json.dumps(metadata))) == raw["metadata"]
    except TypeError:  # a value JSON cannot hold, or a key that is not hashable once decoded
        same = False
    if not same:
        raise ValueError("the metadata does not survive a JSON round trip")
    return arrays, {"columns": columns, "metadata": metadata}


def decode(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> dict[str, Any] | None:
    """The adapter's output back from :func:`encode`'s form; None when it is incomplete or malformed."""
    try:
        columns, metadata = meta["columns"], _untagged(meta["metadata"])
        raw: dict[str, Any] = {}
        for family, names in columns.items():
            table = {}
            for name in names:
                values = arrays[f"{family}.{name}"]
                values.setflags(write=False)
                table[name] = values
            raw[family] = table
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    if not isinstance(metadata, dict) or any(values.ndim != 1 for t in raw.values() for values in t.values()):
        return None
    raw["metadata"] = metadata
    return raw


def _file_state(path: Path) -> list[Any]:
    try:
        info = os.stat(path)
    except OSError:
        return [str(path), None, None]
    return [str(path), info.st_size, info.st_mtime_ns]


def _load(key: str) -> dict[str, Any] | None:
    from costmodel.predictors import _cache

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ParplanWarning)
            stored = _cache.load_arrays(key)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):  # a torn or foreign file is a miss
        return None
    return None if stored is None else decode(*stored)


def _store(key: str, raw: dict[str, Any]) -> None:
    from costmodel.predictors import _cache

    try:
        arrays, meta = encode(raw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ParplanWarning)
            _cache.store_arrays(key, arrays, meta)
    except (OSError, ValueError):
        pass  # not cached: the next command reads the package again


def _tagged(value: Any) -> Any:
    if isinstance(value, dict):
        if all(isinstance(key, str) and key not in (_ITEMS, _TUPLE) for key in value):
            return {key: _tagged(item) for key, item in value.items()}
        return {_ITEMS: [[_tagged(key), _tagged(item)] for key, item in value.items()]}
    if isinstance(value, tuple):
        return {_TUPLE: [_tagged(item) for item in value]}
    if isinstance(value, list):
        return [_tagged(item) for item in value]
    return value


def _untagged(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and _ITEMS in value:
            return {_untagged(key): _untagged(item) for key, item in value[_ITEMS]}
        if len(value) == 1 and _TUPLE in value:
            return tuple(_untagged(item) for item in value[_TUPLE])
        return {key: _untagged(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_untagged(item) for item in value]
    return value
