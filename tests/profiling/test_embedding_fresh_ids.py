"""The lookup timing loop gives every call, warm-up and timed, a batch of ids no earlier call used: a timed
call that repeats a batch finds its rows in cache (cycling 8 sets ran 1.5-2.2x faster at pooling 1-4 on
10^6-10^7 rows on this project's CPU), a reuse that training's fresh batches and the cache model lack."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.profiling import embedding as profiling
from costmodel.profiling.embedding import INDEX_SETS, EmbeddingPoint

torch = pytest.importorskip("torch")


class _RecordingF:
    """Stands in for ``torch.nn.functional``: records the id tensor of every embedding_bag call."""

    def __init__(self) -> None:
        self.ids: list = []

    def embedding_bag(self, ids, weight, offsets, mode):
        self.ids.append(ids)
        return torch.nn.functional.embedding_bag(ids, weight, offsets, mode=mode)


@pytest.mark.parametrize("distribution", ["uniform", "zipf1.2"])
def test_every_call_gets_a_batch_of_its_own(distribution):
    point = EmbeddingPoint(rows=5000, dim=8, pooling=4, distribution=distribution, batch=64)
    weight = torch.zeros(point.rows, point.dim)
    recorder = _RecordingF()
    repeats = 5
    result = profiling._measure_point(point, weight, np.random.default_rng(0), repeats, recorder)
    assert result.repeats == repeats
    assert len(recorder.ids) == INDEX_SETS + repeats  # the warm-up and the timed calls
    assert len({id(t) for t in recorder.ids}) == len(recorder.ids)  # no tensor passed twice
    batches = {tuple(t.tolist()) for t in recorder.ids}
    assert len(batches) == len(recorder.ids)  # no two calls with the same ids
