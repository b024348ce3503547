"""Per-GPU bytes of MoE token dispatch: the dispatched and combined tokens, and DeepEP's fixed buffers.

Tokens. The dispatched tokens (the experts' input) and the combined ones (their output, before
the weighted sum) are both alive around the expert GEMMs: the busiest rank's expert rows each,
``costmodel.specs.moe_tokens.expert_rows``, the formula the time model uses (the rank's ``1/tp``
share under sequence parallelism, ``top_k`` copies, all-gathered over expert TP, times the
capacity factor where tokens are padded to capacity, else the drop-less ``moe_load_imbalance``).

DeepEP (Megatron-Core's ``flex`` dispatcher) also allocates fixed communication buffers once per
EP group, sized by its recommended configs: Megatron-LM @d98e8a64
megatron/core/transformer/moe/fused_a2a.py ``get_buffer`` takes the larger NVLink and RDMA size
hints of ``Buffer.get_dispatch_config`` and ``get_combine_config`` for ``hidden_bytes = hidden x
max(element size, 2)``; the hints are github.com/deepseek-ai/DeepEP @567632d csrc/config.hpp
``get_nvl_buffer_size_hint`` / ``get_rdma_buffer_size_hint``, the configs deep_ep/buffer.py
(``Buffer.num_sms = 20``).
"""

from __future__ import annotations

from costmodel.specs.model import ModelSpec
from costmodel.specs.moe_tokens import expert_rows
from costmodel.specs.strategy import Strategy

BYTES_16BIT = 2
# DeepEP @567632d: deep_ep/buffer.py Buffer.num_sms; csrc/config.hpp kNumMaxTopK, kNumMaxScales;
# csrc/kernels/configs.cuh NUM_MAX_NVL_PEERS, TOPK_IDX_BITS 64; internode.cu SourceMeta (two ints).
DEEPEP_NUM_SMS = 20
DEEPEP_MAX_TOPK = 128
DEEPEP_MAX_SCALES = 128
DEEPEP_NVL_PEERS = 8
DEEPEP_TOPK_IDX_BYTES = 8
DEEPEP_SOURCE_META_BYTES = 8
# (num_max_nvl_chunked_recv_tokens, num_max_rdma_chunked_send_tokens, num_max_rdma_chunked_recv_tokens)
# of deep_ep/buffer.py get_dispatch_config / get_combine_config, by EP size.
DEEPEP_DISPATCH = {2: (256, 6, 128), 4: (256, 6, 128), 8: (256, 6, 128), 16: (288, 20, 128), 24: (288, 8, 128),
                   32: (288, 8, 128), 48: (288, 8, 128), 64: (288, 8, 128), 96: (480, 12, 128),
                   128: (560, 12, 128), 144: (720, 12, 128), 160: (720, 12, 128)}
DEEPEP_COMBINE = {2: (256, 6, 128), 4: (256, 6, 128), 8: (256, 6, 128), 16: (288, 12, 128), 24: (288, 8, 128),
                  32: (288, 8, 128), 48: (288, 8, 128), 64: (288, 8, 128), 96: (480, 8, 128),
                  128: (560, 8, 128), 144: (720, 8, 128), 160: (720, 8, 128)}


def dispatched_token_bytes(model: ModelSpec, strategy: Strategy, seq_length: int) -> float:
    """16-bit dispatched plus combined tokens of one MoE layer on the busiest rank, per micro-batch."""
    return 2 * BYTES_16BIT * expert_rows(model, strategy, seq_length) * model.hidden_size


def _align_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def deepep_buffer_bytes(hidden_size: int, ep: int) -> float:
    """NVLink plus RDMA bytes of the DeepEP buffer Megatron-Core allocates for an EP group of ``ep`` ranks.

    EP sizes without a DeepEP config (DeepEP asserts) take the next larger one (the largest past 160).
    """
    if ep <= 1:
        return 0.0
    key = min((k for k in DEEPEP_DISPATCH if k >= ep), default=max(DEEPEP_DISPATCH))
    hidden_bytes = hidden_size * BYTES_16BIT
    channels = DEEPEP_NUM_SMS // 2
    rdma_ranks = max(ep // DEEPEP_NVL_PEERS, 1)
    nvl_ranks = min(ep, DEEPEP_NVL_PEERS)
    per_token = hidden_bytes + DEEPEP_SOURCE_META_BYTES + DEEPEP_MAX_TOPK * (DEEPEP_TOPK_IDX_BYTES + 4) \
        + DEEPEP_MAX_SCALES * 4
    nvl = rdma = 0
    for nvl_recv, rdma_send, rdma_recv in (DEEPEP_DISPATCH[key], DEEPEP_COMBINE[key]):
        n = channels * nvl_ranks * ((2 * rdma_ranks + 3) * 4 + nvl_recv * per_token)
        nvl = max(nvl, _align_up(n, 128))
        if ep > DEEPEP_NVL_PEERS:  # intranode groups use no RDMA buffer
            recv = _align_up(rdma_recv, rdma_send)  # Config's constructor rounds it up
            r = channels * rdma_ranks * ((DEEPEP_NVL_PEERS * 2 + 2) * 2 * 4 + recv * (per_token + 16) * 2)
            rdma = max(rdma, _align_up(r, 128))
    return float(nvl + rdma)
