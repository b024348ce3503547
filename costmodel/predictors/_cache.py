"""On-disk cache of fitted predictors: joblib files with a SHA-256 checksum beside them.

Layout: ``<cache dir>/predictors/<key>.joblib`` and ``<key>.joblib.sha256``.
The cache directory is ``$PARPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/parplan``,
else ``~/.cache/parplan``. Every function takes an optional ``directory`` that
replaces ``<cache dir>/predictors`` (``parplan profile fit`` stores the fitted
predictors beside the profile's tables, in ``<profile>/fitted``). Both files are written to temporary names and moved
into place with ``os.replace``, data first: a reader that races a writer sees
a checksum that does not match and refits. A file whose checksum does not
match is never unpickled. The checksum guards against truncation and
corruption, not against someone who can write to the cache directory (they
could rewrite both files): keep it private like any user cache.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any

import joblib

__all__ = ["cache_dir", "load_verified", "store"]

_SUFFIX = ".joblib"


def cache_dir() -> Path:
    """Directory holding the cached predictors (not created here)."""
    override = os.environ.get("PARPLAN_CACHE_DIR")
    if override:
        return Path(override) / "predictors"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "parplan" / "predictors"


def paths(key: str, directory: Path | None = None) -> tuple[Path, Path]:
    """The data file and checksum file of ``key`` (in ``directory``, default the cache directory)."""
    data = (cache_dir() if directory is None else Path(directory)) / f"{key}{_SUFFIX}"
    return data, data.with_name(data.name + ".sha256")


def load_verified(key: str, directory: Path | None = None) -> Any | None:
    """The cached object of ``key``, or None when absent or its checksum does not match."""
    data, checksum = paths(key, directory)
    try:
        expected = checksum.read_text(encoding="ascii").strip()
        payload = data.read_bytes()
    except OSError:
        return None
    if hashlib.sha256(payload).hexdigest() != expected:
        return None
    # Unpickle the very bytes that were checked, not the file again (it may have been replaced since).
    return joblib.load(io.BytesIO(payload))


def store(key: str, value: Any, directory: Path | None = None) -> Path:
    """Write ``value`` under ``key`` atomically, with its checksum; return the data path."""
    data, checksum = paths(key, directory)
    data.parent.mkdir(parents=True, exist_ok=True)
    tmp_data = _temp_path(data)
    try:
        joblib.dump(value, tmp_data, compress=3)
        digest = hashlib.sha256(tmp_data.read_bytes()).hexdigest()
        os.replace(tmp_data, data)
    finally:
        tmp_data.unlink(missing_ok=True)
    tmp_sum = _temp_path(checksum)
    try:
        tmp_sum.write_text(digest + "\n", encoding="ascii")
        os.replace(tmp_sum, checksum)
    finally:
        tmp_sum.unlink(missing_ok=True)
    return data


def _temp_path(target: Path) -> Path:
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(handle)
    return Path(name)
