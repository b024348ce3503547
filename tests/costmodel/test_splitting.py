"""Out-of-range shapes split into in-range pieces whose work scales to the op's."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costmodel.predictors import RANGE_MARGIN
from costmodel.splitting import attention_pieces, gemm_pieces

GEMM_RANGE = {"m": (1.0, 32768.0), "n": (32.0, 65536.0), "k": (32.0, 65536.0)}
ATTENTION_RANGE = {"batch": (1.0, 256.0), "seq_len": (1.0, 16384.0), "num_heads": (1.0, 96.0),
                   "num_kv_heads": (1.0, 96.0), "tokens": (1.0, 262144.0)}


def test_an_in_range_gemm_is_not_split():
    assert gemm_pieces((4096, 4096, 4096), GEMM_RANGE) is None


def test_a_gemm_under_a_minimum_is_not_split():
    assert gemm_pieces((100000, 4096, 16), GEMM_RANGE) is None


def test_llama3_lm_head_splits_its_vocabulary():
    scale, piece = gemm_pieces((8192, 128256, 4096), GEMM_RANGE)
    assert piece == (8192, 64128, 4096)  # two halves of the vocabulary, each under the table's 65536
    assert scale == pytest.approx(2.0)


@given(m=st.integers(1, 10**6), n=st.integers(32, 10**6), k=st.integers(32, 10**6))
def test_gemm_pieces_lie_in_range_and_carry_the_work(m, n, k):
    plan = gemm_pieces((m, n, k), GEMM_RANGE)
    if plan is None:  # already inside the predictors' range check (a quarter beyond the sampled edge)
        assert m <= 32768 * RANGE_MARGIN and n <= 65536 * RANGE_MARGIN and k <= 65536 * RANGE_MARGIN
        return
    scale, piece = plan
    for value, size, name in zip((m, n, k), piece, "mnk", strict=True):
        low, high = GEMM_RANGE[name]
        assert low / RANGE_MARGIN <= size <= high * RANGE_MARGIN
        if value > high * RANGE_MARGIN:  # split: at most the table's largest, at least half of it
            assert high / 2 <= size <= high
        else:
            assert size == value
    assert scale == pytest.approx(m * n * k / math.prod(piece))
    assert scale >= 1.0


def test_a_dimension_within_the_range_margin_is_not_split():
    # m 40000 lies within 32768 x 1.25 and n 30 within 32 / 1.25: only k, past 65536 x 1.25, is split
    scale, piece = gemm_pieces((40000, 30, 100000), GEMM_RANGE)
    assert piece == (40000, 30, 50000) and scale == pytest.approx(2.0)


def test_attention_splits_heads_and_batch_but_never_the_sequence():
    scale, piece = attention_pieces((1, 8192, 128, 8, 128), ATTENTION_RANGE)
    assert piece == (1, 8192, 64, 4, 128) and scale == pytest.approx(2.0)
    scale, piece = attention_pieces((64, 8192, 8, 8, 128), ATTENTION_RANGE)  # tokens 524288 > 262144
    assert piece == (32, 8192, 8, 8, 128) and scale == pytest.approx(2.0)
    assert attention_pieces((1, 32768, 128, 8, 128), ATTENTION_RANGE) is None
    assert attention_pieces((1, 18000, 128, 8, 128), ATTENTION_RANGE)[1] == (1, 18000, 64, 4, 128)  # seq in margin
    assert attention_pieces((2, 4096, 32, 8, 128), ATTENTION_RANGE) is None  # in range
