"""Attention as PyTorch SDPA's FlashAttention-2 backend runs it (``framework.attention_kernel: fa2``;
costmodel/llm/fa2_attention.py): below the H100 table's cuDNN level, at the table on A100."""

from __future__ import annotations

import pytest

from costmodel.analytic import attention_backward_ratio
from costmodel.llm import fa2_attention as fa2
from costmodel.llm.decompose import stage_ops
from costmodel.llm.flex_attention import fa2_share_of_table
from costmodel.llm.overheads import kernels_per_layer
from costmodel.llm.step import predict_step
from costmodel.predict import timer_for
from costmodel.specs.errors import SpecError
from costmodel.specs.framework import get_framework
from costmodel.specs.runspec import RunSpec, run_spec_from_mapping

H100 = "h100-sxm5-80gb"


def _run(gpu: str = H100, kernel: str = "fa2", seq: int = 4096, cp: int = 1) -> RunSpec:
    return run_spec_from_mapping({
        "model": "llama2-7b", "seq_length": seq, "cluster": {"gpu": gpu, "num_gpus": 16},
        "strategy": {"dp": 16 // cp, "cp": cp, "micro_batch_size": 1, "global_batch_size": 64, "zero_stage": 3},
        "framework": {"name": "torchtitan", "attention_kernel": kernel}})


def _cores(run: RunSpec) -> dict[str, float]:
    return {op.name: op.count for op in stage_ops(run, 0) if op.family in ("attention_fwd", "attention_bwd")}


def test_backward_share_follows_the_published_fwd_bwd_and_fwd_figures() -> None:
    # FA2 H100 causal hd128 at 4k: fwd+bwd 294 (README figure), fwd 319 (FA3 paper Fig. 5); cuDNN fwd 518
    fa2_bwd = 2.5 / (3.5 / 294 - 1 / 319)
    table_bwd = 2.5 * 518 / attention_backward_ratio(4096, 128)
    assert fa2.fa2_backward_share_of_table(H100, 4096) == pytest.approx(fa2_bwd / table_bwd)
    assert 0.6 < fa2.fa2_backward_share_of_table(H100, 4096) < 0.75


def test_backward_share_is_held_beyond_the_figures_and_one_on_fa2_level_tables() -> None:
    assert fa2.fa2_backward_share_of_table(H100, 262144) == pytest.approx(fa2.fa2_backward_share_of_table(H100, 16384))
    assert fa2.fa2_backward_share_of_table("a100-sxm4-80gb", 4096) == 1.0
    assert fa2.fa2_backward_share_of_table("b200", 4096) == 1.0


def test_h100_cores_run_at_fa2_s_forward_and_backward_shares() -> None:
    flash, slow = _cores(_run(kernel="flash")), _cores(_run())
    assert slow["attention.fwd"] == pytest.approx(flash["attention.fwd"] / fa2_share_of_table(H100, 4096))
    assert slow["attention.bwd"] == pytest.approx(flash["attention.bwd"] / fa2.fa2_backward_share_of_table(H100, 4096))


def test_a100_fa2_is_the_table_itself() -> None:
    assert _cores(_run(gpu="a100-sxm4-80gb")) == _cores(_run(gpu="a100-sxm4-80gb", kernel="flash"))


def test_ring_steps_take_the_share_at_their_own_chunk_length() -> None:
    run, flash = _run(seq=8192, cp=4), _run(seq=8192, cp=4, kernel="flash")
    chunks = {op.name: op for op in stage_ops(flash, 0) if op.family == "attention_fwd"}
    slow = _cores(run)
    for name, op in chunks.items():
        assert slow[name] == pytest.approx(op.count / fa2_share_of_table(H100, int(op.shape[1])))


def test_fa2_step_is_slower_on_h100_and_kernel_count_unchanged() -> None:
    timer = timer_for(_run().cluster.gpu)
    assert predict_step(_run(), timer).step_time_s > predict_step(_run(kernel="flash"), timer).step_time_s
    assert kernels_per_layer(_run()) == kernels_per_layer(_run(kernel="flash"))


def test_framework_files_keep_the_table_kernel_and_fa2_is_a_choice() -> None:
    assert get_framework("torchtitan").attention_kernel == "flash"  # cuDNN first at its pinned commit
    with pytest.raises(SpecError, match="attention_kernel"):
        _run(kernel="cudnn-fa2")
