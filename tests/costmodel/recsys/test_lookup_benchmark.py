"""The small version of benchmarks/embedding.py: on real CPU EmbeddingBag timings, the distribution-aware
lookup model beats the distribution-blind one on held-out cells."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
BENCHMARK = Path(__file__).resolve().parents[3] / "benchmarks" / "embedding.py"


def _benchmark():
    spec = importlib.util.spec_from_file_location("embedding_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_both_models_fit_held_out_cpu_timings_within_a_sanity_bound():
    """On this CPU's timings both models stay within a sanity bound; which one is closer is the benchmark's
    figure, not a test's: it depends on the CPU (the aware model was ahead on the Intel VM of the earlier
    recordings and is 2-5 points behind on a Zen 5 VM, whose FBGEMM lookups gain little from skew)."""
    bench = _benchmark()
    timed = bench.measure_grid(bench.SMALL, rounds=1, seed=0, max_table_bytes=2**30)
    # 72 cells: 30% = 21 points, 2 unit costs at 8 points each (parameters_for); 10% would leave the roofline.
    # Bound: with the per-bag cost merged into the line reads (no place for the call's fixed cost) the aware
    # model missed by 53% on the Zen 5 VM; kept apart, 27%.
    report = bench.evaluate(timed, fraction=0.3, seeds=3)
    assert report["aware_mape"] < 40.0 and report["blind_mape"] < 40.0, report


def test_aware_columns_recover_a_skew_dependent_cost_the_blind_ones_cannot():
    """Timings made from the aware model's own counts (known unit costs, 5% log-normal noise): fitted on
    30% of the CI grid, the aware model predicts the rest within the noise, and the blind one, which
    prices a Zipf table's hot rows as uniform misses, cannot."""
    from costmodel.recsys.embedding import CacheLevels, lookup_counts
    from costmodel.recsys.lookup_fit import TimedLookup, columns, held_out_errors

    bench = _benchmark()
    caches = CacheLevels(1 << 20, 32 << 20, 8 << 20)  # fixed, not this machine's: a deterministic test
    grid = [TimedLookup(bench.DISTRIBUTIONS[p.distribution], p.rows, p.dim, p.pooling, p.batch, 1.0)
            for p in bench.grid(bench.SMALL["rows"], bench.SMALL["dims"], bench.SMALL["poolings"],
                                bench.SMALL["batch"], max_table_bytes=2**30)]
    # per bag; per line read, and again per line missing each cache level and per TLB miss (the two unit
    # costs a fit on 21 points has: parameters_for, MERGES[2])
    costs = np.array([30e-9, 2e-9, 2e-9, 2e-9, 2e-9, 2e-9])
    seconds = lookup_counts(columns(grid, caches, aware=True), 64.0) @ costs
    noise = np.random.default_rng(0).lognormal(0.0, 0.05, len(grid))
    timed = [dataclasses.replace(t, seconds=float(s)) for t, s in zip(grid, seconds * noise)]
    result = held_out_errors(timed, caches, fraction=0.3, seed=0)
    assert result.aware_mape < 8.0 < result.blind_mape, (result.aware_mape, result.blind_mape)


def test_fraction_above_ten_percent_is_refused(capsys):
    assert _benchmark().main(["--fraction", "0.5"]) == 2
    assert "fraction" in capsys.readouterr().err


def test_zero_passes_are_refused(capsys):
    assert _benchmark().main(["--passes", "0"]) == 2
    assert "passes" in capsys.readouterr().err


def test_a_cell_keeps_its_fastest_pass_and_the_noise_floor_compares_halves():
    from costmodel.recsys.lookup_fit import TimedLookup
    from costmodel.specs.recsys import AccessDistribution

    bench = _benchmark()

    def cell(seconds: float) -> TimedLookup:
        return TimedLookup(AccessDistribution(), 1000, 32, 4, 256, seconds)

    passes = [[cell(2e-5)], [cell(1e-5)], [cell(4e-5)], [cell(2e-5)]]
    assert [t.seconds for t in bench.fastest(passes)] == [1e-5]
    assert bench.noise_floor(passes) == 50.0  # fastest of passes 1-2 (1e-5) against 3-4 (2e-5)
    assert bench.noise_floor(passes[:1]) is None


def test_saved_timings_load_back_and_a_bad_file_is_one_line_exit_2(tmp_path, capsys):
    from costmodel.recsys.lookup_fit import TimedLookup
    from costmodel.specs.recsys import AccessDistribution

    bench = _benchmark()
    passes = [[TimedLookup(AccessDistribution(kind="zipf", zipf_exponent=1.05), 1000, 32, 4, 256, 2e-5)]]
    path = tmp_path / "timings.json"
    bench.save_passes(passes, str(path), 1e10)
    assert bench.load_passes(str(path)) == (passes, 1e10)
    assert [p.name for p in tmp_path.iterdir()] == ["timings.json"]  # no temporary file left
    bad = tmp_path / "bad.json"
    bad.write_text('{"passes": [[["zipf9", 1000, 32, 4, 256, 2e-5]]]}')
    assert bench.main(["--load", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "load" in err and "zipf9" in err and len(err.strip().splitlines()) == 1


def test_several_saved_files_load_as_one_measurement(tmp_path):
    from costmodel.recsys.lookup_fit import TimedLookup
    from costmodel.specs.recsys import AccessDistribution

    bench = _benchmark()

    def cell(seconds: float) -> TimedLookup:
        return TimedLookup(AccessDistribution(), 1000, 32, 4, 256, seconds)

    bench.save_passes([[cell(3e-5)], [cell(2e-5)]], str(tmp_path / "a.json"), 1e10)
    bench.save_passes([[cell(1e-5)]], str(tmp_path / "b.json"), 2e10)
    passes, stream = bench.load_many([str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert [[t.seconds for t in p] for p in passes] == [[3e-5], [2e-5], [1e-5]]
    assert stream == 2e10  # the least disturbed streaming read of the runs
    assert [t.seconds for t in bench.fastest(passes)] == [1e-5]
