"""Reduced what-if miniature (benchmarks/replay_miniatures.py): CPU traces recorded here, one rank, 2 and 4 layers."""

import sys
from pathlib import Path

import pytest

from costmodel.replay.edit import apply_what_if, change_group_size, fastest_steps, layer_blocks, parse_what_if
from costmodel.replay.graph import build_graph
from costmodel.replay.parse import read_trace
from costmodel.replay.simulate import simulate
from tests.replay.synth import write

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _replay_miniature import Config, measure_corun, record_config  # noqa: E402


def _free_port():
    import socket

    with socket.socket() as probe:  # a free port: other runs of the benchmark use 29611 and up
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    out = {}
    for layers in (2, 4):
        folder = tmp_path_factory.mktemp(f"L{layers}")
        window, = record_config(Config(layers, 1, 2), folder, _free_port(), windows=1, cycle_s=0.0)
        out[layers] = build_graph([read_trace(window / "rank0.json")])
    return out


def test_one_rank_runs_the_bucket_program_of_many(graphs):
    """World 1 runs the bucket path of world > 1 (a DDP job at world 1 keeps its reducer): the cat into the
    bucket, a 1-rank gloo all-reduce issued by c10d::allreduce_, the division and the per-layer copy-back."""
    graph = graphs[2]
    collectives = [n for n in graph.nodes if n.name == "gloo:all_reduce"]
    assert len(collectives) >= 4 and not graph.unplaced
    assert all(graph.nodes[n.launch].name == "c10d::allreduce_" for n in collectives)
    names = {n.name for n in graph.nodes if n.kind == "cpu"}
    assert {"aten::cat", "aten::div_", "aten::copy_"} <= names


def _fastest(graph, measured=False):
    return min(it.measured_s if measured else it.replayed_s for it in simulate(graph).iterations)


def test_cpu_trace_operators_are_the_work_and_replay_exactly(graphs):
    graph = graphs[2]
    work = [n for n in graph.nodes if n.kind == "cpu"]
    assert {"gemm", "attention", "elementwise"} <= {n.family for n in work}
    iterations = simulate(graph).iterations
    assert len(iterations) >= 4 and all(abs(it.error) < 1e-6 for it in iterations)


def test_layer_edit_adds_the_typical_layer_to_each_recorded_step(graphs):
    """+2 layers: every step grows by two copies of the median-time repeat of each per-layer block (forward,
    backward, the bucket's reshape and copy-back loops; gaps included), its optimizer step's loop over the
    tensors and zero_grad (per-parameter work) by 4/2, and the bucket's cat, division and all-reduce by 4/2 (the all-reduce on a
    worker thread may hide behind the issuing call: between the bounds; the wake-up after it does not grow)."""
    graph = graphs[2]
    edited = simulate(apply_what_if(graph, parse_what_if("layers=+2"))).iterations
    for index, (before, after) in enumerate(zip(simulate(graph).iterations, edited)):
        blocks = layer_blocks(graph, index)
        assert len(blocks) == 4 and all(len(repeats) == 2 for repeats in blocks)
        typical = sum(_span_time(graph, sorted(repeats, key=lambda r: _work(graph, r))[0]) for repeats in blocks)
        step = graph.steps[index]
        inside = [n for n in graph.nodes if n.kind == "cpu"
                  and graph.nodes[step.begin].start <= n.start < graph.nodes[step.end].start]
        optimizer = sum(n.nested or n.dur for n in inside if n.name.startswith("Optimizer."))
        assert any(0 < n.nested < n.dur for n in inside if n.name.startswith("Optimizer.step"))  # its loop
        bucket = next(n.elements for n in inside if n.name == "gloo:all_reduce")
        cat = sum(n.dur for n in inside if n.name == "aten::cat" and n.elements == bucket)
        div = sum(n.dur for n in inside if n.name == "aten::div_" and n.elements == bucket)
        collective = sum(n.dur for n in inside if n.name == "gloo:all_reduce")
        assert optimizer > 0 and cat > 0 and div > 0
        lower = 2 * typical + optimizer + cat + div
        grown = (after.replayed_s - before.replayed_s) * 1e6
        # 0.1 us: the trace's timestamps are ~5e12 us, where a float's resolution is ~1e-3 us per operation
        assert lower - 0.1 <= grown <= lower + collective + 0.1, (grown, lower, collective)


def test_fastest_steps_take_each_operator_at_its_fastest(graphs):
    graph = graphs[4]
    fast = simulate(fastest_steps(graph)).iterations
    times = [it.replayed_s for it in fast]
    assert max(times) - min(times) < 1e-7  # one sequence: one time (to the float resolution of ~5e12 us stamps)
    assert max(times) <= min(it.replayed_s for it in simulate(graph).iterations) + 1e-7  # no step is faster


