"""torchtitan exports through torchtitan's own config manager, parallel dims and device mesh.

Each export is parsed by ``ConfigManager.parse_args`` (its registry function, tyro overrides and
the Trainer.Config ``__post_init__`` checks), its degrees go through ``ParallelDims`` and
``build_mesh`` on a fake process group of the export's world size, and the parsed config must say
what the prediction assumed. Skips without the ``conformance`` extra.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from costmodel.specs.errors import SpecError
from search.exporters import EXPORTERS
from tests.conformance.matrix import CASES, WORLD, expressible

pytest.importorskip("triton")  # torchtitan's model modules import it (the extra pins a CPU-importable wheel)
manager = pytest.importorskip("torchtitan.config.manager")
parallel_dims = pytest.importorskip("torchtitan.distributed.parallel_dims")
activation_checkpoint = pytest.importorskip("torchtitan.distributed.activation_checkpoint")

EXPORTER = EXPORTERS["torchtitan"]


@pytest.fixture(autouse=True)
def target_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The matrix's GPU for torchtitan's hardware checks: H100 is CUDA compute capability 9.0, so its
    Float8 converter builds (the CPU running the test has no CUDA device to ask)."""
    from torchtitan.components.quantization import float8

    monkeypatch.setattr(float8, "has_cuda_capability", lambda major, minor: (9, 0) >= (major, minor))


def argv(text: str) -> list[str]:
    return shlex.split(" ".join(line for line in text.splitlines() if line.strip() and not line.startswith("#")))


def parse(text: str) -> Any:
    """The Trainer.Config torchtitan builds from the export (its real config manager)."""
    return manager.ConfigManager().parse_args(argv(text))


def accumulation_steps(config: Any, batch_degree: int) -> int:
    """torchtitan's own batch checks and accumulation (torchtitan 0.3.0 trainer.py, Trainer.__init__)."""
    global_batch, local = config.training.global_batch_size, config.training.local_batch_size
    assert global_batch % (local * batch_degree) == 0, "global batch must be a multiple of local x dp"
    return global_batch // (local * batch_degree)


def recompute_of(config: Any) -> str:
    ac = activation_checkpoint
    kinds = {ac.FullAC.Config: "full", ac.SelectiveAC.Config: "selective"}
    return next((name for cls, name in kinds.items() if isinstance(config.activation_checkpoint, cls)), "none")


def uses_float8(config: Any) -> bool:
    """Whether torchao's Float8Linear replaced the model's linears (the registry's converters ran)."""
    from torchtitan.components.quantization import float8

    return any(True for _ in config.model_spec.model.traverse(float8.Float8Linear.Config))


@pytest.mark.parametrize("case", sorted(CASES))
def test_export_validates_in_torchtitan_or_is_refused(case: str, tmp_path: Path, fake_world: None) -> None:
    problem, strategy = CASES[case]
    try:
        text = EXPORTER.write(strategy, problem, tmp_path).read_text()
    except SpecError as exc:  # a launcher that cannot run it says which knob, on one line
        assert "\n" not in str(exc) and "torchtitan export: " in exc.field
        assert not any(tmp_path.iterdir())
        return
    config = parse(text)
    dims = parallel_dims.ParallelDims.from_config(config.parallelism, WORLD)
    dims.build_mesh()
    s = strategy
    batch_degree = dims.dp_replicate * dims.dp_shard
    assert (dims.tp, dims.pp, dims.cp, dims.ep, batch_degree) == (s.tp, s.pp, s.cp, s.ep, s.dp)
    steps = accumulation_steps(config, batch_degree)
    if s.pp > 1:  # one pipeline flush of gbs / (dp * mbs) micro-batches
        micro = config.parallelism.pipeline_parallel_microbatch_size
        flush = config.training.local_batch_size // micro
        assert (steps, flush) == (1, s.global_batch_size // (s.dp * s.micro_batch_size))
        parts = config.parallelism.module_fqns_per_model_part
        assert len(parts) == s.pp * s.vpp
        layers = [n for part in parts for n in part if n.startswith("layers.")]
        assert layers == [f"layers.{i}" for i in range(problem.model.num_layers)]
    else:
        micro = config.training.local_batch_size
        assert steps == s.global_batch_size // (s.dp * s.micro_batch_size)
    assert micro == s.micro_batch_size
    assert config.training.seq_len == problem.seq_length
    assert config.parallelism.enable_sequence_parallel == s.sequence_parallel
    assert recompute_of(config) == s.recompute
    assert uses_float8(config) == (s.precision == "fp8")
    if s.zero_stage == 0:
        assert dims.dp_shard == 1
    else:
        assert dims.dp_shard * dims.dp_replicate == s.dp and dims.dp_replicate == s.shard_replicas
        assert config.parallelism.fsdp_reshard_after_forward == {2: "never", 3: "always"}[s.zero_stage]


def test_most_of_the_matrix_validates(tmp_path: Path) -> None:
    """Refusing is for what torchtitan cannot run, not a way to pass: most exports must be written."""
    written = expressible(EXPORTER)
    assert written >= 8


def test_a_typo_in_an_export_would_be_caught(tmp_path: Path) -> None:
    """The real parser rejects what it does not know (the check is not vacuous)."""
    problem, strategy = CASES["dense-fsdp"]
    text = EXPORTER.write(strategy, problem, tmp_path).read_text()
    with pytest.raises(SystemExit):
        parse(text.replace("--parallelism.tensor-parallel-degree", "--parallelism.tensor-parallel-degre"))
