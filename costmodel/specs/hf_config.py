"""Build a ``ModelSpec`` from a local Hugging Face ``config.json``.

Each supported ``model_type`` has a ``_Layout``: which config keys give which
``ModelSpec`` fields, the defaults of the corresponding ``transformers`` config
class for keys a file may leave out, and the fixed architecture facts that a
config does not state (activation, normalisation, position embedding, biases).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costmodel.specs.errors import SpecError
from costmodel.specs.model import ModelSpec

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
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise SpecError(SECTION, str(path), "a readable config.json file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(SECTION, str(file),
                        f"valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(data, dict):
        raise SpecError(SECTION, str(file), "a JSON object (a Hugging Face config.json)")
    return data, file


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
    """Read a Hugging Face ``config.json`` into a ``ModelSpec``.

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
    return ModelSpec(name=name, seq_length=seq_length, **fields)
