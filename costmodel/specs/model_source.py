"""One parser for every place a model is named: run specs, studies and ``parplan search --model``.

A model is a catalog name, a path to a model file (a Hugging Face
``config.json``, or a YAML/JSON mapping of ``ModelSpec`` fields), a mapping
``{hf_config: path, <ModelSpec field>: value, ...}`` (the config plus
overrides, e.g. ``seq_length`` or ``mtp_num_layers``) or an inline mapping of
``ModelSpec`` fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from costmodel.specs.catalog import get_model, model_catalog
from costmodel.specs.errors import SpecError, require_int
from costmodel.specs.model import ModelSpec, model_from_mapping
from costmodel.specs.userfile import read_user_file

MODEL_FILE_SUFFIXES = (".json", ".yaml", ".yml")
ALLOWED = "a catalog name, a model file (config.json or model YAML), {hf_config: path} or a mapping of model fields"


def _looks_like_path(text: str) -> bool:
    return text.endswith(MODEL_FILE_SUFFIXES) or "/" in text or "\\" in text


def _resolve(base_dir: Path | None, text: str) -> Path:
    path = Path(text).expanduser()
    return path if base_dir is None or path.is_absolute() else base_dir / path


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the file system, or holding a NUL
        return False


def _is_hf_config(data: Any) -> bool:
    return isinstance(data, dict) and ("model_type" in data or "architectures" in data)


def parse_model(value: Any, base_dir: Path | None = None, section: str = "model",
                seq_length: int | None = None) -> tuple[ModelSpec, tuple[str, ...]]:
    """The model ``value`` names, and the notes on what its file states but the prediction leaves out.

    Parameters
    ----------
    value : str or mapping
        See the module docstring.
    base_dir : Path, optional
        Folder relative paths resolve against (the file that named the model).
    section : str
        Field name used in error messages (``model``, ``models[2]``, ``--model``).
    seq_length : int, optional
        The training sequence length the caller already knows (a run spec's
        ``seq_length``); an HF config then needs no default.

    Raises
    ------
    SpecError
        One line naming ``section``, the value and what is allowed.
    """
    if isinstance(value, str):
        if value in model_catalog() or not _looks_like_path(value) and not _exists(_resolve(base_dir, value)):
            try:
                return get_model(value), ()
            except SpecError as exc:  # the field stays "model": the catalog is what a bare name looks in
                raise SpecError(exc.field, value, f"{exc.allowed} or a model file (config.json, model YAML)") from None
        return _model_file(_resolve(base_dir, value), section, seq_length)
    if isinstance(value, dict) and "hf_config" in value:
        return _hf_with_overrides(value, base_dir, section, seq_length)
    if isinstance(value, dict):
        return model_from_mapping(dict(value), section=section), ()
    raise SpecError(section, value, ALLOWED)


def _hf_with_overrides(value: dict[str, Any], base_dir: Path | None, section: str,
                       seq_length: int | None) -> tuple[ModelSpec, tuple[str, ...]]:
    from costmodel.specs.hf_config import read_hf_model

    path = value["hf_config"]
    if not isinstance(path, str):
        raise SpecError(f"{section}.hf_config", path, "a path to a config.json or a folder holding one")
    overrides = {k: v for k, v in value.items() if k != "hf_config"}
    if "seq_length" in overrides:
        seq_length = require_int(f"{section}.seq_length", overrides.pop("seq_length"))
    try:
        return read_hf_model(_resolve(base_dir, path), seq_length, overrides)
    except SpecError as exc:
        if exc.field.startswith("model.") and section != "model" and exc.field[6:] in overrides:
            raise SpecError(f"{section}.{exc.field[6:]}", exc.value, exc.allowed) from None
        raise


def _model_file(path: Path, section: str, seq_length: int | None) -> tuple[ModelSpec, tuple[str, ...]]:
    """A ``config.json`` (or a folder holding one), or a YAML/JSON file of model fields."""
    if path.is_dir() or path.name == "config.json":
        return _hf_with_overrides({"hf_config": str(path)}, None, section, seq_length)
    if not _exists(path) or not path.is_file():
        raise SpecError(section, str(path), "a catalog name or an existing model file (config.json or model YAML)")
    data = read_user_file(path, field=section)
    if _is_hf_config(data):
        return _hf_with_overrides({"hf_config": str(path)}, None, section, seq_length)
    if isinstance(data, dict) and "hf_config" in data:
        return _hf_with_overrides(data, path.resolve().parent, section, seq_length)
    if not isinstance(data, dict):
        raise SpecError(section, str(path), "a model file holding a mapping of model fields or a config.json")
    return model_from_mapping({"name": path.stem, **data}, section=section), ()
