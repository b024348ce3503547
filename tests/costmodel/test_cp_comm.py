"""Context-parallel communication per cp_comm_type (costmodel.llm.cp_comm)."""

from __future__ import annotations

import pytest

from constraints.rules import rule_violations
from costmodel.comm import group_placement
from costmodel.llm.cp_comm import all_gather_layout_seconds, cp_layer_exposed_s, kv_chunk_bytes, p2p_ring_seconds
from costmodel.predict import timer_for
from costmodel.specs.errors import SpecError
from costmodel.specs.runspec import run_spec_from_mapping
from costmodel.llm.step import _on_group
from costmodel.llm.tp_comm import tp_layer_exposed_s


def _run(model: str = "llama3.1-8b", seq: int = 8192, gpus: int = 8, **strategy):
    strategy.setdefault("global_batch_size", 64)
    return run_spec_from_mapping({"model": model, "seq_length": seq,
                                  "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": gpus}, "strategy": strategy})


def _exposed(run, kind: str = "cp", log=None, raw=False) -> float:
    timer = timer_for(run.cluster.gpu)
    on = _on_group(timer, group_placement(kind, run.strategy, run.cluster), run.cluster.gpu)

    def collective(op, nbytes):
        if log is not None:
            log.append((op, nbytes))
        return on(op, nbytes)

    if raw:
        return collective
    return (cp_layer_exposed_s if kind == "cp" else tp_layer_exposed_s)(run, timer, collective)


def test_p2p_ring_exposes_only_beyond_each_step():
    assert p2p_ring_seconds([1.0, 1.0], [0.5, 0.0], 0.0) == pytest.approx(2.0)
    assert p2p_ring_seconds([1.0, 1.0], [3.0, 0.0], 0.0) == pytest.approx(4.0)


