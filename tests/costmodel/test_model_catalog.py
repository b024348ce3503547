"""The shipped model catalog: names, sources and parameter counts against published totals."""

from __future__ import annotations

import pytest

from costmodel.specs.catalog import _read_catalog, get_model, model_catalog
from costmodel.specs.errors import SpecError
from costmodel.specs.model import ModelSpec

CATALOG = model_catalog()
PUBLISHED = sorted(name for name, m in CATALOG.items() if m.published_params is not None)

REQUIRED_NAMES = [
    "gpt3-125m", "gpt3-350m", "gpt3-760m", "gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b",
    "gpt3-175b",
    "megatron-1.7b", "megatron-3.6b", "megatron-7.5b", "megatron-18b", "megatron-39b",
    "megatron-76b", "megatron-145b", "megatron-310b", "megatron-530b", "megatron-1t",
    "megatron-22b",
    "llama2-7b", "llama2-13b", "llama2-70b", "llama3.1-8b", "llama3.1-70b", "llama3.1-405b",
    "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "gpt-neox-20b", "bloom-176b", "opt-175b",
    "qwen2.5-7b", "qwen2.5-72b",
    "deepseek-v3", "deepseek-v3-mtp", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b", "gpt-oss-20b",
    "grok-1",
]

# MoE models of 2024-2025: (published total, its source). Each must match within 1%.
MOE_PUBLISHED = {
    "deepseek-v3": (671e9, "DeepSeek-AI 2024, arXiv 2412.19437, abstract: 671B total parameters"),
    "qwen3-30b-a3b": (30.5e9, "Qwen/Qwen3-30B-A3B model card: 30.5B in total"),
    "qwen3-235b-a22b": (235e9, "Qwen/Qwen3-235B-A22B model card: 235B in total"),
    "gpt-oss-120b": (116.83e9, "gpt-oss model card, arXiv 2508.10925 Table 1: 116.83B total"),
    "gpt-oss-20b": (20.91e9, "gpt-oss model card, arXiv 2508.10925 Table 1: 20.91B total"),
    "grok-1": (314e9, "xai-org/grok-1 README, x.ai/news/grok-os: 314B parameters"),
    "mixtral-8x7b": (46.7e9, "Jiang et al. 2024, arXiv 2401.04088 Sec. 2.1: 47B (46.7B checkpoint)"),
    "mixtral-8x22b": (141e9, "mistral.ai/news/mixtral-8x22b: 141B total, 39B active"),
}

# Narayanan et al. 2021 (arXiv 2104.04473) Table 1: parameters in billions, one decimal.
MEGATRON_TABLE_1 = {
    "megatron-1.7b": 1.7, "megatron-3.6b": 3.6, "megatron-7.5b": 7.5, "megatron-18b": 18.4,
    "megatron-39b": 39.1, "megatron-76b": 76.1, "megatron-145b": 145.6, "megatron-310b": 310.1,
    "megatron-530b": 529.6, "megatron-1t": 1008.0,
}

# Exact checkpoint totals that our formula reproduces to the parameter.
EXACT = {
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    "llama3.1-8b": 8_030_261_248,
    "llama3.1-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "mixtral-8x22b": 140_630_071_296,
    "gpt-neox-20b": 20_554_567_680,
}


def test_catalog_size() -> None:
    assert len(CATALOG) >= 25


def test_required_names_present() -> None:
    missing = [name for name in REQUIRED_NAMES if name not in CATALOG]
    assert not missing


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_entry_is_documented(name: str) -> None:
    model = CATALOG[name]
    assert isinstance(model, ModelSpec)
    assert model.name == name
    assert isinstance(model.source, str) and model.source.strip()
    if model.published_params is not None:
        assert isinstance(model.published_params, (int, float))  # not a YAML string like "6.7e9"
        assert not isinstance(model.published_params, bool)
        assert model.published_params_source.strip()


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_entry_states_architecture_explicitly(name: str) -> None:
    entry = _read_catalog("models.yaml")[name]
    for key in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "vocab_size",
                "seq_length", "activation", "normalization", "position_embedding", "tie_embeddings",
                "add_bias_linear", "add_qkv_bias"):
        assert key in entry, key
    if entry["position_embedding"] == "learned":
        assert "max_position_embeddings" in entry
    if entry["hidden_size"] % entry["num_attention_heads"]:
        assert "head_dim" in entry
    if CATALOG[name].is_moe:
        assert "moe_router_topk" in entry


@pytest.mark.parametrize("name", PUBLISHED)
def test_params_match_published(name: str) -> None:
    model = CATALOG[name]
    published = model.published_params
    assert published is not None
    assert abs(model.num_params - published) / published < 0.01


