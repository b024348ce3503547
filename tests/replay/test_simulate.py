import pytest

from costmodel.replay.graph import build_graph
from costmodel.replay.parse import read_trace
from costmodel.replay.simulate import simulate
from tests.replay.synth import synthetic_trace, write


def _graph(tmp_path, **kw):
    return build_graph([read_trace(write(tmp_path / "t.json", synthetic_trace(**kw)))])


def test_unedited_replay_reproduces_each_iteration(tmp_path):
    replay = simulate(_graph(tmp_path, allreduce_us=50.0))
    assert len(replay.iterations) == 2
    for it in replay.iterations:
        assert it.replayed_s == pytest.approx(it.measured_s, rel=1e-6)


def test_sync_waits_for_the_gpu_and_every_kernel_is_placed(tmp_path):
    graph = _graph(tmp_path)
    sync = next(n for n in graph.nodes if n.name == "cudaDeviceSynchronize")
    assert sync.waits and graph.nodes[sync.waits[0]].name == "vectorized_elementwise_kernel"
    assert not graph.unplaced and graph.unplaced_gpu_fraction() == 0.0


def test_breakdown_of_a_gpu_bound_step(tmp_path):
    it = simulate(_graph(tmp_path, layers=4)).iterations[0]
    assert it.breakdown_s["compute"] == pytest.approx(4 * 260e-6, rel=1e-6)  # 4 layers of 260 us of kernels
    assert it.breakdown_s["exposed_communication"] == 0.0
    assert sum(it.breakdown_s.values()) == pytest.approx(it.replayed_s, rel=1e-6)
    assert it.critical_path_s.get("gemm", 0.0) == pytest.approx(4 * 180e-6, rel=1e-6)
