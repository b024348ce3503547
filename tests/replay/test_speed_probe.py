"""The miniature benchmark's machine-speed probe and speed normalisation (benchmarks/_speed_probe.py and its use in
benchmarks/replay_miniatures.py): a recording's times at one common machine speed."""

import os
import sys
from pathlib import Path

import pytest

from costmodel.specs.errors import SpecError
from tests.benchmark_module import load_benchmark
from tests.replay.synth import step_trace, write

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import _replay_miniature as recording  # noqa: E402
import _speed_probe as probe  # noqa: E402

bench = load_benchmark("replay_miniatures")
CONFIGS = [recording.Config(layers, world, batch) for layers in bench.LAYERS for world in bench.WORLDS
           for batch in bench.BATCHES]


def _note(round_, probe_ms=None):
    extra = {} if probe_ms is None else {
        "probe_cores": (0, 1), "probe_before_s": (probe_ms * 1e-3, probe_ms * 1e-3),
        "probe_after_s": (probe_ms * 1e-3, probe_ms * 1e-3), "probe_work": probe.PROBE_WORK}
    return recording.RecordingNote(round=round_, recorded="2026-12-02 02:00:00", seconds=4.0, load_before=1.0,
                                   load_after=1.0, **extra)


def _record(folder, steps_us, note, world=1):
    folder.mkdir(parents=True)
    for rank in range(world):  # every rank: a recording's graph holds all of them
        write(folder / f"rank{rank}.json", step_trace(steps_us, rank, world))
    if note is not None:
        note.write(folder / "recording.json")


def _row(source, target, predicted_s, measured_s, kind="layers"):
    row = {"source": source, "target": target, "kind": kind}
    for name in bench.ESTIMATORS:
        row[f"{name}_predicted_s"], row[f"{name}_measured_s"] = predicted_s, measured_s
        row[f"{name}_error"] = predicted_s / measured_s - 1.0
    return row


@pytest.mark.parametrize(("source_speed", "target_speed"), [(1.0, 1.5), (1.5, 1.0), (0.7, 1.3)])
def test_a_pair_recorded_at_two_known_speeds_is_normalised_back_to_its_unscaled_error(source_speed, target_speed):
    """The source's own step 10 ms predicts 11 ms for a target whose own step is 12 ms (error -8.3 %); recorded with
    the machine at known slowdowns, every time of a recording (and its probe) is that slowdown x its own figure."""
    probes = {"src": 5e-3 * source_speed, "tgt": 5e-3 * target_speed, "other": 5e-3 * 1.1}
    factors = probe.speed_factors(probes)
    row = _row("src", "tgt", 11e-3 * source_speed, 12e-3 * target_speed)
    bench.normalise_rows([row], {"src": factors["src"], "tgt": factors["tgt"]})
    assert row["median_error"] == pytest.approx(11 / 12 * source_speed / target_speed - 1.0)  # raw: off
    for name in bench.ESTIMATORS:
        assert row[f"{name}_normalised_error"] == pytest.approx(11 / 12 - 1.0)
    # the common speed is the median recording's (1.1 here): both times are expressed at it
    assert row["median_normalised_measured_s"] == pytest.approx(12e-3 * 1.1)


def test_probes_in_the_notes_put_every_recording_at_the_median_speed(tmp_path):
    """A configuration recorded three times with the machine at 1x, 2x and 1.5x (steps and probe alike): its
    speed factors are the probe / the run's median probe, and its median steps agree once divided by them."""
    speeds = (1.0, 2.0, 1.5)
    for config in CONFIGS:
        for round_, speed in enumerate(speeds):
            _record(tmp_path / f"round{round_}" / config.name, [speed * d for d in (900.0, 700.0, 800.0)],
                    _note(round_, probe_ms=4.0 * speed), config.world)
    recorded = bench.choose_recordings(bench.find_recordings(tmp_path))
    assert recorded[CONFIGS[0]]["probes_s"] == pytest.approx([4e-3, 8e-3, 6e-3])
    factors = bench.recording_speeds(recorded)
    for config in CONFIGS:
        assert factors[config] == pytest.approx([1 / 1.5, 2 / 1.5, 1.0])
        at_one_speed = [m / f for m, f in zip(recorded[config]["medians_s"], factors[config])]
        assert at_one_speed == pytest.approx([1.5 * 800e-6] * 3)
    tracking = bench.speed_tracking(recorded)
    assert tracking["correlation"] == pytest.approx(1.0) and tracking["slope"] == pytest.approx(1.0)
    assert tracking["spread_raw"] == pytest.approx(2.0) and tracking["spread_normalised"] == pytest.approx(1.0)


