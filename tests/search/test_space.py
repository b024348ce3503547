"""The space generates exactly the legal strategies, and fixes / restrictions narrow it."""

from __future__ import annotations

import itertools

import optuna
import pytest

from constraints import rule_violations
from costmodel.specs import Strategy, get_model
from costmodel.specs.errors import SpecError
from search import build_space, parse_knob_value
from search.objective import suggest_strategy
from search.space import LAYOUT_KNOBS, divisors, nearest
from tests.search.conftest import small_problem


@pytest.mark.parametrize("problem", [small_problem(8), small_problem(64),
                                     small_problem(32, model=get_model("mixtral-8x7b"))],
                         ids=["8b-8", "8b-64", "mixtral-32"])
def test_space_holds_only_legal_strategies(problem) -> None:  # type: ignore[no-untyped-def]
    space = build_space(problem)
    assert space.size > 0
    for strategy in space:
        assert rule_violations(problem.run(strategy)) == [], strategy


def test_space_holds_every_legal_strategy_within_bounds() -> None:
    problem = small_problem(8, max_cp=4, max_vpp=4, max_micro_batch_size=4)
    space = set(build_space(problem))
    brute = set()
    degrees = divisors(8)
    for tp, pp, cp, mbs, vpp, sp, rc, z, prec in itertools.product(
            degrees, degrees, [1, 2, 4], [1, 2, 3, 4], [1, 2, 3, 4], [True, False],
            ["none", "selective", "full"], [0, 1, 2, 3], ["bf16", "fp8"]):
        if tp * pp * cp > 8:
            continue
        for exchange in ("p2p", "all_gather", "a2a") if cp > 1 else ("p2p",):  # cp_comm_type matters at cp > 1
            s = Strategy(tp=tp, pp=pp, cp=cp, dp=8 // (tp * pp * cp), micro_batch_size=mbs, vpp=vpp,
                         global_batch_size=64, sequence_parallel=sp, recompute=rc, zero_stage=z, precision=prec,
                         cp_comm_type=exchange)
            if not rule_violations(problem.run(s)):
                brute.add(s)
    assert space == brute


def test_fix_and_allow_restrict_the_space() -> None:
    space = build_space(small_problem(16, fixed={"tp": 2}, allowed={"recompute": ("none", "selective")}))
    assert {s.tp for s in space} == {2}
    assert {s.recompute for s in space} == {"none", "selective"}
    assert set(space.choices["tp"]) == {2}


def test_fixing_an_illegal_degree_names_the_legal_ones() -> None:
    with pytest.raises(SpecError, match=r"legal for tp on this problem \(1, 2, 4, 8\)"):
        build_space(small_problem(16, fixed={"tp": 3}))


def test_switches_stay_at_their_defaults_unless_allowed() -> None:
    assert {s.tp_comm_overlap for s in build_space(small_problem(8))} == {False}
    space = build_space(small_problem(8, allowed={"tp_comm_overlap": (True, False)}))
    assert {s.tp_comm_overlap for s in space} == {True, False}


def test_fp8_only_where_the_gpu_supports_it() -> None:
    from costmodel.specs import get_gpu

    assert set(build_space(small_problem(8, gpu=get_gpu("a100-sxm4-80gb"))).choices["precision"]) == {"bf16"}
    assert set(build_space(small_problem(8)).choices["precision"]) == {"bf16", "fp8"}


def test_parse_knob_value_types() -> None:
    assert parse_knob_value("tp", "8") == 8
    assert parse_knob_value("sequence_parallel", "false") is False
    assert parse_knob_value("recompute", "full") == "full"
    with pytest.raises(SpecError):
        parse_knob_value("tensor", "8")
    with pytest.raises(SpecError):
        parse_knob_value("tp", "eight")


def test_nearest_snaps_on_a_log_scale() -> None:
    assert nearest(8, [1, 2, 4, 16]) == 4  # ties go to the smaller
    assert nearest(6, [1, 2, 4, 16]) == 4
    assert nearest(True, [False]) is False


def test_suggest_snaps_an_illegal_combination_to_a_legal_strategy() -> None:
    problem = small_problem(16)
    space = build_space(problem)
    params = {k: v[-1] for k, v in space.choices.items() if len(v) > 1}  # every knob at its largest value
    strategy = suggest_strategy(optuna.trial.FixedTrial(params), space)
    assert space.contains(strategy)
    assert not rule_violations(problem.run(strategy))
    assert strategy.tp == params["tp"]  # the first knob is taken as asked
    assert all(k in LAYOUT_KNOBS or getattr(strategy, k) == v for k, v in params.items())
