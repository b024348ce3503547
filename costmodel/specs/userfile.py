"""Safe, bounded reading of the files a user passes in (run specs, studies, HF configs, ...).

Every user file goes through :func:`read_user_file`. A file is data and nothing
else, and a small one must stay cheap to read:

- only a regular file is read (``/dev/zero``, a FIFO or a folder are refused
  before anything blocks), and at most :data:`MAX_FILE_BYTES` of it;
- YAML is parsed by a ``yaml.SafeLoader`` subclass that also refuses anchors
  and aliases (the "billion laughs" of a few hundred bytes that expand to
  gigabytes) and duplicate mapping keys;
- YAML and JSON nest at most :data:`MAX_DEPTH` levels (no ``RecursionError``);
- JSON's non-standard ``NaN`` / ``Infinity`` are refused.

Each refusal is one :class:`SpecError` line naming the file.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from costmodel.specs.errors import SpecError

MAX_FILE_BYTES = 16 * 1024**2
"""Largest user file read (16 MiB); the shipped run specs and studies are under 4 KiB."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists (a run spec nests 3 levels, a study 4)."""


class RefusedInput(ValueError):
    """A limit of this module was hit while parsing (turned into a ``SpecError`` by the caller)."""


def _position(mark: Any) -> str:
    return "" if mark is None else f" at line {mark.line + 1} column {mark.column + 1}"


class _Checks:
    """Compose-level checks mixed into a safe loader: no anchors or aliases, no duplicate keys, bounded depth.

    They run on events and nodes, before any value is built, so an alias is
    refused before it can be expanded. ``allow_aliases`` is for the shipped
    catalogs only (trusted package data that names shared figures once).
    """

    _depth = 0
    allow_aliases = False

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[attr-defined]
        if not self.allow_aliases and (isinstance(event, yaml.AliasEvent)
                                       or getattr(event, "anchor", None) is not None):
            raise RefusedInput(f"YAML without anchors or aliases (&{event.anchor} / *{event.anchor}"
                           f"{_position(event.start_mark)})")
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise RefusedInput(f"YAML nested at most {MAX_DEPTH} levels deep (deeper{_position(event.start_mark)})")
        try:
            return super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` only makes sense with aliases
                raise RefusedInput(f"YAML without merge keys (<<{_position(key_node.start_mark)})")
            key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
            if isinstance(key, Hashable):
                if key in seen:
                    raise RefusedInput(f"YAML without duplicate keys ({str(key)[:40]!r} repeated"
                                   f"{_position(key_node.start_mark)})")
                seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


class BoundedSafeLoader(_Checks, yaml.SafeLoader):
    """``yaml.SafeLoader`` with the checks of ``_Checks`` (pure Python: about 0.5 s per MB)."""


try:
    from yaml._yaml import CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    CParser = None


if CParser is not None:
    class BoundedCSafeLoader(_Checks, Composer, CParser, SafeConstructor, Resolver):  # type: ignore[misc,valid-type]
        """libyaml's parser (events only) under the Python composer, so ``_Checks`` see every node.

        The same parts as ``yaml.CSafeLoader`` except that composing runs in Python:
        about 0.02 s per MB instead of 0.5 s.
        """

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)


def _refuse_constant(name: str) -> None:
    raise RefusedInput(f"JSON without {name} (not a JSON number)")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise RefusedInput(f"JSON without duplicate keys ({key[:40]!r} repeated)")
        out[key] = value
    return out


def _check_depth(data: Any, fmt: str) -> None:
    """Raise when ``data`` nests deeper than ``MAX_DEPTH`` (iterative: no recursion limit)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise RefusedInput(f"{fmt} nested at most {MAX_DEPTH} levels deep")
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)


def parse_json(text: str) -> Any:
    """Parse JSON text with this module's limits; raises ``RefusedInput`` or ``ValueError``."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_refuse_constant)
    except RecursionError:  # the C decoder recurses per level: far too deep
        raise RefusedInput(f"JSON nested at most {MAX_DEPTH} levels deep") from None
    _check_depth(data, "JSON")
    return data


def parse_yaml(text: str, allow_aliases: bool = False) -> Any:
    """Parse YAML text with the bounded safe loader; raises ``RefusedInput`` or ``yaml.YAMLError``.

    ``allow_aliases`` admits anchors and aliases (the shipped catalogs only, never a user's file).
    """
    loader = (BoundedSafeLoader if CParser is None else BoundedCSafeLoader)(text)
    loader.allow_aliases = allow_aliases
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_user_text(path: str | Path, field: str) -> str:
    """The UTF-8 text of a regular file of at most ``MAX_FILE_BYTES``.

    Raises
    ------
    SpecError
        Naming ``field`` and the path: missing, not a regular file (a FIFO or a
        device is never opened for blocking reads), too large, or not UTF-8.
    """
    name = str(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise SpecError(field, name, "a regular file (not a folder, FIFO or device)")
        # O_NONBLOCK: if the path was swapped for a FIFO since the stat, open returns instead of waiting.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SpecError(field, name, f"a readable file ({exc.__class__.__name__})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(field, name, "a regular file (not a folder, FIFO or device)")
        if info.st_size > MAX_FILE_BYTES:
            raise SpecError(field, name, f"a file of at most {MAX_FILE_BYTES // 1024**2} MiB "
                                         f"({info.st_size} bytes)")
        raw = handle.read(MAX_FILE_BYTES + 1)  # a file growing while read is bounded too
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError(field, name, f"a file of at most {MAX_FILE_BYTES // 1024**2} MiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(field, name, f"UTF-8 text (byte {exc.start} is not)") from None


def read_user_file(path: str | Path, field: str = "run spec", fmt: str | None = None) -> Any:
    """Parse a user's YAML or JSON file within this module's limits.

    Parameters
    ----------
    path : str or Path
        The file; ``.json`` is read as JSON, anything else as YAML.
    field : str
        What the file is, for the error message ("run spec", "study", ...).
    fmt : {"yaml", "json"}, optional
        Overrides the choice by suffix.

    Returns
    -------
    Any
        Plain data: dicts, lists, strings, numbers, booleans, None (and YAML dates).

    Raises
    ------
    SpecError
        One line naming ``field`` and the file, with what is wrong and where.
    """
    text = read_user_text(path, field)
    kind = fmt or ("json" if Path(path).suffix.lower() == ".json" else "yaml")
    try:
        return parse_json(text) if kind == "json" else parse_yaml(text)
    except RefusedInput as exc:
        raise SpecError(field, str(path), str(exc)) from None
    except json.JSONDecodeError as exc:
        raise SpecError(field, str(path), f"valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except yaml.MarkedYAMLError as exc:
        if "nesting depth" in str(exc.problem):  # libyaml's own limit (1000) met before ours
            raise SpecError(field, str(path), f"YAML nested at most {MAX_DEPTH} levels deep") from None
        problem = exc.problem or exc.context
        raise SpecError(field, str(path), f"valid YAML ({problem}{_position(exc.problem_mark)})") from None
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: e.g. an integer of more than 4300 digits
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise SpecError(field, str(path), f"valid {kind.upper()} ({first[:120]})") from None
