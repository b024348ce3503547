"""parplan's per-GPU memory beside Megatron-LM's theoretical-memory estimate and published figures.

Part A: ``constraints.memory`` against Megatron-LM's own estimate, reimplemented here (not
copied) from ``megatron/training/theoretical_memory_usage.py`` at github.com/NVIDIA/Megatron-LM
commit d98e8a64ddf34856e74b24714e3bedb2f5a39553 (``compute_weight_and_optimizer_memory``,
``compute_activation_memory`` for sequence parallelism with selective recompute,
``compute_activation_memory_without_sp`` otherwise), term by term on the first pipeline
stage (the rank Megatron calls most loaded): weights + gradients + optimizer, transformer-layer
activations, and the total. Part B: both against every published per-GPU memory figure with a
complete config found (Korthikanti et al. 2022 Figure 1, ``shared/validation/memory_figures.yaml``
or the copy beside ``tests/constraints``; the ZeRO paper's Figure 1 model states per ZeRO stage; the
measured allocator peaks of Megatron-LM's own 7B memory tests, ``compare_measured``).
Part C: every run of ``studies/validation/public.yaml`` really ran, so each must fit: its worst-stage
peak against what the GPU can give (``ClusterSpec.usable_memory_bytes``), the tightest rows listed;
rows with ``unstated`` knobs take validate's nearest fitting completion, as ``parplan validate`` does.

Errors are parplan / reference - 1. Targets: within 3% of Megatron on the terms both model the
same way (each row's ``same_terms``), within 5% of a published figure. Where a term differs the row says
which and why (``differs``).

Usage: ``python benchmarks/memory.py [--json]``
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from constraints import check
from constraints.memory import stage_memory
from costmodel.specs import run_spec_from_mapping
from costmodel.specs.gpu import GiB
from costmodel.specs.model import ModelSpec
from costmodel.specs.runspec import RunSpec

HERE: Final = Path(__file__).resolve().parent
FIGURES: Final = (HERE.parent.parent / "shared" / "validation" / "memory_figures.yaml",
                  HERE.parent / "tests" / "constraints" / "memory_figures.yaml")
MEGATRON: Final = "github.com/NVIDIA/Megatron-LM @d98e8a64 megatron/training/theoretical_memory_usage.py"
MEGATRON_TARGET: Final = 0.03
PUBLISHED_TARGET: Final = 0.05
# theoretical_memory_usage.py compute_activation_memory_without_sp: "buffer for optimizer and
# miscellaneous temporaries (5% overhead)". A Megatron figure, kept on Megatron's side only.
MEGATRON_NO_SP_OVERHEAD: Final = 1.05


# -- Megatron-LM's estimate, reimplemented (dense GPT layers: no MoE, MLA or MTP) -----------------
def megatron_weight_and_optimizer_bytes(run: RunSpec) -> float:
    """``compute_weight_and_optimizer_memory``: bytes of weights, grads and optimizer on the most loaded shard.

    18 bytes per parameter (bf16 weight, fp32 main grad, fp32 master + Adam moments), or
    6 + 12/dp with the distributed optimizer; the most loaded shard holds 1/pp of the layers
    and the input embedding (and the untied output layer when pp = 1).
    """
    m, s = run.model, run.strategy
    h, a, g = m.hidden_size, m.num_attention_heads, m.num_query_groups
    gated = 1.5 if m.activation == "swiglu" else 1.0
    norm = 1 if m.normalization == "rmsnorm" else 2
    query_ratio = m.head_dim * a / h
    attention = 2 * h * h * (1 + g / a) * query_ratio
    mlp = 2 * h * m.ffn_hidden_size * gated  # type: ignore[operator]
    layernorms = 2 * h * norm
    embedding = h * m.vocab_size
    sharded = ((attention + mlp) * m.num_layers / s.pp + embedding) / s.tp
    replicated = (layernorms * m.num_layers + norm * h) / s.pp
    if not m.tie_embeddings and s.pp == 1:
        sharded += embedding / s.tp
    per_param = 6 + 12 / (s.dp * s.cp) if s.zero_stage >= 1 else 18
    return (sharded + replicated) * per_param


def _pipeline_factor(run: RunSpec) -> float:
    """Megatron's in-flight scaling of the per-layer footprint (already times all layers)."""
    s = run.strategy
    if s.vpp > 1:
        return 1 + (s.pp - 1) / (s.pp * s.vpp)
    if s.pp > 1:
        return min(1.0, s.num_microbatches / s.pp)
    return 1.0


