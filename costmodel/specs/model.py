"""Transformer architecture description and the parameter counts derived from it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from costmodel.specs.errors import (
    SpecError,
    reject_unknown_keys,
    require_bool,
    require_choice,
    require_int,
)
from costmodel.specs.hashing import hash_once

ACTIVATIONS = ("gelu", "swiglu", "squared_relu")
NORMALIZATIONS = ("layernorm", "rmsnorm")
POSITION_EMBEDDINGS = ("learned", "rope", "alibi")


@hash_once
@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer (dense or mixture-of-experts).

    Optional sizes are resolved in ``__post_init__``: ``num_query_groups``
    defaults to the number of heads, ``ffn_hidden_size`` to ``4 * hidden_size``,
    ``head_dim`` to ``hidden_size / num_attention_heads``,
    ``moe_ffn_hidden_size`` to ``ffn_hidden_size`` and
    ``max_position_embeddings`` to ``seq_length``. ``dropout`` says whether
    training applies hidden / attention dropout (Megatron-LM's default does;
    most recent open models are trained without), which changes activation
    memory and adds element-wise kernels.

    Multi-head latent attention (MLA, DeepSeek-V2/V3) is on when
    ``kv_lora_rank`` > 0: keys and values are up-projected from a
    ``kv_lora_rank`` latent (plus one ``qk_rope_head_dim`` RoPE key shared by
    all heads), queries from a ``q_lora_rank`` latent (0: one full-rank query
    projection); ``head_dim`` is then ``qk_nope_head_dim + qk_rope_head_dim``
    and ``v_head_dim`` the value width per head. ``qk_norm`` adds a per-head
    RMSNorm on queries and keys (Qwen3). ``sliding_window`` > 0 limits
    attention to that many preceding tokens on every layer except each
    ``full_attention_every``-th one (0: every layer is windowed; GPT-OSS
    alternates with 2). ``mtp_num_layers`` multi-token-prediction layers
    (DeepSeek-V3) sit after the stack and share its embedding and head.
    ``qk_norm_per_head`` false normalises the whole query and key projections
    (OLMo 2) instead of each head. ``sandwich_norm`` adds a norm after
    attention and after the MLP besides the two pre-norms (Gemma 2/3: four per
    layer). ``attention_sinks`` adds one learned sink logit per head and layer,
    ``moe_router_bias`` a bias on the router (both GPT-OSS).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    seq_length: int = 2048
    num_query_groups: int | None = None
    ffn_hidden_size: int | None = None
    head_dim: int | None = None
    activation: str = "gelu"
    normalization: str = "layernorm"
    position_embedding: str = "learned"
    max_position_embeddings: int | None = None
    tie_embeddings: bool = False
    add_bias_linear: bool = False
    add_qkv_bias: bool = False
    dropout: bool = True
    num_experts: int = 0
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    num_shared_experts: int = 0
    first_k_dense_layers: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int | None = None
    qk_norm: bool = False
    sliding_window: int = 0
    full_attention_every: int = 0
    mtp_num_layers: int = 0
    qk_norm_per_head: bool = True
    sandwich_norm: bool = False
    attention_sinks: bool = False
    moe_router_bias: bool = False
    source: str = field(default="", compare=False)
    published_params: float | None = field(default=None, compare=False)
    published_params_source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length"):
            require_int(f"model.{name}", getattr(self, name))
        heads = self.num_attention_heads
        self._resolve("num_query_groups", heads)
        self._resolve("ffn_hidden_size", 4 * self.hidden_size)
        for name in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "sliding_window",
                     "full_attention_every", "mtp_num_layers"):
            require_int(f"model.{name}", getattr(self, name), minimum=0)
        if self.is_mla:
            self._check_mla()
        if self.head_dim is None:
            if self.hidden_size % heads:
                raise SpecError("model.head_dim", None,
                                f"given when hidden_size={self.hidden_size} is not a multiple of "
                                f"num_attention_heads={heads}")
            object.__setattr__(self, "head_dim", self.hidden_size // heads)
        self._resolve("moe_ffn_hidden_size", self.ffn_hidden_size)
        self._resolve("max_position_embeddings", self.seq_length)
        self._resolve("v_head_dim", self.head_dim)  # type: ignore[arg-type]
        for name in ("num_query_groups", "ffn_hidden_size", "head_dim", "moe_ffn_hidden_size",
                     "max_position_embeddings", "moe_router_topk", "v_head_dim"):
            require_int(f"model.{name}", getattr(self, name))
        for name in ("num_experts", "num_shared_experts", "first_k_dense_layers"):
            require_int(f"model.{name}", getattr(self, name), minimum=0)
        if heads % self.num_query_groups:
            raise SpecError("model.num_query_groups", self.num_query_groups,
                            f"a divisor of num_attention_heads={heads}")
        require_choice("model.activation", self.activation, ACTIVATIONS)
        require_choice("model.normalization", self.normalization, NORMALIZATIONS)
        require_choice("model.position_embedding", self.position_embedding, POSITION_EMBEDDINGS)
        for name in ("tie_embeddings", "add_bias_linear", "add_qkv_bias", "dropout", "qk_norm", "qk_norm_per_head",
                     "sandwich_norm", "attention_sinks", "moe_router_bias"):
            require_bool(f"model.{name}", getattr(self, name))
        if self.full_attention_every and not self.sliding_window:
            raise SpecError("model.full_attention_every", self.full_attention_every,
                            "0 when sliding_window is 0 (no windowed layers)")
        if not self.is_mla and self.v_head_dim != self.head_dim:
            raise SpecError("model.v_head_dim", self.v_head_dim,
                            f"equal to head_dim={self.head_dim} unless kv_lora_rank > 0 (MLA)")
        if self.num_experts and self.moe_router_topk > self.num_experts:
            raise SpecError("model.moe_router_topk", self.moe_router_topk,
                            f"at most num_experts={self.num_experts}")
        if self.first_k_dense_layers > self.num_layers:
            raise SpecError("model.first_k_dense_layers", self.first_k_dense_layers,
                            f"at most num_layers={self.num_layers}")

    def _resolve(self, name: str, default: int) -> None:
        if getattr(self, name) is None:
            object.__setattr__(self, name, default)

    def _check_mla(self) -> None:
        for name in ("qk_nope_head_dim", "qk_rope_head_dim"):
            require_int(f"model.{name}", getattr(self, name))
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.head_dim is not None and self.head_dim != qk:
            raise SpecError("model.head_dim", self.head_dim,
                            f"qk_nope_head_dim + qk_rope_head_dim = {qk} with MLA (kv_lora_rank > 0), or omitted")
        if self.num_query_groups != self.num_attention_heads:
            raise SpecError("model.num_query_groups", self.num_query_groups,
                            f"num_attention_heads={self.num_attention_heads} with MLA (keys and values per head)")
        if self.add_qkv_bias:
            raise SpecError("model.add_qkv_bias", True, "false with MLA (its projections have no bias)")
        object.__setattr__(self, "head_dim", qk)

    # -- shapes -------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_k_dense_layers if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def q_size(self) -> int:
        """Width of the query projection output (heads x head_dim)."""
        return self.num_attention_heads * self.head_dim  # type: ignore[operator]

    @property
    def kv_size(self) -> int:
        """Width of one of the key / value projection outputs."""
        return self.num_query_groups * self.head_dim  # type: ignore[operator]

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (low-rank key/value, DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def out_proj_size(self) -> int:
        """Width of the attention output projection's input (heads x v_head_dim)."""
        return self.num_attention_heads * self.v_head_dim  # type: ignore[operator]

    @property
    def num_full_attention_layers(self) -> int:
        """Layers attending to the whole sequence (all but the sliding-window ones)."""
        if not self.sliding_window:
            return self.num_layers
        return self.num_layers // self.full_attention_every if self.full_attention_every else 0

    def window_block(self, seq_length: int) -> int:
        """Causal block length a sliding-window layer's attention is timed as.

        Each query of a window ``w`` sees ``w`` keys, the FLOPs of causal
        attention over independent blocks of ``2w`` tokens; a window that
        covers half the sequence or more is timed as full causal attention
        (exact for ``w >= seq_length``, at most 1/3 over in between).
        """
        w = self.sliding_window
        return 2 * w if w and 2 * w < seq_length else seq_length

    def attention_linears(self) -> list[tuple[str, int, int, bool]]:
        """Weight matrices of one attention block: ``(name, in, out, tp_sharded)``.

        Standard attention is one fused QKV and one output projection. MLA
        (Megatron-Core ``MLASelfAttention``) has q down/up (or one q) projection,
        a kv down projection to the latent plus the shared RoPE key, a kv up
        projection to per-head no-RoPE keys and values, and the output
        projection; the down projections are duplicated on every tensor-parallel
        rank (``parallel_mode="duplicated"`` in Megatron-Core's TE spec).
        """
        h, heads = self.hidden_size, self.num_attention_heads
        if not self.is_mla:
            return [("qkv_proj", h, self.q_size + 2 * self.kv_size, True),
                    ("out_proj", self.q_size, h, True)]
        v_dim: int = self.v_head_dim  # type: ignore[assignment]
        out: list[tuple[str, int, int, bool]] = []
        if self.q_lora_rank:
            out += [("q_down_proj", h, self.q_lora_rank, False),
                    ("q_up_proj", self.q_lora_rank, self.q_size, True)]
        else:
            out.append(("q_proj", h, self.q_size, True))
        out += [("kv_down_proj", h, self.kv_lora_rank + self.qk_rope_head_dim, False),
                ("kv_up_proj", self.kv_lora_rank, heads * (self.qk_nope_head_dim + v_dim), True),
                ("out_proj", self.out_proj_size, h, True)]
        return out

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices in one MLP: 3 for gated (SwiGLU), else 2."""
        return 3 if self.activation == "swiglu" else 2

    # -- parameter counts ---------------------------------------------------
    def attention_matmul_params(self) -> int:
        """Projection weights of one attention block (no biases or norms)."""
        return sum(n_in * n_out for _, n_in, n_out, _ in self.attention_linears())

    def attention_params(self) -> int:
        """Parameters of one attention block (projections, biases, MLA latent and QK norms)."""
        h = self.hidden_size
        n = self.attention_matmul_params()
        if not self.is_mla and (self.add_bias_linear or self.add_qkv_bias):
            n += self.q_size + 2 * self.kv_size
        if self.add_bias_linear:
            n += h
        if self.is_mla:  # the RMSNorms on the q and kv latents
            n += self._norm_width_params(self.q_lora_rank) + self._norm_width_params(self.kv_lora_rank)
        if self.qk_norm and self.qk_norm_per_head:
            n += 2 * self._norm_width_params(self.head_dim)  # type: ignore[arg-type]
        elif self.qk_norm:
            n += self._norm_width_params(self.q_size) + self._norm_width_params(self.kv_size)
        if self.attention_sinks:
            n += self.num_attention_heads
        return n

    def mlp_params(self, ffn: int) -> int:
        """Parameters of one MLP (one expert) with inner size ``ffn``."""
        h = self.hidden_size
        n = self.mlp_matrices * h * ffn
        if self.add_bias_linear:
            n += (self.mlp_matrices - 1) * ffn + h
        return n

    def norm_params(self) -> int:
        """Parameters of one normalisation layer."""
        return self._norm_width_params(self.hidden_size)

    @property
    def norms_per_layer(self) -> int:
        """Hidden-width norms in one transformer layer: 2 pre-norms, 4 with ``sandwich_norm``."""
        return 4 if self.sandwich_norm else 2

    def _norm_width_params(self, width: int) -> int:
        return 2 * width if self.normalization == "layernorm" else width

    def mtp_layer_params(self) -> int:
        """One multi-token-prediction layer (Megatron-Core / DeepSeek-V3 MTP module).

        Norms of the embedding and of the previous hidden state, the ``2h -> h``
        projection of their concatenation, one transformer layer (MoE when the
        model is) and its final norm; embedding and LM head are shared.
        """
        h = self.hidden_size
        return 3 * self.norm_params() + 2 * h * h + self.layer_params(moe=self.is_moe)

    def moe_mlp_params(self, active: bool = False) -> int:
        """Parameters of one MoE MLP block: router, routed and shared experts."""
        experts = self.moe_router_topk if active else self.num_experts
        ffn = self.moe_ffn_hidden_size  # resolved in __post_init__
        router = (self.hidden_size + self.moe_router_bias) * self.num_experts
        return (router
                + (experts + self.num_shared_experts) * self.mlp_params(ffn))  # type: ignore[arg-type]

    def layer_params(self, moe: bool = False, active: bool = False) -> int:
        """Parameters of one transformer layer (its norms, attention, MLP)."""
        mlp = self.moe_mlp_params(active) if moe else self.mlp_params(self.ffn_hidden_size)  # type: ignore[arg-type]
        return self.norms_per_layer * self.norm_params() + self.attention_params() + mlp

    def embedding_params(self) -> int:
        """Word embedding plus learned position embedding, if any."""
        n = self.vocab_size * self.hidden_size
        if self.position_embedding == "learned":
            n += self.max_position_embeddings * self.hidden_size  # type: ignore[operator]
        return n

    def output_params(self) -> int:
        """Final norm plus the LM head (zero extra when tied)."""
        head = 0 if self.tie_embeddings else self.vocab_size * self.hidden_size
        return self.norm_params() + head

    def transformer_params(self, active: bool = False) -> int:
        """Parameters of the transformer layer stack (no embeddings or head)."""
        return (self.num_dense_layers * self.layer_params()
                + self.num_moe_layers * self.layer_params(moe=True, active=active))

    @property
    def num_params(self) -> int:
        """Total parameters, every expert and MTP layer counted."""
        return (self.embedding_params() + self.transformer_params() + self.output_params()
                + self.mtp_num_layers * self.mtp_layer_params())

    @property
    def num_active_params(self) -> int:
        """Parameters one token goes through (top-k experts only, MTP layers excluded)."""
        return self.embedding_params() + self.transformer_params(active=True) + self.output_params()

    def to_dict(self) -> dict[str, Any]:
        """Plain mapping of every field (for JSON output)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


MODEL_KEYS = frozenset(f.name for f in fields(ModelSpec))


def model_from_mapping(data: dict[str, Any], section: str = "model") -> ModelSpec:
    """Build a ``ModelSpec`` from a mapping, rejecting unknown keys."""
    if not isinstance(data, dict):
        raise SpecError(section, data, "a catalog name or a mapping of model fields")
    reject_unknown_keys(section, data, MODEL_KEYS)
    for required in ("name", "num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        if required not in data:
            raise SpecError(f"{section}.{required}", None, "given (it has no default)")
    try:
        return ModelSpec(**data)
    except TypeError as exc:  # pragma: no cover - guarded by the key check above
        raise SpecError(section, data, f"valid model fields ({exc})") from None
