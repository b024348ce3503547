"""Grouped-query attention on the built-in tables brought to a training kernel's level (A100, H100) is
timed at its multi-head shape (costmodel/timing.py ``OperatorTimer._gqa_as_multi_head``)."""

from __future__ import annotations

import pytest

from costmodel.ops import Op
from costmodel.predict import timer_for
from costmodel.specs.catalog import get_gpu
from costmodel.timing import NOTE_GQA_AS_MHA


def _forward(gpu: str, seq: int, heads: int, kv_heads: int, causal: bool = True) -> tuple[float, list[str]]:
    batch = 16384 // seq
    flops = 2.0 * batch * seq * seq * heads * 256 * (0.5 if causal else 1.0)
    op = Op("attention.fwd", "attention_fwd", "fwd", (batch, seq, heads, kv_heads, 128, int(causal)), flops, 0.0,
            "bf16", 1.0)
    timed = timer_for(get_gpu(gpu)).time_ops([op])
    return flops / float(timed.seconds[0]) / 1e12, timed.notes


@pytest.mark.parametrize("gpu", ["h100-sxm5-80gb", "a100-sxm4-80gb"])
@pytest.mark.parametrize("seq", [1024, 2048, 8192])
def test_grouped_heads_run_at_the_multi_head_time_on_levelled_tables(gpu: str, seq: int) -> None:
    grouped, notes = _forward(gpu, seq, 64, 8)
    assert grouped == pytest.approx(_forward(gpu, seq, 64, 64)[0], rel=1e-12)
    assert NOTE_GQA_AS_MHA in notes and NOTE_GQA_AS_MHA not in _forward(gpu, seq, 64, 64)[1]


@pytest.mark.parametrize(("gpu", "ceiling"), [("h100-sxm5-80gb", 616.0), ("a100-sxm4-80gb", 203.0)])
def test_no_grouped_causal_forward_beats_the_published_training_kernel_ceiling(gpu: str, ceiling: float) -> None:
    # H100: FlashAttention-3's best causal forward, 616 TFLOP/s at 16k (arXiv 2407.08608 Fig. 5); A100:
    # FlashAttention-2's best non-causal figure, 203 at 16k (its README). Before, 64 / 8 heads ran 728 and 204.
    fastest = max(_forward(gpu, seq, heads, kv)[0] for seq in (512, 1024, 2048, 4096, 8192, 16384)
                  for heads, kv in ((64, 8), (32, 8), (64, 1), (48, 8)))
    assert fastest <= ceiling


def test_tables_without_a_published_level_keep_their_grouped_times() -> None:
    assert _forward("b200", 1024, 64, 8)[0] > 1.2 * _forward("b200", 1024, 64, 64)[0]
    assert NOTE_GQA_AS_MHA not in _forward("b200", 1024, 64, 8)[1]
