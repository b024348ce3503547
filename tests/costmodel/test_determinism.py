"""Predictions do not depend on what the same timer timed before (issue 12, item 5)."""

from __future__ import annotations

from typing import Any

from costmodel.llm.decompose import layer_ops
from costmodel.predict import predict_run, timer_for
from costmodel.specs import get_gpu
from costmodel.specs.runspec import run_spec_from_mapping
from costmodel.timing import OperatorTimer
from search import Evaluator, SearchProblem, build_space

H100 = "h100-sxm5-80gb"


def _moe_model(hidden: int, moe_ffn: int) -> dict[str, Any]:
    return {"name": f"moe-{hidden}-{moe_ffn}", "num_layers": 4, "hidden_size": hidden, "num_attention_heads": 24,
            "num_query_groups": 8, "ffn_hidden_size": 4 * hidden, "vocab_size": 32000, "seq_length": 4096,
            "head_dim": 128, "activation": "swiglu", "normalization": "rmsnorm", "position_embedding": "rope",
            "num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": moe_ffn}


def _run(model: Any, num_gpus: int = 8, **strategy: Any) -> Any:
    return run_spec_from_mapping({"model": model, "seq_length": 4096,
                                  "cluster": {"gpu": H100, "num_gpus": num_gpus},
                                  "strategy": {"micro_batch_size": 1, "global_batch_size": 64, **strategy}})


# A: h = 3072 with 2048-wide experts, so its moe.permute and moe.experts.swiglu forward kernels move
# the same bytes (4 x routed x h = 6 x routed x ffn). B: its swiglu moves the bytes of A's permute.
RUN_A = _run(_moe_model(3072, 2048))
RUN_B = _run(_moe_model(4096, 2048))
DENSE = _run("llama3.1-8b", tp=2)


def _fresh_timer() -> OperatorTimer:
    shared = timer_for(get_gpu(H100))
    return OperatorTimer(shared.gpu, shared.predictors, reference=shared.reference)


def test_permute_and_expert_activation_get_distinct_memo_keys() -> None:
    ops = {op.name: op for op in layer_ops(RUN_A.model, RUN_A.strategy, RUN_A.seq_length, moe=True)}
    permute, swiglu = ops["moe.permute.fwd"], ops["moe.experts.swiglu.fwd"]
    assert permute.bytes == swiglu.bytes  # the collision the old name-prefix key had
    assert OperatorTimer._key(permute) != OperatorTimer._key(swiglu)


def test_gather_and_activation_of_equal_bytes_are_timed_by_their_own_fits() -> None:
    ops = {op.name: op for op in layer_ops(RUN_A.model, RUN_A.strategy, RUN_A.seq_length, moe=True)}
    timer = OperatorTimer(get_gpu(H100), None)
    timed = timer.time_ops([ops["moe.permute.fwd"], ops["moe.experts.swiglu.fwd"]])
    assert timed.seconds[0] != timed.seconds[1]


def test_prediction_is_the_same_after_timing_other_runs() -> None:
    fresh = predict_run(RUN_A, timer=_fresh_timer())
    shared = _fresh_timer()
    first = predict_run(RUN_A, timer=shared)
    predict_run(RUN_B, timer=shared)  # another MoE run
    predict_run(DENSE, timer=shared)  # and a dense one
    assert predict_run(RUN_A, timer=shared) == first == fresh


def test_prediction_does_not_depend_on_what_was_timed_first() -> None:
    fresh = predict_run(RUN_A, timer=_fresh_timer())
    shared = _fresh_timer()
    predict_run(RUN_B, timer=shared)
    predict_run(DENSE, timer=shared)
    assert predict_run(RUN_A, timer=shared) == fresh


def test_prediction_is_the_same_after_a_search_on_the_same_timer() -> None:
    fresh = predict_run(RUN_A, timer=_fresh_timer())
    shared = _fresh_timer()
    for model in (RUN_B.model, DENSE.model):  # a MoE search and a dense search
        problem = SearchProblem(model=model, gpu=get_gpu(H100), num_gpus=8, global_batch_size=64,
                                seq_length=4096, fixed=(("pp", 1), ("cp", 1), ("vpp", 1)))
        every = list(build_space(problem))
        strategies = every[::max(1, len(every) // 40)]
        assert strategies
        Evaluator(problem, timer=shared).evaluate_many(strategies)
    assert predict_run(RUN_A, timer=shared) == fresh