def test_p2p_bytes_and_steps():
    log = []
    _exposed(_run(cp=4, recompute="none"), log=log)
    chunk = kv_chunk_bytes(_run(cp=4))
    assert chunk == 2 * 1 * (8192 // 4) * 8 * 128 * 2  # K and V of 8 KV heads, bf16
    assert {op for op, _ in log} == {"send_recv"} and {b for _, b in log} == {chunk}


def test_p2p_at_8k_charges_the_smaller_chunk_kernels():
    # the ring's sends hide under 8k attention, but the split attention runs less efficiently (old: 0)
    assert _exposed(_run(cp=2)) > 0.0


def test_all_gather_variant_bytes_and_exposure():
    log = []
    run = _run(cp=4, cp_comm_type="all_gather", recompute="none")
    exposed = _exposed(run, log=log)
    gathered = kv_chunk_bytes(run) * 4
    assert sorted(op for op, _ in log) == ["all_gather", "reduce_scatter"] and {b for _, b in log} == {gathered}
    collective = _exposed(run, raw=True)
    timer = timer_for(run.cluster.gpu)
    copies = all_gather_layout_seconds(run, timer, True) + all_gather_layout_seconds(run, timer, False)
    # forward gather, backward re-gather and dK/dV reduce-scatter, none hidden, plus TE's reorder copies
    assert exposed == pytest.approx(2 * collective("all_gather", gathered) + collective("reduce_scatter", gathered)
                                    + copies)


@pytest.mark.parametrize("cp", [2, 8])
def test_all_gather_variant_streams_te_reorder_copies_even_with_free_transfers(cp):
    """TE @d0067d0d AttnFuncWithCPAndKVAllGather reorders the gathered K/V (index_select) in the forward and
    the backward, zeroes and accumulates the gathered-size dK/dV and reorders them back: at least 2 G forward
    and 7 G backward bytes (G: the gathered K and V) stream through HBM on the compute stream. Before this
    term free transfers meant a free all_gather variant, and the search preferred it for that reason."""
    run = _run(model="mixtral-8x22b", seq=65536, gpus=8, cp=cp, tp=8 // cp, cp_comm_type="all_gather",
               recompute="none", ep=1)
    timer = timer_for(run.cluster.gpu)
    free = cp_layer_exposed_s(run, timer, lambda op, nbytes: 0.0)
    gathered = kv_chunk_bytes(run) * cp
    assert free >= (2 + 7) * gathered / run.cluster.gpu.hbm_bandwidth_bytes_per_s
    assert all_gather_layout_seconds(run, timer, False) > all_gather_layout_seconds(run, timer, True)


def test_a2a_variant_bytes():
    log = []
    run = _run(cp=4, cp_comm_type="a2a", recompute="none")
    assert _exposed(run, log=log) > 0.0
    tokens = 8192 // 4
    qkv, out = tokens * (32 + 16) * 128 * 2, tokens * 32 * 128 * 2
    assert sorted(b for op, b in log if op == "all_to_all") == sorted([qkv, out])


def test_ulysses_needs_heads_divisible_by_tp_cp():
    ok = _run(cp=8, cp_comm_type="a2a")  # 32 heads, 8 KV heads
    assert not [v for v in rule_violations(ok) if "a2a" in v]
    bad = _run(gpus=16, tp=2, cp=8, cp_comm_type="a2a")  # 8 KV heads over tp*cp = 16
    assert any("num_query_groups=8" in v for v in rule_violations(bad))
    assert not [v for v in rule_violations(_run(gpus=16, tp=2, cp=8)) if "a2a" in v]  # p2p has no such rule


def test_unknown_cp_comm_type_is_a_spec_error():
    with pytest.raises(SpecError, match="cp_comm_type"):
        _run(cp=2, cp_comm_type="ring")


@pytest.mark.parametrize("seq", [8192, 65536])
def test_cp_not_priced_more_leniently_than_tp(seq):
    """Where CP exposes less than TP at equal degree, its raw traffic is also smaller."""
    tp_run, cp_run = _run(seq=seq, tp=2), _run(seq=seq, cp=2)
    tp_exposed, cp_exposed = _exposed(tp_run, "tp"), _exposed(cp_run, "cp")
    tp_log, cp_log = [], []
    _exposed(tp_run, "tp", log=tp_log)
    _exposed(cp_run, "cp", log=cp_log)
    tp_raw = sum(_exposed(tp_run, "tp", raw=True)(op, b) for op, b in tp_log)
    cp_raw = sum(_exposed(cp_run, "cp", raw=True)(op, b) for op, b in cp_log)
    if cp_exposed < tp_exposed:
        assert cp_raw < tp_raw


def test_deterministic():
    run = _run(cp=4, cp_comm_type="p2p", recompute="selective")
    first = _exposed(run)
    _exposed(_run(cp=2, cp_comm_type="a2a"))
    assert _exposed(run) == first


def test_p2p_ring_merges_each_step_on_the_compute_stream():
    # TE merges every later step's partial output (forward) and dQ, dK/dV (backward): the merge
    # grows with cp (more steps), and a ring with free, instant transfers still costs it
    from costmodel.llm.cp_comm import ring_merge_seconds

    timer = timer_for(_run().cluster.gpu)
    two, four = _run(cp=2), _run(cp=4)
    assert ring_merge_seconds(two, timer, forward=True) > 0
    # cp - 1 forward merges of the rank's 1/cp share: 1 x 1/2 at cp=2, 3 x 1/4 at cp=4
    assert ring_merge_seconds(four, timer, forward=True) > ring_merge_seconds(two, timer, forward=True)
    assert ring_merge_seconds(two, timer, forward=False) > ring_merge_seconds(two, timer, forward=True)
    assert _exposed(two, raw=False) > 2 * ring_merge_seconds(two, timer, forward=True)


def test_a2a_charges_te_layout_copies_around_each_exchange():
    # with free transfers the Ulysses variant still copies Q, K, V and O into and out of the
    # exchange layout (3 read+write copies each, TE flash_attn_a2a_communicate)
    from costmodel.llm import cp_comm

    run = _run(cp=4, cp_comm_type="a2a", recompute="none")
    timer = timer_for(run.cluster.gpu)
    free = cp_layer_exposed_s(run, timer, lambda op, nbytes: 0.0)
    copies = cp_comm._a2a_layout_seconds(timer, 1e8)
    assert copies > 0
    assert free >= 2 * cp_comm._a2a_layout_seconds(timer, kv_chunk_bytes(run))
