"""Pipeline in-flight activations: 1F1B, interleaved 1F1B and Llama 3's flexible micro-batches per round."""

from __future__ import annotations

import pytest

from constraints.memory import inflight_chunks, microbatches_per_round
from costmodel.specs.strategy import Strategy


def _strategy(pp: int, vpp: int, m: int) -> Strategy:
    return Strategy(tp=1, pp=pp, dp=1, vpp=vpp, micro_batch_size=1, global_batch_size=m)


@pytest.mark.parametrize(("pp", "vpp"), [(4, 2), (8, 4), (16, 8), (16, 2)])
def test_first_stage_of_interleaving_holds_korthikanti_share(pp: int, vpp: int) -> None:
    # Korthikanti et al. 2022 Sec. 4.2.3: the first stage holds L (1 + (p - 1) / (p v)) layers' worth,
    # i.e. p + (p - 1) / v of its own stage's layers, when pp divides the micro-batches.
    assert inflight_chunks(_strategy(pp, vpp, 4 * pp), 0) == pytest.approx(pp + (pp - 1) / vpp)


def test_one_f_one_b_holds_at_most_the_micro_batches() -> None:
    assert [inflight_chunks(_strategy(4, 1, 2), st) for st in range(4)] == [2.0, 2.0, 2.0, 1.0]


@pytest.mark.parametrize(("pp", "m", "n"), [(16, 32, 16), (16, 16, 16), (4, 6, 6), (4, 10, 5), (8, 3, 3)])
def test_micro_batches_per_round_is_pytorchs(pp: int, m: int, n: int) -> None:
    assert microbatches_per_round(pp, m) == n


@pytest.mark.parametrize(("pp", "vpp", "m"), [(4, 2, 6), (4, 3, 10), (8, 2, 3), (16, 8, 32), (16, 8, 24)])
def test_interleaved_chunks_are_pytorch_warmup_plus_one(pp: int, vpp: int, m: int) -> None:
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    warmup = getattr(schedules, "_get_warmup_ops", None)
    if warmup is None:
        pytest.skip("this torch has no _get_warmup_ops")
    n = max(1, m // pp)
    per_round = m // n
    for stage in range(pp):
        expected = min(warmup(stage, vpp, per_round, pp, m) + 1, m * vpp) / vpp
        assert inflight_chunks(_strategy(pp, vpp, m), stage) == pytest.approx(expected)


def test_flexible_rounds_change_nothing_where_pp_divides_the_micro_batches() -> None:
    # Megatron-Core's microbatch_group_size_per_vp_stage defaults to pp: the same warm-up.
    s = _strategy(8, 4, 24)
    assert [inflight_chunks(s, st) * 4 for st in range(8)] == [min(24 * 4, 2 * (8 - st - 1) + 3 * 8 + 1)
                                                               for st in range(8)]
