"""Reading Hugging Face config.json files into ModelSpec."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from costmodel.specs.catalog import get_model
from costmodel.specs.errors import SpecError
from costmodel.specs.hf_config import model_from_hf_config, read_hf_model
from costmodel.specs.notices import ParplanWarning

FIXTURES = Path(__file__).parent / "hf_configs"

# Hugging Face config.json contents (as published on the Hub, trimmed of nothing relevant).
LLAMA31_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256,
}
MIXTRAL_8X7B: dict[str, Any] = {
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.36.0.dev0", "use_cache": True, "vocab_size": 32000,
}
QWEN25_7B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
    "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1", "use_cache": True, "use_mrope": False,
    "use_sliding_window": False, "vocab_size": 152064,
}
GPT2: dict[str, Any] = {
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
    "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": None,
    "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
    "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": 50257,
}
OPT_1_3B: dict[str, Any] = {
    "_name_or_path": "facebook/opt-1.3b", "activation_dropout": 0.0, "activation_function": "relu",
    "architectures": ["OPTForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 2,
    "do_layer_norm_before": True, "dropout": 0.1, "eos_token_id": 2, "ffn_dim": 8192,
    "hidden_size": 2048, "init_std": 0.02, "layerdrop": 0.0, "max_position_embeddings": 2048,
    "model_type": "opt", "num_attention_heads": 32, "num_hidden_layers": 24, "pad_token_id": 1,
    "prefix": "</s>", "torch_dtype": "float16", "transformers_version": "4.21.0.dev0",
    "use_cache": True, "vocab_size": 50272, "word_embed_proj_dim": 2048,
}
OPT_125M: dict[str, Any] = {**OPT_1_3B, "_name_or_path": "facebook/opt-125m", "ffn_dim": 3072,
                            "hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 12,
                            "word_embed_proj_dim": 768}
OPT_350M: dict[str, Any] = {**OPT_1_3B, "_name_or_path": "facebook/opt-350m", "ffn_dim": 4096,
                            "hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 24,
                            "do_layer_norm_before": False, "word_embed_proj_dim": 512}
BLOOM_560M: dict[str, Any] = {
    "apply_residual_connection_post_layernorm": False, "architectures": ["BloomForCausalLM"],
    "attention_dropout": 0.0, "attention_softmax_in_fp32": True, "bias_dropout_fusion": True,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_dropout": 0.0, "hidden_size": 1024,
    "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "masked_softmax_fusion": True,
    "model_type": "bloom", "n_head": 16, "n_inner": None, "n_layer": 24, "offset_alibi": 100,
    "pad_token_id": 3, "pretraining_tp": 1, "skip_bias_add": True, "skip_bias_add_qkv": False,
    "slow_but_exact": False, "transformers_version": "4.27.0.dev0", "unk_token_id": 0,
    "use_cache": True, "vocab_size": 250880,
}
BLOOM_176B: dict[str, Any] = {  # the older key spelling: n_embed, num_attention_heads
    "apply_residual_connection_post_layernorm": False, "attention_dropout": 0.0,
    "attention_softmax_in_fp32": True, "bias_dropout_fusion": True, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_dropout": 0.0, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "masked_softmax_fusion": True, "model_type": "bloom",
    "n_embed": 14336, "n_layer": 70, "num_attention_heads": 112, "pretraining_tp": 4,
    "slow_but_exact": False, "transformers_version": "4.21.0", "use_cache": True,
    "vocab_size": 250880,
}
PYTHIA_160M: dict[str, Any] = {
    "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
    "hidden_act": "gelu", "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
    "layer_norm_eps": 1e-05, "max_position_embeddings": 2048, "model_type": "gpt_neox",
    "num_attention_heads": 12, "num_hidden_layers": 12, "rotary_emb_base": 10000,
    "rotary_pct": 0.25, "tie_word_embeddings": False, "torch_dtype": "float16",
    "transformers_version": "4.24.0", "use_cache": True, "use_parallel_residual": True,
    "vocab_size": 50304,
}
GPT_NEOX_20B: dict[str, Any] = {
    "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
    "hidden_act": "gelu_fast", "hidden_size": 6144, "initializer_range": 0.02,
    "intermediate_size": 24576, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
    "model_type": "gpt_neox", "num_attention_heads": 64, "num_hidden_layers": 44,
    "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
    "torch_dtype": "float16", "transformers_version": "4.24.0", "use_cache": True,
    "use_parallel_residual": True, "vocab_size": 50432,
}

# name -> (config, published total, exact?)
PUBLISHED: dict[str, tuple[dict[str, Any], int, bool]] = {
    "llama3.1-8b": (LLAMA31_8B, 8_030_261_248, True),
    "mixtral-8x7b": (MIXTRAL_8X7B, 46_702_792_704, True),
    "qwen2.5-7b": (QWEN25_7B, 7_615_616_512, True),  # model card "7.61B"
    "gpt2": (GPT2, 124_439_808, True),
    "opt-125m": (OPT_125M, 125_239_296, True),
    "opt-1.3b": (OPT_1_3B, 1_315_758_080, True),
    "bloom-560m": (BLOOM_560M, 559_214_592, False),  # + embedding LayerNorm (2h) not modelled
    "bloom-176b": (BLOOM_176B, 176_247_271_424, False),
    "pythia-160m": (PYTHIA_160M, 162_322_944, True),  # Biderman et al. 2023 Table 1
    "gpt-neox-20b": (GPT_NEOX_20B, 20_554_567_680, True),
}


def write_config(folder: Path, config: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_params_match_published(tmp_path: Path, name: str) -> None:
    config, published, exact = PUBLISHED[name]
    model = model_from_hf_config(write_config(tmp_path / name, config))
    assert abs(model.num_params - published) / published < 0.01
    if exact:
        assert model.num_params == published


def test_bloom_embedding_layernorm_is_the_only_gap(tmp_path: Path) -> None:
    model = model_from_hf_config(write_config(tmp_path / "bloom-560m", BLOOM_560M))
    assert 559_214_592 - model.num_params == 2 * model.hidden_size


def test_mixtral_active_params(tmp_path: Path) -> None:
    model = model_from_hf_config(write_config(tmp_path / "m", MIXTRAL_8X7B))
    assert (model.num_experts, model.moe_router_topk) == (8, 2)
    assert abs(model.num_active_params - 12.9e9) / 12.9e9 < 0.01


@pytest.mark.parametrize("name, config, seq_length", [
    ("llama3.1-8b", LLAMA31_8B, 8192),
    ("mixtral-8x7b", MIXTRAL_8X7B, 32768),
    ("qwen2.5-7b", QWEN25_7B, 4096),
    ("gpt-neox-20b", GPT_NEOX_20B, None),
    ("bloom-176b", BLOOM_176B, None),
])
def test_matches_catalog(tmp_path: Path, name: str, config: dict[str, Any],
                         seq_length: int | None) -> None:
    model = model_from_hf_config(write_config(tmp_path / name, config), seq_length=seq_length)
    catalog = get_model(name)
    assert model.num_params == catalog.num_params
    assert replace(model, name=name) == catalog  # every architecture field


def test_llama_fields(tmp_path: Path) -> None:
    model = model_from_hf_config(write_config(tmp_path / "Llama-3.1-8B", LLAMA31_8B), seq_length=8192)
    assert model.name == "Llama-3.1-8B"  # no _name_or_path: the folder name
    assert (model.num_layers, model.hidden_size, model.num_attention_heads) == (32, 4096, 32)
    assert (model.num_query_groups, model.kv_size, model.ffn_hidden_size) == (8, 1024, 14336)
    assert (model.seq_length, model.max_position_embeddings) == (8192, 131072)
    assert (model.activation, model.normalization, model.position_embedding) == ("swiglu", "rmsnorm", "rope")
    assert not (model.tie_embeddings or model.add_bias_linear or model.add_qkv_bias)


def test_default_seq_length_is_explicit_and_warned(tmp_path: Path) -> None:
    # Not Llama 3.1's max_position_embeddings (131,072): 4096, capped by a shorter context.
    for name, config, seq in (("l", LLAMA31_8B, 4096), ("g", GPT2, 1024), ("b", BLOOM_560M, 2048)):
        with pytest.warns(ParplanWarning, match="no seq_length given"):
            model, notes = read_hf_model(write_config(tmp_path / name, config))
        assert model.seq_length == seq
        assert any(f"{seq} tokens assumed" in n for n in notes)


def test_given_seq_length_is_not_warned(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    assert read_hf_model(write_config(tmp_path / "l", LLAMA31_8B), seq_length=8192)[1] == ()
    assert not recwarn.list


def test_gpt2_fields(tmp_path: Path) -> None:
    model = model_from_hf_config(write_config(tmp_path / "gpt2", GPT2))
    assert model.ffn_hidden_size == 4 * 768  # n_inner absent -> 4h
    assert model.max_position_embeddings == 1024
    assert model.tie_embeddings and model.add_bias_linear and model.position_embedding == "learned"


def test_opt_fields(tmp_path: Path) -> None:
    model = model_from_hf_config(write_config(tmp_path / "x", OPT_1_3B))
    assert model.name == "facebook/opt-1.3b"
    assert model.max_position_embeddings == 2050  # offset of 2
    assert model.seq_length == 2048
    assert model.tie_embeddings and model.activation == "gelu"  # ReLU: same count


def test_opt_350m_rejected(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="word_embed_proj_dim"):
        model_from_hf_config(write_config(tmp_path / "opt-350m", OPT_350M))


def test_qwen2_qkv_bias(tmp_path: Path) -> None:
    model = model_from_hf_config(write_config(tmp_path / "q", QWEN25_7B))
    assert model.add_qkv_bias and not model.add_bias_linear and not model.tie_embeddings


def test_folder_path_and_architectures_fallback(tmp_path: Path) -> None:
    config = {k: v for k, v in LLAMA31_8B.items() if k != "model_type"}
    folder = tmp_path / "my-llama"
    write_config(folder, config)
    model = model_from_hf_config(folder)
    assert model.name == "my-llama"
    assert model.num_params == 8_030_261_248


def test_mistral_is_llama_shaped(tmp_path: Path) -> None:
    config = {**MIXTRAL_8X7B, "model_type": "mistral", "architectures": ["MistralForCausalLM"],
              "sliding_window": 4096, "rope_theta": 10000.0}
    for key in ("num_local_experts", "num_experts_per_tok"):
        del config[key]
    model = model_from_hf_config(write_config(tmp_path / "m", config), seq_length=8192)
    assert model.num_params == 7_241_732_096
    assert (model.sliding_window, model.full_attention_every) == (4096, 0)
    assert replace(model, name="mistral-7b", max_position_embeddings=32768, sliding_window=0) == get_model("mistral-7b")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        model_from_hf_config(tmp_path / "nope" / "config.json")
    assert info.value.field == "model.hf_config"
    assert "a readable config.json file" in str(info.value)
    assert "\n" not in str(info.value)


def test_folder_without_config(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="readable config.json"):
        model_from_hf_config(tmp_path)


def test_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",\n  "hidden_size": }', encoding="utf-8")
    with pytest.raises(SpecError) as info:
        model_from_hf_config(path)
    assert info.value.field == "model.hf_config"
    assert "valid JSON" in str(info.value) and "\n" not in str(info.value)


def test_json_not_an_object(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="JSON object"):
        model_from_hf_config(write_config(tmp_path, [1, 2]))


def test_unsupported_model_type(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        model_from_hf_config(write_config(tmp_path, {"model_type": "t5", "d_model": 512}))
    assert info.value.field == "model.hf_config.model_type"
    assert info.value.value == "t5"
    assert info.value.allowed == ("one of bloom, deepseek_v3, gemma2, gemma3, gemma3_text, gpt2, gpt_neox, gpt_oss, "
                                  "llama, mistral, mixtral, olmo2, opt, phi3, qwen2, qwen3, qwen3_moe")


def test_missing_model_type(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="model_type"):
        model_from_hf_config(write_config(tmp_path, {"hidden_size": 8}))


def test_missing_required_key(tmp_path: Path) -> None:
    config = {k: v for k, v in LLAMA31_8B.items() if k != "intermediate_size"}
    with pytest.raises(SpecError) as info:
        model_from_hf_config(write_config(tmp_path, config))
    assert info.value.field == "model.hf_config.intermediate_size"
    assert "llama" in info.value.allowed


def test_missing_key_with_alternative(tmp_path: Path) -> None:
    config = {k: v for k, v in BLOOM_176B.items() if k != "n_embed"}
    with pytest.raises(SpecError, match="n_embed"):
        model_from_hf_config(write_config(tmp_path, config))


def test_invalid_value_is_spec_error(tmp_path: Path) -> None:
    # the error names the config.json key the user wrote, not parplan's field
    with pytest.raises(SpecError, match=r"model\.hf_config\.num_hidden_layers"):
        model_from_hf_config(write_config(tmp_path, {**LLAMA31_8B, "num_hidden_layers": "32"}))
    with pytest.raises(SpecError, match=r"model\.hf_config\.max_position_embeddings"):
        model_from_hf_config(write_config(tmp_path, {**OPT_1_3B, "max_position_embeddings": "x"}),
                             seq_length=2048)


MISTRAL_7B_V01: dict[str, Any] = {  # mistralai/Mistral-7B-v0.1 config.json (the one with a 4096-token window)
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": 32000,
}


def test_mistral_sliding_window_is_modelled(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    model, notes = read_hf_model(write_config(tmp_path / "m", MISTRAL_7B_V01), seq_length=8192)
    assert (model.sliding_window, model.full_attention_every, model.num_full_attention_layers) == (4096, 0, 0)
    assert notes == () and not recwarn.list
    assert model.num_params == 7_241_732_096


@pytest.mark.parametrize("config", [MIXTRAL_8X7B, QWEN25_7B, LLAMA31_8B], ids=["null", "qwen-off", "absent"])
def test_no_window_when_none_is_in_effect(tmp_path: Path, config: dict[str, Any],
                                          recwarn: pytest.WarningsRecorder) -> None:
    # Mixtral states sliding_window: null; Qwen2.5 states a window but use_sliding_window: false.
    model, notes = read_hf_model(write_config(tmp_path / "c", config), seq_length=4096)
    assert notes == () and model.sliding_window == 0
    assert not recwarn.list


@pytest.mark.parametrize("change, window, every", [
    ({"use_sliding_window": True, "max_window_layers": 0}, 131072, 0),  # every layer windowed
    ({"use_sliding_window": True}, 0, 0),  # max_window_layers 28 = all 28 layers full
    ({"layer_types": ["sliding_attention", "full_attention"] * 14}, 131072, 2),
])
def test_qwen2_window_pattern_is_mapped(tmp_path: Path, change: dict[str, Any], window: int, every: int) -> None:
    model, notes = read_hf_model(write_config(tmp_path / "q", {**QWEN25_7B, **change}), seq_length=4096)
    assert (model.sliding_window, model.full_attention_every) == (window, every) and notes == ()


def test_inexpressible_window_pattern_is_warned(tmp_path: Path) -> None:
    # Windowed from layer 14 on: ModelSpec windows all layers but every k-th one, so this is noted.
    config = {**QWEN25_7B, "use_sliding_window": True, "max_window_layers": 14}
    with pytest.warns(ParplanWarning, match="layer_types"):
        model, notes = read_hf_model(write_config(tmp_path / "q", config), seq_length=4096)
    assert model.sliding_window == 0 and len(notes) == 1 and "full causal attention" in notes[0]


def test_llama_biases_are_warned(tmp_path: Path) -> None:
    with pytest.warns(ParplanWarning):
        notes = read_hf_model(write_config(tmp_path / "l", {**LLAMA31_8B, "attention_bias": True}), seq_length=8192)[1]
    assert notes and "attention_bias=True" in notes[0]


def test_unmodelled_note_reaches_the_prediction_and_one_stderr_line(tmp_path: Path) -> None:
    write_config(tmp_path / "gemma", json.loads((FIXTURES / "gemma-2-9b.json").read_text()))
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({
        "model": {"hf_config": "gemma"}, "seq_length": 8192,
        "cluster": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
        "strategy": {"tp": 8, "micro_batch_size": 1, "global_batch_size": 8}}))
    proc = subprocess.run([sys.executable, "-m", "parplan.cli", "predict", "run.yaml", "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "softcapping" in line]
    assert len(lines) == 2 and all(line.startswith("parplan: warning: model.hf_config.") for line in lines)
    assert not any("seq_length" in line for line in proc.stderr.splitlines())  # the run spec gives it
    assert any("attn_logit_softcapping=50.0" in w for w in json.loads(proc.stdout)["warnings"])


def test_hostile_config_json_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    for text, named in [("[" * 100_000, "nested at most 64"), ('{"model_type": "llama", "model_type": "gpt2"}',
                                                              "duplicate keys"), ('{"hidden_size": NaN}', "NaN")]:
        path.write_text(text, encoding="utf-8")
        with pytest.raises(SpecError) as info:
            model_from_hf_config(path)
        assert info.value.field == "model.hf_config" and named in str(info.value)


# -- architectures added for issue 15: fixtures in hf_configs/ are the Hub config.json contents -------------------
# name -> total parameters: transformers 5.24.0 instantiated on the meta device from the same file
# (test_counts_equal_transformers repeats that when transformers is installed); the published figure beside it.
EXACT: dict[str, int] = {
    "qwen3-8b": 8_190_735_360,  # model card: 8.2B
    "qwen3-30b-a3b": 30_532_122_624,  # model card: 30.5B total
    "deepseek-v3": 671_026_404_352,  # DeepSeek-V3 report (arXiv 2412.19437): 671B, MTP module excluded
    "gemma-2-9b": 9_241_705_984,  # Gemma 2 report (arXiv 2408.00118) Table 1: 9B
    "gemma-3-1b-pt": 999_885_952,  # Gemma 3 report (arXiv 2503.19786) Table 1: 1B
    "phi-3-mini-4k": 3_821_079_552,  # Phi-3 report (arXiv 2404.14219): 3.8B
    "olmo-2-1124-7b": 7_298_617_344,  # OLMo 2 (arXiv 2501.00656): 7B
    "gpt-oss-20b": 20_914_757_184,  # gpt-oss model card (arXiv 2508.10925) Table 1: 20.91B
}


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(EXACT))
def test_new_architecture_exact_count(tmp_path: Path, name: str) -> None:
    model = model_from_hf_config(write_config(tmp_path / name, fixture(name)), seq_length=4096)
    assert model.num_params == EXACT[name]


@pytest.mark.parametrize("name", sorted(EXACT))
def test_counts_equal_transformers(tmp_path: Path, name: str) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = fixture(name)
    config.pop("quantization_config", None)  # MXFP4 packing needs a GPU kernel; the count is the bf16 model's
    if name == "deepseek-v3":  # 61 layers of 256 experts take seconds on the meta device; 5 keep every kind
        config["num_hidden_layers"] = 5
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
    ours = model_from_hf_config(write_config(tmp_path / name, config), seq_length=4096)
    assert ours.num_params == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize("name, catalog", [("qwen3-30b-a3b", "qwen3-30b-a3b"), ("deepseek-v3", "deepseek-v3"),
                                           ("gpt-oss-20b", "gpt-oss-20b")])
def test_new_architecture_matches_catalog(tmp_path: Path, name: str, catalog: str) -> None:
    model = model_from_hf_config(write_config(tmp_path / name, fixture(name)), seq_length=4096)
    entry = get_model(catalog)
    # The catalog's gpt-oss entries leave out the sinks and the router bias (2,304 parameters in 20.9B).
    assert replace(model, name=catalog, attention_sinks=entry.attention_sinks,
                   moe_router_bias=entry.moe_router_bias) == entry


def test_qwen3_fields(tmp_path: Path) -> None:
    model = model_from_hf_config(write_config(tmp_path / "q", fixture("qwen3-8b")), seq_length=4096)
    assert model.qk_norm and model.qk_norm_per_head and not model.add_qkv_bias and not model.dropout
    assert (model.head_dim, model.q_size, model.kv_size) == (128, 4096, 1024)


@pytest.mark.parametrize("change, dense", [({"mlp_only_layers": [0, 1]}, 2), ({"decoder_sparse_step": 1}, 0)])
def test_qwen3_moe_dense_prefix(tmp_path: Path, change: dict[str, Any], dense: int) -> None:
    model = model_from_hf_config(write_config(tmp_path / "q", {**fixture("qwen3-30b-a3b"), **change}), seq_length=4096)
    assert (model.num_experts, model.moe_router_topk, model.first_k_dense_layers) == (128, 8, dense)
    assert model.num_shared_experts == 0  # Qwen3-MoE has none (arXiv 2505.09388 Sec. 2)


@pytest.mark.parametrize("change, key", [({"mlp_only_layers": [3]}, "mlp_only_layers"),
                                         ({"decoder_sparse_step": 2}, "decoder_sparse_step")])
def test_qwen3_moe_interleaved_dense_layers_refused(tmp_path: Path, change: dict[str, Any], key: str) -> None:
    with pytest.raises(SpecError) as info:
        model_from_hf_config(write_config(tmp_path / "q", {**fixture("qwen3-30b-a3b"), **change}), seq_length=4096)
    assert info.value.field == f"model.hf_config.{key}" and "interleaved" in info.value.allowed


def test_deepseek_v3_mla_and_mtp_option(tmp_path: Path) -> None:
    path = write_config(tmp_path / "d", fixture("deepseek-v3"))
    with pytest.warns(ParplanWarning, match="num_nextn_predict_layers=1"):
        model, notes = read_hf_model(path, seq_length=4096)
    assert model.is_mla and (model.q_lora_rank, model.kv_lora_rank, model.head_dim, model.v_head_dim) == (
        1536, 512, 192, 128)
    assert (model.num_shared_experts, model.first_k_dense_layers, model.mtp_num_layers) == (1, 3, 0)
    with_mtp, notes = read_hf_model(path, seq_length=4096, overrides={"mtp_num_layers": 1})
    assert notes == ()
    # DeepSeek-V3 model card: 685B on the Hub = 671B main model + 14B MTP module.
    assert with_mtp.num_params - model.num_params == model.mtp_layer_params()
    assert abs(with_mtp.num_params - 685e9) / 685e9 < 0.005


def test_gemma2_sandwich_norms_window_and_softcap_notes(tmp_path: Path) -> None:
    with pytest.warns(ParplanWarning, match="softcapping"):
        model, notes = read_hf_model(write_config(tmp_path / "g", fixture("gemma-2-9b")), seq_length=4096)
    assert model.sandwich_norm and model.norms_per_layer == 4 and model.tie_embeddings
    assert (model.sliding_window, model.full_attention_every, model.num_full_attention_layers) == (4096, 2, 21)
    assert sorted(n.split("=")[0] for n in notes) == ["model.hf_config.attn_logit_softcapping",
                                                      "model.hf_config.final_logit_softcapping"]


def test_gemma3_multimodal_reads_its_language_model(tmp_path: Path) -> None:
    text = {k: v for k, v in fixture("gemma-3-1b-pt").items() if k not in ("vocab_size", "architectures")}
    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
              "text_config": {**text, "model_type": "gemma3_text"}, "vision_config": {"hidden_size": 1152}}
    with pytest.warns(ParplanWarning, match="vision_config"):
        model, notes = read_hf_model(write_config(tmp_path / "g3", config), seq_length=4096)
    assert model.vocab_size == 262208  # Gemma3TextConfig default, the text_config omits it
    assert (model.sliding_window, model.full_attention_every, model.num_full_attention_layers) == (512, 6, 4)
    assert model.qk_norm and model.sandwich_norm


def test_olmo2_whole_projection_qk_norm(tmp_path: Path) -> None:
    model = model_from_hf_config(write_config(tmp_path / "o", fixture("olmo-2-1124-7b")), seq_length=4096)
    assert model.qk_norm and not model.qk_norm_per_head and not model.sandwich_norm
    per_head = replace(model, qk_norm_per_head=True)
    assert model.num_params - per_head.num_params == 32 * (4096 + 4096 - 2 * 128)


def test_phi3_window_on_every_layer(tmp_path: Path) -> None:
    model = model_from_hf_config(write_config(tmp_path / "p", fixture("phi-3-mini-4k")), seq_length=4096)
    assert (model.sliding_window, model.full_attention_every) == (2047, 0)
    assert model.name == "Phi-3-mini-4k-instruct"


def test_gpt_oss_sinks_router_bias_and_alternation(tmp_path: Path) -> None:
    model = model_from_hf_config(write_config(tmp_path / "o", fixture("gpt-oss-20b")), seq_length=4096)
    assert model.attention_sinks and model.moe_router_bias and model.add_qkv_bias and model.add_bias_linear
    assert (model.sliding_window, model.full_attention_every, model.num_experts, model.moe_router_topk) == (
        128, 2, 32, 4)
    plain = replace(model, attention_sinks=False, moe_router_bias=False)
    assert model.num_params - plain.num_params == 24 * (64 + 32)


def test_bad_layer_types_is_one_line(tmp_path: Path) -> None:
    config = {**fixture("gpt-oss-20b"), "layer_types": ["sliding_attention"] * 3}
    with pytest.raises(SpecError) as info:
        model_from_hf_config(write_config(tmp_path / "o", config), seq_length=4096)
    assert info.value.field == "model.hf_config.layer_types" and "24 entries" in info.value.allowed


@pytest.mark.parametrize("name", ["gemma-2-9b", "gpt-oss-20b", "phi-3-mini-4k"])
def test_sliding_window_predicts_less_attention_time(tmp_path: Path, name: str) -> None:
    from costmodel.predict import predict_run
    from costmodel.specs import RunSpec, Strategy
    from costmodel.specs.catalog import get_gpu
    from costmodel.specs.gpu import ClusterSpec

    seq = 32768
    model = model_from_hf_config(write_config(tmp_path / name, fixture(name)), seq_length=seq)
    cluster = ClusterSpec(gpu=get_gpu("h100-sxm5-80gb"), num_gpus=8, gpus_per_node=8)
    strategy = Strategy(tp=8, dp=1, micro_batch_size=1, global_batch_size=8, sequence_parallel=True,
                        recompute="full")
    times = [predict_run(RunSpec(model=m, cluster=cluster, strategy=strategy, seq_length=seq))["breakdown"]
             ["compute_s"] for m in (model, replace(model, sliding_window=0, full_attention_every=0))]
    assert times[0] < times[1]
