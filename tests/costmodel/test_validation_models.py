"""Catalog models added for the public validation set's FSDP and MoE rows match their published totals."""

from __future__ import annotations

import pytest

from costmodel.specs.catalog import get_model

# name -> (published total, its source). Each computed count must be within 1%.
PUBLISHED = {
    "codellama-34b": (33_743_970_304, "codellama/CodeLlama-34b-hf checkpoint parameter count"),
    "deepseek-v2": (236e9, "DeepSeek-AI 2024, arXiv 2405.04434 abstract: 236B total parameters"),
}
# name -> (published activated parameters per token, its source).
ACTIVE = {
    "deepseek-v2": (21e9, "arXiv 2405.04434 abstract: 21B are activated for each token"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_total_params_match_published(name: str) -> None:
    published, _ = PUBLISHED[name]
    assert abs(get_model(name).num_params - published) / published < 0.01


@pytest.mark.parametrize("name", sorted(ACTIVE))
def test_active_params_match_published(name: str) -> None:
    model = get_model(name)
    published, _ = ACTIVE[name]
    active_without_input_embedding = model.num_active_params - model.embedding_params()
    assert abs(active_without_input_embedding - published) / published < 0.01


def test_codellama_34b_is_the_exact_checkpoint_count() -> None:
    assert get_model("codellama-34b").num_params == 33_743_970_304
