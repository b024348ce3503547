"""Trace import: a hand-written GPU trace (kernels, NCCL, unknowns) and a CPU trace torch.profiler records here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from costmodel.profiles import load_profile
from costmodel.profiling.trace import import_trace
from costmodel.specs.errors import SpecError

BF16 = "c10::BFloat16"


def _op(name: str, ts: float, dur: float, ext: int, dims: list[Any] | None = None,
        types: list[str] | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {"External id": ext, **(extra or {})}
    if dims is not None:
        body.update({"Input Dims": dims, "Input type": types or [BF16] * len(dims)})
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": body}


def _kernel(name: str, ts: float, dur: float, ext: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"External id": ext, "device": 0, "stream": 7}}


def _gpu_trace() -> dict[str, Any]:
    addmm = [[512], [512, 256], [256, 512], [], []]
    events = [
        _op("aten::linear", 0, 100, 1, [[512, 256], [512, 256], [512]]),
        _op("aten::addmm", 10, 80, 2, addmm, [BF16, BF16, BF16, "Scalar", "Scalar"]),
        _kernel("sm90_xmma_gemm_bf16bf16_bf16f32<true>(Params)", 1000, 30, 2),
        _op("aten::addmm", 120, 50, 3, addmm, [BF16, BF16, BF16, "Scalar", "Scalar"]),
        _kernel("sm90_xmma_gemm_bf16bf16_bf16f32<true>(Params)", 1100, 50, 3),
        _op("aten::layer_norm", 200, 50, 4, [[512, 256], [], [256], [256], [], []]),
        _op("aten::native_layer_norm", 205, 40, 5, [[512, 256], [], [256], [256], []]),
        _kernel("void at::native::vectorized_layer_norm_kernel<c10::BFloat16>(int)", 1200, 10, 5),
        _op("aten::bmm", 300, 20, 6, [[8, 64, 64], [8, 64, 64]]),
        _kernel("ampere_bf16_s16816gemm_batched", 1300, 5, 6),
        _op("aten::_scaled_dot_product_flash_attention", 400, 30, 7,
            [[2, 16, 1024, 128], [2, 4, 1024, 128], [2, 4, 1024, 128], [], [], [], []],
            [BF16, BF16, BF16, "Scalar", "Scalar", "Scalar", ""],
            {"Concrete Inputs": ["", "", "", "0.", "True", "False", ""]}),
        _kernel("flash_fwd_kernel<Flash_fwd_kernel_traits<128>>(Flash_fwd_params)", 1400, 500, 7),
        _op("record_param_comms", 500, 20, 8, extra={"Collective name": "allreduce", "dtype": "BFloat16",
                                                     "In msg nelems": 2**20, "Out msg nelems": 2**20,
                                                     "Group size": 8}),
        _kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)", 2000, 100, 8),
        _kernel("my_custom_fused_kernel<float, 4>(float*)", 2200, 9, 99),
    ]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
            "record_shapes": 1, "traceEvents": events}


@pytest.fixture
def gpu_trace(tmp_path) -> Path:
    path = tmp_path / "step.json"
    path.write_text(json.dumps(_gpu_trace()))
    return path


def test_gpu_trace_kernels_become_samples_with_their_shapes(gpu_trace, tmp_path):
    result = import_trace(gpu_trace, tmp_path / "p", device="h100-sxm5-80gb")
    assert result.mode == "gpu kernels"
    assert result.samples == {"gemm_bf16": 1, "memory": 1, "attention_fwd": 1, "nccl": 1}
    assert result.instances["gemm_bf16"] == 2  # two calls of one shape merged
    profile = load_profile(tmp_path / "p")
    assert profile.device == "h100-sxm5-80gb"
    gemm = profile.tables["gemm_bf16"]
    assert (gemm["m"][0], gemm["n"][0], gemm["k"][0]) == (512, 512, 256)
    assert gemm["latency_s"][0] == pytest.approx(40e-6)  # median of the kernels' 30 and 50 us
    norm = profile.tables["memory"]
    assert norm["kind"][0] == "norm" and norm["phase"][0] == "fwd" and norm["elements"][0] == 512 * 256
    assert norm["latency_s"][0] == pytest.approx(10e-6)  # the kernel under native_layer_norm, counted once
    attention = profile.tables["attention_fwd"]
    assert [attention[c][0] for c in ("batch", "seq_len", "num_heads", "num_kv_heads", "head_dim", "causal")] == \
        [2, 1024, 16, 4, 128, True]
    nccl = profile.tables["nccl"]
    assert (nccl["op"][0], nccl["num_gpus"][0], nccl["message_bytes"][0]) == ("all_reduce", 8, 2 * 2**20)


def test_gpu_trace_unknown_and_unsupported_are_counted_not_guessed(gpu_trace, tmp_path):
    result = import_trace(gpu_trace, tmp_path / "p")
    assert result.unknown == {"my_custom_fused_kernel": 1}
    assert result.unsupported == {"aten::bmm (batched GEMM: no batched table)": 1}
    assert load_profile(tmp_path / "p").device == "nvidia-h100-80gb-hbm3"  # the trace's GPU by default


def test_trace_without_recognised_operators_is_a_one_line_error(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"traceEvents": [_op("aten::copy_", 0, 5, 1, [[4], [4]])]}))
    with pytest.raises(SpecError, match="'trace' parameter") as info:
        import_trace(path, tmp_path / "p")
    assert "\n" not in str(info.value)
    path.write_text("not json")
    with pytest.raises(SpecError, match="readable Chrome trace"):
        import_trace(path, tmp_path / "p")


def test_cli_import_trace_reports_counts(gpu_trace, tmp_path, cli, capsys):
    assert cli(["profile", "import-trace", str(gpu_trace), "--out", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "4 samples from 5 events" in out
    assert "unknown (not recognised, not guessed): 1 events: my_custom_fused_kernel x1" in out
    assert "aten::bmm (batched GEMM: no batched table) x1" in out


def test_cpu_trace_recorded_here_is_imported(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    x = torch.randn(2, 128, 256, dtype=torch.bfloat16, requires_grad=True)
    norm = torch.nn.LayerNorm(256, dtype=torch.bfloat16)
    up = torch.nn.Linear(256, 512, dtype=torch.bfloat16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(2):
            h = up(norm(x))
            q = h[..., :256].reshape(2, 128, 4, 64).transpose(1, 2)
            o = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            y = torch.nn.functional.silu(o) * o
            y.sum().backward()
    trace = tmp_path / "cpu_step.json"
    prof.export_chrome_trace(str(trace))
    result = import_trace(trace, tmp_path / "p")
    assert result.mode == "cpu ops"
    profile_ = load_profile(tmp_path / "p")
    assert profile_.device == "cpu"
    gemm = profile_.tables["gemm_bf16"]
    shapes = set(zip(gemm["m"].tolist(), gemm["n"].tolist(), gemm["k"].tolist(), strict=True))
    assert (256, 512, 256) in shapes  # forward: 2 x 128 tokens, 256 -> 512
    assert result.instances["gemm_bf16"] >= 2 * 3  # forward, data- and weight-gradient GEMMs, two steps
    for table in ("attention_fwd", "attention_bwd"):
        row = [profile_.tables[table][c][0] for c in ("batch", "seq_len", "num_heads", "num_kv_heads", "head_dim",
                                                      "causal")]
        assert row == [2, 128, 4, 4, 64, True]
    memory = profile_.tables["memory"]
    kinds = set(zip(memory["kind"].tolist(), memory["phase"].tolist(), strict=True))
    assert {("norm", "fwd"), ("norm", "bwd"), ("activation", "fwd"), ("activation", "bwd")} <= kinds
    assert np.all(profile_.tables["gemm_bf16"]["latency_s"] > 0)
    assert sum(result.unknown.values()) > 0  # e.g. aten::fill_ of the loss gradient: counted, not placed


def test_cli_import_trace_json(gpu_trace, tmp_path, cli, capsys):
    import json

    assert cli(["profile", "import-trace", str(gpu_trace), "--out", str(tmp_path / "p"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sum(out["samples"].values()) == 4 and out["unknown"] == {"my_custom_fused_kernel": 1}
