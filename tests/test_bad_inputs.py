"""Malformed input through the real CLI, in a subprocess: the one-line error contract.

Every case must exit 2 with exactly one line on stderr that names the field (or
file) at fault, print no traceback, finish quickly, and leave nothing behind in
the output folder it was given. The cases cover every command and every kind of
input: run specs, study files, profile folders, Hugging Face configs, validation
sets, traces and flags.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 2.0  # the bound per command; start-up is most of it

GOOD_RUN = """\
model: llama3.1-8b
seq_length: 8192
cluster: {gpu: h100-sxm5-80gb, num_gpus: 8}
strategy: {tp: 1, pp: 1, micro_batch_size: 1, global_batch_size: 8, zero_stage: 1}
"""
GOOD_STUDY = """\
name: s
models: [llama3.1-8b]
gpus: [h100-sxm5-80gb]
gpu_counts: 8
batch: {global_batch_size: 16}
seq_length: 4096
search: {sampler: tpe, trials: 5}
"""
GOOD_ROW = """\
- id: r1
  source: test
  run: {model: llama3.1-8b, seq_length: 8192, cluster: {gpu: h100-sxm5-80gb, num_gpus: 8},
        strategy: {tp: 1, pp: 1, micro_batch_size: 1, global_batch_size: 8}}
  measured: {step_time_s: 1.0, how: measured}
