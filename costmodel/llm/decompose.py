"""One training step -> the operators each GPU runs per micro-batch.

Shapes are per GPU after sharding: tensor parallelism splits heads, the MLP
inner size and the vocabulary; sequence parallelism splits the tokens of norms,
dropout and residuals; context parallelism splits the sequence (attention still
sees every key: causal ring attention, load-balanced); expert parallelism places
``num_experts / ep`` experts on each GPU, which receives ``top_k`` x its tokens on
average. Backward GEMMs are listed as their own data-gradient and
weight-gradient GEMMs. Attention backward FLOPs are counted as 2x forward (the
algorithmic count); the extra QK^T that flash-attention recomputes inside its
backward is part of that kernel's measured time, not of the FLOP count.

MLA layers run Megatron-Core's projections (q down/up, kv down/up, output); the
down projections are duplicated on every tensor-parallel rank, so a GPU runs them
over all its tokens unsharded. Sliding-window layers time their attention as causal
attention over independent blocks of twice the window (``ModelSpec.window_block``,
the same FLOPs); a stage's layers are the average of the model's full and windowed
layers. Attention sinks (GPT-OSS) add one logit per head and are not modelled.
MTP layers run on the last stage after the LM head's input.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from costmodel.analytic import key_length_time_factor, shape_curve_device
from costmodel.llm.fa2_attention import fa2_attention_ops, slower
from costmodel.llm.flex_attention import flex_attention_ops
from costmodel.llm.moe import expert_rows, local_tokens, routing
from costmodel.llm.recompute import layer_recompute_fraction, recompute_policy
from costmodel.ops import Op, gemm, memory_op
from costmodel.run_memo import for_last_run
from costmodel.specs.layout import EMBEDDING, LOSS, MTP, layout_of, stage_layer_counts
from costmodel.specs.model import ModelSpec
from costmodel.specs.runspec import RunSpec
from costmodel.specs.strategy import Strategy

BF16 = 2  # bytes per 16-bit element
DROPOUT_MASK = 1  # bytes per element of a dropout mask (torch native_dropout's bool mask)
# Fused (flash) attention with attention dropout p = 0.1 against p = 0, forward + backward: 0.614 / 0.594 ms on
# H200 with Transformer Engine 2.15's cuDNN backend, bf16, sbhd, 4 x 4096 tokens, 16 heads, head dim 128
# (github.com/NVIDIA/TransformerEngine issue #3312, 2026-08-04); FlashAttention-2 on GB200 pays 0.728 / 0.695
# (pull request #3313). The one Hopper figure is applied to every fused attention kernel run with dropout.
FUSED_ATTENTION_DROPOUT_COST = 0.614 / 0.594
MASKED_SOFTMAX_MAX_KEYS = 4096  # Megatron's fused causal softmax kernel (``_fused_masked_softmax``)


@dataclass(frozen=True)
class LayerShape:
    """Per-GPU sizes of one transformer layer for one micro-batch."""

    tokens: int  # tokens entering the GEMMs (b * s / cp)
    norm_tokens: int  # tokens seen by norms / dropout / residual (divided by tp with SP)
    seq: int  # full sequence (attention keys)
    batch: int
    heads: int  # query heads on this GPU
    kv_heads: int  # KV heads on this GPU (replicated when tp > KV heads)
    head_dim: int  # query / key head dim (nope + rope with MLA)
    v_head_dim: int
    hidden: int
    cp: int
    tp: int
    dtype: str

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def o_width(self) -> int:
        """Attention output width on this GPU (heads x v_head_dim)."""
        return self.heads * self.v_head_dim

    @property
    def v_width(self) -> int:
        return self.kv_heads * self.v_head_dim


def layer_shape(model: ModelSpec, strategy: Strategy, seq_length: int) -> LayerShape:
    t = strategy.tp
    tokens = strategy.micro_batch_size * seq_length // strategy.cp
    sp = strategy.sequence_parallel and t > 1
    kv = model.num_query_groups
    return LayerShape(
        tokens=tokens, norm_tokens=tokens // t if sp else tokens, seq=seq_length,
        batch=strategy.micro_batch_size, heads=max(1, model.num_attention_heads // t),
        kv_heads=max(1, kv // t),  # type: ignore[operator]
        head_dim=model.head_dim, v_head_dim=model.v_head_dim, hidden=model.hidden_size,  # type: ignore[arg-type]
        cp=strategy.cp, tp=t,
        dtype=strategy.precision,  # GEMMs in the run's precision (an fp16 run at the fp16 peak)
    )


def _linear(name: str, x: LayerShape, n: int, k: int, m: int | None = None, count: float = 1.0) -> list[Op]:
    """Forward, data-gradient and weight-gradient GEMMs of a linear layer y[m, n] = x[m, k] W[k, n]."""
    m = x.tokens if m is None else m
    bpe = 1.0 if x.dtype == "fp8" else 2.0
    return [gemm(f"{name}.fwd", "fwd", m, n, k, x.dtype, count, bpe),
            gemm(f"{name}.dgrad", "bwd", m, k, n, x.dtype, count, bpe),
            gemm(f"{name}.wgrad", "bwd", n, k, m, x.dtype, count, bpe)]


def _elementwise(name: str, elements: float, reads: float, writes: float, bwd_reads: float,
                 bwd_writes: float, bytes_per: float = BF16) -> list[Op]:
    """Forward and backward of a memory-bound op over ``elements``, in tensor-sized reads/writes."""
    return [memory_op(f"{name}.fwd", "fwd", elements, elements * bytes_per * (reads + writes)),
            memory_op(f"{name}.bwd", "bwd", elements, elements * bytes_per * (bwd_reads + bwd_writes))]


def _norm(name: str, x: LayerShape) -> list[Op]:
    # forward reads x, writes y; backward reads x and dy, writes dx (statistics recomputed or tiny)
    return _elementwise(name, x.norm_tokens * x.hidden, 1, 1, 2, 1)


def _dropout_residual(name: str, x: LayerShape, model: ModelSpec) -> list[Op]:
    n = x.norm_tokens * x.hidden
    ops = _elementwise(f"{name}_residual", n, 2, 1, 1, 1)
    if model.dropout:  # mask is one byte per element
        ops += [memory_op(f"{name}_dropout.fwd", "fwd", n, n * (2 * BF16 + 1)),
                memory_op(f"{name}_dropout.bwd", "bwd", n, n * (2 * BF16 + 1))]
    return ops


def _attention_kernels(x: LayerShape, name: str, seq: int, causal: bool, batch: int, count: float,
                       bwd_count: float | None = None) -> list[Op]:
    """Forward and backward of ``count`` flash-attention kernels of ``batch`` x ``seq`` queries and keys
    (``bwd_count`` backward kernels where it differs: a key-length factor read per pass)."""
    fwd = 2.0 * batch * seq * seq * x.heads * (x.head_dim + x.v_head_dim) * (0.5 if causal else 1.0)
    shape = (batch, seq, x.heads, x.kv_heads, x.head_dim, int(causal))
    moved = BF16 * batch * seq * (x.q_width + x.o_width + x.kv_width + x.v_width)
    return [Op(f"{name}.fwd", "attention_fwd", "fwd", shape, fwd, moved, "bf16", count),
            Op(f"{name}.bwd", "attention_bwd", "bwd", shape, 2 * fwd, 2 * moved, "bf16",
               count if bwd_count is None else bwd_count)]


def _ring_attention_chunks(x: LayerShape, name: str, gpu: str | None = None) -> list[Op]:
    """Causal attention of one rank of the load-balanced ``p2p`` context-parallel ring, as its kernels.

    The sequence is cut into 2 x cp chunks of c tokens and rank r holds chunks r and 2cp-1-r.
    Transformer Engine runs one flash-attention call per ring step (context_parallel.py
    ``AttnFuncWithCPAndKVP2P``): step 0 is causal over the rank's own 2c tokens; each of the cp - 1
    other steps is non-causal with half of one side. Steps i <= r run all 2c queries against the
    received chunk's first half (one kernel of 2c x c: the thread blocks of 2c queries, each looping
    over c keys, timed as batch 2b at c); later steps the second query chunk against all 2c keys
    (c x 2c: the blocks of c queries, each looping over 2c keys, ``key_length_time_factor``). Over
    the ranks, half of the cp - 1 steps are of each kind. Each kernel therefore runs at the
    efficiency of its own, smaller shape, not of the whole sequence's. Together they do 1/cp of the
    causal work. ``gpu``: whose published kernel curves give each pass's key-length factor
    (``shape_curve_device``).
    """
    chunk = max(1, x.seq // (2 * x.cp))
    (wide_batch, wide), (long_batch, long) = ring_step_kernels(chunk, shape_curve_device(gpu, "attention_fwd"))
    _, (_, long_bwd) = ring_step_kernels(chunk, shape_curve_device(gpu, "attention_bwd"))
    steps = x.cp - 1
    return (_attention_kernels(x, name, 2 * chunk, True, x.batch, 1.0)
            + _attention_kernels(x, f"{name}_ring", chunk, False, wide_batch * x.batch, steps * wide)
            + _attention_kernels(x, f"{name}_ring_keys", chunk, False, long_batch * x.batch, steps * long,
                                 steps * long_bwd))


def ring_step_kernels(chunk: int, gpu: str | None = None) -> tuple[tuple[int, float], tuple[int, float]]:
    """An average off-diagonal ``p2p`` ring step as ``(batch multiple, kernels)`` of non-causal ``chunk``
    squares: half the ranks' steps one 2c x c kernel (batch 2b at c), the others c x 2c, two c-squares'
    work looping over twice the keys (``_ring_attention_chunks``; ``cp_comm`` times its steps by it)."""
    return (2, 0.5), (1, 0.5 * 2.0 * key_length_time_factor(chunk, 2 * chunk, gpu))


def _gathered_attention_chunks(x: LayerShape, name: str, gpu: str | None = None) -> list[Op]:
    """Causal attention of one rank of ``all_gather`` context parallelism, as its kernels.

    Transformer Engine's ``AttnFuncWithCPAndKVAllGather`` (context_parallel.py @d0067d0d) runs, for
    each of the rank's chunks j (r and 2cp-1-r of 2cp chunks of c tokens), one kernel of its c
    queries against the (j+1)c gathered keys up to it, the last c of them causal: j non-causal
    c x c squares and one causal, in the thread blocks of c queries (not of the whole sequence's),
    each looping over (j+1)c keys (``key_length_time_factor``). Over the cp ranks every j in
    0 .. 2cp-1 occurs once, so an average rank runs 1/cp of each. Together they do 1/cp of the
    causal work, the same c-squares the ``p2p`` ring computes (``_ring_attention_chunks``).
    """
    chunk = max(1, x.seq // (2 * x.cp))
    counts = {}  # family -> (full, causal) kernels, each pass at its own curves' key-length factor
    for family in ("attention_fwd", "attention_bwd"):
        factors = [key_length_time_factor(chunk, (j + 1) * chunk, shape_curve_device(gpu, family)) / x.cp
                   for j in range(2 * x.cp)]
        counts[family] = (sum(j * f for j, f in enumerate(factors)), sum(factors))
    (full, causal), (full_bwd, causal_bwd) = counts["attention_fwd"], counts["attention_bwd"]
    return (_attention_kernels(x, name, chunk, True, x.batch, causal, causal_bwd)
            + _attention_kernels(x, f"{name}_gathered", chunk, False, x.batch, full, full_bwd))


def _attention_core(x: LayerShape, strategy: Strategy, name: str = "attention", dropout: bool = False,
                    windowed: bool = False, gpu: str | None = None) -> list[Op]:
    """Causal self-attention on this GPU's heads; with cp the GPU does 1/cp of the causal work
    (the ``p2p`` ring as its per-step kernels, ``_ring_attention_chunks``).

    ``dropout``: attention dropout on the probabilities. A fused kernel draws its mask inside
    (``FUSED_ATTENTION_DROPOUT_COST``); the unfused path runs ``torch.nn.Dropout`` on the
    probabilities after the softmax (megatron/model/transformer.py ``CoreAttention.forward``
    ``self.attention_dropout(attention_probs)``): it reads them and writes the output and a one-byte
    mask, and its backward reads the gradient and the mask and writes the gradient.
    """
    if strategy.flash_attention:
        fused = _flash_attention_core(x, strategy, name, windowed, gpu)
        return [slower(op, 1 / FUSED_ATTENTION_DROPOUT_COST) for op in fused] if dropout else fused
    # Unfused (Megatron's baddbmm + masked softmax + bmm): the full score matrix is computed.
    sq = x.seq // x.cp
    count = x.batch * x.heads
    scores = sq * x.seq
    ops = _batched_linear(f"{name}.scores", x, n=x.seq, k=x.head_dim, m=sq, batch=count)
    softmax = f"{name}_masked_softmax" if _fused_masked_softmax(x, sq, count) else f"{name}.softmax"
    ops += _elementwise(softmax, scores * count, 1, 1, 2, 1)
    if dropout:
        n = scores * count
        ops += [memory_op(f"{name}_probs_dropout.fwd", "fwd", n, n * (2 * BF16 + DROPOUT_MASK)),
                memory_op(f"{name}_probs_dropout.bwd", "bwd", n, n * (2 * BF16 + DROPOUT_MASK))]
    ops += _batched_linear(f"{name}.values", x, n=x.v_head_dim, k=x.seq, m=sq, batch=count)
    return ops


def _fused_masked_softmax(x: LayerShape, sq: int, attn_batches: int) -> bool:
    """Whether Megatron's unfused attention runs its fused causal softmax kernel, not ``torch.softmax``.

    ``FusedScaleMaskSoftmax`` takes ``ScaledUpperTriangMaskedSoftmax`` for 16-bit inputs when
    ``16 < sk <= 4096``, ``sq % 4 == 0``, ``sk % 4 == 0`` and ``b * np % 4 == 0``
    (megatron/core/fusions/fused_softmax.py @d98e8a64 ``is_kernel_available``; ``sk <= 2048`` in
    megatron/model/fused_softmax.py @50a4b5fa, the 2021 code). Every precision here feeds it 16-bit
    scores (FP8 recipes keep the attention core in bf16). Its further ``batch_per_block``
    divisibility condition is not checked.
    """
    sk = x.seq
    return 16 < sk <= MASKED_SOFTMAX_MAX_KEYS and sq % 4 == 0 and sk % 4 == 0 and attn_batches % 4 == 0


def _flash_attention_core(x: LayerShape, strategy: Strategy, name: str, windowed: bool = False,
                          gpu: str | None = None) -> list[Op]:
    """The fused attention kernels of ``_attention_core``: the ``p2p`` ring's steps, ``all_gather``'s
    per-chunk kernels (full-attention layers), else the whole sequence's causal kernel over 1/cp."""
    if x.cp > 1 and strategy.cp_comm_type == "p2p":
        return _ring_attention_chunks(x, name, gpu)
    if x.cp > 1 and strategy.cp_comm_type == "all_gather" and not windowed:
        return _gathered_attention_chunks(x, name, gpu)
    return _attention_kernels(x, name, x.seq, True, x.batch, 1.0 / x.cp)


def _batched_linear(name: str, x: LayerShape, n: int, k: int, m: int, batch: int) -> list[Op]:
    """Forward and both backward products of ``batch`` independent ``[m, k] x [k, n]`` products.

    Megatron's unfused attention issues each as ONE strided-batched kernel over every
    (micro-batch, head) pair (``torch.baddbmm`` / ``torch.bmm`` on ``[b * np, sq, hn]``,
    github.com/NVIDIA/Megatron-LM megatron/model/transformer.py ``CoreAttention.forward``), so it
    is timed as one GEMM with the batch folded into its rows (same FLOPs and tiles), not as
    ``batch`` small GEMMs each too small to fill the GPU.
    """
    bpe = 1.0 if x.dtype == "fp8" else 2.0
    return [gemm(f"{name}.fwd", "fwd", batch * m, n, k, x.dtype, 1.0, bpe),
            gemm(f"{name}.dgrad", "bwd", batch * m, k, n, x.dtype, 1.0, bpe),
            gemm(f"{name}.wgrad", "bwd", batch * n, k, m, x.dtype, 1.0, bpe)]


def _attention_cores(x: LayerShape, model: ModelSpec, strategy: Strategy, gpu: str | None = None) -> list[Op]:
    """The average layer's attention: full layers' and sliding-window layers' cores, weighted."""
    full = model.num_full_attention_layers / model.num_layers
    ops = [_scaled(op, full) for op in _attention_core(x, strategy, dropout=model.dropout, gpu=gpu)] if full else []
    block = model.window_block(x.seq)
    if full < 1:
        blocks = replace(x, seq=block, batch=x.batch * x.seq // block)
        ops += [_scaled(op, 1 - full) for op in _attention_core(blocks, strategy, "attention_window", model.dropout,
                                                                   windowed=True, gpu=gpu)]
    return ops


def _attention_projections(x: LayerShape, model: ModelSpec) -> list[Op]:
    """Projections into the attention core (QKV, or MLA's down/up projections and latent norms)."""
    if not model.is_mla:
        return _linear("qkv_proj", x, n=x.q_width + 2 * x.kv_width, k=x.hidden)
    ops: list[Op] = []
    for name, n_in, n_out, sharded in model.attention_linears():
        if name == "out_proj":
            continue
        # Column-parallel up projections split heads; the duplicated down projections are whole.
        ops += _linear(name, x, n=n_out * x.heads // model.num_attention_heads if sharded else n_out, k=n_in)
        if name.endswith("down_proj"):  # RMSNorm on the latent (q: q_lora_rank; kv: kv_lora_rank)
            latent = model.q_lora_rank if name.startswith("q") else model.kv_lora_rank
            ops += _elementwise(name.replace("down_proj", "latent_norm"), x.tokens * latent, 1, 1, 2, 1)
    return ops


def _rope_elements(x: LayerShape, model: ModelSpec) -> int:
    """Elements RoPE rotates: every query and key head, or MLA's rope parts (per-head q, one shared k)."""
    if model.is_mla:
        return x.tokens * (x.heads + 1) * model.qk_rope_head_dim
    return x.tokens * (x.q_width + x.kv_width)


def _mla_concat_copies(x: LayerShape, model: ModelSpec) -> list[Op]:
    """MLA's q and k assembled from their no-RoPE and RoPE parts by eager copies (no fused MLA RoPE kernel).

    github.com/NVIDIA-NeMo/Automodel @01926a5c nemo_automodel/components/models/deepseek_v3/layers.py
    ``MLA.forward``: ``q = torch.cat([q_nope, q_pe])``, ``k = torch.cat([k_nope, k_pe.expand(heads)])``,
    and v a slice of ``kv_b_proj``'s output that Transformer Engine attention makes contiguous; per
    head, each copy reads and writes its width once (q, k: ``head_dim``; v: ``v_head_dim``). The
    backward's split of ``dq`` and ``dk``/``dv`` back into the projections' layouts concatenates
    them (``head_dim`` and ``qk_nope_head_dim + v_head_dim``) and sums the expanded ``dk_pe`` over
    heads (reads ``qk_rope_head_dim``). torchtitan's DeepSeek-V3 (the other framework here without
    fused RoPE, ``Framework.rope_fusion``) builds q and k the same way (github.com/pytorch/torchtitan
    @b5bcd76c torchtitan/models/deepseek_v3/model.py L118-138: ``torch.cat([q_nope, q_pe])``,
    ``torch.cat([k_nope, k_pe.expand(...)])``, v a ``torch.split`` slice); that its SDPA call
    (models/common/attention.py ``ScaledDotProductAttention.forward``, cuDNN first) copies that v
    slice as Transformer Engine does was not checked, and is counted alike.
    """
    nope, rope = model.qk_nope_head_dim, model.qk_rope_head_dim
    per_head_fwd = 2 * x.head_dim + x.v_head_dim
    return _elementwise("mla_concat", x.tokens * x.heads, per_head_fwd, per_head_fwd,
                        x.head_dim + nope + x.v_head_dim + rope, x.head_dim + nope + x.v_head_dim)


def _mlp(name: str, x: LayerShape, model: ModelSpec, ffn: int, tokens: int | None = None,
         count: float = 1.0) -> list[Op]:
    inner = ffn // x.tp
    gated = model.activation == "swiglu"
    m = x.tokens if tokens is None else tokens
    ops = _linear(f"{name}.up", x, n=(2 if gated else 1) * inner, k=x.hidden, m=m, count=count)
    elements = m * inner * count
    if gated:  # reads gate and up, writes their product; backward reads both and dy, writes two grads
        ops += _elementwise(f"{name}.swiglu", elements, 2, 1, 3, 2)
    else:
        ops += _elementwise(f"{name}.{model.activation}", elements, 1, 1, 2, 1)
    ops += _linear(f"{name}.down", x, n=x.hidden, k=inner, m=m, count=count)
    return ops


def _moe(x: LayerShape, model: ModelSpec, strategy: Strategy, expert_fused: bool = True) -> list[Op]:
    """Router, permutations, the local experts as a grouped GEMM and the shared experts (``costmodel.llm.moe``).

    The router runs on the rank's sequence-parallel tokens, in bf16 also in FP8 recipes (a plain
    linear, Megatron-Core ``TopKRouter.gating``), with its score/top-k, aux-loss and z-loss
    element-wise ops over [tokens, experts] in fp32. The grouped GEMM is timed as one GEMM of each
    expert's rows (``count`` = local experts); the busiest rank's rows set the pace
    (``moe.expert_rows``: load imbalance, or capacity padding). Permutations are row copies.
    ``expert_fused`` false: expert biases and activation run as eager ops (``_eager_expert_ops``).
    """
    experts_here = model.num_experts // strategy.ep
    local = int(local_tokens(strategy, x.seq))
    rows = expert_rows(model, strategy, x.seq)
    scores = local * model.num_experts
    ops = _linear("moe.router", replace(x, tokens=local, dtype="bf16" if x.dtype == "fp8" else x.dtype),
                  n=model.num_experts, k=x.hidden)
    for name in ("moe.router_scores", "moe.router_aux_loss", "moe.router_z_loss"):
        ops += _elementwise(name, scores, 1, 1, 2, 1, bytes_per=4)
    ops += _elementwise("moe.permute", local * model.moe_router_topk * x.hidden, 1, 1, 1, 1)
    per_expert = max(1, math.ceil(rows / experts_here))
    etp = replace(x, tp=strategy.expert_tensor_parallel_size)
    experts = _mlp("moe.experts", etp, model, model.moe_ffn_hidden_size, tokens=per_expert,  # type: ignore[arg-type]
                   count=float(experts_here))
    if not expert_fused and model.add_bias_linear:
        inner = model.moe_ffn_hidden_size // etp.tp  # type: ignore[operator]
        experts = [op for op in experts if ".swiglu." not in op.name]
        experts += _eager_expert_ops(per_expert * experts_here, inner, x.hidden,
                                     probs_grad=routing(strategy) != "round_robin")
    ops += experts
    ops += _elementwise("moe.unpermute", local * model.moe_router_topk * x.hidden, 1, 1, 1, 1)
    if model.num_shared_experts:
        ops += shared_expert_ops(x, model)
    return ops


def _eager_expert_ops(rows: float, inner: int, hidden: int, probs_grad: bool = True) -> list[Op]:
    """Expert biases and gated activation as NeMo Automodel's DeepEP experts run them, kernel by kernel.

    github.com/NVIDIA-NeMo/Automodel @01926a5c nemo_automodel/components/moe/layers.py
    ``GroupedExpertsDeepEP.forward``: ``_apply_bias`` adds each expert's bias to its split of the
    grouped-GEMM output and concatenates (gate/up: add + cat; down: ``t + b * p``, add, cat), and
    ``quick_geglu_deepep`` (two clamps, ``alpha *``, sigmoid, product, ``+ 1``, product, ``* probs``)
    is decorated ``@torch.compile`` (layers.py L316 @01926a5c), so Inductor runs it as one fused pass:
    forward reads the gate/up rows (2 x inner) and writes the product (inner); backward reads the
    gradient and the gate/up rows and writes their gradients. The bias kernels are eager (split,
    add, cat). The fused path's one SwiGLU op is dropped.

    The down bias is weighted by the permuted probs, which DeepEP delivers in fp32 (``_DeepepManager``
    asserts ``dispatched_probs.dtype == torch.float32``), so PyTorch's type promotion runs its kernels
    in fp32 until the closing ``.to(value.dtype)``: per output element the forward writes ``b * p``
    (4 bytes), ``t + b * p`` reads bf16 t and it and writes fp32 (2 + 4 + 4), cat copies fp32 (4 + 4),
    the cast reads fp32 and writes bf16 (4 + 2): 28 bytes. Backward: the cast's gradient to fp32
    (2 + 4), the add's gradient to bf16 t (4 + 2), the bias gradient ``(g * p)`` summed over rows
    (4 + 4 + 4): 24 bytes, and 12 more for the probs' gradient ``(g * b)`` summed over the hidden
    dim where the router is trained (``probs_grad``; Automodel's FakeBalancedGate makes constant probs).
    """
    ops = _elementwise("moe.experts.up_bias", rows * 2 * inner, 2, 2, 1, 0)
    ops += _elementwise("moe.experts.geglu_compiled", rows * inner, 2, 1, 3, 2)
    ops += _elementwise("moe.experts.down_bias", rows * hidden, 28, 0, 24 + (12 if probs_grad else 0), 0,
                        bytes_per=1)
    return ops


def shared_expert_ops(x: LayerShape, model: ModelSpec) -> list[Op]:
    """The shared experts: a dense tensor-parallel MLP over every token of the layer."""
    return _mlp("moe.shared", x, model, model.moe_ffn_hidden_size * model.num_shared_experts)  # type: ignore[operator]


def layer_ops(model: ModelSpec, strategy: Strategy, seq_length: int, moe: bool = False,
              policy: str | None = None, rope_fused: bool = True, expert_fused: bool = True,
              flex_attention: bool = False, flex_device: str | None = None,
              fa2_device: str | None = None, gpu: str | None = None) -> list[Op]:
    """Operators of one transformer layer for one micro-batch on one GPU (fwd, bwd, recompute).

    ``policy`` is the run's recomputation policy (``costmodel.llm.recompute.recompute_policy``);
    None: Megatron's meaning of ``strategy.recompute``. ``rope_fused``: the framework's
    ``rope_fusion`` (one streaming kernel, ``rope_fused``; otherwise eager ops, ``rope``).
    ``expert_fused``: the framework's ``moe_expert_fusion`` (``_moe``). ``flex_attention``: the
    framework's ``attention_kernel`` is ``flex`` (``costmodel.llm.flex_attention``), timed against
    FlashAttention-2's forward and backward shares of the table of GPU ``flex_device``.
    ``fa2_device``: the framework's ``attention_kernel`` is ``fa2``, on this GPU's table
    (``costmodel.llm.fa2_attention``). ``gpu``: the run's GPU, whose published attention-kernel curves
    give the context-parallel chunks' key-length factors (``costmodel.analytic.ATTENTION_SHAPE_CURVES``).
    """
    if policy is None:
        policy = "megatron" if strategy.recompute == "selective" else strategy.recompute
    x = layer_shape(model, strategy, seq_length)
    ops = _norm("input_norm", x)
    ops += _attention_projections(x, model)
    if model.qk_norm:  # per-head RMSNorm of queries and keys
        ops += _elementwise("qk_norm", x.tokens * (x.q_width + x.kv_width), 1, 1, 2, 1)
    if model.position_embedding == "rope":
        ops += _elementwise("rope_fused" if rope_fused else "rope", _rope_elements(x, model), 1, 1, 1, 1)
        if model.is_mla and not rope_fused:
            ops += _mla_concat_copies(x, model)
    core = _attention_cores(x, model, strategy, gpu)
    if flex_attention:
        core = flex_attention_ops(core, model.sliding_window, model.attention_sinks, x.tokens * x.o_width,
                                  flex_device, {"q": x.tokens * x.q_width, "k": x.tokens * x.kv_width,
                                                "v": x.tokens * x.v_width, "out": x.tokens * x.o_width})
    elif fa2_device is not None:
        core = fa2_attention_ops(core, fa2_device)
    ops += core
    ops += _linear("out_proj", x, n=x.hidden, k=x.o_width)
    ops += _dropout_residual("attn", x, model)
    ops += _norm("post_attn_norm", x)
    ops += _moe(x, model, strategy, expert_fused) if moe else _mlp("mlp", x, model, model.ffn_hidden_size)  # type: ignore[arg-type]
    ops += _dropout_residual("mlp", x, model)
    return ops + _recomputed(ops, core, x, model, policy, moe)


def _recomputed(ops: list[Op], core: list[Op], x: LayerShape, model: ModelSpec, policy: str,
                moe: bool) -> list[Op]:
    """The forward operators ``policy`` re-runs before the layer's backward (``costmodel.llm.recompute``).

    The op-level policy was read for dense, non-MLA blocks; other layers under it re-run the
    attention core, as the memory model counts them (``constraints.memory``).
    """
    forward = [op for op in ops if op.phase == "fwd"]
    share = layer_recompute_fraction(policy)
    if share:
        return [_scaled(_as_recompute(op), share) for op in forward]
    if policy == "op" and not moe and not model.is_mla:
        bpe = 1.0 if x.dtype == "fp8" else 2.0
        # the even-numbered matmuls wk, wo and w3 (w2 without a gate), and every element-wise op
        again = [gemm("qkv_proj.k.recompute", "recompute", x.tokens, x.kv_width, x.hidden, x.dtype, 1.0, bpe)]
        again += [_as_recompute(op) for op in forward
                  if op.family == "memory" or op.name == "out_proj.fwd"]
        inner = model.ffn_hidden_size // x.tp  # type: ignore[operator]
        if model.activation == "swiglu":
            again.append(gemm("mlp.up.w3.recompute", "recompute", x.tokens, inner, x.hidden, x.dtype, 1.0, bpe))
        else:
            again += [_as_recompute(op) for op in forward if op.name == "mlp.down.fwd"]
        return again
    if policy in ("megatron", "op"):
        return [_as_recompute(op) for op in core if op.phase == "fwd"]
    return []


def _as_recompute(op: Op) -> Op:
    return Op(op.name.replace(".fwd", ".recompute"), op.family, "recompute", op.shape, op.flops, op.bytes,
              op.dtype, op.count)


def embedding_ops(model: ModelSpec, strategy: Strategy, seq_length: int) -> list[Op]:
    """First-stage extras: token (and position) embedding lookup and its gradient."""
    x = layer_shape(model, strategy, seq_length)
    n = x.tokens * x.hidden
    tables = 2 if model.position_embedding == "learned" else 1
    return _elementwise("embedding", n * tables, 1, 1, 1, 2)


def head_ops(model: ModelSpec, strategy: Strategy, seq_length: int, mtp_layers: int | None = None,
             lm_head: bool = True) -> list[Op]:
    """Last-stage extras: final norm, LM head and vocab-parallel softmax cross-entropy; MTP layers.

    ``mtp_layers`` (default: all of the model's) and ``lm_head`` say what a rank holds when a
    pipeline layout places the MTP layers on a stage of their own.
    """
    x = layer_shape(model, strategy, seq_length)
    ops = _lm_head("", x, model) if lm_head else []
    for depth in range(model.mtp_num_layers if mtp_layers is None else mtp_layers):
        ops += _mtp_layer(f"mtp{depth}.", x, model, strategy, seq_length)
    return ops


def _lm_head(prefix: str, x: LayerShape, model: ModelSpec) -> list[Op]:
    vocab = model.vocab_size // x.tp
    ops = _norm(f"{prefix}final_norm", x)
    # The LM head is Megatron-Core's own ColumnParallelLinear, not a Transformer Engine module, so FP8
    # recipes run it in bf16 (github.com/NVIDIA/Megatron-LM @d98e8a64 megatron/core/models/gpt/
    # gpt_model.py output_layer_cls: TE only with the mxfp8 output projection).
    ops += _linear(f"{prefix}lm_head", replace(x, dtype="bf16") if x.dtype == "fp8" else x, n=vocab, k=x.hidden)
    # Ideal single-pass traffic (read logits, write softmax; backward read softmax, write grad),
    # the convention of the measured fit in costmodel/analytic.py that prices the real multi-pass kernel.
    ops += _elementwise(f"{prefix}cross_entropy", x.tokens * vocab, 1, 1, 1, 1)
    return ops


def _mtp_layer(prefix: str, x: LayerShape, model: ModelSpec, strategy: Strategy, seq_length: int) -> list[Op]:
    """One Megatron-Core MTP layer: embedding of the shifted tokens, two norms, the column-parallel
    ``2h -> h`` projection, one transformer layer, and the shared LM head again."""
    ops = _elementwise(f"{prefix}embedding", x.tokens * x.hidden, 1, 1, 1, 2)
    ops += _norm(f"{prefix}enorm", x) + _norm(f"{prefix}hnorm", x)
    ops += _linear(f"{prefix}eh_proj", x, n=x.hidden // x.tp, k=2 * x.hidden)
    ops += [_renamed(op, prefix) for op in layer_ops(model, strategy, seq_length, moe=model.is_moe)]
    return ops + _lm_head(prefix, x, model)


def _renamed(op: Op, prefix: str) -> Op:
    return Op(prefix + op.name, op.family, op.phase, op.shape, op.flops, op.bytes, op.dtype, op.count)


# Adam step with fp32 master weights, moments and main grads, writing 16-bit params back:
# reads grad 4 + master 4 + m 4 + v 4, writes master 4 + m 4 + v 4 + param 2 = 30 bytes/param
# (derived in docs/hardware_and_formulas.md section 4e from Megatron-LM's distributed optimizer).
ADAM_BYTES_PER_PARAM = 30


def optimizer_op(params_on_gpu: float) -> Op:
    """The optimizer step over the parameters this GPU updates (its ZeRO shard)."""
    return Op("adam.step", "optimizer", "step", (int(params_on_gpu),), 12.0 * params_on_gpu,
              ADAM_BYTES_PER_PARAM * params_on_gpu, "fp32", 1.0)


def fa2_device(run: RunSpec) -> str | None:
    """``run``'s GPU where its framework runs attention as FlashAttention-2 (``attention_kernel: fa2``), else None."""
    return run.cluster.gpu.name if run.framework.attention_kernel == "fa2" else None


@for_last_run  # asked by every distinct stage and the launch overhead of one prediction
def run_layer_ops(run: RunSpec, moe: bool) -> list[Op]:
    """One layer's operators as ``run``'s framework and GPU run them (``layer_ops`` with the run's settings).

    The list is shared by the calls for one run: read it, do not change it. Positional arguments only.
    """
    return layer_ops(run.model, run.strategy, run.seq_length, moe=moe, policy=recompute_policy(run),
                     rope_fused=run.framework.rope_fusion, expert_fused=run.framework.moe_expert_fusion,
                     flex_attention=run.framework.attention_kernel == "flex", flex_device=run.cluster.gpu.name,
                     fa2_device=fa2_device(run), gpu=run.cluster.gpu.name)


def stage_ops(run: RunSpec, stage: int,
              layer_ops_of: Callable[[RunSpec, bool], list[Op]] = run_layer_ops) -> list[Op]:
    """Every operator one GPU of pipeline ``stage`` runs per micro-batch (counts include its layers).

    ``layer_ops_of``: ``run_layer_ops`` or a memoised stand-in (a sweep's stages share few layer shapes).
    """
    model, s, seq = run.model, run.strategy, run.seq_length
    dense, moe = stage_layer_counts(model, s, stage)
    ops: list[Op] = []
    for layers, is_moe in ((dense, False), (moe, True)):
        if layers:
            ops += [_scaled(op, layers) for op in layer_ops_of(run, is_moe)]
    layout = layout_of(model, s)  # the embedding, MTP layers and loss where the pipeline layout puts them
    if layout.count(stage, EMBEDDING):
        ops += embedding_ops(model, s, seq)
    if layout.count(stage, LOSS) or layout.count(stage, MTP):
        ops += head_ops(model, s, seq, layout.count(stage, MTP), lm_head=bool(layout.count(stage, LOSS)))
    return ops


def _scaled(op: Op, factor: float) -> Op:
    return Op(op.name, op.family, op.phase, op.shape, op.flops, op.bytes, op.dtype, op.count * factor)
