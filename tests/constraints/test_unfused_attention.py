"""Unfused (non-flash) attention: what it keeps for backward and the score gradients of its backward."""

from __future__ import annotations

from dataclasses import replace

import pytest

from constraints.memory import activation_bytes_per_layer, other_bytes, unfused_attention_backward_bytes
from costmodel.specs.runspec import RunSpec, run_spec_from_mapping

A, S, B, TP = 32, 4096, 2, 2


def _run(dropout: bool, flash: bool, recompute: str = "none") -> RunSpec:
    return run_spec_from_mapping({
        "model": {"name": "toy", "num_layers": 4, "hidden_size": 2048, "num_attention_heads": A,
                  "ffn_hidden_size": 8192, "vocab_size": 32000, "seq_length": S, "dropout": dropout},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
        "strategy": {"tp": TP, "pp": 1, "dp": 4, "micro_batch_size": B, "global_batch_size": 8,
                     "sequence_parallel": True, "recompute": recompute, "flash_attention": flash}})


def _layer(run: RunSpec) -> float:
    return activation_bytes_per_layer(run.model, run.strategy, run.seq_length)


def test_without_dropout_the_softmax_output_is_the_only_score_sized_tensor_kept() -> None:
    # Flash keeps the fp32 log-sum-exp instead (4 a s b / t); the output O is the projection's input either way.
    no_flash, flash = _run(False, False), _run(False, True)
    assert _layer(no_flash) - _layer(flash) == pytest.approx(2 * A * S * S * B / TP - 4 * A * S * B / TP)


def test_with_dropout_korthikanti_5as2b_is_kept() -> None:
    # arXiv 2205.05198 Sec. 4.1: softmax output 2, dropout mask 1, dropout output 2 (bytes per score element)
    with_drop, without = _run(True, False), _run(False, False)
    masks = 2 * S * B * 2048 / TP  # the two hidden-state dropout masks (1 byte, SP-sharded)
    assert _layer(with_drop) - _layer(without) == pytest.approx(3 * A * S * S * B / TP + masks)


def test_unfused_backward_adds_two_score_gradients_only_without_flash_or_recompute() -> None:
    grads = unfused_attention_backward_bytes(_run(False, False).model, _run(False, False).strategy, S)
    assert grads == pytest.approx(4 * A * S * S * B / TP)
    assert other_bytes(_run(False, False), 0) - other_bytes(_run(False, True), 0) == pytest.approx(grads)
    selective = other_bytes(_run(False, False, "selective"), 0)
    assert selective == pytest.approx(other_bytes(_run(False, True, "selective"), 0))


def test_context_parallel_splits_the_score_gradients() -> None:
    run = _run(False, False)
    cp2 = replace(run.strategy, cp=2, dp=2)
    assert unfused_attention_backward_bytes(run.model, cp2, S) == pytest.approx(
        unfused_attention_backward_bytes(run.model, run.strategy, S) / 2)
