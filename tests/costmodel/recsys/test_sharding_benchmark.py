"""Helpers of benchmarks/sharding.py's measured miniatures (one gloo rank, in a child process)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import benchmarks._sharding_miniature as miniature  # noqa: E402
from benchmarks._sharding_miniature import MiniTable, critical_cpu_seconds, draw_rounds  # noqa: E402


def test_each_phase_lasts_as_long_as_its_busiest_rank_and_the_fastest_step_counts():
    # phases[rank, plan, step, phase]: one plan, two steps, two phases, two ranks
    phases = np.array([[[[1.0, 5.0], [2.0, 2.0]]],
                       [[[3.0, 1.0], [1.0, 4.0]]]])
    # step 0: max(1, 3) + max(5, 1) = 8; step 1: max(2, 1) + max(2, 4) = 6
    assert critical_cpu_seconds(phases).tolist() == [6.0]


def test_a_rank_idle_in_a_phase_does_not_shorten_it():
    busy = np.array([[[[4.0]]], [[[0.0]]]])
    assert critical_cpu_seconds(busy).tolist() == [4.0]


TABLES = [MiniTable("u", rows=5000, dim=8, pooling=4), MiniTable("z", rows=20000, dim=8, pooling=16, zipf=1.2)]


def test_every_round_looks_up_a_fresh_batch():
    rounds = draw_rounds(TABLES, batch=256, rounds=3, seed=0, mine=slice(0, 256))
    for t in TABLES:
        assert rounds[0][t.name].shape == (256, t.pooling)
        assert not np.array_equal(rounds[0][t.name], rounds[1][t.name])
        assert not np.array_equal(rounds[1][t.name], rounds[2][t.name])
        assert all(0 <= r[t.name].min() and r[t.name].max() < t.rows for r in rounds)


def test_the_ranks_slices_are_of_one_global_batch():
    whole = draw_rounds(TABLES, batch=64, rounds=2, seed=3, mine=slice(0, 64))
    halves = [draw_rounds(TABLES, batch=64, rounds=2, seed=3, mine=slice(r * 32, (r + 1) * 32)) for r in (0, 1)]
    for i in range(2):
        for t in TABLES:
            assert np.array_equal(np.concatenate([h[i][t.name] for h in halves]), whole[i][t.name])


def test_a_zipf_tables_hot_rows_stay_hot_from_round_to_round():
    # the hashing of ranks onto rows is drawn once per table: redrawn per batch, the hot rows would move
    rounds = draw_rounds(TABLES, batch=512, rounds=2, seed=1, mine=slice(0, 512))
    top = [set(np.argsort(np.bincount(r["z"].ravel(), minlength=20000))[-10:]) for r in rounds]
    assert len(top[0] & top[1]) >= 8
    assert len(top[0] & set(range(10))) <= 2  # hashed: the hot rows are not the first rows


class _Queue:
    def __init__(self) -> None:
        self.items: list = []

    def put(self, item) -> None:
        self.items.append(item)


def _timed_steps_probe() -> dict:
    """One gloo rank of the miniature with a slowed id draw and a recording lookup, in a process of its own.

    The worker initialises the default process group, of which a process has one: run inside the test
    process it would collide with any other test's (the conformance tests' fake world is session-wide).
    """
    import torch
    import torch.distributed as dist

    burn_s = 0.05
    drawn = 0
    real_draw = miniature._draw

    def slow_draw(*args, **kwargs):  # CPU time a timed step would show if ids were drawn in it
        nonlocal drawn
        drawn += 1
        start = time.process_time()
        while time.process_time() - start < burn_s:
            pass
        return real_draw(*args, **kwargs)

    seen: list = []

    class RecordingBag(torch.nn.EmbeddingBag):
        def forward(self, ids, offsets=None, *args, **kwargs):
            seen.append(ids.clone().tolist())
            return super().forward(ids, offsets, *args, **kwargs)

    miniature._draw = slow_draw
    torch.nn.EmbeddingBag = RecordingBag
    queue = _Queue()
    try:
        miniature._worker(0, 1, miniature._free_port(), PROBE_TABLES, [PROBE_PLAN], 16, 3, 1, 7, queue)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    _, _, phases = queue.items[0]
    return {"drawn": drawn, "seen": seen, "shape": list(phases.shape),
            "longest_step_s": float(phases.sum(axis=-1).max()), "burn_s": burn_s}


PROBE_TABLES = [MiniTable("a", rows=300, dim=4, pooling=3), MiniTable("b", rows=500, dim=4, pooling=2, zipf=1.05)]
PROBE_PLAN = {"a": ("table_wise", (0,)), "b": ("table_wise", (0,))}


def test_each_timed_step_looks_up_its_rounds_batch_drawn_outside_the_timed_region():
    code = ("import json, tests.costmodel.recsys.test_sharding_benchmark as t; "
            "print(json.dumps(t._timed_steps_probe()))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    tables = PROBE_TABLES
    assert result["drawn"] == 4 * len(tables)  # a batch per table for each of the 4 rounds (1 warm-up + 3 timed)
    expected = draw_rounds(tables, 16, 4, 7, slice(0, 16))
    seen = [np.array(ids) for ids in result["seen"]]
    assert len(seen) == 4 * len(tables)  # rounds in order, tables in order
    for index, ids in enumerate(seen):
        assert np.array_equal(ids, expected[index // 2][tables[index % 2].name].ravel())
    assert not np.array_equal(seen[0], seen[2])
    assert result["shape"] == [1, 3, len(miniature.PHASES)]
    assert result["longest_step_s"] < result["burn_s"]
