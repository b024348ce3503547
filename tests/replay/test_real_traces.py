"""Replay of real Kineto traces (HolisticTraceAnalysis test data, MIT); skipped when ../shared is absent."""

from pathlib import Path

import pytest

from costmodel.replay.graph import build_graph
from costmodel.replay.parse import read_trace
from costmodel.replay.simulate import simulate

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kineto-traces"
SMALL = TRACES / "amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
NCCL = TRACES / "nccl_parser_config_nccl_data.json.gz"


@pytest.mark.skipif(not SMALL.exists(), reason="../shared/data/kineto-traces absent")
def test_small_mi250_trace_replays_within_3_percent_with_nothing_unplaced():
    graph = build_graph([read_trace(SMALL)])
    iterations = simulate(graph).iterations
    assert [it.name for it in iterations] == ["ProfilerStep#1", "ProfilerStep#2"]
    assert all(abs(it.error) <= 0.03 for it in iterations)
    assert graph.unplaced_gpu_fraction() <= 0.01 and not graph.weakly_placed


@pytest.mark.skipif(not NCCL.exists(), reason="../shared/data/kineto-traces absent")
def test_two_stream_nccl_trace_links_waits_and_replays():
    graph = build_graph([read_trace(NCCL)])
    nccl = [n for n in graph.nodes if n.family == "collective"]
    assert len(nccl) == 21 and any(n.waits for n in nccl)  # compute -> NCCL stream waits were linked
    iterations = simulate(graph).iterations
    assert len(iterations) == 3 and all(abs(it.error) <= 0.03 for it in iterations)
    assert all(it.breakdown_s["exposed_communication"] > 0 for it in iterations)
