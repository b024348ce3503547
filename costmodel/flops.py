"""Closed-form FLOP counts of a training step (one place for every FLOP formula).

Model FLOPs follow the contract (docs/run_spec.md): Narayanan et al. 2021
(arXiv 2104.04473) Eq. 3 without the recomputation forward,
``72 B s l h^2 (1 + s/(6h) + V/(12 l h))``, generalised term by term: per token and
layer ``6 x`` the active matmul parameters (GQA widths, SwiGLU's third matrix, top-k
experts and the router) plus ``12 s q`` for the attention scores and values, where
q = heads x head_dim; plus ``6 h V`` per token for the LM head. The contract counts
the full s x s attention; ``causal=True`` halves it (what kernels actually run).
"""

from __future__ import annotations

from costmodel.specs.model import ModelSpec
from costmodel.specs.strategy import Strategy


def matmul_params_per_layer(model: ModelSpec, moe: bool) -> float:
    """Weights one token multiplies by in one layer (biases and norms excluded)."""
    h = model.hidden_size
    attn = h * (model.q_size + 2 * model.kv_size) + model.q_size * h
    if not moe:
        return attn + model.mlp_matrices * h * model.ffn_hidden_size  # type: ignore[operator]
    experts = model.moe_router_topk + model.num_shared_experts
    return attn + h * model.num_experts + experts * model.mlp_matrices * h * model.moe_ffn_hidden_size  # type: ignore[operator]


def attention_flops_per_token(model: ModelSpec, seq_length: int, causal: bool) -> float:
    """Forward FLOPs of the attention scores and weighted values for one token of one layer."""
    return 4.0 * seq_length * model.q_size * (0.5 if causal else 1.0)


def forward_flops_per_token(model: ModelSpec, seq_length: int, causal: bool, with_head: bool = True) -> float:
    """Forward FLOPs for one token through every layer (and the LM head)."""
    layers = (model.num_dense_layers * 2 * matmul_params_per_layer(model, False)
              + model.num_moe_layers * 2 * matmul_params_per_layer(model, True))
    layers += model.num_layers * attention_flops_per_token(model, seq_length, causal)
    head = 2.0 * model.hidden_size * model.vocab_size if with_head else 0.0
    return layers + head


def model_flops_per_step(model: ModelSpec, seq_length: int, global_batch_size: int, causal: bool = False) -> float:
    """Model FLOPs of one optimizer step (forward + backward, no recomputation)."""
    return 3.0 * forward_flops_per_token(model, seq_length, causal) * seq_length * global_batch_size


def recompute_flops_per_step(model: ModelSpec, strategy: Strategy, seq_length: int, global_batch_size: int,
                             causal: bool = True) -> float:
    """Extra forward FLOPs that activation recomputation adds to one step."""
    tokens = seq_length * global_batch_size
    if strategy.recompute == "full":
        return forward_flops_per_token(model, seq_length, causal, with_head=False) * tokens
    if strategy.recompute == "selective":
        return model.num_layers * attention_flops_per_token(model, seq_length, causal) * tokens
    return 0.0


def hardware_flops_per_step(model: ModelSpec, strategy: Strategy, seq_length: int, global_batch_size: int,
                            causal: bool = True) -> float:
    """FLOPs the GPUs execute in one step: model FLOPs plus recomputation."""
    return (model_flops_per_step(model, seq_length, global_batch_size, causal)
            + recompute_flops_per_step(model, strategy, seq_length, global_batch_size, causal))