@pytest.mark.parametrize("name", sorted(EXACT))
def test_params_exact(name: str) -> None:
    assert CATALOG[name].num_params == EXACT[name]
    assert CATALOG[name].published_params == EXACT[name]


@pytest.mark.parametrize("name", sorted(MEGATRON_TABLE_1))
def test_megatron_table_1_rounding(name: str) -> None:
    assert round(CATALOG[name].num_params / 1e9, 1) == MEGATRON_TABLE_1[name]


def test_megatron_matches_narayanan_formula() -> None:
    # P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)); ours adds the final LayerNorm (2h).
    for name in MEGATRON_TABLE_1:
        m = get_model(name)
        l, h, v, s = m.num_layers, m.hidden_size, m.vocab_size, m.seq_length
        assert m.num_params == 12 * l * h * h + 13 * l * h + (v + s) * h + 2 * h


def test_gpt3_350m_is_gpt2_medium_with_longer_positions() -> None:
    # openai-community/gpt2-medium: same shape, 1024-row position table, 354,823,168 params.
    assert get_model("gpt3-350m").num_params - 1024 * 1024 == 354_823_168


def test_gpt3_rounded_labels() -> None:
    labels = {"gpt3-125m": 0.125, "gpt3-350m": 0.35, "gpt3-760m": 0.76, "gpt3-1.3b": 1.3,
              "gpt3-2.7b": 2.7, "gpt3-6.7b": 6.7, "gpt3-13b": 13.0, "gpt3-175b": 175.0}
    for name, billions in labels.items():
        assert abs(get_model(name).num_params / 1e9 - billions) / billions < 0.02, name


def test_gpt3_13b_head_dim() -> None:
    m = get_model("gpt3-13b")
    assert (m.hidden_size, m.num_attention_heads, m.head_dim, m.q_size) == (5140, 40, 128, 5120)


def test_llama31_8b_exact_breakdown() -> None:
    m = get_model("llama3.1-8b")
    attention = 4096 * (4096 + 2 * 1024) + 4096 * 4096
    mlp = 3 * 4096 * 14336
    layer = attention + mlp + 2 * 4096
    assert m.layer_params() == layer
    assert m.num_params == 32 * layer + 2 * 128256 * 4096 + 4096 == 8_030_261_248


def test_gqa_kv_size() -> None:
    assert get_model("llama3.1-70b").kv_size == 1024
    assert get_model("llama3.1-70b").q_size == 8192
    assert get_model("qwen2.5-7b").kv_size == 512
    assert get_model("llama2-7b").kv_size == 4096  # MHA


def test_mixtral_active_params() -> None:
    m8x7 = get_model("mixtral-8x7b")
    assert m8x7.is_moe and m8x7.num_experts == 8 and m8x7.moe_router_topk == 2
    assert m8x7.num_active_params == 12_879_925_248
    assert abs(m8x7.num_active_params - 12.9e9) / 12.9e9 < 0.01  # published "12.9B active"
    m8x22 = get_model("mixtral-8x22b")
    assert abs(m8x22.num_active_params - 39e9) / 39e9 < 0.01  # published "39B active"


def test_bloom_differs_only_by_embedding_layernorm() -> None:
    m = get_model("bloom-176b")
    assert m.published_params - m.num_params == 2 * m.hidden_size


def test_qwen_untied_with_qkv_bias() -> None:
    for name in ("qwen2.5-7b", "qwen2.5-72b"):
        m = get_model(name)
        assert m.add_qkv_bias and not m.add_bias_linear and not m.tie_embeddings


def test_position_embeddings() -> None:
    assert get_model("opt-175b").max_position_embeddings == 2050
    assert get_model("bloom-176b").position_embedding == "alibi"
    assert get_model("gpt3-175b").max_position_embeddings == 2048
    assert get_model("llama3.1-8b").position_embedding == "rope"


@pytest.mark.parametrize("name", sorted(MOE_PUBLISHED))
def test_moe_params_match_published_total(name: str) -> None:
    published, source = MOE_PUBLISHED[name]
    assert source
    assert abs(get_model(name).num_params - published) / published < 0.01


def test_deepseek_v3_mla_attention_params() -> None:
    # config.json: q 7168 -> 1536 -> 128 x 192; kv 7168 -> 512 + 64 -> 128 x (128 + 128); out 128 x 128 -> 7168
    m = get_model("deepseek-v3")
    assert m.is_mla and m.head_dim == 192 and m.v_head_dim == 128
    q = 7168 * 1536 + 1536 + 1536 * 128 * 192  # down, latent RMSNorm, up
    kv = 7168 * (512 + 64) + 512 + 512 * 128 * (128 + 128)
    out = 128 * 128 * 7168
    assert m.attention_params() == q + kv + out == 187_107_328


