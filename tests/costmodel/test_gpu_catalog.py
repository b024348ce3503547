"""The shipped GPU catalog (costmodel/catalog/gpus.yaml): names, sources, datasheet spot checks.

Citation keys in comments are those of docs/hardware_and_formulas.md section 8.
"""

from __future__ import annotations

import json

import pytest

from costmodel.specs.catalog import get_gpu, gpu_catalog
from costmodel.specs.errors import SpecError
from costmodel.specs.gpu import GPU_FIELDS, GPU_INT_FIELDS, GiB

CATALOG_NAMES = (
    "a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-80gb", "h100-sxm5-80gb", "h100-pcie-80gb",
    "h200-sxm-141gb", "gh200-96gb", "gh200-144gb", "b200", "gb200", "mi300x", "l40s",
    "b300", "gb300", "mi325x", "mi355x",
)
NEW_GPUS = ("b300", "gb300", "mi325x", "mi355x")  # issue 13 item 9
FIGURE_KEYS = ("peak_tflops", *GPU_FIELDS, *GPU_INT_FIELDS)


def figure(name: str, key: str) -> float:
    """Catalog-unit figure ``key`` of GPU ``name`` (TFLOP/s via ``peak_tflops.<dtype>``)."""
    data = get_gpu(name).to_dict()
    if key.startswith("peak_tflops."):
        return data["peak_tflops"][key.split(".", 1)[1]]
    return data[key]


@pytest.mark.parametrize("name", CATALOG_NAMES)
def test_catalog_name_loads(name):
    gpu = gpu_catalog()[name]
    assert gpu.name == name
    assert gpu.vendor in ("nvidia", "amd")
    assert gpu.display_name and gpu.display_name != name


@pytest.mark.parametrize("name", CATALOG_NAMES)
def test_every_figure_has_a_source(name):
    sources = dict(gpu_catalog()[name].sources)
    for key in FIGURE_KEYS:
        assert isinstance(sources.get(key), str) and sources[key].strip(), f"{name}: no source for {key}"
    # A misspelt source key would leave its figure unsourced while looking sourced.
    optional = {"gpus_per_nvlink_domain_used"} & set(gpu_catalog()[name].to_dict())  # sourced where given
    assert optional <= set(sources), f"{name}: no source for {optional - set(sources)}"
    assert set(sources) <= set(FIGURE_KEYS) | optional, f"{name}: unknown source keys {set(sources) - set(FIGURE_KEYS)}"


def test_a100_has_no_fp8_and_h100_has_it():
    a100 = get_gpu("a100-sxm4-80gb")
    assert not a100.supports("fp8")
    with pytest.raises(SpecError):
        a100.peak("fp8")
    h100 = get_gpu("h100-sxm5-80gb")
    assert h100.supports("fp8")
    assert h100.peak("fp8") == pytest.approx(1978.9e12)


