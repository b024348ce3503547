"""Study files: the shipped examples parse, ranges and patterns expand, malformed files fail on one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from costmodel.specs.errors import SpecError
from studies.problems import expand
from studies.spec import DEFAULT_TOKENS_PER_STEP, load_study, study_from_mapping
from tests.studies.conftest import TINY, write_study

EXAMPLES = sorted((Path(__file__).parents[2] / "studies" / "examples").glob("study-*.yaml"))


def test_three_example_studies_ship() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"study-dense-scaling.yaml", "study-gpu-kinds.yaml", "study-moe.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_parse_and_round_trip(path: Path) -> None:
    spec = load_study(path)
    assert expand(spec)
    again = study_from_mapping(yaml.safe_load(yaml.safe_dump(spec.to_dict())))
    assert again == spec


def test_ranges_patterns_and_token_batches() -> None:
    spec = study_from_mapping({
        "name": "r", "models": ["mixtral-8x*"], "gpus": "h100-sxm5-80gb",
        "gpu_counts": {"min": 64, "max": 512, "factor": 2}, "batch": {"tokens_per_step": [2**21, 2**22]},
        "seq_length": 4096,
    })
    assert [m.name for m in spec.models] == ["mixtral-8x7b", "mixtral-8x22b"]  # smallest first
    assert spec.gpu_counts == (64, 128, 256, 512)
    problems = expand(spec)
    assert len(problems) == 2 * 4 * 2
    assert {p.global_batch_size for p in problems} == {512, 1024}
    assert len({p.id for p in problems}) == len(problems)


def test_defaults_use_each_models_sequence_length_and_4m_tokens() -> None:
    spec = study_from_mapping({"name": "d", "models": ["llama3.1-8b"], "gpus": ["b200"], "gpu_counts": 8})
    (problem,) = expand(spec)
    assert problem.seq_length == spec.models[0].seq_length
    assert problem.global_batch_size == round(DEFAULT_TOKENS_PER_STEP / problem.seq_length)
    assert spec.search.sampler == "tpe" and spec.search.objective == "time"


def test_pareto_objective_defaults_to_nsga2() -> None:
    spec = study_from_mapping({**TINY, "search": {"objective": "pareto"}})
    assert spec.search.sampler == "nsga2"


def test_relative_paths_resolve_against_the_study_file(tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "_name_or_path": "my-llama",
        "hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 16, "num_key_value_heads": 8,
        "num_hidden_layers": 8, "vocab_size": 32000, "max_position_embeddings": 4096}))
    (tmp_path / "profile").mkdir()
    (tmp_path / "studies").mkdir()
    data = {**TINY, "models": [{"hf_config": "../configs/config.json", "seq_length": 2048}],
            "search": {"profile": "../profile"}, "outputs": {"dir": "out"}}
    spec = load_study(write_study(tmp_path / "studies", data, "s.yaml"))
    assert spec.models[0].name == "my-llama" and spec.models[0].seq_length == 2048
    assert spec.search.profile == str((tmp_path / "profile").resolve())
    assert spec.out_dir == (tmp_path / "studies" / "out").resolve()


def test_inline_model() -> None:
    model = {"name": "toy", "num_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "vocab_size": 1000}
    spec = study_from_mapping({**TINY, "models": [model]})
    assert spec.models[0].num_layers == 4


def test_fix_and_allow_are_typed_like_the_cli() -> None:
    spec = study_from_mapping({**TINY, "search": {"fix": {"tp": 2, "sequence_parallel": True},
                                                  "allow": {"recompute": ["none", "selective"]}}})
    assert dict(spec.search.fixed) == {"sequence_parallel": True, "tp": 2}
    assert dict(spec.search.allowed) == {"recompute": ("none", "selective")}


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("unknown top-level key", {"modles": ["gpt3-350m"]}, "'modles'"),
    ("unknown search key", {"search": {"samplr": "tpe"}}, "search.samplr"),
    ("unknown sampler", {"search": {"sampler": "cmaes"}}, "search.sampler"),
    ("sampler does not fit objective", {"search": {"sampler": "tpe", "objective": "pareto"}}, "search.sampler"),
    ("unknown GPU", {"gpus": ["h900"]}, "cluster.gpu"),
    ("unknown model", {"models": ["llama9-1t"]}, "'model'"),
    ("pattern matching nothing", {"models": ["llama9-*"]}, "models[0]"),
    ("empty models", {"models": []}, "models"),
    ("range upside down", {"gpu_counts": {"min": 64, "max": 8}}, "gpu_counts.max"),
    ("range with an unknown key", {"gpu_counts": {"from": 8, "to": 64}}, "gpu_counts.from"),
    ("zero GPUs", {"gpu_counts": [0, 8]}, "gpu_counts[0]"),
    ("both batch kinds", {"batch": {"global_batch_size": 64, "tokens_per_step": 4096}}, "batch"),
    ("batch as a number", {"batch": 64}, "batch"),
    ("unknown knob in fix", {"search": {"fix": {"tensor_parallel": 2}}}, "search.fix.tensor_parallel"),
    ("trials not an integer", {"search": {"trials": "many"}}, "search.trials"),
    ("bad name", {"name": "my study!"}, "'name'"),
    ("unknown outputs key", {"outputs": {"folder": "x"}}, "outputs.folder"),
    ("model with an unknown field", {"models": [{"name": "m", "layers": 2}]}, "models[0].layers"),
]


@pytest.mark.parametrize(("change", "field"), [(c, f) for _, c, f in BAD], ids=[i for i, _, _ in BAD])
def test_malformed_studies_fail_with_one_line_naming_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as info:
        study_from_mapping({**TINY, **change})
    message = str(info.value)
    assert "\n" not in message
    assert field in message
    assert "must be" in message and "Got" in message


def test_missing_required_key() -> None:
    data = {k: v for k, v in TINY.items() if k != "gpus"}
    with pytest.raises(SpecError, match="'gpus'"):
        study_from_mapping(data)


def test_not_yaml_data(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: [unclosed\n", encoding="utf-8")
    with pytest.raises(SpecError, match="valid YAML"):
        load_study(path)
    path.write_text("!!python/object:os.system {}\n", encoding="utf-8")  # safe_load refuses tags that run code
    with pytest.raises(SpecError):
        load_study(path)


def test_duplicate_model_names_are_rejected() -> None:
    with pytest.raises(SpecError, match="distinct model names"):
        study_from_mapping({**TINY, "models": ["gpt3-350m", "gpt3-350m"]})


NUMERIC: list[tuple[str, dict[str, Any], str, str]] = [
    ("zero trials", {"search": {"trials": 0}}, "search.trials", "an integer in [1, "),
    ("negative seed", {"search": {"seed": -1}}, "search.seed", "an integer in [0, "),
    ("nan seed", {"search": {"seed": float("nan")}}, "search.seed", "an integer in [0, "),
    ("zero top_k", {"outputs": {"top_k": 0}}, "outputs.top_k", "an integer in [1, "),
    ("negative gpus_per_node", {"gpus_per_node": -8}, "gpus_per_node", "an integer in [1, 1048576]"),
    ("1e12 GPUs", {"gpu_counts": 10**12}, "gpu_counts", "an integer in [1, 1048576]"),
    ("range to 1e12 GPUs", {"gpu_counts": {"min": 8, "max": 10**12, "step": 1}}, "gpu_counts.max", "[1, 1048576]"),
    ("zero factor", {"gpu_counts": {"min": 8, "max": 64, "factor": 0}}, "gpu_counts.factor", "an integer in [2, "),
    ("inf batch", {"batch": {"global_batch_size": float("inf")}}, "batch.global_batch_size", "an integer in [1, "),
    ("negative tokens", {"batch": {"tokens_per_step": [4096, -1]}}, "batch.tokens_per_step[1]", "an integer in [1, "),
    ("zero seq_length", {"seq_length": 0}, "seq_length", "an integer in [1, "),
    ("string 1.0e308 seq_length", {"seq_length": "1.0e308"}, "seq_length", "an integer in [1, "),
    ("zero max_tp", {"search": {"max_tp": 0}}, "search.max_tp", "an integer in [1, "),
    ("fix tp 0", {"search": {"fix": {"tp": 0}}}, "search.fix.tp", "an integer in [1, "),
    ("fix tp -2", {"search": {"fix": {"tp": -2}}}, "search.fix.tp", "an integer in [1, "),
    ("fix tp 8.0", {"search": {"fix": {"tp": 8.0}}}, "search.fix.tp", "a single value of tp"),
    ("allow pp with a zero", {"search": {"allow": {"pp": [1, 0]}}}, "search.allow.pp", "an integer in [1, "),
    ("fix tp text", {"search": {"fix": {"tp": "eight"}}}, "search.fix.tp", "an integer"),
    ("inline model with zero layers", {"models": [{"name": "m", "num_layers": 0, "hidden_size": 64,
                                                   "num_attention_heads": 4, "vocab_size": 100}]},
     "model.num_layers", "an integer in [1, "),
]


@pytest.mark.parametrize(("change", "field", "allowed"), [(c, f, a) for _, c, f, a in NUMERIC],
                         ids=[i for i, _, _, _ in NUMERIC])
def test_numeric_study_fields_out_of_range_name_field_and_range(change: dict[str, Any], field: str,
                                                                allowed: str) -> None:
    with pytest.raises(SpecError) as info:
        study_from_mapping({**TINY, **change})
    message = str(info.value)
    assert "\n" not in message
    assert f"'{field}'" in message and allowed in message, message


def test_fixing_zero_stage_0_is_allowed() -> None:
    spec = study_from_mapping({**TINY, "search": {"fix": {"zero_stage": 0}}})
    assert dict(spec.search.fixed) == {"zero_stage": 0}


@pytest.mark.parametrize("text, named", [
    ("name: a\nname: b\nmodels: [gpt3-350m]\ngpus: [h100-pcie-80gb]\ngpu_counts: 8\n", "'name' repeated"),
    ("base: &m gpt3-350m\nname: a\nmodels: [*m]\ngpus: [h100-pcie-80gb]\ngpu_counts: 8\n", "anchors or aliases"),
    ("name: a\nmodels: " + "[" * 10_000 + "\n", "nested at most 64"),
])
def test_hostile_study_files_fail_on_one_line(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_study(path)
    assert info.value.field == "study" and named in str(info.value) and "\n" not in str(info.value)


def test_the_resolved_study_file_a_run_writes_reads_back(tmp_path: Path) -> None:
    # study.yaml is written with yaml.safe_dump: it must hold no anchors the bounded reader refuses.
    spec = study_from_mapping({**TINY, "search": {"fix": {"tp": 2}, "allow": {"pp": [1, 2]}}})
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(spec.to_dict()), encoding="utf-8")
    assert load_study(path) == spec
