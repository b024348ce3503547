"""Conformance tests shared by every pipeline schedule, plus the closed forms they reduce to."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.llm.schedule import SCHEDULES, interleaved_one_f_one_b, one_f_one_b, schedule_name

TIMES = st.lists(st.floats(0.001, 1.0), min_size=1, max_size=8)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@settings(max_examples=50, deadline=None)
@given(times=TIMES, m=st.integers(1, 64), vpp=st.sampled_from([1, 2, 4]), p2p=st.floats(0, 0.01))
def test_parts_add_up_and_bound_the_work(name: str, times: list[float], m: int, vpp: int, p2p: float) -> None:
    fwd = times
    bwd = [2 * t for t in times]
    flush = SCHEDULES[name](fwd, bwd, m, vpp, p2p)
    assert flush.total_s == pytest.approx(flush.steady_s + flush.bubble_s + flush.p2p_s)
    slowest = max(f + b for f, b in zip(fwd, bwd))
    assert flush.steady_s == pytest.approx(m * slowest)
    assert flush.bubble_s >= -1e-12
    assert flush.total_s >= m * slowest * (1 - 1e-9)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_bubble_share_falls_with_more_microbatches(name: str) -> None:
    shares = []
    for m in (4, 8, 16, 64):
        flush = SCHEDULES[name]([1.0] * 4, [2.0] * 4, m, 2, 0.0)
        shares.append(flush.bubble_s / flush.total_s)
    assert shares == sorted(shares, reverse=True)


def test_1f1b_equal_stages_closed_form() -> None:
    flush = one_f_one_b([1.0] * 8, [2.0] * 8, 16, 1, 0.0)
    assert flush.total_s == pytest.approx((16 + 8 - 1) * 3.0)  # (m + p - 1)(f + b)


def test_interleaving_divides_the_bubble() -> None:
    plain = one_f_one_b([1.0] * 8, [2.0] * 8, 16, 1, 0.0)
    inter = interleaved_one_f_one_b([1.0] * 8, [2.0] * 8, 16, 4, 0.0)
    assert inter.bubble_s == pytest.approx(plain.bubble_s / 4)  # (p - 1)(f + b) / v


def test_imbalanced_last_stage_is_the_bottleneck() -> None:
    flush = one_f_one_b([1.0, 1.0, 1.5], [2.0, 2.0, 3.0], 8, 1, 0.0)
    assert flush.bottleneck == 2


def test_schedule_by_pipeline_shape() -> None:
    assert schedule_name(1, 1) == "1f1b"
    assert schedule_name(4, 1) == "1f1b"
    assert schedule_name(4, 2) == "interleaved"
