"""Run-spec overrides of catalog figures reach every formula that uses them (issue 11, item 6)."""

from __future__ import annotations

from typing import Any

import pytest

from costmodel.predict import predict_run, timer_for
from costmodel.specs import get_gpu
from costmodel.specs.errors import SpecError
from costmodel.specs.gpu import CLUSTER_KEYS, DTYPES, UNUSED_PEAK_DTYPES
from costmodel.specs.runspec import run_spec_from_mapping

H100 = "h100-sxm5-80gb"
CATALOG = get_gpu(H100)


def _run(cluster: dict[str, Any] | None = None, model: str = "llama3.1-8b", num_gpus: int = 16,
         **strategy: Any) -> Any:
    knobs = {"tp": 8, "pp": 1, "micro_batch_size": 1, "global_batch_size": 32, "zero_stage": 1,
             "recompute": "selective", "precision": "bf16", **strategy}
    return run_spec_from_mapping({"model": model, "seq_length": 4096,
                                  "cluster": {"gpu": H100, "num_gpus": num_gpus, **(cluster or {})},
                                  "strategy": knobs})


def _predict(cluster: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    return predict_run(_run(cluster, **kwargs))


def _metric(out: dict[str, Any], name: str) -> float:
    return float(out["breakdown"][name] if name in out["breakdown"] else out[name])


def _peak(dtype: str, factor: float) -> dict[str, Any]:
    return {"peak_tflops": {dtype: dict(CATALOG.peak_flops)[dtype] / 1e12 * factor}}


# (case id, overrides, run knobs, output, expected sign of (overridden - catalog)): each override in the
# direction that should make the run faster or give it more memory. 16 H100 on two nodes: tp 8 inside a
# node (measured NCCL table), dp 2 across the network.
CASES = [
    ("peak_tflops.bf16", _peak("bf16", 2), {}, "compute_s", -1),
    ("peak_tflops.fp16", _peak("fp16", 2), {"precision": "fp16"}, "compute_s", -1),
    ("peak_tflops.fp8", _peak("fp8", 2), {"precision": "fp8"}, "compute_s", -1),
    ("hbm_bandwidth_GBps", {"hbm_bandwidth_GBps": 2 * 3350}, {}, "compute_s", -1),
    ("intra_node_bandwidth_GBps", {"intra_node_bandwidth_GBps": 2 * 450}, {}, "tp_comm_s", -1),
    ("intra_node_latency_us", {"intra_node_latency_us": 0.5}, {}, "tp_comm_s", -1),
    ("inter_node_bandwidth_GBps", {"inter_node_bandwidth_GBps": 200}, {"overlap_grad_reduce": False},
     "dp_comm_exposed_s", -1),
    ("inter_node_latency_us", {"inter_node_latency_us": 1}, {"pp": 2}, "pp_comm_s", -1),  # 4 MiB sends
    ("nvlink_domain_size", {"nvlink_domain_size": 16}, {"tp": 16, "allow_tp_across_nodes": True},
     "tp_comm_s", -1),
    ("gpus_per_node", {"gpus_per_node": 4}, {}, "tp_comm_s", +1),  # fewer per node: tp 8 crosses nodes
    ("gpus_per_nvlink_domain_used", {"gpus_per_nvlink_domain_used": 4}, {}, "tp_comm_s", +1),  # 4 of 8 used
    ("hbm_capacity_GiB", {"hbm_capacity_GiB": 160}, {}, "usable_memory_gib", +1),
    ("memory_reserve_GiB", {"memory_reserve_GiB": 8}, {}, "usable_memory_gib", -1),
    ("fragmentation_fraction", {"fragmentation_fraction": 0.2}, {}, "usable_memory_gib", -1),
]
REJECTED = {"num_sms": 200, **{f"peak_tflops.{d}": 1000 for d in UNUSED_PEAK_DTYPES}}


@pytest.mark.parametrize(("overrides", "knobs", "output", "sign"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_override_moves_its_output_in_the_right_direction(overrides: dict[str, Any], knobs: dict[str, Any],
                                                          output: str, sign: int) -> None:
    base = _metric(_predict(**knobs), output)
    changed = _metric(_predict(overrides, **knobs), output)
    assert base > 0
    assert (changed - base) * sign > 0.01 * base


def test_every_overridable_figure_is_tested_or_refused() -> None:
    covered = {c[0] for c in CASES} | set(REJECTED)
    figures = (CLUSTER_KEYS - {"gpu", "num_gpus", "peak_tflops"}) | {f"peak_tflops.{d}" for d in DTYPES}
    assert figures == covered


@pytest.mark.parametrize("field", sorted(REJECTED))
def test_figures_that_time_nothing_are_refused(field: str) -> None:
    key, _, dtype = field.partition(".")
    value = {dtype: REJECTED[field]} if dtype else REJECTED[field]
    with pytest.raises(SpecError, match=field.replace(".", r"\.")) as err:
        _run({key: value})
    assert "\n" not in str(err.value)


def test_more_memory_lets_a_run_fit() -> None:
    big = {"model": "llama3.1-70b", "num_gpus": 8, "tp": 8, "zero_stage": 0, "recompute": "none"}
    assert not _predict(**big)["fits"]
    assert _predict({"hbm_capacity_GiB": 2000}, **big)["fits"]


def test_compute_bound_time_follows_the_overridden_peak() -> None:
    base = _predict()
    faster = _predict(_peak("bf16", 2))
    # compute-bound GEMMs take half the time; memory-bound kernels and attention's floor do not
    assert 0.5 * base["breakdown"]["compute_s"] < faster["breakdown"]["compute_s"] < 0.8 * base["breakdown"]["compute_s"]
    assert faster["mfu"] < base["mfu"]  # the peak grew more than the step shrank


def test_measured_times_scaled_to_an_override_say_so() -> None:
    note = [w for w in _predict(_peak("bf16", 0.5))["warnings"] if w.startswith("what-if")]
    assert len(note) == 1 and H100 in note[0] and "peak_tflops.bf16" in note[0]
    assert not [w for w in _predict()["warnings"] if w.startswith("what-if")]
    assert not [w for w in _predict({"inter_node_bandwidth_GBps": 50})["warnings"] if w.startswith("what-if")]


def test_an_override_does_not_refit_the_profile() -> None:
    overridden = _run(_peak("bf16", 3)).cluster.gpu
    assert timer_for(overridden).predictors is timer_for(CATALOG).predictors


# The case: 8 H100 FSDP with the bf16 peak overridden to 300 TFLOP/s printed an MFU of 2.0.
MFU_RUNS = [
    {"model": "llama3.1-8b", "num_gpus": 8, "tp": 1, "zero_stage": 3, "global_batch_size": 128},
    {"model": "llama3.1-8b", "num_gpus": 16},
    {"model": "llama3.1-8b", "num_gpus": 16, "precision": "fp8"},
    {"model": "llama3.1-70b", "num_gpus": 64, "pp": 4, "global_batch_size": 64},
]
MFU_OVERRIDES = [{}, _peak("bf16", 300 / 989.4), _peak("bf16", 1 / 10), _peak("bf16", 4), _peak("fp8", 1 / 10),
                 {"hbm_bandwidth_GBps": 300}, {"hbm_bandwidth_GBps": 30000}]


@pytest.mark.parametrize("overrides", MFU_OVERRIDES, ids=lambda o: str(o) or "catalog")
@pytest.mark.parametrize("knobs", MFU_RUNS, ids=lambda k: f"{k['model']}x{k['num_gpus']}-{k.get('precision', 'bf16')}")
def test_mfu_never_exceeds_one(knobs: dict[str, Any], overrides: dict[str, Any]) -> None:
    out = _predict(overrides, **knobs)
    assert 0 < out["mfu"] <= 1
