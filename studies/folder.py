"""A study's output folder, guarded: parplan writes only into a folder it made or marked, never through a symlink.

A folder becomes a study folder when ``parplan study run`` creates it, or adopts
an existing empty one, and writes the marker file ``.parplan-study`` (JSON: the
study's name and the result files parplan wrote). Any other non-empty folder is
refused, so a mistyped ``--out`` cannot overwrite or delete someone's files.

Inside the folder every path is walked one component at a time from a directory
file descriptor with ``O_NOFOLLOW``: a symlinked ``results/``, ``report/`` or
file is refused with a one-line error instead of being followed out of the
folder (e.g. into another user's home through a link planted in ``/tmp``).
Files are written to a temporary name in their own folder and renamed over the
old one (``os.replace``), so a killed run never leaves a truncated file.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from costmodel.specs.errors import SpecError

MARKER_FILE = ".parplan-study"
MAX_READ_BYTES = 64 * 1024**2
"""Largest file parplan reads back from an output folder (a result file is a few KiB; a marker, ~100 B a problem)."""
SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _refuse(path: Path | str, allowed: str) -> SpecError:
    return SpecError("out", str(path), allowed)


class StudyFolder:
    """An output folder that carries parplan's marker; files reached by relative paths like ``results/x.json``.

    Parameters
    ----------
    path : Path
        The folder (absolute).
    study : str
        The study whose outputs it holds.
    """

    def __init__(self, path: Path, study: str) -> None:
        self.path, self.study = path, study

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def claim(cls, path: str | Path, study: str) -> StudyFolder:
        """The output folder of ``study`` at ``path``: created (with its parents) when missing, adopted when empty.

        Raises
        ------
        SpecError
            If ``path`` is a file, a symlink another user owns, a non-empty folder without the marker,
            or the folder of another study.
        """
        out = Path(path).expanduser().absolute()
        _check_root(out)
        if not out.exists():
            try:
                out.mkdir(parents=True)
            except FileExistsError:
                pass  # another worker made it first
            except OSError as exc:
                raise _refuse(out, f"a folder parplan can create ({exc.strerror})") from None
        folder = cls(out, study)
        marker = folder.marker()
        if marker is None:
            with folder._dir("") as fd:
                if os.listdir(fd):
                    raise _refuse(out, f"a new or empty folder, or one made by `parplan study run` (with "
                                       f"{MARKER_FILE}); this one holds other files")
            folder.write_marker([])
        elif marker.get("study") != study:
            raise _refuse(out, f"a folder of study {study!r} or a new one (it holds study "
                               f"{str(marker.get('study'))!r})")
        return folder

    @classmethod
    def existing(cls, path: str | Path) -> StudyFolder:
        """A folder ``parplan study run`` made (for reading and reports).

        Raises
        ------
        SpecError
            If ``path`` is not a folder with the marker.
        """
        out = Path(path).expanduser().absolute()
        _check_root(out)
        folder = cls(out, "")
        marker = folder.marker() if out.is_dir() else None
        if marker is None:
            raise _refuse(out, f"a study output folder (with {MARKER_FILE}, from `parplan study run`)")
        folder.study = str(marker.get("study", ""))
        return folder

    # -- the marker ------------------------------------------------------------------------------
    def marker(self) -> dict[str, Any] | None:
        """The marker's content, or ``None`` when the folder has none.

        Raises
        ------
        SpecError
            If the marker is unreadable or not parplan's JSON.
        """
        text = self.read_text(MARKER_FILE)
        if text is None:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("study"), str):
            raise _refuse(self.path / MARKER_FILE, 'a folder whose marker holds the JSON parplan writes ({"study": NAME, "results": [...]}); remove the file '
                            "only if the folder is yours")
        return data

    def written_results(self) -> set[str]:
        """Problem ids whose ``results/ID.json`` parplan wrote (the manifest in the marker)."""
        marker = self.marker() or {}
        ids = marker.get("results")
        if not isinstance(ids, list):
            return set()
        # Only plain file names: an edited marker must not name a path outside results/.
        return {i for i in ids if isinstance(i, str) and SAFE_NAME.fullmatch(i) and i not in (".", "..")}

    def write_marker(self, result_ids: list[str]) -> None:
        self.write_text(MARKER_FILE, json.dumps({"study": self.study, "results": sorted(result_ids)}) + "\n")

    # -- files -----------------------------------------------------------------------------------
    @contextmanager
    def _dir(self, relative: str, create: bool = False) -> Iterator[int]:
        """A descriptor of the sub-folder ``relative`` (``""``: the folder), no component a symlink."""
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in (p for p in relative.split("/") if p):
                if create:
                    try:
                        os.mkdir(part, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise _refuse(self.path / relative, "a real folder inside the output folder, not a "
                                                            "symlink or a file") from None
                    raise
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def write_text(self, relative: str, text: str) -> Path:
        """Write ``text`` (UTF-8) to ``relative`` atomically; see :meth:`write_bytes`."""
        return self.write_bytes(relative, text.encode("utf-8"))

    def write_bytes(self, relative: str, data: bytes) -> Path:
        """Write ``data`` to ``relative`` atomically (temporary file in the same folder, then ``os.replace``)."""
        parent, _, name = relative.rpartition("/")
        with self._dir(parent, create=True) as dfd:
            _require_regular_or_absent(self.path / relative, name, dfd)
            tmp = f".{name}.{secrets.token_hex(6)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                         dir_fd=dfd)  # 0o666 less the umask: outputs are meant to be shared like any file
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=dfd)
                except FileNotFoundError:
                    pass
                raise
        return self.path / relative

    def read_text(self, relative: str, limit: int = MAX_READ_BYTES) -> str | None:
        """The text of ``relative``, or ``None`` when absent.

        Raises
        ------
        SpecError
            If it is a symlink, not a regular file (a FIFO, a device) or larger than ``limit`` bytes.
        """
        parent, _, name = relative.rpartition("/")
        path = self.path / relative
        try:
            with self._dir(parent) as dfd:
                try:
                    # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
                except FileNotFoundError:
                    return None
                except OSError as exc:
                    if exc.errno == errno.ELOOP:
                        raise _refuse(path, "a folder whose files are regular files, not symlinks") from None
                    raise
                with os.fdopen(fd, "rb") as f:
                    info = os.fstat(f.fileno())
                    if not stat.S_ISREG(info.st_mode):
                        raise _refuse(path, "a folder whose files are regular files (not a FIFO or a device)")
                    data = f.read(limit + 1)
        except FileNotFoundError:
            return None
        if len(data) > limit:
            raise _refuse(path, f"a folder whose files parplan reads are at most {limit} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise _refuse(path, "a folder whose files parplan reads are UTF-8 text") from None

    def remove(self, relative: str) -> None:
        """Delete ``relative`` if it is there (a file parplan wrote: callers name only those)."""
        parent, _, name = relative.rpartition("/")
        try:
            with self._dir(parent) as dfd:
                _require_regular_or_absent(self.path / relative, name, dfd)
                os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            pass

    def require_subfolder(self, relative: str) -> None:
        """Refuse ``relative`` when it exists and is not a real folder (a symlink, a file)."""
        try:
            with self._dir(relative):
                pass
        except FileNotFoundError:
            pass

    def require_no_symlink(self, relative: str) -> None:
        """Refuse ``relative`` when it is a symlink (for files opened by other libraries, e.g. SQLite)."""
        parent, _, name = relative.rpartition("/")
        with self._dir(parent) as dfd:
            _require_regular_or_absent(self.path / relative, name, dfd)


def _check_root(out: Path) -> None:
    """The folder itself: not a file, and a symlink only when the current user made it."""
    try:
        info = out.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode) and info.st_uid != os.getuid():
        # A link another user planted (typically in /tmp) would send our files into a folder of their choosing.
        raise _refuse(out, "a folder, or a symlink you own (this one belongs to another user)")
    if out.exists() and not out.is_dir():
        raise _refuse(out, "a folder (it is a file)")


def _require_regular_or_absent(path: Path, name: str, dfd: int) -> None:
    """Refuse ``name`` in ``dfd`` unless it is missing or a regular file (never follow a link to check it)."""
    try:
        info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise _refuse(path, "a folder whose files are regular files, not symlinks")
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(path, "a folder whose files are regular files (not a FIFO, a device or a folder)")