def megatron_layer_activation_bytes(run: RunSpec) -> float:
    """Transformer-layer activations of the first stage (Korthikanti et al. 2022 Table 2, as Megatron codes it)."""
    m, s = run.model, run.strategy
    sbh = run.seq_length * s.micro_batch_size * m.hidden_size
    if s.sequence_parallel and s.recompute == "selective":
        per_layer = sbh * (18 + 4 * m.ffn_hidden_size / m.hidden_size) / s.tp  # type: ignore[operator]
        return per_layer * m.num_layers * _pipeline_factor(run)
    per_layer = sbh * (10 + 24 / s.tp)
    return per_layer * m.num_layers * _pipeline_factor(run) * MEGATRON_NO_SP_OVERHEAD


def megatron_activation_bytes(run: RunSpec) -> float:
    """``compute_activation_memory`` (SP + selective) or ``..._without_sp``: all activations, first stage."""
    m, s = run.model, run.strategy
    sb, h = run.seq_length * s.micro_batch_size, m.hidden_size
    factor = _pipeline_factor(run)
    if s.sequence_parallel and s.recompute == "selective":
        extra = (8 * sb * s.pp + sb * h * s.pp) * factor  # token ids and embedding dropout, pp in flight
        if s.pp == 1:
            extra += sb * h * 4 * (1 + m.vocab_size / h)  # output-layer input and CE loss
        return megatron_layer_activation_bytes(run) + extra / s.tp
    extra = (8 * sb * s.pp + sb * h * s.pp) * factor
    if s.pp == 1:
        extra += (sb * m.vocab_size / s.tp + sb * h) * 2
    return megatron_layer_activation_bytes(run) + extra * MEGATRON_NO_SP_OVERHEAD


# -- configurations --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    """One run compared with Megatron's estimate; ``differs`` names terms the two model differently."""

    label: str
    model: str
    num_gpus: int
    strategy: dict[str, Any]
    seq_length: int | None = None
    differs: tuple[str, ...] = ()


_LLAMA = ("activations: Megatron's formula keeps 4*ffn/h bytes per token for the MLP and full-width "
          "K and V (its own TODO: 'take into account query_projection_size'); a SwiGLU MLP keeps fc1's "
          "2*ffn output and the ffn-wide product (6*ffn bytes), GQA keeps K and V at kv_channels*groups, "
          "and Llama trains without dropout masks (constraints/memory.py activation_bytes_per_layer)")
_NO_SP = ("activations: Megatron's without-SP formula adds a 5% 'optimizer and miscellaneous temporaries' "
          "overhead and drops the attention core (flash attention) but keeps its 24/t TP-sharded share; "
          "parplan counts flash attention's output O and fp32 log-sum-exp instead")
_FULL = ("activations: Megatron's estimate has no full-recompute branch (recompute_granularity 'full' "
         "falls to the without-SP formula); under full recompute parplan keeps only each layer's input "
         "plus one layer's rebuilt forward")
_EDGES = ("activations and total (every row): outside the layers the two keep different tensors. parplan "
          "keeps the 16-bit embedding output of each in-flight micro-batch, not TP-sharded, and on the last "
          "stage the logits (constraints/memory.py other_bytes); Megatron keeps the 1-byte embedding dropout "
          "mask and 8-byte token ids divided by tp, and at pp = 1 its output-layer term. The weight term "
          "differs by parplan's biases and learned position embeddings, which Megatron's formula leaves out")
_SP_OFF_SELECTIVE = ("activations: without SP Megatron uses the no-recompute formula even for selective "
                     "recompute; parplan drops the attention core")

