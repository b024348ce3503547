"""``constraints.table.check_table``: each strategy of a table gets exactly ``constraints.check``'s verdict.

The table path runs every rule and memory term once per distinct combination of the strategy fields it
declares (``costmodel.specs.reads``); these tests compare it with the scalar path over whole search spaces
(dense, MoE, FSDP2, FP8 with TP overlap and CUDA graphs, a memory margin) and over strategies that break
rules, to the last bit.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from constraints import check
from constraints.memory import EAGER_BUFFERS, cuda_graph_bytes, layer_activation_bytes, model_state_bytes
from constraints.rules import RULES
from constraints.table import TABLE_MIN_ROWS, check_many, check_table
from costmodel.specs import get_gpu, get_model
from costmodel.specs.framework import get_framework
from costmodel.specs.reads import ReadsView, UndeclaredRead, reads
from costmodel.specs.strategy import Strategy
from costmodel.specs.strategy_table import StrategyTable
from search import SearchProblem, build_space
from search.space import StrategySpace
from search.objective import Evaluator

SAMPLE = {"mla-moe-mtp-h100": 300}  # about as many rows checked per space (default 1500): the scalar path is slow
SPACES = {
    "dense-h100": dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", num_gpus=32, global_batch_size=128,
                       seq_length=8192),
    "moe-h100": dict(model="mixtral-8x7b", gpu="h100-sxm5-80gb", num_gpus=32, global_batch_size=64,
                     seq_length=4096),
    "mla-moe-mtp-h100": dict(model="deepseek-v3-mtp", gpu="h100-sxm5-80gb", num_gpus=256, global_batch_size=512,
                             seq_length=4096, max_pp=16),
    "fsdp2-a100": dict(model="llama3.1-8b", gpu="a100-sxm4-80gb", num_gpus=16, global_batch_size=64,
                       seq_length=4096, framework="torchtitan"),
    "fp8-switches-graphs": dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", num_gpus=16, global_batch_size=64,
                                seq_length=4096, memory_margin=0.1,
                                allowed={"tp_comm_overlap": (False, True), "flash_attention": (False, True),
                                         "cuda_graphs": ("none", "layers", "full_iteration"),
                                         "overlap_grad_reduce": (False, True)}),
}


def _problem(spec: dict) -> SearchProblem:
    spec = dict(spec)
    framework = spec.pop("framework", None)
    if framework is not None:
        spec["framework"] = get_framework(framework)
    return SearchProblem(model=get_model(spec.pop("model")), gpu=get_gpu(spec.pop("gpu")), **spec)


def _sample(space: StrategySpace, rows: int) -> list[Strategy]:
    """About ``rows`` strategies: every 7th of an evenly spaced subset of the layouts (MoE spaces hold millions;
    the stride over rows keeps many layouts in)."""
    stride = max(1, space.size // (7 * rows))
    return list(replace(space, layouts=space.layouts[::stride]))[::7]


def _assert_same_verdicts(problem: SearchProblem, strategies: list[Strategy]) -> int:
    run = problem.run(strategies[0])
    verdict = check_table(run, StrategyTable(strategies), problem.memory_margin)
    infeasible = 0
    for row, strategy in enumerate(strategies):
        alone = check(problem.run(strategy), problem.memory_margin)
        assert verdict.violations[row] == alone.violations, strategy
        assert verdict.peak_bytes[row] == alone.memory.total_bytes, strategy  # exact, not approximate
        assert verdict.peak_stage[row] == alone.memory.stage, strategy
        infeasible += not alone.fits
    assert verdict.usable_bytes == run.cluster.usable_memory_bytes
    return infeasible


@pytest.mark.parametrize("name", sorted(SPACES))
def test_every_strategy_of_a_space_gets_the_scalar_verdict(name: str) -> None:
    problem = _problem(SPACES[name])
    sample = _sample(build_space(problem), SAMPLE.get(name, 1500))
    infeasible = _assert_same_verdicts(problem, sample)
    assert 0 < infeasible < len(sample) or name == "dense-h100"  # both outcomes exercised where they occur


def test_strategies_that_break_rules_get_the_same_sentences() -> None:
    """Random strategies outside any space: wrong world sizes, batches, interleaving, HSDP groups, ZeRO-2 in
    Megatron, CP exchanges, expert degrees on a dense model."""
    problem = _problem(SPACES["moe-h100"])
    rng = random.Random(3)
    knobs = {"tp": [1, 2, 3, 4, 8], "pp": [1, 2, 4], "dp": [1, 2, 4, 8, 16], "cp": [1, 2], "ep": [1, 2, 8],
             "vpp": [1, 2], "micro_batch_size": [1, 2, 3], "recompute": ["none", "selective", "full"],
             "zero_stage": [0, 1, 2, 3], "precision": ["bf16", "fp8"], "hsdp_shard_size": [0, 2, 3, 4],
             "cp_comm_type": ["p2p", "a2a"], "moe_a2a_overlap": [None, True], "etp": [None, 1, 2]}
    strategies = []
    while len(strategies) < 400:
        values = {k: rng.choice(v) for k, v in knobs.items()}
        try:
            strategies.append(Strategy(global_batch_size=64, **values))
        except ValueError:
            continue
    infeasible = _assert_same_verdicts(problem, strategies)
    assert infeasible > 300  # almost all break a rule
    dense = _problem(SPACES["dense-h100"])
    _assert_same_verdicts(dense, [Strategy(tp=2, dp=16, ep=2, global_batch_size=128),
                                  Strategy(tp=8, dp=4, global_batch_size=128, sequence_parallel=False)])


def test_every_mechanism_the_table_runs_declares_what_it_reads() -> None:
    for fn in (*RULES, model_state_bytes, layer_activation_bytes, *EAGER_BUFFERS, cuda_graph_bytes):
        assert isinstance(fn.reads, frozenset) and fn.reads, fn.__name__  # type: ignore[attr-defined]


def test_an_undeclared_read_is_refused_not_grouped_over() -> None:
    strategy = Strategy(tp=2, dp=4, micro_batch_size=2, global_batch_size=64)
    view = ReadsView(strategy, frozenset({"tp", "micro_batch_size"}))
    assert view.tp == 2 and view.micro_batch_size == 2
    with pytest.raises(UndeclaredRead, match="strategy.dp is read but not declared"):
        view.dp  # noqa: B018
    with pytest.raises(UndeclaredRead, match="global_batch_size"):  # through a derived property
        view.num_microbatches  # noqa: B018
    with pytest.raises(UndeclaredRead):  # not an AttributeError: hasattr and getattr's default do not hide it
        hasattr(view, "zero_stage")
    with pytest.raises(UndeclaredRead):
        getattr(view, "zero_stage", 1)
    assert not hasattr(view, "no_such_field")
    assert ReadsView(strategy, frozenset({"global_batch_size", "micro_batch_size", "dp"})).num_microbatches == 8
    changed = view.replaced(recompute="full")
    assert changed.recompute == "full" and changed.tp == 2

    @reads("tp")
    def leaky(v: ReadsView) -> int:
        return v.tp * v.dp

    table = StrategyTable([strategy, Strategy(tp=2, dp=8, global_batch_size=64)])
    with pytest.raises(UndeclaredRead, match="strategy.dp"):
        table.evaluate(leaky, leaky.reads)  # type: ignore[attr-defined]


def test_evaluate_calls_once_per_distinct_combination_in_table_order() -> None:
    strategies = [Strategy(tp=tp, dp=dp, micro_batch_size=mbs, global_batch_size=64)
                  for tp, dp, mbs in itertools.product((4, 1, 2), (2, 8), (1, 2))]
    table = StrategyTable(strategies)
    calls = []

    def per_tp(v: ReadsView) -> int:
        calls.append(v.tp)
        return 10 * v.tp

    values, group = table.evaluate(per_tp, frozenset({"tp"}))
    assert calls == [4, 1, 2] and values == [40, 10, 20]  # groups numbered by their first row
    assert [values[g] for g in group] == [10 * s.tp for s in strategies]
    first, group2 = table.groups({"tp", "dp"})
    assert len(first) == 6 and list(group2[:4]) == [0, 0, 1, 1]
    memo: dict = {}
    table.evaluate(per_tp, frozenset({"tp"}), memo=memo, key="tp")
    table.evaluate(per_tp, frozenset({"tp"}), memo=memo, key="tp")
    assert calls == [4, 1, 2] * 2  # the memoised calls ran once, the second time from the caller's memo


def test_a_table_checked_against_two_runs_gets_each_runs_verdicts() -> None:
    """Nothing of one run's check is kept on the table for the next (the memo is the call's own)."""
    long, short = _problem(SPACES["dense-h100"]), replace(_problem(SPACES["dense-h100"]), seq_length=2048)
    strategies = _sample(build_space(long), 300)
    table = StrategyTable(strategies)
    for problem in (long, short):
        verdict = check_table(problem.run(strategies[0]), table)
        assert [float(b) for b in verdict.peak_bytes] == \
            [check(problem.run(s)).memory.total_bytes for s in strategies]


def test_values_equal_across_types_stay_apart() -> None:
    """A capacity factor of 1 and of 1.0 are two columns values (equal, but not the same input)."""
    strategies = [Strategy(tp=1, dp=8, ep=8, global_batch_size=64, moe_capacity_factor=f) for f in (1, 1.0, 1.25, 1)]
    codes, values = StrategyTable(strategies).codes("moe_capacity_factor")
    assert list(codes) == [0, 1, 2, 0] and [type(v) for v in values] == [int, float, float]
    _assert_same_verdicts(_problem(SPACES["moe-h100"]), strategies)


def test_check_many_is_check_one_by_one_on_either_side_of_the_table_size() -> None:
    problem = _problem(SPACES["moe-h100"])
    strategies = _sample(build_space(problem), 2 * TABLE_MIN_ROWS)
    for part in (strategies[:TABLE_MIN_ROWS - 1], strategies[:TABLE_MIN_ROWS]):
        verdict = check_many(problem.run(part[0]), part)
        alone = [check(problem.run(s)) for s in part]
        assert verdict.violations == tuple(v.violations for v in alone)
        assert verdict.peak_bytes.tolist() == [v.memory.total_bytes for v in alone]
        assert verdict.peak_stage.tolist() == [v.memory.stage for v in alone]


def test_evaluate_many_matches_evaluate_one_by_one() -> None:
    problem = _problem(SPACES["fp8-switches-graphs"])
    strategies = _sample(build_space(problem), 2 * TABLE_MIN_ROWS)  # enough for the table path
    assert len(strategies) >= TABLE_MIN_ROWS
    batch = Evaluator(problem).evaluate_many(strategies + strategies[:3])  # repeats come from the memo
    alone = [Evaluator(problem).evaluate(s) for s in strategies]
    assert batch[:len(strategies)] == alone and batch[-3:] == alone[:3]
    assert any(e.feasible for e in alone) and any(not e.feasible for e in alone)


def test_tables_of_one_problem_sharing_a_memo_get_each_strategys_own_verdict() -> None:
    """A memo kept across a problem's tables (first_fitting's chunks, a sweep's) is keyed by values, not by
    a table's codes: each chunk gets what checking it alone gives, and later chunks reuse earlier results."""
    problem = _problem(SPACES["moe-h100"])
    strategies = _sample(build_space(problem), 3 * TABLE_MIN_ROWS)
    # a capacity factor of 1 in one chunk and 1.0 in the next: equal values, but not the same input
    strategies = [replace(s, moe_capacity_factor=1 if i < TABLE_MIN_ROWS else 1.0) for i, s in enumerate(strategies)]
    chunks = [strategies[:TABLE_MIN_ROWS], strategies[TABLE_MIN_ROWS:]]
    memo: dict = {}
    sizes = []
    for chunk in chunks:
        shared = check_table(problem.run(chunk[0]), StrategyTable(chunk), problem.memory_margin, memo)
        alone = check_table(problem.run(chunk[0]), StrategyTable(chunk), problem.memory_margin)
        assert shared.violations == alone.violations
        assert shared.peak_bytes.tolist() == alone.peak_bytes.tolist()
        assert shared.peak_stage.tolist() == alone.peak_stage.tolist()
        sizes.append(len(memo))
    fresh: dict = {}
    check_table(problem.run(chunks[1][0]), StrategyTable(chunks[1]), problem.memory_margin, fresh)
    assert sizes[1] < sizes[0] + len(fresh)  # the second chunk found some of its results in the memo
    assert any(k[2] and (float, 1.0) in k[2] for k in memo)  # the float factor has entries of its own
    assert any(k[2] and (int, 1) in k[2] for k in memo)


