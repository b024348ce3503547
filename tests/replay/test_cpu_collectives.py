"""CPU-only traces (costmodel/replay/cpu.py, host.py): gloo worker-thread collectives, ranks per core, buckets."""

import pytest

from costmodel.comm.formulas import bus_factor
from costmodel.replay.cpu import operand_elements
from costmodel.replay.edit import apply_what_if, change_group_size, layer_blocks, parse_what_if, scale_family
from costmodel.replay.graph import build_graph
from costmodel.replay.host import HostProfile, corun_slowdown, scale_gradient_bucket, time_slicing
from costmodel.replay.parse import read_trace
from costmodel.replay.simulate import simulate
from costmodel.specs.errors import SpecError
from tests.replay.synth import write

BUCKET = 1000  # elements of the flat gradient bucket


def _op(name, ts, dur, tid=1, cat="cpu_op", dims=None):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {"Input Dims": dims} if dims is not None else {}}


def _rank_events(compute_us: float, arrive_us: float, transfer_end_us: float, steps: int = 2,
                 late_us: float = 0.0) -> list[dict]:
    """``steps`` steps: compute, a cat into the bucket, c10d::allreduce_ queuing gloo:all_reduce on worker
    thread 2 (from ``arrive_us`` after the issue to the common ``transfer_end_us``, and ``late_us`` beyond it:
    the rank preempted after the data arrived), then the div_ that waited."""
    events, t = [], 0.0
    for step in range(steps):
        begin = t
        events.append(_op("aten::linear", t + 5, compute_us))
        t += 5 + compute_us
        events.append(_op("aten::cat", t + 2, 10, dims=[[[BUCKET // 2], [BUCKET // 2]], []]))
        issue = t + 14
        events.append(_op("c10d::allreduce_", issue, 20, dims=[[BUCKET]]))
        events.append(_op("gloo:all_reduce", issue + arrive_us,
                          begin + transfer_end_us + late_us - issue - arrive_us, tid=2, cat="user_annotation",
                          dims=[[BUCKET]]))
        done = begin + transfer_end_us + late_us
        events.append(_op("aten::div_", done + 3, 7, dims=[[BUCKET], []]))
        t = done + 12
        events.append(_op(f"ProfilerStep#{step + 1}", begin, t - begin, cat="user_annotation"))
        t += 1
    return events


def _graph(tmp_path, ranks, world=2):
    traces = [read_trace(write(tmp_path / f"rank{r}.json", {"traceEvents": events,
                                                             "distributedInfo": {"rank": r, "world_size": world}}))
              for r, events in enumerate(ranks)]
    return build_graph(traces)


def test_the_issuing_thread_waits_for_the_worker_collective(tmp_path):
    """The wait after c10d::allreduce_ is no recorded gap: a collective twice as long delays the step by its
    recorded length, where before the link the main thread kept its recorded gap and the step did not move."""
    graph = _graph(tmp_path, [_rank_events(300.0, 5.0, 600.0)])
    collective = next(n for n in graph.nodes if n.name == "gloo:all_reduce")
    assert graph.nodes[collective.launch].name == "c10d::allreduce_" and not graph.unplaced
    before = simulate(graph).iterations
    assert all(abs(it.error) < 1e-9 for it in before)
    after = simulate(scale_family(graph, "collective", 2.0)).iterations
    recorded = 600.0 - (5 + 300 + 14 + 5)  # the collective's span: issue + arrival to the end
    assert after[0].replayed_s - before[0].replayed_s == pytest.approx(recorded * 1e-6, abs=1e-9)


def test_matched_cpu_ranks_separate_the_wait_from_the_transfer(tmp_path):
    """Rank 1 computes 200 us longer: rank 0's collective is mostly waiting. Matched, the transfer is what
    followed the last arrival, so halving the transfer (network=2) saves half of that, not half of rank 0's span."""
    graph = _graph(tmp_path, [_rank_events(300.0, 5.0, 800.0), _rank_events(500.0, 5.0, 800.0)])
    base = [it for it in simulate(graph).iterations if it.rank == 0]
    assert all(abs(it.error) < 1e-9 for it in base)
    transfer = 800.0 - (5 + 500 + 14 + 5)  # from rank 1's arrival to the common end
    faster = [it for it in simulate(apply_what_if(graph, parse_what_if("network=2"))).iterations if it.rank == 0]
    assert base[0].replayed_s - faster[0].replayed_s == pytest.approx(transfer / 2 * 1e-6, abs=1e-9)


def test_a_rank_late_after_the_transfer_keeps_its_own_delay(tmp_path):
    """Rank 1's collective ends 300 us after rank 0's (preempted once the data had arrived): the replay
    keeps that delay on rank 1 alone (both ranks' steps as recorded, where ending every rank at the first
    end took 300 us off rank 1's step and, through its earlier arrival, off the next steps of a real
    trace), and a faster network halves the transfer, not the delay."""
    graph = _graph(tmp_path, [_rank_events(300.0, 5.0, 800.0, steps=1),
                              _rank_events(500.0, 5.0, 800.0, steps=1, late_us=300.0)])
    base = simulate(graph).iterations
    assert [it.rank for it in base] == [0, 1] and all(abs(it.error) < 1e-9 for it in base), base
    transfer = 800.0 - (5 + 500 + 14 + 5)  # from rank 1's arrival to rank 0's end
    faster = simulate(apply_what_if(graph, parse_what_if("network=2"))).iterations
    assert [b.replayed_s - f.replayed_s for b, f in zip(base, faster)] == pytest.approx([transfer / 2 * 1e-6] * 2,
                                                                                       abs=1e-9)


def test_more_ranks_than_cores_time_slice_every_operator(tmp_path):
    """2 -> 4 ranks on 2 cores: work and gaps x2 (ranks per core), the ring transfer x bus(4)/bus(2) x2."""
    graph = _graph(tmp_path, [_rank_events(300.0, 5.0, 600.0)])
    edited = change_group_size(graph, 2.0, cores=2)
    step = simulate(graph).iterations[0].replayed_s
    collective = next(n.dur for n in graph.nodes if n.name == "gloo:all_reduce") * 1e-6
    ring = bus_factor("all_reduce", 4) / bus_factor("all_reduce", 2)
    expected = 2 * (step - collective) + 2 * ring * collective
    assert simulate(edited).iterations[0].replayed_s == pytest.approx(expected, rel=1e-9)
    same_cores = simulate(change_group_size(graph, 2.0, cores=4)).iterations[0].replayed_s  # one core per rank
    assert same_cores == pytest.approx(step - collective + ring * collective, rel=1e-9)
    assert time_slicing(4, 2) == 2.0 and time_slicing(2, 2) == 1.0 and time_slicing(4, None) == 1.0


def test_one_rank_drops_the_transfer_but_keeps_the_bucket_program(tmp_path):
    """A DDP job on one rank still runs its bucket copies and a 1-rank all-reduce (torch's
    DistributedDataParallel has no world-size-1 path): only the ring transfer goes."""
    graph = _graph(tmp_path, [_rank_events(300.0, 5.0, 600.0)])
    single = change_group_size(graph, 0.5, cores=2)
    gone = {n.name for n in single.nodes if n.kind == "cpu" and n.dur == 0.0}
    assert gone == {"gloo:all_reduce"}
    assert {n.name for n in single.nodes if n.dur > 0} >= {"aten::linear", "aten::cat", "c10d::allreduce_",
                                                           "aten::div_"}
    collective = next(n for n in single.nodes if n.name == "gloo:all_reduce")
    assert collective.latency == pytest.approx(5.0)  # the worker still picks the work up


def test_cores_is_checked_and_feeds_the_dp_edit(tmp_path):
    graph = _graph(tmp_path, [_rank_events(300.0, 5.0, 600.0)])
    with_cores = simulate(apply_what_if(graph, parse_what_if("dp=2x,cores=2"))).iterations[0].replayed_s
    without = simulate(apply_what_if(graph, parse_what_if("dp=2x"))).iterations[0].replayed_s
    assert with_cores > 1.8 * without  # 4 ranks on 2 cores: everything time-sliced
    for bad in ("cores=0", "cores=two", "cores=1.5"):
        with pytest.raises(SpecError, match="cores"):
            parse_what_if(f"dp=2x,{bad}")


def test_operand_elements_counts_a_tensor_list():
    assert operand_elements({"Input Dims": [[[2, 3], [4]], []]}) == 10  # aten::cat of two tensors
    assert operand_elements({"Input Dims": [[8, 16], [16]]}) == 128
    assert operand_elements({}) == 0


def test_layer_blocks_take_every_per_layer_sequence_but_not_a_per_tensor_loop(tmp_path):
    """Forward and backward layers and a per-layer copy loop repeat 3 times; a 2-tensor loop repeats twice."""
    events, t = [], 0.0
    forward = ["aten::layer_norm", "aten::linear", "aten::gelu", "aten::linear"]
    backward = ["AddmmBackward0", "GeluBackward0", "AddmmBackward0", "NativeLayerNormBackward0", "aten::add"]
    per_layer = ["aten::slice", "aten::view_as", "aten::copy_", "aten::slice", "aten::view_as", "aten::copy_"]
    for name in forward * 3 + backward * 3 + ["aten::zeros", "aten::mul", "aten::sum", "aten::mean"] * 2 \
            + per_layer * 3:
        events.append(_op(name, t, 10.0))
        t += 11.0
    events.append(_op("ProfilerStep#1", 0.0, t, cat="user_annotation"))
    graph = _graph(tmp_path, [events], world=1)
    blocks = layer_blocks(graph, 0)
    assert sorted((len(b), len(b[0])) for b in blocks) == [(3, 4), (3, 5), (3, 6)]
    added = simulate(apply_what_if(graph, parse_what_if("layers=+1"))).iterations[0].replayed_s
    assert added - simulate(graph).iterations[0].replayed_s == pytest.approx((4 + 5 + 6) * 11e-6, abs=1e-9)


def test_one_rank_no_longer_waits_for_a_slower_peer(tmp_path):
    """Rank 1 computes 200 us longer; on one rank rank 0's step is its own program: linear, the bucket's cat,
    the c10d call queuing a transfer-free collective, the wake-up and div_ after it, gaps and markers."""
    graph = _graph(tmp_path, [_rank_events(300.0, 5.0, 800.0), _rank_events(500.0, 5.0, 800.0)])
    single = [it for it in simulate(change_group_size(graph, 0.5, cores=2)).iterations if it.rank == 0]
    issue = 5 + 300 + 2 + 10 + 2  # gap, linear, gap, cat, gap: c10d::allreduce_ starts
    own = issue + max(20, 5) + 3 + 7 + 2  # the call (the worker's 5 us pickup ends inside it), wake-up, div_, end
    assert single[0].replayed_s == pytest.approx(own * 1e-6, abs=1e-9)


def test_corun_slowdown_follows_the_busy_cores():
    assert corun_slowdown(1, 2, 1.2) == 1.0 and corun_slowdown(2, 2, 1.2) == pytest.approx(1.2)
    assert corun_slowdown(4, 2, 1.2) == pytest.approx(1.2)  # more ranks than cores: all busy, no more
    assert corun_slowdown(3, 5, 1.2) == pytest.approx(1.1)  # between one and all busy: linear in the count
    assert corun_slowdown(2, 2, None) == 1.0 and corun_slowdown(2, None, 1.2) == 1.0  # unmeasured: none


def test_dp_edit_applies_the_measured_corun_slowdown_as_busy_cores_change(tmp_path):
    """2 -> 1 rank on 2 cores: the rank's work runs alone, 1/corun as long; 2 -> 4: both cores stay busy,
    only the time slicing changes; without a measured figure nothing is applied and the notes say so."""
    graph = _graph(tmp_path, [_rank_events(300.0, 5.0, 600.0)])
    plain = simulate(change_group_size(graph, 0.5, cores=2)).iterations[0].replayed_s
    alone = change_group_size(graph, 0.5, cores=2, corun=1.25)
    assert simulate(alone).iterations[0].replayed_s == pytest.approx(plain / 1.25, rel=1e-9)
    assert "measured co-running slowdown 1.25" in alone.notes[-1]
    assert "not measured" in change_group_size(graph, 0.5, cores=2).notes[-1]
    four = simulate(change_group_size(graph, 2.0, cores=2)).iterations[0].replayed_s
    assert simulate(change_group_size(graph, 2.0, cores=2, corun=1.25)).iterations[0].replayed_s == \
        pytest.approx(four, rel=1e-9)
    via_cli = simulate(apply_what_if(graph, parse_what_if("dp=0.5x,cores=2,corun=1.25"))).iterations[0].replayed_s
    assert via_cli == pytest.approx(plain / 1.25, rel=1e-9)
    for bad in ("corun=0", "corun=fast", "corun=nan", "corun=11"):
        with pytest.raises(SpecError, match="corun"):
            parse_what_if(f"dp=0.5x,{bad}")


def test_host_profile_round_trips_and_rejects_what_it_is_not(tmp_path):
    path = tmp_path / "host.json"
    HostProfile(cores=2, corun_slowdown=1.13, corun_source="measured here").write(path)
    host = HostProfile.read(path)
    assert (host.cores, host.corun_slowdown, host.what_if()) == (2, 1.13, "cores=2,corun=1.1300")
    assert HostProfile(cores=2).what_if() == "cores=2"  # unmeasured: no corun item
    for text, field in (('{"cores": 0}', "cores"), ('{"cores": 2, "corun_slowdown": "x"}', "corun_slowdown"),
                        ('{"cores": 2, "corun_slowdown": 1e9}', "corun_slowdown"), ("[1]", "host.json"),
                        ("{not json", "host.json"), ('{"cores": 2, "extra": 1}', "key")):
        path.write_text(text)
        with pytest.raises(SpecError, match=field):
            HostProfile.read(path)


def test_bucket_scaling_grows_own_time_but_not_the_wake_up_the_queuing_call_or_views(tmp_path):
    """x2 parameters: cat and the collective x2, the div_ that waited grows by its own 7 us (its 3 us wake-up
    stays), the c10d:: call that only queued the work and a slice (a view) of the bucket stay."""
    events = _rank_events(300.0, 5.0, 600.0, steps=1)
    events.append(_op("aten::slice", 598.0, 1.0, dims=[[BUCKET], [], [], [], []]))
    graph = _graph(tmp_path, [events], world=1)
    before = {n.name: (n.dur, n.tail) for n in graph.nodes if n.kind == "cpu"}
    scale_gradient_bucket(graph, 0, 2.0)
    after = {n.name: (n.dur, n.tail) for n in graph.nodes if n.kind == "cpu"}
    assert after["aten::cat"][0] == 2 * before["aten::cat"][0]
    assert after["gloo:all_reduce"][0] == pytest.approx(2 * before["gloo:all_reduce"][0])
    assert before["aten::div_"] == (7.0, pytest.approx(10.0)) and after["aten::div_"] == (14.0, pytest.approx(17.0))
    assert after["c10d::allreduce_"] == before["c10d::allreduce_"] and after["aten::slice"] == before["aten::slice"]


def test_a_waiter_keeps_its_gap_when_the_collective_ended_before_the_issuing_call_returned(tmp_path):
    """c10d::allreduce_ runs 100 us, past the 30 us collective it queued: the 8 us before div_ held no wait.
    The replay is exact, and a collective that ends later than the call now delays div_ from its end."""
    events = [_op("aten::linear", 5.0, 300.0), _op("c10d::allreduce_", 310.0, 100.0, dims=[[BUCKET]]),
              _op("gloo:all_reduce", 350.0, 30.0, tid=2, cat="user_annotation", dims=[[BUCKET]]),
              _op("aten::div_", 418.0, 7.0, dims=[[BUCKET], []]),
              _op("ProfilerStep#1", 0.0, 430.0, cat="user_annotation")]
    graph = _graph(tmp_path, [events], world=1)
    div = next(n for n in graph.nodes if n.name == "aten::div_")
    assert (div.gap, div.tail) == (pytest.approx(8.0), pytest.approx(7.0)) and div.waits
    assert abs(simulate(graph).iterations[0].error) < 1e-9
    longer = simulate(scale_family(graph, "collective", 3.0)).iterations[0].replayed_s  # ends at 350 + 90 = 440
    assert longer == pytest.approx((440 + 7 + 5) * 1e-6)  # div_ right after it, then the 5 us to the step's end
