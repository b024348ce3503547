"""Build a ``ModelSpec`` from a local Hugging Face ``config.json``.

Each supported ``model_type`` has a ``_Layout``: which config keys give which
``ModelSpec`` fields, the defaults of the corresponding ``transformers`` config
class for keys a file may leave out, and the fixed architecture facts that a
config does not state (activation, normalisation, position embedding, biases).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costmodel.specs.errors import SpecError, quote
from costmodel.specs.model import ModelSpec
from costmodel.specs.notices import ParplanWarning
from costmodel.specs.userfile import read_user_file

SECTION = "model.hf_config"


@dataclass(frozen=True)
class _Layout:
    """How the ``config.json`` of one ``model_type`` maps onto ``ModelSpec``.

    Attributes
    ----------
    required : Mapping[str, tuple[str, ...]]
        ``ModelSpec`` field -> config keys tried in order; one must be present.
    optional : Mapping[str, tuple[str, Any]]
        ``ModelSpec`` field -> (config key, default when absent). A value of
        ``None`` (in the file or as default) leaves the ``ModelSpec`` default.
    fixed : Mapping[str, Any]
        ``ModelSpec`` fields the architecture implies.
    context_key : str or None
        Config key giving the default ``seq_length``; ``None`` uses
        ``default_seq_length``.
    default_seq_length : int
        ``seq_length`` when the config states no context length.
    """

    required: Mapping[str, tuple[str, ...]]
    optional: Mapping[str, tuple[str, Any]] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    context_key: str | None = "max_position_embeddings"
    default_seq_length: int = 2048


_BIASED = {"normalization": "layernorm", "add_bias_linear": True, "add_qkv_bias": True}
_GATED = {"activation": "swiglu", "normalization": "rmsnorm", "position_embedding": "rope",
          "add_bias_linear": False, "add_qkv_bias": False}
_LLAMA_REQUIRED = {
    "num_layers": ("num_hidden_layers",),
    "hidden_size": ("hidden_size",),
    "num_attention_heads": ("num_attention_heads",),
    "ffn_hidden_size": ("intermediate_size",),
    "vocab_size": ("vocab_size",),
}
_LLAMA_OPTIONAL = {
    "num_query_groups": ("num_key_value_heads", None),
    "head_dim": ("head_dim", None),
    "max_position_embeddings": ("max_position_embeddings", None),
    "tie_embeddings": ("tie_word_embeddings", False),
}
_LLAMA = _Layout(_LLAMA_REQUIRED, _LLAMA_OPTIONAL, _GATED)

LAYOUTS: dict[str, _Layout] = {
    "bloom": _Layout(
        {"num_layers": ("n_layer", "num_hidden_layers"),
         "hidden_size": ("hidden_size", "n_embed"),
         "num_attention_heads": ("n_head", "num_attention_heads"),
         "vocab_size": ("vocab_size",)},
        {"tie_embeddings": ("tie_word_embeddings", True)},
        {**_BIASED, "activation": "gelu", "position_embedding": "alibi"},
        context_key=None),  # BLOOM trained on 2048-token sequences; configs omit it
    "gpt2": _Layout(
        {"num_layers": ("n_layer",), "hidden_size": ("n_embd",), "num_attention_heads": ("n_head",),
         "vocab_size": ("vocab_size",), "max_position_embeddings": ("n_positions",)},
        {"ffn_hidden_size": ("n_inner", None), "tie_embeddings": ("tie_word_embeddings", True)},
        {**_BIASED, "activation": "gelu", "position_embedding": "learned"},
        context_key="n_positions"),
    "gpt_neox": _Layout(
        {**_LLAMA_REQUIRED, "max_position_embeddings": ("max_position_embeddings",)},
        {"tie_embeddings": ("tie_word_embeddings", False)},
        {**_BIASED, "activation": "gelu", "position_embedding": "rope"}),  # rotary_pct: no params
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "mixtral": _Layout(
        _LLAMA_REQUIRED,
        {**_LLAMA_OPTIONAL, "num_experts": ("num_local_experts", 8),
         "moe_router_topk": ("num_experts_per_tok", 2)},
        _GATED),
    "opt": _Layout(
        {"num_layers": ("num_hidden_layers",), "hidden_size": ("hidden_size",),
         "num_attention_heads": ("num_attention_heads",), "ffn_hidden_size": ("ffn_dim",),
         "vocab_size": ("vocab_size",), "max_position_embeddings": ("max_position_embeddings",)},
        {"tie_embeddings": ("tie_word_embeddings", True), "add_bias_linear": ("enable_bias", True),
         "add_qkv_bias": ("enable_bias", True)},
        # ReLU MLP: "gelu" stands for any two-matrix MLP (same parameter count).
        {"activation": "gelu", "normalization": "layernorm", "position_embedding": "learned"}),
    "qwen2": _Layout(_LLAMA_REQUIRED, _LLAMA_OPTIONAL, {**_GATED, "add_qkv_bias": True}),
}

ARCHITECTURES = {
    "BloomForCausalLM": "bloom", "GPT2LMHeadModel": "gpt2", "GPTNeoXForCausalLM": "gpt_neox",
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "MixtralForCausalLM": "mixtral",
    "OPTForCausalLM": "opt", "Qwen2ForCausalLM": "qwen2",
}

OPT_POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding has max_position_embeddings + 2 rows

# Config keys that change a step's cost but that no layout maps onto ModelSpec, and what the
# prediction does instead. Their meaning is that of the transformers config classes: MistralConfig,
# MixtralConfig and Qwen2Config (sliding_window; Qwen2 only with use_sliding_window, and then on
# the layers from max_window_layers on), LongformerConfig (attention_window), Llama4TextConfig
# (attention_chunk_size), layer_types (transformers >= 4.53), LlamaConfig (attention_bias, mlp_bias).
WINDOW_KEYS = ("sliding_window", "attention_window", "attention_chunk_size", "layer_types")
BIAS_KEYS = ("attention_bias", "mlp_bias")
_CONSEQUENCE = {
    **dict.fromkeys(WINDOW_KEYS, "attention is timed as full causal attention on every layer (an "
                                 "over-estimate for sequences longer than the window)"),
    **dict.fromkeys(BIAS_KEYS, "those biases are not counted (the layout has none)"),
}


def _in_effect(key: str, config: Mapping[str, Any], model_type: str) -> bool:
    value = config.get(key)
    if key == "sliding_window" and model_type == "qwen2":
        return bool(value) and config.get("use_sliding_window") is True
    if key == "layer_types":
        return isinstance(value, list) and any(kind != "full_attention" for kind in value)
    if key in BIAS_KEYS:  # only Llama-shaped layouts fix the biases off; the others read or imply them
        return value is True and LAYOUTS[model_type] is _LLAMA
    return bool(value)


def read_hf_config(path: str | Path) -> tuple[dict[str, Any], Path]:
    """Load a ``config.json`` (or the one inside a folder).

    Parameters
    ----------
    path : str or Path
        The file, or a model folder holding ``config.json``.

    Returns
    -------
    tuple[dict[str, Any], Path]
        The parsed mapping and the file it came from.

    Raises
    ------
    SpecError
        If the file cannot be read or is not a JSON object.
    """
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    if not file.exists():
        raise SpecError(SECTION, str(path), "a readable config.json file (none found)")
    data = read_user_file(file, field=SECTION, fmt="json")
    if not isinstance(data, dict):
        raise SpecError(SECTION, str(file), "a JSON object (a Hugging Face config.json)")
    return data, file


def unmodelled_keys(config: Mapping[str, Any], model_type: str) -> tuple[str, ...]:
    """One note per config key that changes cost, is in effect and is not mapped onto ``ModelSpec``."""
    layout = LAYOUTS[model_type]
    mapped = {k for keys in layout.required.values() for k in keys} | {k for k, _ in layout.optional.values()}
    return tuple(f"{SECTION}.{key}={quote(config[key])} is not modelled: {consequence}"
                 for key, consequence in _CONSEQUENCE.items()
                 if key not in mapped and _in_effect(key, config, model_type))


def _model_type(config: Mapping[str, Any]) -> str:
    model_type = config.get("model_type")
    architectures = config.get("architectures")
    if model_type is None and isinstance(architectures, list):
        for arch in architectures:
            if isinstance(arch, str) and arch in ARCHITECTURES:
                return ARCHITECTURES[arch]
    if not isinstance(model_type, str) or model_type not in LAYOUTS:
        raise SpecError(f"{SECTION}.model_type", model_type, "one of " + ", ".join(sorted(LAYOUTS)))
    return model_type


def _spec_fields(config: Mapping[str, Any], model_type: str) -> dict[str, Any]:
    layout = LAYOUTS[model_type]
    out: dict[str, Any] = dict(layout.fixed)
    for name, keys in layout.required.items():
        key = next((k for k in keys if config.get(k) is not None), None)
        if key is None:
            raise SpecError(f"{SECTION}.{keys[0]}", None,
                            f"present in a {model_type} config.json"
                            + (f" (or {', '.join(keys[1:])})" if len(keys) > 1 else ""))
        out[name] = config[key]
    for name, (key, default) in layout.optional.items():
        value = config.get(key, default)
        if value is not None:
            out[name] = value
    if model_type == "opt":
        _opt_checks(config, out)
    return out


def _opt_checks(config: Mapping[str, Any], out: dict[str, Any]) -> None:
    """OPT's position-table offset and the variants ``ModelSpec`` cannot express."""
    if type(out["max_position_embeddings"]) is int:  # not bool
        out["max_position_embeddings"] += OPT_POSITION_OFFSET
    proj = config.get("word_embed_proj_dim")
    if proj is not None and proj != out["hidden_size"]:
        raise SpecError(f"{SECTION}.word_embed_proj_dim", proj,
                        f"equal to hidden_size={out['hidden_size']} (projected embeddings, "
                        "as in OPT-350m, are not modelled)")
    if config.get("do_layer_norm_before", True) is not True:
        raise SpecError(f"{SECTION}.do_layer_norm_before", config["do_layer_norm_before"],
                        "true (post-LayerNorm OPT, as OPT-350m, is not modelled)")