def test_a_probe_that_does_not_follow_the_steps_shows_as_no_correlation():
    steps = {"a": [1.0, 2.0, 1.0, 2.0], "b": [3.0, 6.0, 3.0, 6.0]}
    probes = {"a": [1.0, 1.0, 2.0, 2.0], "b": [1.0, 1.0, 2.0, 2.0]}  # slow in rounds 2-3; the steps in 1 and 3
    figures = probe.probe_tracking(steps, probes)
    assert figures["correlation"] == pytest.approx(0.0, abs=1e-9) and figures["slope"] == pytest.approx(0.0, abs=1e-9)
    assert figures["spread_normalised"] > figures["spread_raw"] - 1e-9  # normalising by it does not help
    assert probe.probe_tracking({"a": [1.0, 2.0]}, {"a": [1.0, 1.0]}) is None  # too few / constant probe


@pytest.mark.parametrize("probed", [(), (0,)])  # no note has a probe; one of them has
def test_recordings_without_probes_analyse_raw_only_and_say_so(tmp_path, probed, monkeypatch):
    monkeypatch.setattr(bench, "HEADLINE_NORMALISED", True)  # were the headline normalised, it would fall back
    for config in CONFIGS:
        for round_ in range(2):
            _record(tmp_path / f"round{round_}" / config.name, [900.0, 700.0, 800.0],
                    _note(round_, probe_ms=4.0 if round_ in probed else None), config.world)
    old = tmp_path / "round0" / CONFIGS[1].name / "recording.json"  # a note of before the probe: no probe keys
    old.write_text('{"round": 0, "recorded": "x", "seconds": 1, "load_before": 1, "load_after": 1}')
    recorded = bench.choose_recordings(bench.find_recordings(tmp_path))
    assert recorded[CONFIGS[1]]["probes_s"][0] is None
    speeds = bench.recording_speeds(recorded)
    assert all(v is None for v in speeds.values())  # all recordings at one speed, or none
    rows = [_row(CONFIGS[0].name, CONFIGS[2].name, 11e-3, 12e-3), _row(CONFIGS[2].name, CONFIGS[0].name, 13e-3, 10e-3)]
    bench.normalise_rows(rows, {c.name: None for c in CONFIGS})
    assert all(r["median_normalised_error"] is None for r in rows)
    label, figures = bench.headline(rows)
    assert "raw" in label and "no speed probe" in label
    assert figures == pytest.approx({"layers": (1 / 12 + 0.3) / 2})
    assert bench._mape(rows, normalised=True) == {}
    assert bench.speed_tracking(recorded) is None


def test_the_headline_is_the_raw_trimmed_mean_from_the_windowed_protocol_on(monkeypatch):
    rows = [_row("a", "b", 11e-3, 18e-3), _row("b", "a", 18e-3, 11e-3)]
    bench.normalise_rows(rows, {"a": 1.0, "b": 1.5})
    label, figures = bench.headline(rows)
    assert not bench.HEADLINE_NORMALISED and bench.HEADLINE_ESTIMATOR == "trimmed_mean"
    assert label == "trimmed_mean step, raw"
    assert figures["layers"] == pytest.approx((abs(11 / 18 - 1) + abs(18 / 11 - 1)) / 2)
    monkeypatch.setattr(bench, "HEADLINE_NORMALISED", True)  # mini8's rule: the speed-normalised figure
    label, figures = bench.headline(rows)
    assert label == "trimmed_mean step, speed-normalised"
    assert figures["layers"] == pytest.approx((abs(11 / 12 - 1) + abs(12 / 11 - 1)) / 2)


@pytest.mark.parametrize(("extra", "field"), [
    ('"probe_cores": [0, 1]', "recording.json probe_before_s"),  # one probe field without the others
    ('"probe_cores": [0, 1], "probe_before_s": [0.005, 0.005], "probe_after_s": [0.005], "probe_work": "v1"',
     "recording.json probe_after_s"),  # one time per core
    ('"probe_cores": [0], "probe_before_s": [-1], "probe_after_s": [0.005], "probe_work": "v1"',
     "recording.json probe_before_s"),
    ('"probe_cores": [0], "probe_before_s": [0.005], "probe_after_s": [0.005], "probe_work": ""',
     "recording.json probe_work"),
    ('"steal_cores": "lots"', "recording.json steal_cores"),
])
def test_a_bad_probe_field_is_a_one_line_error_naming_it(tmp_path, extra, field):
    path = tmp_path / "recording.json"
    path.write_text('{"round": 0, "recorded": "x", "seconds": 1, "load_before": 1, "load_after": 1, ' + extra + "}")
    with pytest.raises(SpecError) as caught:
        recording.RecordingNote.read(path)
    assert caught.value.field == field and "\n" not in str(caught.value)


def test_a_probed_note_round_trips(tmp_path):
    note = _note(1, probe_ms=5.0)
    note.write(tmp_path / "recording.json")
    assert recording.RecordingNote.read(tmp_path / "recording.json") == note and note.probed


def test_the_probe_times_each_core_alone_and_restores_the_process():
    torch = pytest.importorskip("torch")
    affinity, threads = os.sched_getaffinity(0), torch.get_num_threads()
    cores, times = probe.probe_speed()
    assert cores == tuple(sorted(affinity)) and len(times) == len(cores) and all(t > 0 for t in times)
    assert os.sched_getaffinity(0) == affinity and torch.get_num_threads() == threads