CONFIGS: Final = (
    Config("gpt3-175b tp8 pp8 vpp3 sel+sp distopt", "gpt3-175b", 512,
           {"tp": 8, "pp": 8, "vpp": 3, "micro_batch_size": 1, "global_batch_size": 512,
            "sequence_parallel": True, "recompute": "selective", "zero_stage": 1}),
    Config("gpt3-175b tp8 pp8 vpp3 sel+sp no-distopt", "gpt3-175b", 512,
           {"tp": 8, "pp": 8, "vpp": 3, "micro_batch_size": 1, "global_batch_size": 512,
            "sequence_parallel": True, "recompute": "selective", "zero_stage": 0}),
    Config("gpt3-175b tp8 pp16 sel+sp distopt", "gpt3-175b", 1024,
           {"tp": 8, "pp": 16, "micro_batch_size": 1, "global_batch_size": 1024,
            "sequence_parallel": True, "recompute": "selective", "zero_stage": 1}),
    Config("gpt3-175b tp8 pp8 no-recompute no-sp", "gpt3-175b", 512,
           {"tp": 8, "pp": 8, "micro_batch_size": 1, "global_batch_size": 512,
            "sequence_parallel": False, "recompute": "none", "zero_stage": 1}, differs=(_NO_SP,)),
    Config("gpt3-175b tp8 pp8 full-recompute", "gpt3-175b", 512,
           {"tp": 8, "pp": 8, "micro_batch_size": 1, "global_batch_size": 512,
            "sequence_parallel": True, "recompute": "full", "zero_stage": 1}, differs=(_FULL,)),
    Config("llama2-70b tp8 pp4 sel+sp distopt", "llama2-70b", 256,
           {"tp": 8, "pp": 4, "micro_batch_size": 1, "global_batch_size": 512,
            "sequence_parallel": True, "recompute": "selective", "zero_stage": 1}, differs=(_LLAMA,)),
    Config("llama2-70b tp8 pp4 sel+sp no-distopt", "llama2-70b", 256,
           {"tp": 8, "pp": 4, "micro_batch_size": 1, "global_batch_size": 512,
            "sequence_parallel": True, "recompute": "selective", "zero_stage": 0}, differs=(_LLAMA,)),
    Config("llama3.1-70b tp8 pp4 vpp5 sel+sp distopt", "llama3.1-70b", 512,
           {"tp": 8, "pp": 4, "vpp": 5, "micro_batch_size": 1, "global_batch_size": 512,
            "sequence_parallel": True, "recompute": "selective", "zero_stage": 1}, differs=(_LLAMA,)),
    Config("llama3.1-70b tp8 pp8 full-recompute", "llama3.1-70b", 512,
           {"tp": 8, "pp": 8, "micro_batch_size": 1, "global_batch_size": 512,
            "sequence_parallel": True, "recompute": "full", "zero_stage": 1}, differs=(_FULL,)),
    Config("llama3.1-8b tp1 pp1 dp8 sel", "llama3.1-8b", 8,
           {"tp": 1, "pp": 1, "micro_batch_size": 1, "global_batch_size": 64,
            "sequence_parallel": False, "recompute": "selective", "zero_stage": 1},
           differs=(_SP_OFF_SELECTIVE,)),
    Config("llama3.1-8b tp2 pp1 dp4 sel+sp distopt", "llama3.1-8b", 8,
           {"tp": 2, "pp": 1, "micro_batch_size": 1, "global_batch_size": 64,
            "sequence_parallel": True, "recompute": "selective", "zero_stage": 1}, differs=(_LLAMA,)),
    Config("llama3.1-8b tp4 pp2 dp4 sel+sp no-distopt", "llama3.1-8b", 32,
           {"tp": 4, "pp": 2, "micro_batch_size": 2, "global_batch_size": 128,
            "sequence_parallel": True, "recompute": "selective", "zero_stage": 0}, differs=(_LLAMA,)),
)


def _run(model: str | dict[str, Any], num_gpus: int, strategy: dict[str, Any], gpu: str = "h100-sxm5-80gb",
         seq_length: int | None = None) -> RunSpec:
    data: dict[str, Any] = {"model": model, "cluster": {"gpu": gpu, "num_gpus": num_gpus},
                            "framework": "megatron-core",
                            "strategy": {"precision": "bf16", "flash_attention": True, "tp_comm_overlap": False,
                                         **strategy}}
    if seq_length is not None:
        data["seq_length"] = seq_length
    return run_spec_from_mapping(data)


@dataclass
class Row:
    """One configuration, GiB per term for both, and parplan / Megatron - 1."""

    label: str
    parplan: dict[str, float]
    megatron: dict[str, float]
    error: dict[str, float]
    same_terms: list[str]
    """The terms both estimates model alike (the 3% target applies to these)."""
    differs: list[str] = field(default_factory=list)