@pytest.mark.parametrize("name", sorted(SPACES))
def test_space_rows_give_their_strategies_columns_and_verdicts(name: str) -> None:
    """A table of (layout, setting) pairs (``SpaceRows``) reads the columns its strategies would give, value and
    type, in any order of the pairs, and gets their verdicts; it builds a strategy only for the rows it reads."""
    problem = _problem(SPACES[name])
    space = build_space(problem)
    stride = max(1, space.size // (7 * SAMPLE.get(name, 1500)))
    sub = replace(space, layouts=space.layouts[::stride])
    pairs = list(sub.legal_settings())[::7]
    random.Random(1).shuffle(pairs)  # layouts interleaved, as the memory-friendly order interleaves them
    make = sub.strategy_maker()
    strategies = [make(*pair) for pair in pairs]
    rows = sub.rows(pairs)
    lazy, eager = StrategyTable(rows), StrategyTable(strategies)
    for field in Strategy.__dataclass_fields__:
        codes, values = lazy.codes(field)
        got = [values[c] for c in codes]
        want = [getattr(s, field) for s in strategies]
        assert got == want and [type(v) for v in got] == [type(v) for v in want], field
    assert len(rows._built) == len({layout for layout, _ in pairs})  # the columns built one strategy per layout
    verdict, reference = check_table(problem.run(strategies[0]), lazy, problem.memory_margin), \
        check_table(problem.run(strategies[0]), eager, problem.memory_margin)
    assert verdict.violations == reference.violations
    assert verdict.peak_bytes.tolist() == reference.peak_bytes.tolist()
    assert verdict.peak_stage.tolist() == reference.peak_stage.tolist()
    assert all(rows[i] == s for i, s in enumerate(strategies))


def test_problems_of_one_context_share_its_memo_and_others_do_not() -> None:
    from constraints.table import context_memo

    problem = _problem(SPACES["dense-h100"])
    strategy = next(iter(build_space(problem)))
    run = problem.run(strategy)
    other_batch = replace(problem, global_batch_size=256).run(replace(strategy, global_batch_size=256))
    assert context_memo(run) is context_memo(other_batch)
    assert context_memo(run) is not context_memo(replace(problem, seq_length=4096).run(strategy))
    assert context_memo(run) is not context_memo(problem.with_gpus(64).run(replace(strategy, dp=strategy.dp * 2)))
