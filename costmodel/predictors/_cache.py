"""On-disk cache of fitted predictors and other derived arrays: data only, in a private directory.

Each entry is one ``<key>.npz`` of numeric arrays plus JSON metadata, read with
``allow_pickle=False``: a cache file can hold wrong numbers at worst, never
code, so nothing here is ever unpickled. Wrong numbers are still kept out: the
directory is ``<cache dir>/predictors``, where the cache dir is
``$PARPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/parplan``, else
``~/.cache/parplan``; parplan creates it with mode 0700. On every load and
store it must be a real directory (not a symlink), owned by the current uid
and neither group- nor world-writable; otherwise the cache is not used at all
(nothing read, nothing written, the predictors are refitted) and a
``ParplanWarning`` says why. Each file records its key, so that an entry moved
under another key's name is not read.

No function here takes another directory, and a profile directory's
``fitted/`` folder (which a team may share) is never read
(``costmodel.predictors._fitted``). Files are written under temporary names and
moved into place with ``os.replace``: a reader racing a writer sees the old
file or the new one. (Earlier versions kept HMAC-signed joblib pickles here as
``<key>.joblib``; they are ignored.)
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import tempfile
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np

from costmodel.specs.notices import ParplanWarning

__all__ = ["cache_dir", "load_arrays", "store_arrays"]

_ARRAYS_SUFFIX: Final = ".npz"
_META: Final = "__meta__"  # the JSON metadata, stored as a uint8 array beside the data arrays
_KEY_PATTERN: Final = re.compile(r"[A-Za-z0-9_.-]+")
# Bits that let someone else write the directory.
_OTHERS_WRITE: Final = stat.S_IWGRP | stat.S_IWOTH


def cache_dir() -> Path:
    """Directory holding the cached predictors (not created here)."""
    override = os.environ.get("PARPLAN_CACHE_DIR")
    if override:
        return Path(override) / "predictors"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "parplan" / "predictors"


def load_arrays(key: str) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """The arrays and JSON metadata stored under ``key`` by :func:`store_arrays`; None when absent or unreadable.

    Data only: the file is read with ``allow_pickle=False``, so nothing in it can run code, and a file
    whose recorded key differs (moved under another name) or that is broken counts as absent.
    """
    directory = _private_dir(create=False)
    if directory is None:
        return None
    blob = _read(directory / _file_name(key, _ARRAYS_SUFFIX))
    if blob is None:
        return None
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        meta = json.loads(arrays.pop(_META).tobytes().decode())
    except (OSError, ValueError, KeyError, EOFError, UnicodeDecodeError, zipfile.BadZipFile):
        return None
    if not isinstance(meta, dict) or meta.get("key") != key:
        return None
    return arrays, meta


def store_arrays(key: str, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> Path | None:
    """Write numeric ``arrays`` and JSON-able ``meta`` under ``key`` atomically, data only (``.npz``).

    Returns the file, or None when the cache directory is not private.
    """
    if _META in arrays:
        raise ValueError(f"array name {_META!r} is reserved")
    values = {name: np.asarray(value) for name, value in arrays.items()}
    if any(value.dtype.hasobject for value in values.values()):
        raise ValueError("store_arrays holds numeric arrays only (no object dtype)")
    directory = _private_dir(create=True)
    if directory is None:
        return None
    header = np.frombuffer(json.dumps({**meta, "key": key}, sort_keys=True).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **values, **{_META: header})
    target = directory / _file_name(key, _ARRAYS_SUFFIX)
    _write_new(target, buffer.getvalue())
    return target


def _file_name(key: str, suffix: str) -> str:
    if not _KEY_PATTERN.fullmatch(key):
        raise ValueError(f"cache key {key[:80]!r} is not file-name safe")
    return key + suffix


def _private_dir(create: bool) -> Path | None:
    """The cache directory if it is private to this user (created 0700 when asked), else None."""
    directory = cache_dir()
    if create:
        try:
            directory.parent.mkdir(parents=True, exist_ok=True)
            directory.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        info = os.lstat(directory)
    except OSError:
        return None  # no cache yet
    if not (stat.S_ISDIR(info.st_mode) and _owned(info) and not info.st_mode & _OTHERS_WRITE):
        _warn(directory, "a directory you own that no one else can write (chmod 700)")
        return None
    return directory


def _owned(info: os.stat_result) -> bool:
    getuid = getattr(os, "getuid", None)  # no uids (Windows): nothing can be shown private, so no cache
    return getuid is not None and info.st_uid == getuid()


def _read(path: Path) -> bytes | None:
    try:
        handle = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(handle, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            return None
        return file.read()


def _write_new(target: Path, data: bytes) -> None:
    """Write ``data`` to a fresh private file beside ``target`` and move it over ``target``."""
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)  # mode 0600
    temporary = Path(name)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _warn(path: Path, allowed: str) -> None:
    warnings.warn(f"predictor cache {path} is not private (it must be {allowed}): not used, so fitted "
                  f"predictors are neither read from it nor written to it", ParplanWarning, stacklevel=3)
