"""Golden check: per-GPU memory of Korthikanti et al. 2022 (arXiv 2205.05198) Figure 1.

The figures (GiB, first pipeline stage, A100-80GB, fp16 mixed precision, Adam, no
optimizer sharding, sequence 2048, vocabulary 51200) are copied, with their source,
into ``memory_figures.yaml`` beside this test from shared/validation/memory_figures.yaml.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from constraints.memory import stage_memory
from costmodel.specs import run_spec_from_mapping
from costmodel.specs.gpu import GiB

FIGURES = yaml.safe_load((Path(__file__).parent / "memory_figures.yaml").read_text())
TOLERANCE = 0.05


def _run(entry: dict, recompute: str, sp: bool) -> object:
    model = {**entry["model"], "vocab_size": 51200, "seq_length": 2048, "activation": "gelu",
             "normalization": "layernorm", "position_embedding": "learned", "dropout": True}
    strategy = {**entry["strategy"], "recompute": recompute, "sequence_parallel": sp, "zero_stage": 0,
                "precision": "fp16", "flash_attention": False}
    strategy["dp"] = entry["num_gpus"] // (strategy["tp"] * strategy["pp"])
    # global batch chosen in the figures so that every stage runs at least pp micro-batches
    return run_spec_from_mapping({"model": model, "cluster": {"gpu": "a100-sxm4-80gb", "num_gpus": entry["num_gpus"]},
                                  "strategy": strategy})


@pytest.mark.parametrize("entry", FIGURES, ids=[e["model"]["name"] for e in FIGURES])
def test_parameter_and_optimizer_memory(entry: dict) -> None:
    run = _run(entry, "none", False)
    got = stage_memory(run, 0).layer_states_bytes / GiB
    assert got == pytest.approx(entry["params_opt_gib"], rel=TOLERANCE)


@pytest.mark.parametrize("entry", FIGURES, ids=[e["model"]["name"] for e in FIGURES])
@pytest.mark.parametrize(("setting", "recompute", "sp"), [("none", "none", False),
                                                         ("selective_sp", "selective", True)])
def test_activation_memory(entry: dict, setting: str, recompute: str, sp: bool) -> None:
    run = _run(entry, recompute, sp)
    got = stage_memory(run, 0).layer_activation_bytes / GiB
    assert got == pytest.approx(entry["activations_gib"][setting], rel=TOLERANCE)


def test_states_follow_bytes_per_param_of_the_full_model() -> None:
    """The full model-state term (with embeddings) is close to, and above, the figure's convention."""
    entry = FIGURES[0]
    mem = stage_memory(_run(entry, "none", False), 0)
    full = (mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes) / GiB
    assert entry["params_opt_gib"] < full < entry["params_opt_gib"] * 1.05
