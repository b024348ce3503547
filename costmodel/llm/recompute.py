"""What activation recomputation re-runs, per the framework's policy.

``Strategy.recompute`` says none, full or selective; what *selective* recomputes is the
framework's (``Framework.selective_recompute``), so the policy of a run is one of:

- ``none``: nothing;
- ``full``: every layer's forward (Megatron-Core ``--recompute-granularity full``);
- ``megatron``: the attention core only (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 5:
  ``--recompute-granularity selective`` re-runs ``core_attn``);
- ``layer``: torchtitan's default selective option ``"2"``: every second transformer block
  is wrapped in a full checkpoint, the others keep everything (torchtitan @3faaa1a0
  torchtitan/parallelisms/parallelize_llama.py ``checkpoint_wrapper``:
  ``if not ptd_checkpoint_wrapper._count % ac_freq == 0: return module``);
- ``op``: torchtitan's op-level policy: the outputs of mm, flash / efficient attention and
  reduce-scatter are saved "except every second mm", everything else is recomputed
  (same file, ``_custom_policy`` over ``_save_list``). A Llama block issues its matmuls as
  wq, wk, wv, wo, w1, w3, w2 (torchtitan models/llama/model.py), so wk, wo and w3 (w2 without
  a gate) are re-run, with every element-wise op; the attention kernel is saved.

The same policy drives the memory model's saved bytes (``constraints.memory``); this module
is the time side.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["POLICIES", "attention_recompute_fraction", "layer_recompute_fraction", "recompute_policy"]

POLICIES: Final = ("none", "full", "megatron", "layer", "op")

# Share of a stage's layers that torchtitan's layer-level option "2" fully checkpoints (every second one).
LAYER_SAC_SHARE: Final = 0.5


def recompute_policy(run: Any) -> str:
    """The recomputation policy of ``run``: its ``recompute`` unless selective, then its framework's."""
    recompute = run.strategy.recompute
    if recompute != "selective":
        return str(recompute)
    framework = getattr(run, "framework", None)
    return framework.selective_recompute if framework is not None else "megatron"


def layer_recompute_fraction(policy: str) -> float:
    """Share of the layers whose whole forward is re-run before their backward."""
    return {"full": 1.0, "layer": LAYER_SAC_SHARE}.get(policy, 0.0)


def attention_recompute_fraction(policy: str) -> float:
    """Share of the layers whose attention core (and with it any CP exchange) is re-run."""
    if policy == "megatron":
        return 1.0
    return layer_recompute_fraction(policy)  # the op policy saves the attention output
