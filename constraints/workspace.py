"""Fixed communication workspaces a framework allocates once per GPU beside the model and activations.

Transformer Engine userbuffers (TP-communication overlap). Megatron-LM @d98e8a64
megatron/training/initialize.py ``_initialize_tp_communicators`` calls ``initialize_ub`` with the
shape ``[seq_length * micro_batch_size / cp, hidden_size]`` when ``--tp-comm-overlap`` is set.
Transformer Engine @d0067d0d transformer_engine/pytorch/module/base.py ``initialize_ub`` then
registers one buffer of that global shape for each of its twelve overlapped GEMMs (ring-exchange
qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad; pipeline proj_fprop, fc2_fprop; bulk qkv_dgrad,
qkv_wgrad, fc1_dgrad, fc1_wgrad; external proj_wgrad, fc2_wgrad), in uint8 for the all-gather ones
under FP8 (``layers_all_gather_overlap``, ``fp8_buf``) and in bf16 otherwise; a ring-exchange
reduce-scatter would hold ``2 tp - 1`` chunks, but none of the defaults is one
(common/comm_gemm_overlap/comm_gemm_overlap.cpp ``CommOverlapP2PBase::initialize``).

NCCL's own buffers and the CUDA context stay in the runtime reserve (``ClusterSpec.usable_memory_bytes``).
CUDA graphs (``Strategy.cuda_graphs``): their static buffers and private pool are ``constraints.cuda_graphs``.
"""

from __future__ import annotations

from costmodel.specs.runspec import RunSpec

BYTES_16BIT = 2
BYTES_FP8 = 1
# transformer_engine/pytorch/module/base.py @d0067d0d: the overlapped GEMMs and which take an FP8 buffer
UB_GEMMS = ("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad", "proj_fprop", "fc2_fprop",
            "qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad", "proj_wgrad", "fc2_wgrad")
UB_ALL_GATHER = frozenset({"qkv_fprop", "qkv_dgrad", "proj_dgrad", "proj_wgrad", "fc1_fprop", "fc1_dgrad",
                           "fc2_dgrad", "fc2_wgrad"})


def userbuffer_bytes(run: RunSpec) -> float:
    """Bytes of Transformer Engine's TP-overlap userbuffers on one GPU (0 without ``tp_comm_overlap``)."""
    s = run.strategy
    if not s.tp_comm_overlap or s.tp < 2:
        return 0.0
    elements = run.seq_length * s.micro_batch_size / s.cp * run.model.hidden_size
    fp8 = s.precision == "fp8"
    return sum(elements * (BYTES_FP8 if fp8 and name in UB_ALL_GATHER else BYTES_16BIT) for name in UB_GEMMS)
