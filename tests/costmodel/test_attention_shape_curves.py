"""The causal / non-causal and key-length factors read the run's GPU's published kernel curves
(costmodel.analytic.ATTENTION_SHAPE_CURVES: cuDNN on H100), FlashAttention-2's A100 curves elsewhere."""

from __future__ import annotations

import pytest

from costmodel.analytic import key_length_time_factor, noncausal_time_factor
from costmodel.llm.decompose import run_layer_ops
from costmodel.specs.runspec import run_spec_from_mapping

H100, A100 = "h100-sxm5-80gb", "a100-sxm4-80gb"


def test_h100_factors_are_cudnn_s_published_ratios():
    # FA3 paper Fig. 5, hd 128, 16k tokens: cuDNN causal 484 / non-causal 617 TFLOP/s at 2k; non-causal 600 at 8k
    assert noncausal_time_factor(2048, H100) == pytest.approx(2 * 484 / 617)
    assert key_length_time_factor(2048, 8192, H100) == pytest.approx(617 / 600)  # longer loops lose on cuDNN
    # FlashAttention-2 README, A100: causal 155 / non-causal 187 at 2k, 201 at 8k
    assert noncausal_time_factor(2048, A100) == pytest.approx(2 * 155 / 187)
    assert key_length_time_factor(2048, 8192, A100) == pytest.approx(187 / 201)
    assert key_length_time_factor(2048, 8192, "b200") == key_length_time_factor(2048, 8192, A100)


def _gathered_count(gpu: str, name: str = "attention_gathered.fwd") -> float:
    run = run_spec_from_mapping({"model": "llama3.1-70b", "seq_length": 8192, "cluster": {"gpu": gpu, "num_gpus": 8},
                                 "strategy": {"cp": 4, "dp": 2, "cp_comm_type": "all_gather", "recompute": "none",
                                              "global_batch_size": 8}})
    return next(op.count for op in run_layer_ops(run, False) if op.name == name)


def test_the_all_gather_chunks_take_their_gpu_s_key_length_factor():
    # chunk j of 8 (1k tokens each) loops over (j+1)k keys; on average j squares per chunk, 1/cp of them a rank's
    chunk = 8192 // 8

    def expected(gpu: str) -> float:
        return sum(j * key_length_time_factor(chunk, (j + 1) * chunk, gpu) for j in range(8)) / 4

    assert _gathered_count(H100) == pytest.approx(expected(H100))
    assert _gathered_count(A100) == pytest.approx(expected(A100))
    assert _gathered_count(H100) > _gathered_count(A100)  # cuDNN gains less from the longer loops
    # the backward kernels keep FlashAttention-2's forward + backward curves: cuDNN's are forward figures
    assert _gathered_count(H100, "attention_gathered.bwd") == pytest.approx(expected(A100))