def _terms_parplan(run: RunSpec) -> dict[str, float]:
    mem = stage_memory(run, 0)
    states = mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes
    return {"weights_optimizer": states / GiB, "layer_activations": mem.layer_activation_bytes / GiB,
            "activations": (mem.activations_bytes + mem.other_bytes) / GiB, "total": mem.total_bytes / GiB}


def _terms_megatron(run: RunSpec) -> dict[str, float]:
    states = megatron_weight_and_optimizer_bytes(run)
    acts = megatron_activation_bytes(run)
    return {"weights_optimizer": states / GiB, "layer_activations": megatron_layer_activation_bytes(run) / GiB,
            "activations": acts / GiB, "total": (states + acts) / GiB}


def compare_megatron(configs: tuple[Config, ...] = CONFIGS) -> list[Row]:
    """Part A rows."""
    rows = []
    for c in configs:
        run = _run(c.model, c.num_gpus, c.strategy, seq_length=c.seq_length)
        ours, theirs = _terms_parplan(run), _terms_megatron(run)
        same = ["weights_optimizer"] if c.differs else ["weights_optimizer", "layer_activations"]
        rows.append(Row(c.label, ours, theirs, {k: ours[k] / theirs[k] - 1 for k in ours},
                        same_terms=same, differs=[*c.differs, _EDGES]))
    return rows


# -- published figures ---------------------------------------------------------------------------
@dataclass
class Published:
    """One published figure, parplan's and Megatron's estimate of it, and their errors."""

    source: str
    label: str
    term: str
    published_gib: float
    parplan_gib: float
    megatron_gib: float | None

    @property
    def parplan_error(self) -> float:
        return self.parplan_gib / self.published_gib - 1

    @property
    def megatron_error(self) -> float | None:
        return None if self.megatron_gib is None else self.megatron_gib / self.published_gib - 1


KORTHIKANTI: Final = ("Korthikanti et al. 2022 (arXiv 2205.05198) Figure 1, as transcribed in "
                      "shared/validation/memory_figures.yaml")


def _korthikanti_run(entry: dict[str, Any], recompute: str, sp: bool) -> RunSpec:
    # The figure's setting (the figures file's header): fp16, Adam, no optimizer sharding, seq 2048,
    # vocabulary 51200, GELU 4h, learned positions, no flash attention (2022).
    model = {**entry["model"], "vocab_size": 51200, "seq_length": 2048, "activation": "gelu",
             "normalization": "layernorm", "position_embedding": "learned", "dropout": True}
    strategy = {**entry["strategy"], "recompute": recompute, "sequence_parallel": sp, "zero_stage": 0,
                "precision": "fp16", "flash_attention": False,
                "dp": entry["num_gpus"] // (entry["strategy"]["tp"] * entry["strategy"]["pp"])}
    return _run(model, entry["num_gpus"], strategy, gpu="a100-sxm4-80gb")


ZERO: Final = ("Rajbhandari et al. 2020 (arXiv 1910.02054) Figure 1: model states of a 7.5B-parameter model on "
                "64 GPUs with mixed-precision Adam (K = 12): 120, 31.4, 16.6 and 1.9 GB for the baseline, P_os, "
                "P_os+g and P_os+g+p (decimal GB)")
ZERO_PARAMS: Final = 7.5e9
ZERO_GPUS: Final = 64
ZERO_FIGURES_GB: Final = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}


def compare_zero() -> list[Published]:
    """ZeRO Figure 1: parplan's model-state bytes per parameter under DeepSpeed ZeRO stage 0-3, times 7.5B.

    Any dense model serves (the figure counts bytes per parameter).
    """
    from constraints.memory import model_state_bytes, params_on_gpu

    out = []
    for stage, gb in ZERO_FIGURES_GB.items():
        run = run_spec_from_mapping({"model": "llama3.1-8b", "seq_length": 2048, "framework": "deepspeed",
                                     "cluster": {"gpu": "a100-sxm4-80gb", "num_gpus": ZERO_GPUS},
                                     "strategy": {"dp": ZERO_GPUS, "zero_stage": stage, "global_batch_size": 64}})
        per_param = sum(model_state_bytes(run, 0)[:3]) / sum(params_on_gpu(run, 0))
        # Megatron's formula (fp32 main grads, no ZeRO-2/3) is not DeepSpeed's setting: no Megatron column.
        out.append(Published(ZERO, "zero-7.5b", f"model states (ZeRO stage {stage})", gb * 1e9 / GiB,
                             per_param * ZERO_PARAMS / GiB, None))
    return out


