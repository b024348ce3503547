"""``benchmarks/pin_predictions.py`` loaded as a module (``benchmarks/`` is no package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "pin_predictions.py"


def load_pin_module() -> Any:
    """The pin script's module, loaded once per process."""
    name = "_pin_predictions"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
