"""Monotonicity of per-stage memory in the pipeline layout (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from constraints.memory import stage_memory
from costmodel.specs import ClusterSpec, RunSpec, Strategy, get_gpu, get_model

MODELS = ["llama3.1-8b", "mixtral-8x7b", "megatron-22b"]


def _run(model: str, counts: list[int], tp: int, recompute: str, zero: int) -> RunSpec:
    """One rank per entry of ``counts``, spelled as a Megatron-Core layout string."""
    layout = "|".join(("E" if i == 0 else "") + "t" * n + ("L" if i == len(counts) - 1 else "")
                      for i, n in enumerate(counts))
    pp = len(counts)
    strategy = Strategy(tp=tp, pp=pp, dp=2, micro_batch_size=1, global_batch_size=16, recompute=recompute,
                        zero_stage=zero, pipeline_layout=layout)
    cluster = ClusterSpec(gpu=get_gpu("h100-sxm5-80gb"), num_gpus=tp * pp * 2, gpus_per_node=tp * pp * 2)
    return RunSpec(model=get_model(model), cluster=cluster, strategy=strategy, seq_length=2048)


@st.composite
def _layouts(draw: st.DrawFn) -> tuple[str, list[int], int]:
    model = draw(st.sampled_from(MODELS))
    layers = get_model(model).num_layers
    pp = draw(st.integers(2, 8))
    cuts = sorted(draw(st.lists(st.integers(0, layers), min_size=pp - 1, max_size=pp - 1)))
    counts = [b - a for a, b in zip([0, *cuts], [*cuts, layers])]
    return model, counts, draw(st.integers(0, pp - 1))


@settings(max_examples=60, deadline=None)
@given(_layouts(), st.sampled_from([1, 2, 4]), st.sampled_from(["none", "selective", "full"]),
       st.sampled_from([0, 1, 3]))
def test_moving_a_layer_off_the_heaviest_stage_never_raises_its_memory(
        drawn: tuple[str, list[int], int], tp: int, recompute: str, zero: int) -> None:
    model, counts, target = drawn
    run = _run(model, counts, tp, recompute, zero)
    totals = [stage_memory(run, s).total_bytes for s in range(len(counts))]
    heaviest = max(range(len(counts)), key=totals.__getitem__)
    if counts[heaviest] == 0 or target == heaviest:
        return
    moved = list(counts)
    moved[heaviest] -= 1
    moved[target] += 1
    after = stage_memory(_run(model, moved, tp, recompute, zero), heaviest).total_bytes
    assert after <= totals[heaviest] * (1 + 1e-12)
    assert stage_memory(_run(model, moved, tp, recompute, zero), target).total_bytes >= \
        stage_memory(run, target).total_bytes * (1 - 1e-12)