@pytest.mark.parametrize(("name", "key", "expected"), [
    # H100 SXM dense bf16: 1830 MHz x 528 tensor cores x 512 FMA x 2 = 989.4 TFLOP/s [GK-H100], [MLE-ACC]
    ("h100-sxm5-80gb", "peak_tflops.bf16", 989.4),
    # A100 dense bf16 312 TFLOP/s, tf32 156, fp32 19.5 (NVIDIA datasheet via [MLE-ACC], [GK-A100])
    ("a100-sxm4-80gb", "peak_tflops.bf16", 312),
    ("a100-sxm4-40gb", "peak_tflops.tf32", 156),
    ("a100-pcie-80gb", "peak_tflops.fp32", 19.5),
    # B200 dense bf16 2250 / fp8 4500 (DGX B200 datasheet via [MLE-ACC] note 20)
    ("b200", "peak_tflops.bf16", 2250),
    ("b200", "peak_tflops.fp8", 4500),
    # MI300X dense bf16 1307.4 TFLOP/s [MLE-ACC], [TORCHAO-ROOF]
    ("mi300x", "peak_tflops.bf16", 1307.4),
    # L40S dense bf16 362.05 (sparse 733) [NV-L40S-COPY]
    ("l40s", "peak_tflops.bf16", 362.05),
    # HBM bandwidth: A100 80GB SXM 2039 GB/s [GK-A100], H100 SXM5 3.35 TB/s [HOPPER-WP-COPY],
    # H200 4.8 TB/s [MLE-ACC], A100 40GB 1555 GB/s [GK-A100]
    ("a100-sxm4-80gb", "hbm_bandwidth_GBps", 2039),
    ("h100-sxm5-80gb", "hbm_bandwidth_GBps", 3350),
    ("h200-sxm-141gb", "hbm_bandwidth_GBps", 4800),
    ("a100-sxm4-40gb", "hbm_bandwidth_GBps", 1555),
    # Capacity software sees: nvidia-smi 81920 MiB (A100 80GB) [NVSMI-A100-80], 81559 MiB (H100)
    # [NVSMI-H100], 143771 MiB (H200) [NVSMI-H200]
    ("a100-sxm4-80gb", "hbm_capacity_GiB", 80.0),
    ("h100-sxm5-80gb", "hbm_capacity_GiB", 81559 / 1024),
    ("h200-sxm-141gb", "hbm_capacity_GiB", 143771 / 1024),
    # SMs: A100 108 [GK-A100], H100 SXM5 132 [HOPPER-WP-COPY], B200 148 [TORCHAO-PR4002]
    ("a100-sxm4-80gb", "num_sms", 108),
    ("h100-sxm5-80gb", "num_sms", 132),
    ("b200", "num_sms", 148),
    # NVLink per GPU, one direction: NVLink3 300, NVLink4 450, NVLink5 900 GB/s [MLE-NET]
    ("a100-sxm4-80gb", "intra_node_bandwidth_GBps", 300),
    ("h100-sxm5-80gb", "intra_node_bandwidth_GBps", 450),
    ("b200", "intra_node_bandwidth_GBps", 900),
    # Scale-out per GPU, one direction: DGX A100 8x200 Gb/s [NCCL-812], DGX H100 8x400 Gb/s [DGX-BASEPOD]
    ("a100-sxm4-80gb", "inter_node_bandwidth_GBps", 25),
    ("h100-sxm5-80gb", "inter_node_bandwidth_GBps", 50),
    # GB200 NVL72: 4 GPUs per tray, 72 per NVLink domain [AIWIKI-GB200], [MLPERF-GB200]
    ("gb200", "gpus_per_node", 4),
    ("gb200", "nvlink_domain_size", 72),
    # HGX B300 datasheet (8 GPUs, sparse): BF16 36 PF, FP8 72 PF -> per GPU dense 2250 / 4500
    ("b300", "peak_tflops.bf16", 2250),
    ("b300", "peak_tflops.fp8", 4500),
    # B300 nvidia-smi 275040 MiB, GB300 284208 MiB (aiconfigurator-core 0.12.0 systems/*.yaml)
    ("b300", "hbm_capacity_GiB", 275040 / 1024),
    ("gb300", "hbm_capacity_GiB", 284208 / 1024),
    # ConnectX-8 800 Gb/s per GPU = 100 GB/s one direction (HGX B300, GB300 NVL72: 72 CX8 per rack)
    ("b300", "inter_node_bandwidth_GBps", 100),
    ("gb300", "inter_node_bandwidth_GBps", 100),
    # GB300 NVL72: 360 PF fp8 dense / 72 GPUs; 576 TB/s / 72; 72 GPUs per NVLink domain, 4 per tray
    ("gb300", "peak_tflops.fp8", 5000),
    ("gb300", "hbm_bandwidth_GBps", 8000),
    ("gb300", "nvlink_domain_size", 72),
    ("gb300", "gpus_per_node", 4),
    # MI325X: MI300X compute, 6 TB/s HBM3E; ROCm spec table 304 CUs, 256 GiB
    ("mi325x", "peak_tflops.bf16", 1307.4),
    ("mi325x", "hbm_bandwidth_GBps", 6000),
    ("mi325x", "num_sms", 304),
    # MI355X: 256 CUs x 2.4 GHz x 8192 fp8 FLOP/clk (ISSCC 2026) = 5.03 PF; 288 GiB; 8 TB/s
    ("mi355x", "peak_tflops.fp8", 256 * 2.4e9 * 8192 / 1e12),
    ("mi355x", "peak_tflops.bf16", 256 * 2.4e9 * 4096 / 1e12),
    ("mi355x", "num_sms", 256),
    ("mi355x", "hbm_capacity_GiB", 288),
])
def test_datasheet_spot_check(name, key, expected):
    assert figure(name, key) == pytest.approx(expected, rel=1e-3)


def test_capacity_is_stored_in_bytes():
    # 81559 MiB from nvidia-smi [NVSMI-H100]
    assert get_gpu("h100-sxm5-80gb").hbm_capacity_bytes == pytest.approx(81559 * 2**20, rel=1e-4)
    assert get_gpu("a100-sxm4-80gb").hbm_capacity_bytes == 80 * GiB