def model_from_hf_config(path: str | Path, seq_length: int | None = None) -> ModelSpec:
    """Read a Hugging Face ``config.json`` into a ``ModelSpec`` (see :func:`read_hf_model`)."""
    return read_hf_model(path, seq_length)[0]


def read_hf_model(path: str | Path, seq_length: int | None = None) -> tuple[ModelSpec, tuple[str, ...]]:
    """Read a Hugging Face ``config.json`` into a ``ModelSpec`` and the notes on what it leaves out.

    Supported ``model_type`` values: bloom, gpt2, gpt_neox, llama, mistral,
    mixtral, opt, qwen2 (a file without ``model_type`` is recognised by its
    ``architectures`` entry, e.g. ``LlamaForCausalLM``).

    Parameters
    ----------
    path : str or Path
        The ``config.json`` file, or a model folder holding one.
    seq_length : int, optional
        Training sequence length. By default the config's context length
        (``max_position_embeddings``; ``n_positions`` for GPT-2; 2048 for
        BLOOM, whose configs state none). For RoPE models that is usually the
        longest supported context, not the pre-training one.

    Returns
    -------
    ModelSpec
        Named after the config's ``_name_or_path``, else the folder holding it.
    tuple of str
        One note per config key that changes cost but is not modelled (e.g.
        Mistral's ``sliding_window``); each is also issued as a ``ParplanWarning``
        (one ``parplan: warning: ...`` line on stderr from the CLI).

    Raises
    ------
    SpecError
        If the file is unreadable or not JSON, the architecture is not
        supported, a required key is missing, or a value is invalid.
    """
    config, file = read_hf_config(path)
    model_type = _model_type(config)
    layout = LAYOUTS[model_type]
    fields = _spec_fields(config, model_type)
    if seq_length is None:
        context = config.get(layout.context_key) if layout.context_key else None
        seq_length = layout.default_seq_length if context is None else context
    name = config.get("_name_or_path")
    if not isinstance(name, str) or not name:
        name = file.resolve().parent.name
    model = ModelSpec(name=name, seq_length=seq_length, **fields)
    notes = unmodelled_keys(config, model_type)
    for note in notes:
        warnings.warn(note, ParplanWarning, stacklevel=2)
    return model, notes
