"""The memos a step-time prediction leans on (costmodel.run_memo, costmodel.specs.hashing, placement tables):
each gives what the unmemoised function gives, and forgets what it must."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from costmodel.comm import group_placement, pipeline_placements
from costmodel.run_memo import by_reads, for_last_run
from costmodel.specs import ClusterSpec, Strategy, get_gpu, get_model
from costmodel.specs.reads import reads
from costmodel.specs.runspec import RunSpec

ROOT = Path(__file__).resolve().parents[2]


def _run(**strategy: int) -> RunSpec:
    gpu = get_gpu("h100-sxm5-80gb")
    s = Strategy(**strategy)
    return RunSpec(model=get_model("llama3.1-8b"), cluster=ClusterSpec(gpu=gpu, num_gpus=s.tp * s.pp * s.dp * s.cp,
                                                                       gpus_per_node=8),
                   strategy=s, seq_length=4096)


def test_for_last_run_answers_per_run_and_argument() -> None:
    calls: list[tuple[int, int]] = []

    @for_last_run
    def tp_times(run: RunSpec, k: int) -> int:
        calls.append((run.strategy.tp, k))
        return run.strategy.tp * k

    a, b = _run(tp=2, dp=4), _run(tp=4, dp=2)
    assert [tp_times(a, 3), tp_times(a, 3), tp_times(a, 5)] == [6, 6, 10]
    assert tp_times(b, 3) == 12  # another run object: computed afresh
    assert tp_times(a, 3) == 6
    assert calls == [(2, 3), (2, 5), (4, 3), (2, 3)]


def test_by_reads_shares_only_between_strategies_with_the_declared_fields_alike() -> None:
    calls: list[int] = []

    @by_reads
    @reads("tp")
    def tp_twice(run: RunSpec) -> int:
        calls.append(run.strategy.tp)
        return 2 * run.strategy.tp

    base = _run(tp=2, dp=4)
    same_tp = base.with_strategy(replace(base.strategy, zero_stage=3))
    other_tp = base.with_strategy(Strategy(tp=4, dp=2))
    assert [tp_twice(base), tp_twice(same_tp), tp_twice(other_tp)] == [4, 4, 8]
    assert calls == [2, 4]
    # another model (a different object) is another problem: nothing carried over
    other_model = replace(base, model=get_model("llama3.1-70b"))
    assert tp_twice(other_model) == 4 and calls == [2, 4, 2]


def test_pipeline_placements_equal_group_placement_and_share_alike_ranks() -> None:
    run = _run(tp=2, dp=3, pp=4)  # 6 ranks per stage on 8-GPU nodes: stages straddle nodes differently
    kinds = ("tp", "dp_cp", "dp")
    table = pipeline_placements(kinds, run.strategy, run.cluster)
    assert len(table) == 4
    for stage, row in enumerate(table):
        assert row == tuple(group_placement(k, run.strategy, run.cluster, stage=stage) for k in kinds)
    assert len({row for row in table}) == len({id(row) for row in table})  # equal rows are one object
    assert len({row for row in table}) > 1


def test_cached_hash_is_not_pickled_and_a_fresh_process_finds_the_copy() -> None:
    gpu = get_gpu("h100-sxm5-80gb")
    hash(gpu)
    assert "_hash_once" in gpu.__dict__
    copy = pickle.loads(pickle.dumps(gpu))
    assert "_hash_once" not in copy.__dict__ and copy == gpu and hash(copy) == hash(gpu)
    # string hashes differ between processes: a copy unpickled there must hash as its equal built there
    code = ("import pickle, sys\nfrom costmodel.specs import get_gpu\n"
            "copy = pickle.loads(sys.stdin.buffer.read())\nprint({get_gpu('h100-sxm5-80gb'): 1}.get(copy))")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(gpu), capture_output=True, env=env,
                         cwd=ROOT, timeout=120, check=True)
    assert out.stdout.decode().strip() == "1"


def test_hash_once_refuses_an_unhashable_class() -> None:
    from dataclasses import dataclass

    from costmodel.specs.hashing import hash_once

    with pytest.raises(TypeError, match="hashable dataclass"):
        @hash_once
        @dataclass
        class Mutable:
            x: int


@pytest.mark.parametrize("model, gpus", [("llama3.1-8b", 64), ("mixtral-8x7b", 64), ("deepseek-v3-mtp", 64)])
def test_by_reads_functions_read_only_what_they_declare(model: str, gpus: int) -> None:
    """A ``by_reads`` memo hands one strategy's answer to another that shares the declared fields: each such
    function of the cost model must give its answer through a view that refuses every other field."""
    import copy
    import random

    import constraints.memory  # noqa: F401 - registers its by_reads functions
    import costmodel.llm.compute  # noqa: F401
    from costmodel.run_memo import MEMOISED_BY_READS
    from costmodel.specs.reads import ReadsView
    from search import SearchProblem, build_space
    from search.space import LAYOUT_KNOBS, setting_conflicts

    checked = [fn for fn in MEMOISED_BY_READS if fn.__module__.split(".")[0] in ("constraints", "costmodel")]
    assert {fn.__name__ for fn in checked} >= {"params_on_gpu", "optimizer_params_on_gpu"}
    problem = SearchProblem(model=get_model(model), gpu=get_gpu("h100-sxm5-80gb"), num_gpus=gpus,
                            global_batch_size=512, seq_length=4096)
    space, rng = build_space(problem), random.Random(0)
    for layout in rng.sample(space.layouts, min(40, len(space.layouts))):  # a random legal strategy of each
        picked = dict(zip(LAYOUT_KNOBS, layout))
        legal = [[v for v in values if not setting_conflicts(picked, k, v, problem.framework)]
                 for k, values in space.settings]
        if not all(legal):
            continue
        strategy = space.strategy_of(layout, [rng.choice(values) for values in legal])
        run = problem.run(strategy)
        viewed = copy.copy(run)
        for fn in checked:  # each takes (run, stage)
            object.__setattr__(viewed, "strategy", ReadsView(strategy, fn.reads))  # type: ignore[attr-defined]
            for stage in range(strategy.pp):
                assert fn.__wrapped__(viewed, stage) == fn.__wrapped__(run, stage)  # type: ignore[attr-defined]
