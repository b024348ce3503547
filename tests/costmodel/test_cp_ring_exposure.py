"""The p2p ring's transfers show beyond the step kernels they run beside, even where the chunk
kernels are timed below the booked whole-sequence attention (costmodel.llm.cp_comm)."""

from __future__ import annotations

import pytest

from costmodel.analytic import key_length_time_factor
from costmodel.llm import cp_comm
from costmodel.llm.cp_comm import cp_layer_exposed_s, p2p_ring_seconds
from costmodel.predict import timer_for
from costmodel.specs.runspec import run_spec_from_mapping


def _run(seq: int = 131072, cp: int = 4):
    return run_spec_from_mapping({"model": "llama2-7b", "seq_length": seq,
                                  "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 16},
                                  "strategy": {"tp": 4, "cp": cp, "sequence_parallel": True, "global_batch_size": 4,
                                               "recompute": "none", "cp_comm_type": "p2p"}})


def _step_kernels(run, timer, family: str) -> list[float]:
    s, m = run.strategy, run.model
    heads, kv = cp_comm._heads(run, s.tp)
    half = run.seq_length // (2 * s.cp)
    diagonal = cp_comm._seconds(timer, cp_comm._attention(family, 1, 2 * half, heads, kv, m.head_dim, m.v_head_dim, True))
    wide = cp_comm._seconds(timer, cp_comm._attention(family, 2, half, heads, kv, m.head_dim, m.v_head_dim, False))
    long = cp_comm._seconds(timer, cp_comm._attention(family, 1, half, heads, kv, m.head_dim, m.v_head_dim, False))
    off = 0.5 * (wide + 2 * key_length_time_factor(half, 2 * half, run.cluster.gpu.name) * long)  # the two kinds of step, half each
    return [diagonal] + [off] * (s.cp - 1)


def test_free_transfers_leave_only_the_chunk_kernels_excess():
    # ... and the ring's per-step merges of partial outputs and gradients (cp_comm.ring_merge_seconds)
    run = _run()
    timer = timer_for(run.cluster.gpu)
    expected = sum(max(0.0, sum(_step_kernels(run, timer, f)) - cp_comm._booked(run, timer, f))
                   + cp_comm.ring_merge_seconds(run, timer, f == "attention_fwd")
                   for f in ("attention_fwd", "attention_bwd"))
    assert cp_layer_exposed_s(run, timer, lambda op, nbytes: 0.0) == pytest.approx(expected)


def test_a_transfer_longer_than_its_step_shows_by_its_excess():
    run = _run()
    timer = timer_for(run.cluster.gpu)
    free = cp_layer_exposed_s(run, timer, lambda op, nbytes: 0.0)
    send = 10 * max(_step_kernels(run, timer, "attention_bwd"))  # far longer than any step
    slow = cp_layer_exposed_s(run, timer, lambda op, nbytes: send)
    cp = run.strategy.cp
    # forward: cp - 1 transfers; backward: 1 + 2 (cp - 2) + 1 transfer units, each waited for whole
    fwd_steps, bwd_steps = _step_kernels(run, timer, "attention_fwd"), _step_kernels(run, timer, "attention_bwd")
    fwd = p2p_ring_seconds(fwd_steps, [send] * (cp - 1) + [0.0]) - sum(fwd_steps)
    bwd = p2p_ring_seconds(bwd_steps, [send] + [2 * send] * (cp - 2) + [send]) - sum(bwd_steps)
    assert slow - free == pytest.approx(fwd + bwd)
    assert slow - free > (cp - 1) * send  # nothing of the excess is hidden by cheaper chunk kernels
