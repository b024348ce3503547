"""Layers per pipeline rank: even splits, and Megatron-Core's first/last-stage uneven split."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from constraints import check
from constraints.memory import peak_stage_memory, stage_memory
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model
from costmodel.specs.strategy import pipeline_layers
from search.space import SearchProblem, legal_pp


def test_llama3_405b_on_16_stages_drops_a_layer_at_each_end():
    assert pipeline_layers(126, 16) == (7,) + (8,) * 14 + (7,)


def test_even_splits_and_interleaving():
    assert pipeline_layers(32, 4) == (8, 8, 8, 8)
    assert pipeline_layers(32, 4, vpp=2) == (8, 8, 8, 8)
    assert pipeline_layers(30, 4, vpp=2) is None  # interleaving needs an even split
    assert pipeline_layers(3, 4) is None  # more stages than layers
    assert pipeline_layers(7, 6) is None  # the ends would hold no layer


@given(layers=st.integers(1, 200), pp=st.integers(1, 64))
def test_uneven_split_keeps_every_layer_and_equal_middle_stages(layers, pp):
    split = pipeline_layers(layers, pp)
    if split is None:
        return
    assert len(split) == pp and sum(split) == layers and min(split) >= 1
    middle = split[1:-1]
    assert len(set(middle)) <= 1
    if middle:  # the ends give up the shortfall against ceil(layers / pp), the last one more
        shortfall = middle[0] * pp - layers
        assert middle[0] == -(-layers // pp)
        assert (middle[0] - split[0], middle[0] - split[-1]) == (shortfall // 2, (shortfall + 1) // 2)


def _405b(pp: int = 16) -> RunSpec:
    strategy = Strategy(tp=8, pp=pp, dp=1, micro_batch_size=1, global_batch_size=32, recompute="full")
    cluster = ClusterSpec(gpu=get_gpu("h100-sxm5-80gb"), num_gpus=8 * pp, gpus_per_node=8)
    return RunSpec(model=get_model("llama3.1-405b"), cluster=cluster, strategy=strategy, seq_length=8192)


def test_405b_on_16_stages_is_legal_and_its_peak_is_a_full_middle_stage():
    run = _405b()
    assert not any("num_layers" in v for v in check(run).violations)
    peak = peak_stage_memory(run)
    # stage 1 holds 8 layers x 15 in-flight micro-batches, stage 0 7 x 16 (plus embeddings)
    assert peak.total_bytes >= stage_memory(run, 1).total_bytes
    assert stage_memory(run, 1).layer_activation_bytes > stage_memory(run, 0).layer_activation_bytes


def test_search_offers_power_of_two_stages_for_126_layers():
    problem = SearchProblem(model=get_model("llama3.1-405b"), gpu=get_gpu("h100-sxm5-80gb"), num_gpus=2048,
                            global_batch_size=2048, seq_length=8192)
    assert legal_pp(problem, 8, 1) == [1, 2, 4, 8, 16, 32, 64]


def test_predict_reports_the_layers_of_each_stage():
    from costmodel.predict import predict_run
    from costmodel.timing import OperatorTimer

    run = _405b()
    out = predict_run(run, None, timer=OperatorTimer(run.cluster.gpu, None))
    assert out["pipeline_layers"] == [7] + [8] * 14 + [7]