def test_layer_edits_move_towards_the_measured_other_layer_count(graphs):
    # Accuracy against the measured traces is benchmarks/replay_miniatures.py's (on a shared, loaded 2-core
    # machine a step's time varies 2-3x from preemption); here only the direction, which noise cannot flip.
    assert _fastest(apply_what_if(graphs[2], parse_what_if("layers=+2"))) > _fastest(graphs[2])
    assert _fastest(apply_what_if(graphs[4], parse_what_if("layers=-2"))) < _fastest(graphs[4])


def _work(graph, nodes):
    return sum(graph.nodes[i].dur for i in nodes)


def _span_time(graph, nodes):
    """Microseconds from the end of the node before the repeat to the end of its last node (its gaps too)."""
    lane = graph.lanes[graph.nodes[nodes[0]].lane]
    first, last = lane.index(nodes[0]), lane.index(nodes[-1])
    return sum(graph.nodes[i].dur + graph.nodes[i].gap for i in lane[first:last + 1])


def test_gloo_collective_of_a_cpu_trace_is_retimed_by_the_dp_edit(tmp_path):
    """A CPU trace's gloo:all_reduce span is a collective node that dp=2x scales by the bus factor."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0,
               "dur": 400.0, "args": {}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 10.0, "dur": 200.0,
               "args": {}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20.0, "dur": 150.0,
               "args": {}},
              {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 1, "ts": 220.0,
               "dur": 100.0, "args": {}}]
    graph = build_graph([read_trace(write(tmp_path / "cpu.json", {
        "traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 2}}))])
    assert [(n.name, n.family) for n in graph.nodes if n.kind == "cpu"] == [
        ("aten::linear", "gemm"), ("gloo:all_reduce", "collective")]  # aten::mm is inside aten::linear
    wider = simulate(change_group_size(graph, 2.0)).iterations[0]
    assert wider.replayed_s == pytest.approx(400e-6 + 50e-6)  # all_reduce 2(n-1)/n: 1.0 -> 1.5 on 2 -> 4 ranks


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """L2, 2 gloo ranks, both ranks' traces (the CI size of the benchmark's DP pairs)."""
    folder = tmp_path_factory.mktemp("L2-dp2")
    window, = record_config(Config(2, 2, 2), folder, _free_port(), windows=1, cycle_s=0.0)
    return build_graph([read_trace(window / f"rank{r}.json") for r in range(2)])


def test_gloo_ranks_are_linked_matched_and_replayed(two_ranks):
    """The worker-thread gloo:all_reduce of each step is issued by c10d::allreduce_ and waited for by the main
    thread; matched across the two ranks it lasts its transfer, and each rank then its own time after the
    first end (a rank preempted once the data had arrived), so the replay gives every step of both ranks
    as measured, however loaded the host was (1e-6: the float resolution of ~5e12 us stamps over a step)."""
    graph = two_ranks
    collectives = [n for n in graph.nodes if n.name == "gloo:all_reduce"]
    assert collectives and not graph.unplaced
    assert all(graph.nodes[n.launch].name == "c10d::allreduce_" for n in collectives)
    steps = simulate(graph).iterations
    assert len(steps) >= 8 and {it.rank for it in steps} == {0, 1}
    assert max(abs(it.error) for it in steps) < 1e-6, [f"{it.rank} {it.error:+.2e}" for it in steps]


def _window(graph):
    """Rank 0's replayed steps summed: one step's matched transfer can be near zero (a peer preempted at the
    wrong moment), so an ordering of single fastest steps is noise; over the window every edit shows."""
    return sum(it.replayed_s for it in simulate(graph).iterations if it.rank == 0)


def test_dp_edits_of_a_gloo_trace_move_the_step_the_physical_way(two_ranks):
    base = _window(two_ranks)
    one = _window(apply_what_if(two_ranks, parse_what_if("dp=0.5x,cores=2")))
    four = _window(apply_what_if(two_ranks, parse_what_if("dp=2x,cores=2")))
    four_cores = _window(apply_what_if(two_ranks, parse_what_if("dp=2x,cores=4")))
    seen = f"one {one:.6f} base {base:.6f} four on 4 cores {four_cores:.6f} four on 2 {four:.6f}; {two_ranks.unplaced}"
    assert one < base < four_cores < four, seen  # no sync < 2 ranks < 4 ranks on own cores < 4 ranks on 2 cores
    assert four > 1.9 * one, seen  # 4 ranks on 2 cores: at least the work, time-sliced twice


def test_corun_measurement_times_the_step_alone_and_on_every_core():
    """The host figure is a ratio of two measured medians, or none when the host was not quiet (its value
    is the host's; here only that it is one, and that the line says what was timed and under what load)."""
    ratio, source = measure_corun(2, steps=3)
    assert (ratio is None and "not quiet" in source) or 0.1 < ratio < 10.0
    assert "2 processes at once" in source and "alone" in source and "load" in source
