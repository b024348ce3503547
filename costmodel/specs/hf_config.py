"""Build a ``ModelSpec`` from a local Hugging Face ``config.json``.

Each supported ``model_type`` has a ``_Layout``: which config keys give which
``ModelSpec`` fields, the defaults of the corresponding ``transformers`` config
class for keys a file may leave out, and the fixed architecture facts that a
config does not state (activation, normalisation, position embedding, biases).
The attention pattern (sliding-window and global layers) and the MoE layer
pattern are read by :mod:`costmodel.specs.hf_patterns`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costmodel.specs.errors import SpecError, quote
from costmodel.specs.hf_patterns import attention_pattern, moe_dense_prefix
from costmodel.specs.model import MODEL_KEYS, ModelSpec
from costmodel.specs.notices import ParplanWarning
from costmodel.specs.userfile import read_user_file

SECTION = "model.hf_config"
DEFAULT_SEQ_LENGTH = 4096
"""``seq_length`` when none is given (capped by the config's context length). A config states the longest
context (131,072 for Llama 3.1), not the pre-training length: DeepSeek-V3 (arXiv 2412.19437 Sec. 4.2), Qwen3
stage S1 (arXiv 2505.09388 Sec. 3.2) and gpt-oss (``initial_context_length``, arXiv 2508.10925 Sec. 2) pre-train
on 4,096-token sequences."""


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
        Config key giving the context length (caps the default ``seq_length``);
        ``None`` uses ``default_context``.
    default_context : int
        Context length when the config states none.
    defaults : Mapping[str, Any]
        Config keys a file may omit, with the ``transformers`` config class default.
    windows : bool
        Whether the architecture has sliding-window layers (read by ``attention_pattern``).
    dropout_keys : tuple of str
        Config keys whose positive value means training applies dropout (empty:
        the ``ModelSpec`` default).
    """

    required: Mapping[str, tuple[str, ...]]
    optional: Mapping[str, tuple[str, Any]] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    context_key: str | None = "max_position_embeddings"
    default_context: int = 2048
    defaults: Mapping[str, Any] = field(default_factory=dict)
    windows: bool = False
    dropout_keys: tuple[str, ...] = ()


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
_NO_DROPOUT = ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop")
# Llama: transformers' LlamaConfig has attention_dropout (default 0.0) and no hidden dropout.
_LLAMA = _Layout(_LLAMA_REQUIRED, _LLAMA_OPTIONAL, _GATED, dropout_keys=_NO_DROPOUT)
# Gated GELU (GeGLU) has SwiGLU's three matrices: "swiglu" stands for any gated MLP.
_GEMMA = {**_GATED, "sandwich_norm": True}
# Gemma3TextConfig defaults (transformers 5.24): the multimodal configs' text_config leaves them out.
_GEMMA3_DEFAULTS = {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "max_position_embeddings": 131072, "sliding_window": 4096, "tie_word_embeddings": True}
_MOE_OPTIONAL = {"num_experts": ("num_local_experts", None), "moe_router_topk": ("num_experts_per_tok", None),
                 "moe_ffn_hidden_size": ("moe_intermediate_size", None)}

LAYOUTS: dict[str, _Layout] = {
    "bloom": _Layout(
        {"num_layers": ("n_layer", "num_hidden_layers"),
         "hidden_size": ("hidden_size", "n_embed"),
         "num_attention_heads": ("n_head", "num_attention_heads"),
         "vocab_size": ("vocab_size",)},
        {"tie_embeddings": ("tie_word_embeddings", True)},
        {**_BIASED, "activation": "gelu", "position_embedding": "alibi"},
        context_key=None, dropout_keys=_NO_DROPOUT),  # BLOOM trained on 2048-token sequences; configs omit it
    "gpt2": _Layout(
        {"num_layers": ("n_layer",), "hidden_size": ("n_embd",), "num_attention_heads": ("n_head",),
         "vocab_size": ("vocab_size",), "max_position_embeddings": ("n_positions",)},
        {"ffn_hidden_size": ("n_inner", None), "tie_embeddings": ("tie_word_embeddings", True)},
        {**_BIASED, "activation": "gelu", "position_embedding": "learned"},
        context_key="n_positions"),
    "gpt_neox": _Layout(
        {**_LLAMA_REQUIRED, "max_position_embeddings": ("max_position_embeddings",)},
        {"tie_embeddings": ("tie_word_embeddings", False)},
        {**_BIASED, "activation": "gelu", "position_embedding": "rope"},  # rotary_pct: no params
        dropout_keys=_NO_DROPOUT),
    "llama": _LLAMA,
    "mistral": _Layout(_LLAMA_REQUIRED, _LLAMA_OPTIONAL, _GATED, windows=True, dropout_keys=_NO_DROPOUT),
    "mixtral": _Layout(
        _LLAMA_REQUIRED,
        {**_LLAMA_OPTIONAL, "num_experts": ("num_local_experts", 8),
         "moe_router_topk": ("num_experts_per_tok", 2)},
        _GATED, windows=True, dropout_keys=_NO_DROPOUT),
    "opt": _Layout(
        {"num_layers": ("num_hidden_layers",), "hidden_size": ("hidden_size",),
         "num_attention_heads": ("num_attention_heads",), "ffn_hidden_size": ("ffn_dim",),
         "vocab_size": ("vocab_size",), "max_position_embeddings": ("max_position_embeddings",)},
        {"tie_embeddings": ("tie_word_embeddings", True), "add_bias_linear": ("enable_bias", True),
         "add_qkv_bias": ("enable_bias", True)},
        # ReLU MLP: "gelu" stands for any two-matrix MLP (same parameter count).
        {"activation": "gelu", "normalization": "layernorm", "position_embedding": "learned"}),
    "qwen2": _Layout(_LLAMA_REQUIRED, _LLAMA_OPTIONAL, {**_GATED, "add_qkv_bias": True}, windows=True,
                     dropout_keys=_NO_DROPOUT),
    # Qwen3: per-head RMSNorm on queries and keys, no QKV bias (Qwen3 report, arXiv 2505.09388 Sec. 2).
    "qwen3": _Layout(_LLAMA_REQUIRED, _LLAMA_OPTIONAL, {**_GATED, "qk_norm": True}, windows=True,
                     dropout_keys=_NO_DROPOUT),
    # Qwen3-MoE has no shared experts (arXiv 2505.09388 Sec. 2); the experts key was renamed in transformers 5.
    "qwen3_moe": _Layout(
        _LLAMA_REQUIRED,
        {**_LLAMA_OPTIONAL, **_MOE_OPTIONAL, "num_experts": ("num_experts", None)},
        {**_GATED, "qk_norm": True}, windows=True, dropout_keys=_NO_DROPOUT,
        defaults={"num_experts_per_tok": 8, "moe_intermediate_size": 768}),
    "deepseek_v3": _Layout(
        _LLAMA_REQUIRED,
        {"max_position_embeddings": ("max_position_embeddings", None),
         "tie_embeddings": ("tie_word_embeddings", False),
         "num_experts": ("n_routed_experts", None), "moe_router_topk": ("num_experts_per_tok", None),
         "moe_ffn_hidden_size": ("moe_intermediate_size", None),
         "num_shared_experts": ("n_shared_experts", None), "first_k_dense_layers": ("first_k_dense_replace", None),
         "q_lora_rank": ("q_lora_rank", None), "kv_lora_rank": ("kv_lora_rank", None),
         "qk_nope_head_dim": ("qk_nope_head_dim", None), "qk_rope_head_dim": ("qk_rope_head_dim", None),
         "v_head_dim": ("v_head_dim", None)},
        _GATED, dropout_keys=_NO_DROPOUT,
        # DeepseekV3Config defaults (transformers 5.24) for keys a file may omit
        defaults={"n_shared_experts": 1, "first_k_dense_replace": 3, "qk_nope_head_dim": 128,
                  "qk_rope_head_dim": 64, "v_head_dim": 128, "kv_lora_rank": 512}),
    "gemma2": _Layout(_LLAMA_REQUIRED, {**_LLAMA_OPTIONAL, "tie_embeddings": ("tie_word_embeddings", True)},
                      _GEMMA, windows=True, dropout_keys=_NO_DROPOUT),
    "gemma3_text": _Layout(_LLAMA_REQUIRED, {**_LLAMA_OPTIONAL, "tie_embeddings": ("tie_word_embeddings", True)},
                           {**_GEMMA, "qk_norm": True}, windows=True, dropout_keys=_NO_DROPOUT,
                           defaults=_GEMMA3_DEFAULTS),
    # Phi-3: fused qkv_proj / gate_up_proj, the same weights as Llama's.
    "phi3": _Layout(_LLAMA_REQUIRED, _LLAMA_OPTIONAL, _GATED, windows=True, dropout_keys=_NO_DROPOUT),
    # OLMo 2: norms after attention and MLP (two per layer, as pre-norm) and RMSNorm over the whole
    # query and key projections (Team OLMo 2024, arXiv 2501.00656 Sec. 3.1).
    "olmo2": _Layout(_LLAMA_REQUIRED, _LLAMA_OPTIONAL, {**_GATED, "qk_norm": True, "qk_norm_per_head": False},
                     dropout_keys=_NO_DROPOUT),
    # gpt-oss: biases on Q/K/V/O, the experts and the router; one learned sink logit per head
    # (gpt-oss model card, arXiv 2508.10925 Sec. 2.1); clamped SwiGLU experts.
    "gpt_oss": _Layout(
        _LLAMA_REQUIRED, {**_LLAMA_OPTIONAL, **_MOE_OPTIONAL, "moe_ffn_hidden_size": ("intermediate_size", None)},
        {**_GATED, "add_bias_linear": True, "add_qkv_bias": True, "attention_sinks": True,
         "moe_router_bias": True}, windows=True, dropout_keys=_NO_DROPOUT),
}

ARCHITECTURES = {
    "BloomForCausalLM": "bloom", "GPT2LMHeadModel": "gpt2", "GPTNeoXForCausalLM": "gpt_neox",
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "MixtralForCausalLM": "mixtral",
    "OPTForCausalLM": "opt", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe", "DeepseekV3ForCausalLM": "deepseek_v3", "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text", "Gemma3ForConditionalGeneration": "gemma3", "Phi3ForCausalLM": "phi3",
    "Olmo2ForCausalLM": "olmo2", "GptOssForCausalLM": "gpt_oss",
}
MULTIMODAL = {"gemma3": "gemma3_text"}
"""Multimodal ``model_type`` -> the ``model_type`` of its ``text_config`` (the language model that is planned)."""

OPT_POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding has max_position_embeddings + 2 rows

# Config keys that change a step's cost but that no layout maps onto ModelSpec, and what the
# prediction does instead. Their meaning is that of the transformers config classes: LongformerConfig
# (attention_window), Llama4TextConfig (attention_chunk_size), LlamaConfig (attention_bias, mlp_bias),
# Gemma2Config (attn_logit_softcapping, final_logit_softcapping), DeepseekV3Config (num_nextn_predict_layers).
# Sliding windows are read by hf_patterns; one it cannot express is noted there.
CHUNK_KEYS = ("attention_window", "attention_chunk_size")
BIAS_KEYS = ("attention_bias", "mlp_bias")
SOFTCAP_KEYS = ("attn_logit_softcapping", "final_logit_softcapping")
_CONSEQUENCE = {
    **dict.fromkeys(CHUNK_KEYS, "attention is timed as full causal attention on every layer (an "
                                "over-estimate for sequences longer than the window)"),
    **dict.fromkeys(BIAS_KEYS, "those biases are not counted (the layout has none)"),
    "attn_logit_softcapping": "the tanh soft-capping of attention scores is not timed (fused into the "
                              "attention kernel: an under-estimate of attention time)",
    "final_logit_softcapping": "the tanh soft-capping of the logits is not timed (one element-wise pass over "
                               "the vocabulary logits: an under-estimate of the LM-head time)",
    "num_nextn_predict_layers": "the multi-token-prediction layers are not counted (as in the published total); "
                                "set mtp_num_layers beside hf_config to train them",
}


def _in_effect(key: str, config: Mapping[str, Any], model_type: str) -> bool:
    value = config.get(key)
    if key in BIAS_KEYS:  # only Llama-shaped layouts fix the biases off; the others read or imply them
        return value is True and LAYOUTS[model_type].fixed.get("add_bias_linear") is False \
            and model_type != "gpt_oss"
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


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
    if not isinstance(model_type, str) or (model_type not in LAYOUTS and model_type not in MULTIMODAL):
        raise SpecError(f"{SECTION}.model_type", model_type, "one of " + ", ".join(sorted({*LAYOUTS, *MULTIMODAL})))
    return model_type


def _language_model(config: dict[str, Any], model_type: str) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    """The text model's config of a multimodal one (and a note on the towers left out), else ``config``."""
    if model_type not in MULTIMODAL:
        return config, model_type, ()
    text = config.get("text_config", {})
    if not isinstance(text, dict):
        raise SpecError(f"{SECTION}.text_config", text, "a JSON object (the language model's config)")
    notes = tuple(f"{SECTION}.{key} is not modelled: only the language model is planned (its parameters and "
                  f"cost are left out)" for key in ("vision_config", "audio_config") if config.get(key))
    return text, MULTIMODAL[model_type], notes


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
    if layout.dropout_keys:
        out["dropout"] = any(isinstance(config.get(k), int | float) and config[k] > 0 for k in layout.dropout_keys)
    if model_type == "opt":
        _opt_checks(config, out)
    return out


def _as_config_error(exc: SpecError, config: Mapping[str, Any], layout: Any,
                     overrides: Mapping[str, Any]) -> SpecError:
    """``exc`` about a ``model.<field>`` re-aimed at the config.json key that field was read from."""
    field = exc.field.removeprefix("model.")
    if field in overrides:
        return exc
    keys = layout.required.get(field) or ((layout.optional[field][0],) if field in layout.optional else ())
    key = next((k for k in keys if config.get(k) is not None), None)
    return exc if key is None else SpecError(f"{SECTION}.{key}", exc.value, exc.allowed)


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


def _default_seq_length(config: Mapping[str, Any], layout: _Layout) -> tuple[int, str]:
    """``DEFAULT_SEQ_LENGTH`` capped by the config's context, and the note saying so."""
    context = config.get(layout.context_key) if layout.context_key else None
    if not isinstance(context, int) or isinstance(context, bool):
        context = layout.default_context
    seq = min(DEFAULT_SEQ_LENGTH, context)
    stated = f"{layout.context_key}={context}" if layout.context_key else f"a {context}-token context"
    return seq, (f"{SECTION}: no seq_length given; {seq} tokens assumed (the config states {stated}, the longest "
                 "context, not the training length): give seq_length")


def model_from_hf_config(path: str | Path, seq_length: int | None = None) -> ModelSpec:
    """Read a Hugging Face ``config.json`` into a ``ModelSpec`` (see :func:`read_hf_model`)."""
    return read_hf_model(path, seq_length)[0]


def read_hf_model(path: str | Path, seq_length: int | None = None,
                  overrides: Mapping[str, Any] | None = None) -> tuple[ModelSpec, tuple[str, ...]]:
    """Read a Hugging Face ``config.json`` into a ``ModelSpec`` and the notes on what it leaves out.

    Supported ``model_type`` values: bloom, deepseek_v3, gemma2, gemma3 (its
    language model), gemma3_text, gpt2, gpt_neox, gpt_oss, llama, mistral,
    mixtral, olmo2, opt, phi3, qwen2, qwen3, qwen3_moe (a file without
    ``model_type`` is recognised by its ``architectures`` entry, e.g.
    ``LlamaForCausalLM``). Sliding-window layers (Mistral, Phi-3, Gemma 2/3,
    gpt-oss, Qwen with ``use_sliding_window``) map onto ``sliding_window`` and
    ``full_attention_every``.

    Parameters
    ----------
    path : str or Path
        The ``config.json`` file, or a model folder holding one.
    seq_length : int, optional
        Training sequence length. By default ``DEFAULT_SEQ_LENGTH`` (4096),
        capped by the config's context length, with a note: a config states
        the longest context, not the pre-training one.
    overrides : mapping, optional
        ``ModelSpec`` fields that replace what the config gives (e.g.
        ``{"mtp_num_layers": 1}`` to train DeepSeek-V3's MTP module).

    Returns
    -------
    ModelSpec
        Named after the config's ``_name_or_path``, else the folder holding it.
    tuple of str
        One note per config key that changes cost but is not modelled (e.g.
        Gemma 2's logit soft-capping); each is also issued as a ``ParplanWarning``
        (one ``parplan: warning: ...`` line on stderr from the CLI).

    Raises
    ------
    SpecError
        If the file is unreadable or not JSON, the architecture is not
        supported, a required key is missing, or a value is invalid.
    """
    outer, file = read_hf_config(path)
    config, model_type, notes = _language_model(outer, _model_type(outer))
    layout = LAYOUTS[model_type]
    config = {**layout.defaults, **{k: v for k, v in config.items() if v is not None or k not in layout.defaults}}
    fields = _spec_fields(config, model_type)
    if layout.windows:
        window, every, pattern_notes = attention_pattern(config, model_type, fields["num_layers"], SECTION)
        fields.update(sliding_window=window, full_attention_every=every)
        notes += pattern_notes
    if model_type == "qwen3_moe":
        fields["first_k_dense_layers"] = moe_dense_prefix(config, fields["num_layers"], SECTION)
    for key, value in (overrides or {}).items():
        if key not in MODEL_KEYS:
            raise SpecError(f"model.{key}", value, "a model field beside hf_config (see docs/run_spec.md)")
        fields[key] = value
    seq_length = fields.pop("seq_length", seq_length)
    if seq_length is None:
        seq_length, seq_note = _default_seq_length(config, layout)
        notes += (seq_note,)
    name = fields.pop("name", None) or outer.get("_name_or_path")
    if not isinstance(name, str) or not name:
        name = file.resolve().parent.name
    try:
        model = ModelSpec(name=name, seq_length=seq_length, **fields)
    except SpecError as exc:  # name the config.json key the user wrote, not parplan's field
        raise _as_config_error(exc, config, layout, overrides or {}) from None
    notes += tuple(n for n in unmodelled_keys(config, model_type)
                   if not (n.startswith(f"{SECTION}.num_nextn_predict_layers") and model.mtp_num_layers))
    for note in notes:
        warnings.warn(note, ParplanWarning, stacklevel=2)
    return model, notes