"""
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, n in zip("abcdefgh", "bcdefghi"))


def _run_with(**changes: str) -> str:
    """GOOD_RUN with whole lines replaced: key prefix -> new line."""
    lines = GOOD_RUN.splitlines()
    for prefix, line in changes.items():
        lines = [line if existing.startswith(prefix) else existing for existing in lines]
    return "\n".join(lines) + "\n"


def _cluster(extra: str) -> str:
    return _run_with(cluster=f"cluster: {{gpu: h100-sxm5-80gb, num_gpus: 8, {extra}}}")


def _strategy(extra: str) -> str:
    return _run_with(strategy=f"strategy: {{tp: 1, pp: 1, micro_batch_size: 1, global_batch_size: 8, {extra}}}")


def _model(extra: str) -> str:
    model = ("model: {name: m, num_layers: 4, hidden_size: 1024, num_attention_heads: 8, "
             f"vocab_size: 32000, seq_length: 2048, {extra}}}")
    return _run_with(model=model)


def _study_with(**changes: str) -> str:
    lines = GOOD_STUDY.splitlines()
    for prefix, line in changes.items():
        lines = [line if existing.startswith(prefix) else existing for existing in lines]
        if not any(existing.startswith(prefix) for existing in lines):
            lines.append(line)
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Case:
    """One malformed input: the argv ({d} = a fresh folder), files to write into it, and the word the error names."""

    id: str
    argv: tuple[str, ...]
    names: str
    files: dict[str, str] = field(default_factory=dict)
    out: str | None = None  # an output folder (relative to {d}) that must stay empty or absent
    special: str | None = None  # "fifo": make {d}/fifo a named pipe


def _predict(content: str, names: str, cid: str) -> Case:
    return Case(cid, ("predict", "{d}/run.yaml"), names, {"run.yaml": content})


def _search(names: str, cid: str, *flags: str) -> Case:
    base = ("search", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8")
    return Case(cid, base + flags, names)


def _study(content: str, names: str, cid: str) -> Case:
    return Case(cid, ("study", "run", "{d}/study.yaml", "--out", "{d}/out"), names, {"study.yaml": content},
                out="out")


def _validate(content: str, names: str, cid: str) -> Case:
    return Case(cid, ("validate", "{d}/set.yaml"), names, {"set.yaml": content})


CASES: list[Case] = [
    # --- run spec: file-level -------------------------------------------------------------------
    Case("spec-missing-file", ("predict", "{d}/nope.yaml"), "nope.yaml"),
    Case("spec-is-directory", ("predict", "{d}"), "run spec"),
    Case("spec-dev-zero", ("predict", "/dev/zero"), "/dev/zero"),
    Case("spec-fifo", ("predict", "{d}/fifo"), "fifo", special="fifo"),
    _predict("", "run spec", "spec-empty"),
    _predict("- a\n- b\n", "run spec", "spec-top-level-list"),
    _predict("model: [unclosed\n", "run.yaml", "spec-yaml-syntax"),
    _predict("\udcff", "run.yaml", "spec-bad-utf8"),
    _predict(LAUGHS, "alias", "spec-billion-laughs"),
    _predict("model: " + "[" * 20000 + "]" * 20000 + "\n", "nest", "spec-deep-nesting-yaml"),
    _predict(GOOD_RUN + "seq_length: 4096\n", "seq_length", "spec-duplicate-key"),
    _predict("model: !!python/object/apply:os.system [echo hi]\n", "run.yaml", "spec-python-tag"),
    _predict(GOOD_RUN + "colour: blue\n", "colour", "spec-unknown-top-key"),
    _predict(_run_with(model="model: no-such-model"), "model", "spec-unknown-model"),
    _predict(_run_with(model="model: [1, 2]"), "model", "spec-model-list"),
    _predict(_run_with(model="model: " + "x" * 3_000_000), "model", "spec-huge-value"),
    _predict(_run_with(seq_length="seq_length: 0"), "seq_length", "spec-seq-zero"),
    _predict(_run_with(seq_length="seq_length: -8"), "seq_length", "spec-seq-negative"),
    _predict(_run_with(seq_length="seq_length: .nan"), "seq_length", "spec-seq-nan"),
    _predict(_run_with(seq_length="seq_length: .inf"), "seq_length", "spec-seq-inf"),
    _predict(_run_with(seq_length="seq_length: '1.0e308'"), "seq_length", "spec-seq-string-1e308"),
    _predict(_run_with(seq_length="seq_length: 1.0e308"), "seq_length", "spec-seq-float-1e308"),
    _predict(_run_with(seq_length="seq_length: abc"), "seq_length", "spec-seq-text"),
    # --- run spec: cluster ------------------------------------------------------------------------
    _predict(_run_with(cluster="cluster: null"), "cluster", "cluster-missing"),
    _predict(_run_with(cluster="cluster: {gpu: no-such-gpu, num_gpus: 8}"), "gpu", "cluster-unknown-gpu"),
    _predict(_run_with(cluster="cluster: {gpu: h100-sxm5-80gb, num_gpus: 0}"), "num_gpus", "cluster-gpus-zero"),
    _predict(_run_with(cluster="cluster: {gpu: h100-sxm5-80gb, num_gpus: -8}"), "num_gpus", "cluster-gpus-neg"),
    _predict(_run_with(cluster="cluster: {gpu: h100-sxm5-80gb, num_gpus: 1e12}"), "num_gpus", "cluster-gpus-1e12"),
    _predict(_run_with(cluster="cluster: {gpu: h100-sxm5-80gb, num_gpus: 1000000000000}"), "num_gpus",
             "cluster-gpus-10-to-12-int"),
    _predict(_run_with(cluster="cluster: {gpu: h100-sxm5-80gb, num_gpus: 8.5}"), "num_gpus", "cluster-gpus-frac"),
    _predict(_run_with(cluster="cluster: {gpu: h100-sxm5-80gb, num_gpus: '8'}"), "num_gpus", "cluster-gpus-str"),
    _predict(_cluster("gpus_per_node: 0"), "gpus_per_node", "cluster-gpn-zero"),
    _predict(_cluster("gpus_per_node: 3"), "gpus_per_node", "cluster-gpn-not-divisor"),
    _predict(_cluster("peak_tflops: -1"), "peak_tflops", "cluster-peak-negative"),
    _predict(_cluster("peak_tflops: .nan"), "peak_tflops", "cluster-peak-nan"),
    _predict(_cluster("peak_tflops: .inf"), "peak_tflops", "cluster-peak-inf"),
    _predict(_cluster("inter_node_bandwidth_GBps: 0"), "inter_node_bandwidth_GBps", "cluster-nic-zero"),
    _predict(_cluster("hbm_capacity_GiB: -80"), "hbm", "cluster-hbm-negative"),
    _predict(_cluster("colour: blue"), "colour", "cluster-unknown-key"),
    # --- run spec: strategy -----------------------------------------------------------------------
    _predict(_strategy("tp: 0"), "tp", "strategy-tp-zero"),
    _predict(_strategy("pp: -2"), "pp", "strategy-pp-negative"),
    _predict(_strategy("cp: .nan"), "cp", "strategy-cp-nan"),
    _predict(_strategy("ep: 1.5"), "ep", "strategy-ep-frac"),
    _predict(_strategy("vpp: 0"), "vpp", "strategy-vpp-zero"),
    _predict(_run_with(strategy="strategy: {tp: 1, micro_batch_size: 0, global_batch_size: 8}"), "micro_batch_size",
             "strategy-mbs-zero"),
    _predict(_run_with(strategy="strategy: {tp: 1, micro_batch_size: 1, global_batch_size: -8}"),
             "global_batch_size", "strategy-gbs-negative"),
    _predict(_strategy("recompute: sometimes"), "recompute", "strategy-recompute"),
    _predict(_strategy("zero_stage: 5"), "zero_stage", "strategy-zero-5"),
    _predict(_strategy("zero_stage: true"), "zero_stage", "strategy-zero-bool"),
    _predict(_strategy("precision: int4"), "precision", "strategy-precision"),
    _predict(_strategy("sequence_parallel: 'yes'"), "sequence_parallel", "strategy-sp-string"),
    _predict(_strategy("flash_attention: 1"), "flash_attention", "strategy-flash-int"),
    _predict(_strategy("tensor_parallel: 8"), "tensor_parallel", "strategy-unknown-key"),
    _predict(_run_with(strategy="strategy: [tp, 8]"), "strategy", "strategy-list"),
    # --- run spec: inline model -------------------------------------------------------------------
    _predict(_model("num_layers: 0").replace("num_layers: 4, ", ""), "num_layers", "model-layers-zero"),
    _predict(_model("ffn_hidden_size: -1"), "ffn_hidden_size", "model-ffn-negative"),
    _predict(_model("head_dim: .inf"), "head_dim", "model-headdim-inf"),
    _predict(_model("num_query_groups: 3"), "num_query_groups", "model-gqa-not-divisor"),
    _predict(_model("activation: relu6"), "activation", "model-activation"),
    _predict(_model("normalization: batchnorm"), "normalization", "model-norm"),
    _predict(_model("num_experts: -4"), "num_experts", "model-experts-negative"),
    _predict(_model("wings: 2"), "wings", "model-unknown-key"),
    # --- run spec: Hugging Face config ------------------------------------------------------------
    Case("hf-missing", ("predict", "{d}/run.yaml"), "config.json",
         {"run.yaml": _run_with(model="model: {hf_config: missing/config.json}")}),
    Case("hf-bad-json", ("predict", "{d}/run.yaml"), "config.json",
         {"run.yaml": _run_with(model="model: {hf_config: config.json}"), "config.json": "{not json"}),
    Case("hf-deep-json", ("predict", "{d}/run.yaml"), "config.json",
         {"run.yaml": _run_with(model="model: {hf_config: config.json}"), "config.json": "[" * 100000 + "]" * 100000}),
    Case("hf-not-object", ("predict", "{d}/run.yaml"), "config.json",
         {"run.yaml": _run_with(model="model: {hf_config: config.json}"), "config.json": "[1, 2]"}),
    Case("hf-unsupported-arch", ("predict", "{d}/run.yaml"), "model_type",
         {"run.yaml": _run_with(model="model: {hf_config: config.json}"),
          "config.json": json.dumps({"model_type": "no-such-arch", "hidden_size": 64})}),
    Case("hf-negative-field", ("predict", "{d}/run.yaml"), "num_hidden_layers",
         {"run.yaml": _run_with(model="model: {hf_config: config.json}"),
          "config.json": json.dumps({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": -32,
                                     "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000})}),
    Case("hf-extra-key", ("predict", "{d}/run.yaml"), "colour",
         {"run.yaml": _run_with(model="model: {hf_config: config.json, colour: blue}"),
          "config.json": json.dumps({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                                     "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000})}),
    # --- predict / validate flags -----------------------------------------------------------------
    Case("predict-profile-missing", ("predict", "{d}/run.yaml", "--profile", "{d}/noprofile"), "profile",
         {"run.yaml": GOOD_RUN}),
    Case("predict-profile-is-file", ("predict", "{d}/run.yaml", "--profile", "{d}/run.yaml"), "profile",
         {"run.yaml": GOOD_RUN}),
    Case("predict-profile-no-metadata", ("predict", "{d}/run.yaml", "--profile", "{d}/p"), "metadata",
         {"run.yaml": GOOD_RUN, "p/notes.txt": "empty profile"}),
    Case("predict-profile-bad-metadata", ("predict", "{d}/run.yaml", "--profile", "{d}/p"), "metadata",
         {"run.yaml": GOOD_RUN, "p/metadata.yaml": LAUGHS}),
    Case("catalog-unknown-kind", ("catalog", "tpus"), "kind"),
    # --- validation sets --------------------------------------------------------------------------
    Case("validate-missing", ("validate", "{d}/nope.yaml"), "nope.yaml"),
    _validate("id: r1\n", "validation", "validate-not-a-list"),
    _validate(GOOD_ROW.replace("- id: r1\n ", "-"), "id", "validate-row-no-id"),
    _validate(GOOD_ROW + GOOD_ROW, "r1", "validate-duplicate-ids"),
    _validate(GOOD_ROW.replace("step_time_s: 1.0", "step_time_s: .nan"), "step_time_s", "validate-nan-measured"),
    _validate(GOOD_ROW.replace("step_time_s: 1.0", "step_time_s: -1.0"), "step_time_s", "validate-negative-measured"),
    _validate(GOOD_ROW.replace("step_time_s: 1.0, how: measured", "how: measured"), "step_time_s",
              "validate-no-measured-time"),
    _validate(LAUGHS, "alias", "validate-billion-laughs"),
    _validate(GOOD_ROW.replace("source: test\n", "source: test\n  source: again\n"), "source", "validate-dup-key"),
    # --- search flags -----------------------------------------------------------------------------
    _search("--global-batch-size", "search-gbs-zero", "--global-batch-size", "0"),
    _search("--global-batch-size", "search-gbs-negative", "--global-batch-size", "-8"),
    _search("--global-batch-size", "search-gbs-text", "--global-batch-size", "lots"),
    _search("--seq-length", "search-seq-zero", "--seq-length", "0"),
    _search("--seq-length", "search-seq-1e308", "--seq-length", "1.0e308"),
    _search("--gpus-per-node", "search-gpn-zero", "--gpus-per-node", "0"),
    _search("--trials", "search-trials-zero", "--trials", "0"),
    _search("--trials", "search-trials-negative", "--trials", "-5"),
    _search("--top", "search-top-zero", "--top", "0"),
    _search("--max-tp", "search-maxtp-zero", "--max-tp", "0"),
    _search("--max-micro-batch-size", "search-maxmbs-negative", "--max-micro-batch-size", "-1"),
    _search("--price-per-gpu-hour", "search-price-negative", "--price-per-gpu-hour", "-1"),
    _search("--price-per-gpu-hour", "search-price-nan", "--price-per-gpu-hour", "nan"),
    _search("--tokens", "search-tokens-inf", "--tokens", "inf"),
    _search("--tokens", "search-tokens-zero", "--tokens", "0"),
    _search("--deadline-days", "search-deadline-nan", "--tokens", "1e12", "--deadline-days", "nan"),
    _search("--jobs", "search-jobs-zero", "--jobs", "0"),
    _search("model", "search-unknown-model", "--model", "no-such-model"),
    _search("gpu", "search-unknown-gpu", "--gpu", "no-such-gpu"),
    _search("--fix", "search-fix-unknown-knob", "--fix", "wings=2"),
    _search("--fix", "search-fix-bad-value", "--fix", "tp=abc"),
    _search("--fix", "search-fix-no-value", "--fix", "tp"),
    _search("--allow", "search-allow-empty-item", "--allow", "tp=1,,2"),
    _search("export", "search-export-unknown", "--export", "horovod"),
    _search("--storage", "search-storage-malformed", "--storage", "notaurl"),
    _search("--storage", "search-storage-bad-scheme", "--storage", "nosuchdb://x/y"),
    _search("--profile", "search-profile-missing", "--profile", "/nonexistent/profile-dir"),
    Case("search-gpus-empty-item", ("search", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8,,16"),
         "--gpus"),
    Case("search-gpus-zero", ("search", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "0"), "--gpus"),
    Case("search-gpus-text", ("search", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "eight"),
         "--gpus"),
    Case("search-max-gpus-zero", ("search", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--max-gpus", "0"),
         "--max-gpus"),
    Case("search-out-is-file", ("search", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8",
                                "--export", "megatron", "--out", "{d}/file.txt"), "--out", {"file.txt": "mine\n"}),
    # --- study files ------------------------------------------------------------------------------
    _study(_study_with(name="name: 'bad name!'"), "name", "study-bad-name"),
    _study(_study_with(models="models: []"), "models", "study-no-models"),
    _study(_study_with(models="models: [no-such-model]"), "models", "study-unknown-model"),
    _study(_study_with(gpus="gpus: [no-such-gpu]"), "gpus", "study-unknown-gpu"),
    _study(_study_with(gpu_counts="gpu_counts: 0"), "gpu_counts", "study-counts-zero"),
    _study(_study_with(gpu_counts="gpu_counts: {min: 64, max: 8}"), "gpu_counts", "study-counts-reversed"),
    _study(_study_with(gpu_counts="gpu_counts: {min: 8, max: 64, factor: 1}"), "factor", "study-counts-factor-1"),
    _study(_study_with(gpu_counts="gpu_counts: [8, .nan]"), "gpu_counts", "study-counts-nan"),
    _study(_study_with(batch="batch: {global_batch_size: 0}"), "global_batch_size", "study-gbs-zero"),
    _study(_study_with(batch="batch: {tokens_per_step: -1}"), "tokens_per_step", "study-tokens-negative"),
    _study(_study_with(seq_length="seq_length: 0"), "seq_length", "study-seq-zero"),
    _study(_study_with(search="search: {sampler: annealing}"), "sampler", "study-sampler"),
    _study(_study_with(search="search: {trials: 0}"), "trials", "study-trials-zero"),
    _study(_study_with(search="search: {profile: no-such-profile}"), "profile", "study-profile-missing"),
    _study(_study_with(outputs="outputs: {top_k: 0}"), "top_k", "study-topk-zero"),
    _study(_study_with(colour="colour: blue"), "colour", "study-unknown-key"),
    _study(_study_with(models="models: [llama3.1-8b, llama3.1-8b]"), "llama3.1-8b", "study-model-id-collision"),
    _study(LAUGHS, "alias", "study-billion-laughs"),
    _study(GOOD_STUDY + "gpus: [a100-sxm4-80gb]\n", "gpus", "study-duplicate-key"),
    _study("name: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", "nest", "study-deep-nesting"),
    Case("study-out-is-file", ("study", "run", "{d}/study.yaml", "--out", "{d}/file.txt"), "out",
         {"study.yaml": GOOD_STUDY, "file.txt": "mine\n"}),
    Case("study-out-foreign-folder", ("study", "run", "{d}/study.yaml", "--out", "{d}/mine"), "mine",
         {"study.yaml": GOOD_STUDY, "mine/thesis.json": "{}"}),
    Case("study-n-jobs-zero", ("study", "run", "{d}/study.yaml", "--n-jobs", "0", "--out", "{d}/out"), "--n-jobs",
         {"study.yaml": GOOD_STUDY}, out="out"),
    Case("study-storage-malformed", ("study", "run", "{d}/study.yaml", "--storage", "notaurl", "--out", "{d}/out"),
         "storage", {"study.yaml": GOOD_STUDY}, out="out"),
    Case("study-worker-ttl-zero", ("study", "worker", "{d}/study.yaml", "--storage", "sqlite:///{d}/w.db",
                                   "--claim-ttl", "0"), "--claim-ttl", {"study.yaml": GOOD_STUDY}),
    Case("study-worker-poll-nan", ("study", "worker", "{d}/study.yaml", "--storage", "sqlite:///{d}/w.db",
                                   "--poll", "nan"), "--poll", {"study.yaml": GOOD_STUDY}),
    Case("study-worker-max-problems-zero", ("study", "worker", "{d}/study.yaml", "--storage", "sqlite:///{d}/w.db",
                                            "--max-problems", "0"), "--max-problems", {"study.yaml": GOOD_STUDY}),
    Case("study-report-missing", ("study", "report", "{d}/nothing-here"), "nothing-here"),
    Case("study-report-foreign", ("study", "report", "{d}/mine"), "mine", {"mine/notes.txt": "not a study\n"}),
    # --- profile folders and traces ---------------------------------------------------------------
    Case("profile-fit-missing", ("profile", "fit", "{d}/noprofile"), "noprofile"),
    Case("profile-fit-no-metadata", ("profile", "fit", "{d}/p"), "metadata", {"p/gemm_bf16.csv": "m,n,k\n"}),
    Case("profile-fit-bad-metadata", ("profile", "fit", "{d}/p"), "metadata", {"p/metadata.yaml": "device: [\n"}),
    Case("profile-fit-metadata-list", ("profile", "fit", "{d}/p"), "metadata", {"p/metadata.yaml": "- a\n"}),
    Case("profile-run-budget-zero", ("profile", "run", "--device", "cpu", "--budget-seconds", "0", "--out", "{d}/p"),
         "--budget-seconds", out="p"),
    Case("profile-run-budget-nan", ("profile", "run", "--device", "cpu", "--budget-seconds", "nan", "--out", "{d}/p"),
         "--budget-seconds", out="p"),
    Case("profile-run-ops-unknown", ("profile", "run", "--device", "cpu", "--ops", "gemm,warp", "--out", "{d}/p"),
         "ops", out="p"),
    Case("profile-run-threads-zero", ("profile", "run", "--device", "cpu", "--threads", "0", "--out", "{d}/p"),
         "--threads", out="p"),
    Case("profile-run-device", ("profile", "run", "--device", "tpu", "--out", "{d}/p"), "--device", out="p"),
    Case("trace-missing", ("profile", "import-trace", "{d}/nope.json", "--out", "{d}/p"), "nope.json", out="p"),
    Case("trace-bad-json", ("profile", "import-trace", "{d}/t.json", "--out", "{d}/p"), "t.json",
         {"t.json": "{\"traceEvents\": [\n"}, out="p"),
    Case("trace-deep-json", ("profile", "import-trace", "{d}/t.json", "--out", "{d}/p"), "t.json",
         {"t.json": "[" * 100000 + "]" * 100000}, out="p"),
    Case("trace-no-events", ("profile", "import-trace", "{d}/t.json", "--out", "{d}/p"), "traceEvents",
         {"t.json": "{\"schema\": 1}"}, out="p"),
]


def test_enough_cases():
    assert len(CASES) >= 100
    assert len({case.id for case in CASES}) == len(CASES)


def _materialise(case: Case, folder: Path) -> list[str]:
    for name, content in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode("utf-8", "surrogateescape"))
    if case.special == "fifo":
        os.mkfifo(folder / "fifo")
    return [arg.replace("{d}", str(folder)) for arg in case.argv]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_gets_one_line_and_exit_2(case, tmp_path):
    argv = _materialise(case, tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.is_fifo()}
    env = dict(os.environ, PARPLAN_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200")
    start = time.perf_counter()
    command = [str(Path(sys.executable).with_name("parplan")), *argv]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=60)
    elapsed = time.perf_counter() - start
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-500:])
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1, proc.stderr[-1000:]
    assert len(lines[0]) < 600, lines[0][:200]
    assert case.names.lower() in lines[0].lower(), lines[0]
    assert elapsed < TIME_LIMIT_S, f"{elapsed:.2f} s"
    if case.out is not None:
        out = tmp_path / case.out
        assert not out.exists() or not any(out.iterdir()), sorted(out.iterdir())
    for path, content in before.items():  # no file the user had is changed or removed
        assert path.exists() and path.read_bytes() == content, path
