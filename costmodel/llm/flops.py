"""Closed-form FLOP counts of a training step (one place for every FLOP formula).

Model FLOPs follow the contract (docs/run_spec.md): Narayanan et al. 2021
(arXiv 2104.04473) Eq. 3 without the recomputation forward,
``72 B s l h^2 (1 + s/(6h) + V/(12 l h))``, generalised term by term: per token and
layer ``6 x`` the active matmul parameters (GQA widths, SwiGLU's third matrix, top-k
experts and the router) plus ``12 s q`` for the attention scores and values, where
q = heads x head_dim; plus ``6 h V`` per token for the LM head. The contract counts
the full s x s attention; ``causal=True`` halves it (what kernels actually run).

Generalisations beyond Eq. 3: MLA's projection weights are its own (q and kv down/up
projections, ``ModelSpec.attention_linears``) and its attention core is
``6 s heads (d_qk + d_v)`` (keys of ``d_qk = nope + rope``, values of ``d_v``); a
sliding-window layer attends over ``ModelSpec.window_block`` keys instead of ``s``;
each MTP layer adds its ``2h -> h`` projection, one transformer layer and one more
pass through the LM head.
"""

from __future__ import annotations

from costmodel.llm.recompute import layer_recompute_fraction
from costmodel.specs.model import ModelSpec
from costmodel.specs.strategy import Strategy


def matmul_params_per_layer(model: ModelSpec, moe: bool) -> float:
    """Weights one token multiplies by in one layer (biases and norms excluded)."""
    h = model.hidden_size
    attn = model.attention_matmul_params()
    if not moe:
        return attn + model.mlp_matrices * h * model.ffn_hidden_size  # type: ignore[operator]
    experts = model.moe_router_topk + model.num_shared_experts
    return attn + h * model.num_experts + experts * model.mlp_matrices * h * model.moe_ffn_hidden_size  # type: ignore[operator]


def attention_flops_per_token(model: ModelSpec, seq_length: int, causal: bool, window: bool = False) -> float:
    """Forward FLOPs of the attention scores and weighted values for one token of one layer.

    ``window`` prices a sliding-window layer (keys over ``model.window_block``).
    """
    keys = model.window_block(seq_length) if window else seq_length
    widths = model.num_attention_heads * (model.head_dim + model.v_head_dim)  # type: ignore[operator]
    return 2.0 * keys * widths * (0.5 if causal else 1.0)


def stack_attention_flops_per_token(model: ModelSpec, seq_length: int, causal: bool) -> float:
    """Attention-core forward FLOPs for one token through every layer (full and windowed)."""
    full = model.num_full_attention_layers
    return (full * attention_flops_per_token(model, seq_length, causal)
            + (model.num_layers - full) * attention_flops_per_token(model, seq_length, causal, window=True))


def mean_layer_attention_flops_per_token(model: ModelSpec, seq_length: int, causal: bool) -> float:
    """Attention-core forward FLOPs of the average layer (the mix of full and windowed layers)."""
    return stack_attention_flops_per_token(model, seq_length, causal) / model.num_layers


def mtp_layer_flops_per_token(model: ModelSpec, seq_length: int, causal: bool) -> float:
    """Forward FLOPs of the transformer layer inside one MTP layer (an average layer's attention)."""
    return (2.0 * matmul_params_per_layer(model, model.is_moe)
            + mean_layer_attention_flops_per_token(model, seq_length, causal))


def mtp_flops_per_token(model: ModelSpec, seq_length: int, causal: bool) -> float:
    """Forward FLOPs one token adds through the MTP layers (projection, layer, LM head)."""
    h = model.hidden_size
    per_layer = 2.0 * 2 * h * h + mtp_layer_flops_per_token(model, seq_length, causal) + 2.0 * h * model.vocab_size
    return model.mtp_num_layers * per_layer


def forward_flops_per_token(model: ModelSpec, seq_length: int, causal: bool, with_head: bool = True) -> float:
    """Forward FLOPs for one token through every layer (and the LM head and MTP layers)."""
    layers = (model.num_dense_layers * 2 * matmul_params_per_layer(model, False)
              + model.num_moe_layers * 2 * matmul_params_per_layer(model, True))
    layers += stack_attention_flops_per_token(model, seq_length, causal)
    head = 2.0 * model.hidden_size * model.vocab_size + mtp_flops_per_token(model, seq_length, causal) \
        if with_head else 0.0
    return layers + head


def model_flops_per_step(model: ModelSpec, seq_length: int, global_batch_size: int, causal: bool = False) -> float:
    """Model FLOPs of one optimizer step (forward + backward, no recomputation)."""
    return 3.0 * forward_flops_per_token(model, seq_length, causal) * seq_length * global_batch_size


def op_policy_matmul_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs of the matmuls torchtitan's op-level policy re-runs, per token, over the dense layers.

    The even-numbered matmuls wk, wo and w3 (w2 without a gate: the same ``h x ffn`` FLOPs) of each
    dense, non-MLA block; those blocks keep the attention output (``costmodel.llm.recompute``). The
    layers it was not read for re-run the attention core only, as ``costmodel.llm.decompose`` counts them.
    """
    if model.is_mla:
        return 0.0
    h = model.hidden_size
    ffn = model.ffn_hidden_size or 0
    per_layer = 2.0 * (h * model.kv_size + model.out_proj_size * h + h * ffn)
    return model.num_dense_layers * per_layer


def recompute_flops_per_step(model: ModelSpec, strategy: Strategy, seq_length: int, global_batch_size: int,
                             causal: bool = True, policy: str | None = None) -> float:
    """Extra forward FLOPs that activation recomputation adds to one step.

    ``policy`` is the run's recomputation policy (``costmodel.llm.recompute.recompute_policy``: full,
    torchtitan's layer / op, Megatron's attention core); None: Megatron's meaning of ``strategy.recompute``.
    """
    if policy is None:
        policy = "megatron" if strategy.recompute == "selective" else strategy.recompute
    tokens = seq_length * global_batch_size
    mtp = model.mtp_num_layers
    share = layer_recompute_fraction(policy)
    if share:
        return share * (forward_flops_per_token(model, seq_length, causal, with_head=False)
                        + mtp * mtp_layer_flops_per_token(model, seq_length, causal)) * tokens
    if policy in ("megatron", "op"):
        attention = stack_attention_flops_per_token(model, seq_length, causal)
        extra = 0.0
        if policy == "op" and not model.is_mla:  # dense blocks save the attention output, re-run three matmuls
            attention *= model.num_moe_layers / model.num_layers
            extra = op_policy_matmul_flops_per_token(model)
        return (attention + extra + mtp * mean_layer_attention_flops_per_token(model, seq_length, causal)) * tokens
    return 0.0


def hardware_flops_per_step(model: ModelSpec, strategy: Strategy, seq_length: int, global_batch_size: int,
                            causal: bool = True, policy: str | None = None) -> float:
    """FLOPs the GPUs execute in one step: model FLOPs plus recomputation (``policy`` as above)."""
    return (model_flops_per_step(model, seq_length, global_batch_size, causal)
            + recompute_flops_per_step(model, strategy, seq_length, global_batch_size, causal, policy))
