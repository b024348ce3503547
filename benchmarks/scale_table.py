"""The scale table of issue 18: Llama 3.1 8B / 70B / 405B on 64 ... 16,384 H100, strong and weak scaling.

17 problems, all at sequence length 8192 on H100 SXM5 80 GB. Each model has a base problem; strong
scaling keeps its global batch and multiplies the GPUs by 4, weak scaling multiplies the batch with
the GPUs (the sequences per GPU of the base problem):

- 8B: base 64 GPUs / batch 256; strong 256, 1024; weak 256 / 1024, 1024 / 4096, 4096 / 16384.
- 70B: base 256 GPUs / batch 512 (the README's main job); strong 64, 1024, 4096; weak 1024 / 2048,
  4096 / 8192.
- 405B: base 1024 GPUs / batch 512; strong 4096, 16384; weak 4096 / 2048, 16384 / 8192.

Llama 3 405B itself trained on 16,384 H100 at 8192 tokens with batches of 4M-16M tokens
(arXiv 2407.21783, Sec. 3.4.1 and Table 4), i.e. 512-2048 sequences: the strong-scaling end of the
405B row.

Used by ``benchmarks/pin_predictions.py`` (the pinned predictions) and meant for the batch-vs-scalar
figures of ``benchmarks/search.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.specs import get_gpu, get_model
from search import SearchProblem

GPU = "h100-sxm5-80gb"
SEQ_LENGTH = 8192


@dataclass(frozen=True)
class ScaleCase:
    """One problem of the table: a model on ``num_gpus`` H100 with ``global_batch_size`` sequences."""

    name: str
    model: str
    num_gpus: int
    global_batch_size: int
    scaling: str
    """``base``, ``strong`` (the base batch on more GPUs) or ``weak`` (batch grown with the GPUs)."""

    def problem(self) -> SearchProblem:
        return SearchProblem(model=get_model(self.model), gpu=get_gpu(GPU), num_gpus=self.num_gpus,
                             global_batch_size=self.global_batch_size, seq_length=SEQ_LENGTH)


def _row(model: str, tag: str, base: tuple[int, int], strong: tuple[int, ...],
         weak: tuple[int, ...]) -> list[ScaleCase]:
    gpus, batch = base
    cases = [ScaleCase(f"{tag}-{gpus}-b{batch}", model, gpus, batch, "base")]
    cases += [ScaleCase(f"{tag}-{n}-b{batch}", model, n, batch, "strong") for n in strong]
    cases += [ScaleCase(f"{tag}-{n}-b{batch * n // gpus}", model, n, batch * n // gpus, "weak") for n in weak]
    return cases


SCALE_CASES: tuple[ScaleCase, ...] = tuple(
    _row("llama3.1-8b", "8b", (64, 256), (256, 1024), (256, 1024, 4096))
    + _row("llama3.1-70b", "70b", (256, 512), (64, 1024, 4096), (1024, 4096))
    + _row("llama3.1-405b", "405b", (1024, 512), (4096, 16384), (4096, 16384))
)
