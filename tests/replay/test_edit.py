import pytest

from costmodel.replay import edit
from costmodel.replay.graph import build_graph
from costmodel.replay.parse import read_trace
from costmodel.replay.simulate import simulate
from costmodel.specs.errors import SpecError
from tests.replay.synth import synthetic_trace, write


def _graph(tmp_path, name="t.json", **kw):
    return build_graph([read_trace(write(tmp_path / name, synthetic_trace(**kw)))])


def _times(graph):
    return [it.replayed_s for it in simulate(graph).iterations]


def test_halving_gemms_matches_a_trace_recorded_with_halved_gemms(tmp_path):
    predicted = _times(edit.scale_family(_graph(tmp_path), "gemm", 0.5))
    measured = [it.measured_s for it in simulate(_graph(tmp_path, "h.json", gemm_scale=0.5)).iterations]
    assert predicted == pytest.approx(measured, rel=0.02)


@pytest.mark.parametrize("delta", [2, -1])
def test_layer_edit_matches_a_trace_with_that_many_layers(tmp_path, delta):
    predicted = _times(edit.change_layers(_graph(tmp_path, layers=4), delta))
    measured = [it.measured_s for it in simulate(_graph(tmp_path, "m.json", layers=4 + delta)).iterations]
    assert predicted == pytest.approx(measured, rel=0.05)


def test_layer_blocks_find_the_repeated_layer(tmp_path):
    blocks = edit.layer_blocks(_graph(tmp_path, layers=5), 0)
    assert len(blocks[0]) == 5 and len(blocks[0][0]) == 4


def test_dp_doubling_scales_all_reduce_by_the_bus_factor(tmp_path):
    graph = _graph(tmp_path, allreduce_us=100.0)
    wider = edit.change_group_size(graph, 2.0)
    before = [n.dur for n in graph.nodes if n.family == "collective"]
    after = [n.dur for n in wider.nodes if n.family == "collective"]
    assert after == pytest.approx([d * 1.5 for d in before])  # 2(n-1)/n: 1.5 on 4 ranks over 1.0 on 2
    assert [n.dur for n in graph.nodes if n.family == "gemm"] == [n.dur for n in wider.nodes if n.family == "gemm"]


def test_removing_syncs_cannot_slow_a_step(tmp_path):
    graph = _graph(tmp_path, allreduce_us=300.0)
    assert all(a <= b + 1e-12 for a, b in zip(_times(edit.remove_syncs(graph)), _times(graph)))


def test_what_if_spec_is_checked():
    assert edit.parse_what_if("gemm=0.5, network=2,layers=+8,dp=2x") == [
        ("gemm", "0.5"), ("network", "2"), ("layers", "+8"), ("dp", "2x")]
    for bad, field in (("tpu=2", "what-if"), ("gpu=h900", "what-if gpu"), ("gemm=0", "what-if gemm"),
                       ("layers=8", "what-if layers"), ("dp=nanx", "what-if dp"), ("sync=maybe", "what-if sync"),
                       ("gemm", "what-if")):
        with pytest.raises(SpecError) as info:
            edit.parse_what_if(bad)
        assert info.value.field == field


def test_removing_more_layers_than_recorded_is_refused(tmp_path):
    with pytest.raises(SpecError, match="layers"):
        edit.change_layers(_graph(tmp_path, layers=3), -3)
