"""Pinned predictions do not depend on evaluation order, an earlier search or the hash seed (issue 12, item 5).

``tests/costmodel/test_determinism.py`` checks this on three hand-made runs; here it is checked on a
subset of the pins (MoE and dense public rows, a dense and a MoE benchmark problem), bit for bit. Each order
gets fresh operator timers, so that what is memoised first differs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from costmodel.predict import timer_for
from costmodel.specs import get_gpu, get_model
from costmodel.specs.gpu import GPUSpec
from costmodel.specs.runspec import RunSpec
from costmodel.timing import OperatorTimer
from search import Evaluator, SearchProblem, run_search
from tests.regression.pins import load_pin_module

pins = load_pin_module()
ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ("70b-256-b512", "search-mixtral8x7b-h100-64")
RUNS_PER_PROBLEM = 4
H100 = "h100-sxm5-80gb"


def _subset(doc: dict[str, Any], problems: tuple[str, ...] = PROBLEMS, every: int = 16,
            moe_rows: int = 2) -> dict[str, Any]:
    """Every ``every``-th public row, ``moe_rows`` MoE rows with expert parallelism, a few runs of ``problems``."""
    moe = [r for r in doc["public"] if r.get("pred", {}).get("breakdown.ep_comm_s", 0) > 0][:moe_rows]
    public = {r["id"]: r for r in doc["public"][::every] + moe}
    chosen = [{**e, "runs": e["runs"][:RUNS_PER_PROBLEM]} for e in doc["problems"]
              if e["problem"]["name"] in problems]
    assert len(chosen) == len(problems) and moe
    return {**doc, "public": [public[k] for k in sorted(public)], "problems": chosen}


class FreshTimers:
    """Per GPU a new timer on the shared fitted predictors: nothing memoised yet."""

    def __init__(self) -> None:
        self.made: dict[GPUSpec, OperatorTimer] = {}

    def for_gpu(self, gpu: GPUSpec) -> OperatorTimer:
        if gpu not in self.made:
            shared = timer_for(gpu)
            self.made[gpu] = OperatorTimer(shared.gpu, shared.predictors, reference=shared.reference)
        return self.made[gpu]

    def __call__(self, run: RunSpec) -> OperatorTimer:
        return self.for_gpu(run.cluster.gpu)


def _ids(doc: dict[str, Any]) -> list[str]:
    return [r["id"] for r in doc["public"]]


@pytest.fixture(scope="module")
def subset() -> dict[str, Any]:
    return _subset(pins.load())


@pytest.fixture(scope="module")
def forward(subset: dict[str, Any]) -> dict[str, Any]:
    return pins.recompute(subset, timer_of=FreshTimers(), public_ids=_ids(subset))


def test_forward_evaluation_reproduces_the_pins(subset: dict[str, Any], forward: dict[str, Any]) -> None:
    diffs = pins.differences(subset, forward)
    if diffs:
        pytest.fail(pins.report(diffs), pytrace=False)


def test_pins_do_not_depend_on_evaluation_order(forward: dict[str, Any], subset: dict[str, Any]) -> None:
    backward = pins.recompute(subset, reverse=True, timer_of=FreshTimers(), public_ids=_ids(subset))
    diffs = pins.differences(forward, backward, rel_tol=0.0)
    if diffs:
        pytest.fail(pins.report(diffs), pytrace=False)


def test_pins_are_the_same_after_an_unrelated_search(forward: dict[str, Any], subset: dict[str, Any]) -> None:
    timers = FreshTimers()
    gpu = get_gpu(H100)
    for model in ("mixtral-8x7b", "llama3.1-8b"):  # a MoE and a dense search on the timer the pins use next
        problem = SearchProblem(model=get_model(model), gpu=gpu, num_gpus=16, global_batch_size=128,
                                seq_length=4096)
        result = run_search(problem, n_trials=25, seed=1, evaluator=Evaluator(problem, timer=timers.for_gpu(gpu)))
        assert result.best is not None
    after = pins.recompute(subset, timer_of=timers, public_ids=_ids(subset))
    diffs = pins.differences(forward, after, rel_tol=0.0)
    if diffs:
        pytest.fail(pins.report(diffs), pytrace=False)


_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from tests.regression.pins import load_pin_module
pins = load_pin_module()
doc = json.load(open(sys.argv[1]))
print(json.dumps(pins.recompute(doc, public_ids=[r["id"] for r in doc["public"]]), allow_nan=False))
"""


@pytest.mark.slow  # two fresh processes; the main pin test already checks pins written by another process
def test_pins_do_not_depend_on_the_hash_seed(subset: dict[str, Any], tmp_path: Path) -> None:
    small = _subset(subset, problems=PROBLEMS[:1], every=len(subset["public"]), moe_rows=1)
    path = tmp_path / "subset.json"
    path.write_text(json.dumps(small), encoding="utf-8")
    outputs = []
    for seed in ("0", "1"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(ROOT)), str(path)], env=env,
                              capture_output=True, text=True, cwd=ROOT, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append(json.loads(done.stdout))
    diffs = pins.differences(*outputs, rel_tol=0.0)
    if diffs:
        pytest.fail(pins.report(diffs), pytrace=False)
