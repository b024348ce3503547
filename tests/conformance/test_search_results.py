"""What ``parplan search --export X`` recommends, fed to X's consumer: the top strategies of real
searches (analytic timer, each launcher's framework and restrictions), not hand-picked ones.

Three problems x the three best distinct strategies = up to 9 search results per exporter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from costmodel.specs import get_gpu, get_model
from costmodel.specs.framework import get_framework
from search import SearchProblem
from search.exporters import EXPORTERS, launcher_restrictions
from search.run import run_search
from tests.conformance.matrix import WORLD
from tests.search.conftest import analytic_evaluator

PROBLEMS = {"dense-8b": ("llama3.1-8b", 4096), "dense-70b-long": ("llama3.1-70b", 16384),
            "moe-qwen3": ("qwen3-30b-a3b", 4096)}


def top_strategies(name: str, problem_name: str, k: int = 3) -> list[tuple[SearchProblem, object]]:
    model, seq = PROBLEMS[problem_name]
    exporter = EXPORTERS[name]
    problem = SearchProblem(model=get_model(model), gpu=get_gpu("h100-sxm5-80gb"), num_gpus=WORLD,
                            global_batch_size=128, seq_length=seq, framework=get_framework(exporter.framework),
                            allowed=launcher_restrictions([name], get_model(model)))
    result = run_search(problem, n_trials=40, seed=0, evaluator=analytic_evaluator(problem))
    return [(problem, e.strategy) for e in result.top(k)]


def validate(name: str, problem: SearchProblem, strategy: object, out: Path) -> None:
    """Feed the export to the consumer the other conformance tests use for ``name``."""
    text = EXPORTERS[name].write(strategy, problem, out).read_text()  # type: ignore[arg-type]
    if name == "torchtitan":
        from tests.conformance import test_torchtitan as titan

        config = titan.parse(text)
        titan.parallel_dims.ParallelDims.from_config(config.parallelism, WORLD).build_mesh()
    elif name == "deepspeed":
        from tests.conformance import test_deepspeed as ds

        ds.validate(text, strategy.dp)  # type: ignore[attr-defined]
    elif name in ("megatron", "slurm"):
        pytest.importorskip("megatron.core")
        from tests.conformance import test_megatron as mg

        mg.core_configs(mg.launch(name, text)[0])
    else:  # Megatron-Bridge does not install on CPU: its mock reader (tests/search/test_exporters.py)
        from tests.search.test_exporters import read_nemo

        read_nemo(text, problem)


@pytest.mark.parametrize("problem_name", sorted(PROBLEMS))
@pytest.mark.parametrize("name", sorted(EXPORTERS))
def test_top_search_results_validate_in_their_launcher(name: str, problem_name: str, tmp_path: Path,
                                                       request: pytest.FixtureRequest) -> None:
    if name == "deepspeed":
        request.getfixturevalue("deepspeed_world")
    elif name == "torchtitan":
        request.getfixturevalue("fake_world")
    found = top_strategies(name, problem_name)
    assert found, "the launcher's space has a feasible strategy"
    for i, (problem, strategy) in enumerate(found):
        validate(name, problem, strategy, tmp_path / str(i))
