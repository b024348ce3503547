"""The layer edit scales an optimizer step's loop over its tensors, not the step's fixed time around it."""

import pytest

from costmodel.replay.edit import apply_what_if, parse_what_if
from costmodel.replay.graph import build_graph
from costmodel.replay.parse import read_trace
from costmodel.replay.simulate import simulate
from tests.replay.synth import write

FORWARD = (("aten::layer_norm", 30.0), ("aten::linear", 150.0), ("aten::gelu", 60.0), ("aten::linear", 140.0),
           ("aten::add", 10.0))
BACKWARD = (("autograd::engine::evaluate_function: AddmmBackward0", 300.0),
            ("autograd::engine::evaluate_function: GeluBackward0", 70.0),
            ("autograd::engine::evaluate_function: AddmmBackward0", 290.0),
            ("autograd::engine::evaluate_function: NativeLayerNormBackward0", 50.0))
PARAMS_PER_LAYER, ADD_US, LOOP_GAP_US = 4, 3.0, 2.0
HEAD_US, TAIL_US = 150.0, 50.0  # the optimizer step's own time before its first and after its last add_


def cpu_trace(layers: int, steps: int = 3) -> dict[str, object]:
    """A CPU-only training step: per layer a forward and a backward block, then ``Optimizer.step#SGD.step``
    (a fixed head and tail around one ``aten::add_`` per parameter); 1 us between outermost operators."""
    events: list[dict[str, object]] = []
    t = 100.0

    def op(name: str, dur: float, cat: str = "cpu_op") -> float:
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": t, "dur": dur, "args": {}})
        return t + dur + 1.0

    for step in range(steps):
        begin = t
        for _ in range(layers):
            for name, dur in FORWARD:
                t = op(name, dur)
        t = op("aten::mean", 20.0)  # the loss: once per step
        for _ in range(layers):
            for name, dur in BACKWARD:
                t = op(name, dur)
        params = layers * PARAMS_PER_LAYER
        loop = params * ADD_US + (params - 1) * LOOP_GAP_US
        start, t = t, t + HEAD_US
        for _ in range(params):
            t = op("aten::add_", ADD_US) + LOOP_GAP_US - 1.0
        t = start
        t = op("Optimizer.step#SGD.step", HEAD_US + loop + TAIL_US, "user_annotation")
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": begin - 0.5, "dur": t - begin + 0.5, "args": {}})
        t += 5.0
    return {"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 1}}


def _graph(tmp_path, layers):
    return build_graph([read_trace(write(tmp_path / f"L{layers}.json", cpu_trace(layers)))])


def _steps(graph, measured=False):
    return [it.measured_s if measured else it.replayed_s for it in simulate(graph).iterations]


def test_optimizer_step_node_holds_its_loop_over_tensors(tmp_path):
    step = next(n for n in _graph(tmp_path, 2).nodes if n.name.startswith("Optimizer.step"))
    params = 2 * PARAMS_PER_LAYER
    assert step.nested == pytest.approx(params * ADD_US + (params - 1) * LOOP_GAP_US)
    assert step.dur == pytest.approx(step.nested + HEAD_US + TAIL_US)


@pytest.mark.parametrize(("layers", "delta"), [(2, 2), (4, -2), (2, 6)])
def test_layer_edit_matches_a_trace_with_that_many_layers_optimizer_included(tmp_path, layers, delta):
    predicted = _steps(apply_what_if(_graph(tmp_path, layers), parse_what_if(f"layers={delta:+d}")))
    measured = _steps(_graph(tmp_path, layers + delta), measured=True)
    # Exact up to the inter-tensor gaps: n tensors have n-1 gaps, the edit scales the loop's span by the ratio
    assert predicted == pytest.approx(measured, abs=abs(delta) * LOOP_GAP_US * 1e-6)


def test_without_the_loop_span_the_fixed_time_would_scale_as_if_per_layer(tmp_path):
    """An Optimizer.step with no nested span (as before the span was read) scales whole: from 4 layers to 2
    its head and tail are halved too, (HEAD_US + TAIL_US) / 2 under the 2-layer trace's step."""
    graph = _graph(tmp_path, 4)
    for node in graph.nodes:
        node.nested = 0.0
    whole = _steps(apply_what_if(graph, parse_what_if("layers=-2")))
    measured = _steps(_graph(tmp_path, 2), measured=True)
    assert [m - w for w, m in zip(whole, measured)] == pytest.approx([0.5 * (HEAD_US + TAIL_US) * 1e-6] * 3,
                                                                      abs=LOOP_GAP_US * 1e-6)
