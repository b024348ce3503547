"""``--json`` output: strict JSON, never a bare ``NaN`` or ``Infinity`` (which most JSON parsers refuse)."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by ``None`` (JSON ``null``), recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any) -> str:
    """Indented strict JSON of ``value`` (non-finite numbers as ``null``; callers say why beside them)."""
    return json.dumps(finite(value), indent=2, allow_nan=False)