def _figures_file() -> Path | None:
    return next((p for p in FIGURES if p.is_file()), None)


def _layer_states_megatron(run: RunSpec) -> float:
    """Megatron's 18 bytes/param on the layers only (the figure's convention leaves out embeddings)."""
    m, s = run.model, run.strategy
    return 18 * 12 * m.num_layers * m.hidden_size**2 / (s.tp * s.pp)


MCORE_TESTS: Final = ("github.com/NVIDIA/Megatron-LM tests/functional_tests/test_cases/{case}/"
                      "golden_values_dev_dgx_h100.json @{commit}: mem-max-allocated-bytes, torch "
                      "allocated_bytes.all.peak (megatron/training/training.py @d98e8a64 L3445) of the last rank "
                      "(the tensorboard writer, global_vars.py L241), max over the test's iterations; its "
                      "model_config.yaml at that commit, run on 1 node of 8 H100 (tests/test_utils/recipes/h100)")
# The memory tests' MODEL_ARGS; unset flags take Megatron-LM's defaults (arguments.py: ffn 4h, GeLU, LayerNorm,
# learned absolute positions, dropout 0.1, linear biases, fp32 main grads, no SP).
MCORE_7B: Final = {"name": "gpt3-7b-memory-speed", "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                   "num_query_groups": 8, "ffn_hidden_size": 16384, "vocab_size": 131073, "seq_length": 8192,
                   "activation": "gelu", "normalization": "layernorm", "position_embedding": "learned",
                   "max_position_embeddings": 8192, "dropout": True, "tie_embeddings": False}