def test_deepseek_v3_layers_and_active_params() -> None:
    m = get_model("deepseek-v3")
    assert (m.num_dense_layers, m.num_moe_layers, m.num_experts, m.moe_router_topk, m.num_shared_experts) \
        == (3, 58, 256, 8, 1)
    # arXiv 2412.19437: "37B activated for each token" (the input embedding is a lookup, not counted)
    assert round((m.num_active_params - m.embedding_params()) / 1e9) == 37


def test_deepseek_v3_mtp_module() -> None:
    main, mtp = get_model("deepseek-v3"), get_model("deepseek-v3-mtp")
    h = 7168
    assert mtp.mtp_layer_params() == 3 * h + 2 * h * h + main.layer_params(moe=True)
    assert mtp.num_params - main.num_params == mtp.mtp_layer_params()
    assert mtp.num_active_params == main.num_active_params
    # README: 685B = 671B main model + 14B MTP module, whose checkpoint holds its own embedding and head
    own_copies = 2 * 129280 * h
    assert abs(mtp.num_params + own_copies - 685e9) / 685e9 < 0.001
    assert round((mtp.num_params + own_copies - main.num_params) / 1e9) == 13  # "14B", 13.46B


def test_qwen3_moe_active_and_non_embedding_params() -> None:
    # Model cards: 30.5B total / 3.3B activated / 29.9B non-embedding; 235B / 22B / 234B.
    small, large = get_model("qwen3-30b-a3b"), get_model("qwen3-235b-a22b")
    for m, active, non_embedding in ((small, 3.3, 29.9), (large, 22.0, 234.0)):
        assert m.qk_norm and m.num_experts == 128 and m.moe_router_topk == 8
        embeddings = m.embedding_params() + m.vocab_size * m.hidden_size
        assert round((m.num_params - embeddings) / 1e9, 0 if non_embedding > 100 else 1) == non_embedding
        # Qwen counts embeddings in the active figure; the 30B card truncates 3.353B to 3.3B
        assert int(m.num_active_params / 1e8) / 10 == active or round(m.num_active_params / 1e9) == active


def test_gpt_oss_active_params_and_attention() -> None:
    # arXiv 2508.10925 Table 1 counts the unembedding, not the embedding, in "active".
    for name, active in (("gpt-oss-120b", 5.13), ("gpt-oss-20b", 3.61)):
        m = get_model(name)
        assert round((m.num_active_params - m.embedding_params()) / 1e9, 2) == active
        assert (m.sliding_window, m.num_full_attention_layers) == (128, m.num_layers // 2)
        assert m.q_size == 64 * 64 and m.kv_size == 8 * 64 and m.moe_router_topk == 4


def test_grok1_quarter_of_weights_active() -> None:
    # x.ai/news/grok-os: "25% of the weights active on a given token" (rounded)
    m = get_model("grok-1")
    assert m.tie_embeddings and m.ffn_hidden_size == int(8 * 6144) * 2 // 3
    assert abs(m.num_active_params / m.num_params - 0.25) < 0.02


def _mla(**changes: object) -> ModelSpec:
    fields = dict(name="mla", num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1000,
                  kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, normalization="rmsnorm")
    fields.update(changes)
    return ModelSpec(**fields)  # type: ignore[arg-type]


def test_mla_without_q_lora_has_one_query_projection() -> None:
    m = _mla()
    names = [name for name, *_ in m.attention_linears()]
    assert names == ["q_proj", "kv_down_proj", "kv_up_proj", "out_proj"]
    assert m.attention_params() == 256 * 4 * 48 + 256 * 80 + 64 + 64 * 4 * 64 + 4 * 32 * 256


@pytest.mark.parametrize(("changes", "field"), [
    ({"head_dim": 64}, "model.head_dim"),  # must be nope + rope = 48
    ({"num_query_groups": 2}, "model.num_query_groups"),
    ({"qk_rope_head_dim": 0}, "model.qk_rope_head_dim"),
    ({"add_qkv_bias": True}, "model.add_qkv_bias"),
])
def test_mla_rejects_inconsistent_fields(changes: dict, field: str) -> None:
    with pytest.raises(SpecError) as err:
        _mla(**changes)
    assert err.value.field == field


def test_v_head_dim_and_full_attention_every_need_their_feature() -> None:
    base = dict(name="m", num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1000)
    with pytest.raises(SpecError, match="v_head_dim"):
        ModelSpec(**base, v_head_dim=32)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="full_attention_every"):
        ModelSpec(**base, full_attention_every=2)  # type: ignore[arg-type]