def test_sanity_ordering_across_generations():
    bf16 = {name: get_gpu(name).peak("bf16") for name in ("a100-sxm4-80gb", "h100-sxm5-80gb", "b200")}
    assert bf16["b200"] > bf16["h100-sxm5-80gb"] > bf16["a100-sxm4-80gb"]
    assert get_gpu("h200-sxm-141gb").hbm_capacity_bytes > get_gpu("h100-sxm5-80gb").hbm_capacity_bytes
    assert get_gpu("h200-sxm-141gb").hbm_bandwidth_bytes_per_s > get_gpu("h100-sxm5-80gb").hbm_bandwidth_bytes_per_s
    assert get_gpu("gb200").peak("bf16") > get_gpu("b200").peak("bf16")


@pytest.mark.parametrize("name", CATALOG_NAMES)
def test_entry_is_internally_consistent(name):
    gpu = get_gpu(name)
    peaks = dict(gpu.peak_flops)
    # Tensor-core rates climb as precision falls; fp32 (non-tensor) is the slowest.
    assert peaks["bf16"] == peaks["fp16"]
    assert peaks["bf16"] > peaks.get("tf32", peaks["fp32"]) >= peaks["fp32"]
    if "fp8" in peaks:
        assert peaks["fp8"] > peaks["bf16"]
    # The scale-up domain is whole nodes; the network is slower and higher-latency than the node.
    assert gpu.nvlink_domain_size % gpu.gpus_per_node == 0
    assert gpu.inter_node_bandwidth_bytes_per_s < gpu.intra_node_bandwidth_bytes_per_s
    assert gpu.intra_node_latency_s < gpu.inter_node_latency_s
    assert 1e-6 <= gpu.intra_node_latency_s <= 20e-6
    assert 1e-6 <= gpu.inter_node_latency_s <= 50e-6


def test_mi355x_has_no_tf32_matrix_rate():
    # CDNA 4 has no XF32/TF32 matrix instructions; the catalog leaves the dtype out rather than guess
    assert not get_gpu("mi355x").supports("tf32")
    assert get_gpu("mi325x").supports("tf32")


def test_blackwell_ultra_outranks_blackwell_in_memory_not_dense_bf16():
    # Blackwell Ultra adds HBM (288 GB), FP4 and attention throughput; dense bf16 stays at B200 / GB200's
    assert get_gpu("b300").peak("bf16") == get_gpu("b200").peak("bf16")
    assert get_gpu("gb300").peak("bf16") == get_gpu("gb200").peak("bf16")
    assert get_gpu("b300").hbm_capacity_bytes > 1.4 * get_gpu("b200").hbm_capacity_bytes
    assert get_gpu("gb300").inter_node_bandwidth_bytes_per_s == 2 * get_gpu("gb200").inter_node_bandwidth_bytes_per_s


@pytest.mark.parametrize("name", NEW_GPUS)
def test_new_gpu_has_a_builtin_profile_or_a_labelled_fallback(name):
    from costmodel.profiles import aiconfigurator_adapter as adapter

    system = adapter.system_for(name)  # raises for a GPU the adapter does not know
    if name in ("b300", "gb300"):
        assert system == {"b300": "b300_sxm", "gb300": "gb300"}[name]
    else:
        assert system is None  # aiconfigurator-core 0.12.0 has no AMD system
        with pytest.raises(adapter.ProfileDataError, match="ships no measurements"):
            adapter.load_tables(name)


@pytest.mark.parametrize("name", ("b300", "gb300"))
def test_blackwell_ultra_builtin_tables_load(name):
    pytest.importorskip("pyarrow")
    from costmodel.profiles import aiconfigurator_adapter as adapter

    try:
        tables = adapter.load_tables(name)
    except adapter.ProfileDataError as exc:  # package absent or of another version
        pytest.skip(str(exc))
    assert {"gemm_bf16", "gemm_fp8", "attention_fwd", "nccl"} <= set(tables)
    assert tables["gemm_bf16"]["latency_s"].size > 1000
    from costmodel.profiles.profile import builtin_profile

    assert builtin_profile(name).name == f"aiconfigurator-core 0.12.0: {name}"  # what predict's "profile" says


@pytest.mark.parametrize("name", ("mi325x", "mi355x"))
def test_predict_output_labels_the_analytic_fallback(name, capsys, tmp_path):
    # (b300 / gb300: test_blackwell_ultra_builtin_tables_load checks the profile name predict prints;
    # a predict there first fits the predictors on the tables, 15-25 s each)
    from parplan.cli import main

    spec = f"model: llama3.1-8b\nseq_length: 4096\ncluster: {{gpu: {name}, num_gpus: 8}}\n" \
           "strategy: {tp: 1, pp: 1, micro_batch_size: 1, global_batch_size: 8, precision: bf16}\n"
    path = tmp_path / "run.yaml"
    path.write_text(spec)
    assert main(["predict", str(path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["profile"] is None
    assert any(f"no sampled table for {name}" in w for w in result["warnings"])