# MLA + MoE + MTP, unfused attention (--attention-backend unfused), GPT-2 BPE vocabulary (50257) padded to
# --make-vocab-size-divisible-by 3232 x tp 2 = 51712; one 1024-wide shared expert, layer 0 dense.
MCORE_MOE: Final = {"name": "moe-mla-memory-speed", "num_layers": 16, "hidden_size": 1024, "num_attention_heads": 32,
                    "num_query_groups": 32, "ffn_hidden_size": 4096, "vocab_size": 51712, "seq_length": 4096,
                    "activation": "swiglu", "normalization": "rmsnorm", "position_embedding": "rope",
                    "dropout": False, "tie_embeddings": False, "add_bias_linear": False, "num_experts": 32,
                    "moe_router_topk": 4, "moe_ffn_hidden_size": 1024, "num_shared_experts": 1,
                    "first_k_dense_layers": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_norm": True, "mtp_num_layers": 1}
_DENSE_7B: Final = {"dp": 2, "global_batch_size": 8, "sequence_parallel": False, "flash_attention": True}
# (test case, golden-values commit, model, strategy, measured peak bytes)
MCORE_MEMORY_TESTS: Final = (
    ("gpt/gpt3_7b_tp1_pp4_memory_speed", "6e091e1b", MCORE_7B,
     {**_DENSE_7B, "tp": 1, "pp": 4, "vpp": 8, "micro_batch_size": 1}, 60720852992),
    ("gpt/gpt3_7b_tp4_pp1_memory_speed", "6e091e1b", MCORE_7B,
     {**_DENSE_7B, "tp": 4, "pp": 1, "vpp": 1, "micro_batch_size": 2}, 57143791616),
    # scope mr-broken in the recipes at d98e8a64; the golden values are those of the config at 11debfa7
    ("moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed", "11debfa7", MCORE_MOE,
     {"tp": 2, "pp": 2, "vpp": 4, "dp": 2, "ep": 4, "etp": 1, "micro_batch_size": 4, "global_batch_size": 32,
      "sequence_parallel": True, "flash_attention": False, "moe_token_dispatcher": "alltoall"}, 60111630336),
)


def compare_measured() -> list[Published]:
    """Measured allocator peaks of Megatron-LM's own memory tests, the last pipeline stage (the logging rank).

    The Megatron column is its formula's first-stage estimate, so it is given only where that is the last stage
    and the model is one the formula covers (no MoE, MLA or MTP).
    """
    out = []
    for case, commit, model, strategy, peak_bytes in MCORE_MEMORY_TESTS:
        run = _run(model, 8, {"zero_stage": 1, "recompute": "none", "overlap_grad_reduce": True, **strategy})
        last = run.strategy.pp - 1
        covered = not last and not run.model.is_moe
        megatron = (megatron_weight_and_optimizer_bytes(run) + megatron_activation_bytes(run)) / GiB if covered \
            else None
        label = case.split("/")[1].removeprefix("gpt3_").removeprefix("mcore_te_").removesuffix("_memory_speed")
        out.append(Published(MCORE_TESTS.format(case=case, commit=commit), label, "allocator peak, last stage",
                             peak_bytes / GiB, stage_memory(run, last).total_bytes / GiB, megatron))
    return out


def compare_published() -> list[Published]:
    """Part B rows (the figures file's rows only where it is found)."""
    out = compare_zero() + compare_measured()
    path = _figures_file()
    if path is None:
        return out
    for entry in yaml.safe_load(path.read_text(encoding="utf-8")):
        name = entry["model"]["name"]
        base = _korthikanti_run(entry, "none", False)
        out.append(Published(KORTHIKANTI, name, "params+optimizer (layers)", entry["params_opt_gib"],
                             stage_memory(base, 0).layer_states_bytes / GiB, _layer_states_megatron(base) / GiB))
        for setting, recompute, sp in (("none", "none", False), ("selective_sp", "selective", True)):
            run = _korthikanti_run(entry, recompute, sp)
            # Megatron's no-SP formula assumes flash attention (no 5as/h scores term): not the figure's setting.
            megatron = megatron_layer_activation_bytes(run) / GiB if sp else None
            out.append(Published(KORTHIKANTI, name, f"layer activations ({setting})",
                                 entry["activations_gib"][setting],
                                 stage_memory(run, 0).layer_activation_bytes / GiB, megatron))
    return out


# -- Part C: runs that ran must fit ------------------------------------------------------------------
PUBLIC_RUNS: Final = HERE.parent / "studies" / "validation" / "public.yaml"
TIGHTEST: Final = 8


@dataclass
class Ran:
    """One published run's worst-stage peak beside the usable memory of its GPU."""

    run_id: str
    gpu: str
    peak_gib: float
    usable_gib: float
    oom_probability: float
    completed: dict[str, Any] = field(default_factory=dict)

    @property
    def headroom_gib(self) -> float:
        return self.usable_gib - self.peak_gib


def compare_ran(path: Path = PUBLIC_RUNS) -> list[Ran]:
    """Every public run's verdict (as stated, or validate's nearest fitting completion of its unstated knobs)."""
    from studies.validate import load_validation_set, nearest_fitting_completion, with_row_framework

    out = []
    for entry in load_validation_set(path):
        run = run_spec_from_mapping(with_row_framework(entry), path.parent)
        verdict, changes = check(run), {}
        if not verdict.fits and entry.get("unstated"):
            found = nearest_fitting_completion(run, entry["unstated"])
            if found is not None:
                run, changes = found
                verdict = check(run)
        out.append(Ran(entry["id"], run.cluster.gpu.name, verdict.peak_memory_gib, verdict.usable_bytes / GiB,
                       verdict.oom_probability, changes))
    return out


# -- output --------------------------------------------------------------------------------------
def summary(rows: list[Row], published: list[Published]) -> dict[str, Any]:
    same = [abs(r.error[t]) for r in rows for t in r.same_terms]
    pub = [abs(p.parplan_error) for p in published]
    return {"megatron_same_terms_max_abs_error": max(same, default=None),
            "megatron_target": MEGATRON_TARGET,
            "megatron_target_met": bool(same) and max(same) <= MEGATRON_TARGET,
            "published_max_abs_error": max(pub, default=None), "published_target": PUBLISHED_TARGET,
            "published_target_met": bool(pub) and max(pub) <= PUBLISHED_TARGET,
            "published_figures": len(published), "published_file": str(_figures_file())}


def ran_summary(ran: list[Ran]) -> dict[str, Any]:
    """False "does not fit" count over the runs that ran, and the tightest headroom."""
    false_oom = [r.run_id for r in ran if r.headroom_gib < 0]
    return {"runs": len(ran), "false_oom": len(false_oom), "false_oom_runs": false_oom,
            "min_headroom_gib": min((r.headroom_gib for r in ran), default=None)}


def print_ran(ran: list[Ran], out: Any = sys.stdout) -> None:
    print(f"C. published runs that ran ({PUBLIC_RUNS.name}): worst-stage peak vs usable memory, GiB "
          f"({TIGHTEST} tightest)", file=out)
    head = f"{'run':46} {'gpu':16} {'peak':>7} {'usable':>7} {'headroom':>9} {'P(oom)':>7}"
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in sorted(ran, key=lambda r: r.headroom_gib / r.usable_gib)[:TIGHTEST]:
        done = " (completed: " + ", ".join(f"{k}={v}" for k, v in r.completed.items()) + ")" if r.completed else ""
        print(f"{r.run_id:46} {r.gpu:16} {r.peak_gib:7.2f} {r.usable_gib:7.2f} {r.headroom_gib:+9.2f} "
              f"{r.oom_probability:7.3f}{done}", file=out)
    s = ran_summary(ran)
    print(f"runs that ran predicted not to fit: {s['false_oom']} of {s['runs']}", file=out)


def _pct(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:+.1f}%"


def print_report(rows: list[Row], published: list[Published], out: Any = sys.stdout) -> None:
    print(f"A. parplan vs Megatron-LM theoretical memory ({MEGATRON}), first pipeline stage, GiB", file=out)
    head = f"{'config':44} {'term':18} {'parplan':>9} {'megatron':>9} {'error':>8}"
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in rows:
        for i, term in enumerate(("weights_optimizer", "layer_activations", "activations", "total")):
            label = r.label if i == 0 else ""
            mark = "" if term in r.same_terms else " *"
            print(f"{label:44} {term + mark:18} {r.parplan[term]:9.2f} {r.megatron[term]:9.2f} "
                  f"{_pct(r.error[term]):>8}", file=out)
    print("* modelled differently (no 3% target):", file=out)
    for note in dict.fromkeys(n for r in rows for n in r.differs):
        print(f"  - {note}", file=out)
    print(file=out)
    print("B. published per-GPU memory figures, GiB", file=out)
    if not published:
        print("  (no figures file found)", file=out)
    head = f"{'model':16} {'term':34} {'published':>9} {'parplan':>9} {'error':>8} {'megatron':>9} {'error':>8}"
    print(head, file=out)
    print("-" * len(head), file=out)
    for p in published:
        meg = "-" if p.megatron_gib is None else f"{p.megatron_gib:9.2f}"
        print(f"{p.label:16} {p.term:34} {p.published_gib:9.2f} {p.parplan_gib:9.2f} {_pct(p.parplan_error):>8} "
              f"{meg:>9} {_pct(p.megatron_error):>8}", file=out)
    for source in dict.fromkeys(p.source for p in published):
        print(f"  source: {source}", file=out)
    s = summary(rows, published)
    print(file=out)
    print(f"same-term rows vs Megatron: max |error| {_pct(s['megatron_same_terms_max_abs_error'])} "
          f"(target {MEGATRON_TARGET:.0%}: {'met' if s['megatron_target_met'] else 'NOT met'})", file=out)
    print(f"published figures: max |error| {_pct(s['published_max_abs_error'])} over {len(published)} "
          f"(target {PUBLISHED_TARGET:.0%}: {'met' if s['published_target_met'] else 'NOT met'})", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    rows, published, ran = compare_megatron(), compare_published(), compare_ran()
    if args.json:
        print(json.dumps({"megatron": [asdict(r) for r in rows],
                          "published": [asdict(p) | {"parplan_error": p.parplan_error,
                                                     "megatron_error": p.megatron_error} for p in published],
                          "ran": [asdict(r) | {"headroom_gib": r.headroom_gib} for r in ran],
                          "summary": summary(rows, published) | {"ran": ran_summary(ran)}}, indent=1))
    else:
        print_report(rows, published)
        print()
        print_ran(ran)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
