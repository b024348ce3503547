"""Per-layer patterns of a Hugging Face config: sliding-window vs global attention, dense vs MoE layers.

``ModelSpec`` expresses a window on every layer except each
``full_attention_every``-th one, and MoE layers after ``first_k_dense_layers``
dense ones. A config's pattern is read as the ``transformers`` config class
derives it (its ``layer_types`` when the file gives none) and mapped onto those
fields; a pattern they cannot express is a note (window) or an error (MoE, whose
parameter count would be wrong).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from costmodel.specs.errors import SpecError, quote

SLIDING, FULL = "sliding_attention", "full_attention"
_GEMMA3_PATTERN = 6  # Gemma3TextConfig.sliding_window_pattern default (transformers 5.24)


def derived_layer_types(config: Mapping[str, Any], model_type: str, num_layers: int) -> list[str]:
    """The attention kind of each layer, as the ``transformers`` config class derives it.

    Mistral, Mixtral and Phi-3 window every layer when ``sliding_window`` is set;
    Qwen2/3 only with ``use_sliding_window``, from layer ``max_window_layers``
    on; Gemma 2 and gpt-oss alternate (windowed first); Gemma 3 makes every
    ``sliding_window_pattern``-th layer global.
    """
    given = config.get("layer_types")
    if isinstance(given, list):
        return [str(kind) for kind in given]
    window = config.get("sliding_window")
    if not window:
        return [FULL] * num_layers
    if model_type in ("qwen2", "qwen3", "qwen3_moe"):
        if config.get("use_sliding_window") is not True:
            return [FULL] * num_layers
        first = config.get("max_window_layers", 0)
        first = first if isinstance(first, int) else 0
        return [SLIDING if i >= first else FULL for i in range(num_layers)]
    if model_type in ("gemma2", "gpt_oss"):
        return [SLIDING if (i + 1) % 2 else FULL for i in range(num_layers)]
    if model_type == "gemma3_text":
        period = config.get("sliding_window_pattern", _GEMMA3_PATTERN)
        period = period if isinstance(period, int) and period > 0 else _GEMMA3_PATTERN
        return [SLIDING if (i + 1) % period else FULL for i in range(num_layers)]
    return [SLIDING] * num_layers


def _period(kinds: Sequence[str]) -> int | None:
    """``k`` when exactly every ``k``-th layer is global (0: none is), else ``None``."""
    full = [i for i, kind in enumerate(kinds) if kind == FULL]
    if not full:
        return 0
    k = full[0] + 1
    return k if full == [i for i in range(len(kinds)) if (i + 1) % k == 0] else None


def attention_pattern(config: Mapping[str, Any], model_type: str, num_layers: int,
                      section: str) -> tuple[int, int, tuple[str, ...]]:
    """``(sliding_window, full_attention_every, notes)`` of a config.

    Raises
    ------
    SpecError
        If ``layer_types`` names an unknown kind or does not have one entry per layer.
    """
    kinds = derived_layer_types(config, model_type, num_layers)
    if len(kinds) != num_layers or not set(kinds) <= {SLIDING, FULL}:
        raise SpecError(f"{section}.layer_types", kinds,
                        f"{num_layers} entries (num_hidden_layers), each {SLIDING!r} or {FULL!r}")
    if SLIDING not in kinds:
        return 0, 0, ()
    window = config.get("sliding_window")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise SpecError(f"{section}.sliding_window", window, "a positive integer where layers are windowed")
    period = _period(kinds)
    if period is None:
        note = (f"{section}.layer_types={quote(kinds)} is not modelled (windowed layers other than all but every "
                f"k-th one): attention is timed as full causal attention on every layer (an over-estimate for "
                f"sequences longer than the window {window})")
        return 0, 0, (note,)
    return window, period, ()


def moe_dense_prefix(config: Mapping[str, Any], num_layers: int, section: str) -> int:
    """Leading dense layers of a Qwen-MoE config (``mlp_only_layers``, ``decoder_sparse_step``).

    A layer is MoE when it is not in ``mlp_only_layers`` and ``(i + 1) %
    decoder_sparse_step == 0`` (``Qwen3MoeDecoderLayer``). ``ModelSpec``
    expresses dense layers only as a prefix.

    Raises
    ------
    SpecError
        If the dense layers are not the first ``k`` layers.
    """
    step = config.get("decoder_sparse_step", 1)
    dense_only = config.get("mlp_only_layers") or []
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise SpecError(f"{section}.decoder_sparse_step", step, "a positive integer")
    if not isinstance(dense_only, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                   for i in dense_only):
        raise SpecError(f"{section}.mlp_only_layers", dense_only, "a list of layer indices")
    dense = [i for i in range(num_layers) if i in dense_only or (i + 1) % step]
    if dense != list(range(len(dense))):
        field = "mlp_only_layers" if step == 1 else "decoder_sparse_step"
        raise SpecError(f"{section}.{field}", dense_only if step == 1 else step,
                        "a pattern whose dense layers are the first k (interleaved dense and MoE layers are not "
                        "modelled)")
    return len(dense)
