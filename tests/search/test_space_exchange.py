"""The space offers cp_comm_type (where the framework and the Ulysses rule allow it) and HSDP shard groups,
and ``--framework`` narrows the space to what that framework runs."""

from __future__ import annotations

import argparse

import optuna
import pytest

from constraints import rule_violations
from costmodel.specs.errors import SpecError
from costmodel.specs.framework import get_framework
from parplan import cli_search
from search import build_space, run_search
from search.objective import suggest_strategy
from search.space import legal_cp_comm_types, legal_hsdp_shard_sizes
from tests.search.conftest import analytic_evaluator, small_problem


def test_cp_comm_type_offered_only_with_cp() -> None:
    problem = small_problem(8)
    assert legal_cp_comm_types(problem, tp=1, cp=1) == ["p2p"]
    assert legal_cp_comm_types(problem, tp=1, cp=2) == ["p2p", "all_gather", "a2a"]
    # llama3.1-8b has 8 KV heads: Ulysses over tp*cp = 16 cannot split them
    assert legal_cp_comm_types(problem, tp=4, cp=4) == ["p2p", "all_gather"]


@pytest.mark.parametrize(("framework", "offered"), [("torchtitan", {"p2p", "all_gather"}),
                                                    ("deepspeed", {"a2a"}),
                                                    ("megatron-core", {"p2p", "all_gather", "a2a"})])
def test_space_offers_the_frameworks_cp_exchanges(framework: str, offered: set[str]) -> None:
    space = build_space(small_problem(8, framework=get_framework(framework), fixed={"cp": 2}))
    assert {s.cp_comm_type for s in space} == offered


@pytest.mark.parametrize("exchange", ["p2p", "all_gather", "a2a"])
def test_the_sampler_can_pick_each_cp_exchange(exchange: str) -> None:
    space = build_space(small_problem(8, fixed={"cp": 2, "tp": 2}))
    values = {k: v[0] for k, v in space.choices.items()} | {"cp": 2, "tp": 2, "cp_comm_type": exchange}
    strategy = suggest_strategy(optuna.trial.FixedTrial(values), space)
    assert strategy.cp_comm_type == exchange and space.contains(strategy)


@pytest.mark.parametrize("exchange", ["p2p", "all_gather", "a2a"])
def test_a_search_returns_each_cp_exchange_it_is_allowed(exchange: str) -> None:
    problem = small_problem(8, fixed={"cp": 2, "tp": 1, "pp": 1}, allowed={"cp_comm_type": (exchange,)})
    result = run_search(problem, sampler="exhaustive", evaluator=analytic_evaluator(problem))
    assert result.best is not None and result.best.strategy.cp_comm_type == exchange


def test_search_compares_the_exchanges() -> None:
    # all three in one sweep: the ranking is by predicted time, not by the exchange's name
    problem = small_problem(8, fixed={"cp": 2, "tp": 1, "pp": 1, "micro_batch_size": 1, "recompute": "selective",
                                      "zero_stage": 1, "precision": "bf16"})
    result = run_search(problem, sampler="exhaustive", evaluator=analytic_evaluator(problem))
    times = {e.strategy.cp_comm_type: e.step_time_s for e in result.feasible}
    assert set(times) == {"p2p", "all_gather", "a2a"}
    assert result.best.strategy.cp_comm_type == min(times, key=times.get)


def test_hsdp_shard_sizes_cover_whole_nodes() -> None:
    problem = small_problem(64)
    # tp=2: dp=32 ranks 2 apart; whole 8-GPU nodes need shards of 4, 8 or 16 ranks
    assert legal_hsdp_shard_sizes(problem, tp=2, cp=1, dp=32) == [0, 4, 8, 16]
    torchtitan = small_problem(64, framework=get_framework("torchtitan"), allowed={"zero_stage": (0,)})
    assert legal_hsdp_shard_sizes(torchtitan, tp=2, cp=1, dp=32) == [0]  # no ZeRO-3 allowed: no HSDP


def test_space_pairs_hsdp_only_with_sharding_the_framework_runs() -> None:
    problem = small_problem(64, framework=get_framework("torchtitan"), fixed={"tp": 2, "pp": 1, "cp": 1})
    space = build_space(problem)
    hsdp = [s for s in space if s.hsdp_shard_size]
    assert hsdp and {s.zero_stage for s in hsdp} == {3}
    assert all(not rule_violations(problem.run(s)) for s in hsdp[:50])


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="parplan")
    cli_search.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["search", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16",
                              "--global-batch-size", "64", "--seq-length", "4096", *argv])


@pytest.mark.parametrize("name", ["torchtitan", "deepspeed", "megatron-core"])
def test_framework_flag_narrows_the_space_to_what_it_runs(name: str) -> None:
    problem = cli_search.problem_from_args(_args(["--framework", name]), 16)
    fw = get_framework(name)
    assert problem.framework == fw
    space = build_space(problem)
    assert set(space.choices["zero_stage"]) <= set(fw.zero_stages)
    assert set(space.choices["cp_comm_type"]) - {"p2p"} <= set(fw.cp_comm_types)
    for strategy in list(space)[::97]:
        assert not [v for v in rule_violations(problem.run(strategy)) if fw.display_name in v], strategy


def test_framework_flag_rejects_unknown_names_in_one_line() -> None:
    with pytest.raises(SpecError, match="framework") as err:
        cli_search.problem_from_args(_args(["--framework", "nope"]), 16)
    assert "\n" not in str(err.value)


def test_search_under_a_framework_uses_only_what_it_allows(analytic_search_timer,  # type: ignore[no-untyped-def]
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    args = _args(["--framework", "torchtitan", "--trials", "20", "--json"])
    assert int(args.func(args)) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["top"] and all(row["strategy"]["zero_stage"] in (0, 3) for row in out["top"])
