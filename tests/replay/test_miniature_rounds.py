"""The miniature benchmark's recording protocol: interleaved rounds, a load note beside each recording, and
each configuration's least-disturbed recording chosen (benchmarks/replay_miniatures.py, _replay_miniature.py)."""

import json
import sys
from pathlib import Path

import pytest

from costmodel.specs.errors import SpecError
from tests.benchmark_module import load_benchmark
from tests.replay.synth import step_trace, write

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import _replay_miniature as recording  # noqa: E402

bench = load_benchmark("replay_miniatures")


def test_rounds_are_interleaved_and_each_recording_has_its_load(tmp_path, monkeypatch):
    calls = []

    def fake_record(config, out, port, cores=None):
        calls.append((config.name, port))
        pinned.append(cores)
        out.mkdir(parents=True)
        return out / "rank0.json"

    probes, pinned = [], []

    def fake_probe(cores=None):
        probes.append(len(calls))  # how many recordings had run when the probe did
        return (0, 1), (0.004 + 0.001 * len(probes), 0.005)

    monkeypatch.setattr(recording, "record_config", fake_record)
    configs = [recording.Config(2, 1, 2), recording.Config(4, 1, 2), recording.Config(2, 2, 8)]
    recording.record_rounds(configs, tmp_path, rounds=2, probe=fake_probe)
    assert [name for name, _ in calls] == [c.name for c in configs] * 2  # A B C A B C
    assert len({port for _, port in calls}) == 6  # no port reused
    assert probes == [(i + 1) // 2 for i in range(12)]  # one probe just before and one just after each recording
    # each rank on one of the probe's cores, distinct while they suffice; rank 0 on the next core each round
    assert pinned == [(0,), (0,), (0, 1), (1,), (1,), (1, 0)]
    for round_ in range(2):
        for i, config in enumerate(configs):
            note = recording.RecordingNote.read(tmp_path / f"round{round_}" / config.name / "recording.json")
            assert note.round == round_ and note.load_before >= 0 and note.load_after >= 0 and note.seconds >= 0
            k = 2 * (3 * round_ + i)  # this recording's probes were the (k+1)th and (k+2)th calls
            assert note.probed and note.probe_cores == (0, 1) and note.probe_work
            assert note.probe_before_s == pytest.approx((0.004 + 0.001 * (k + 1), 0.005))
            assert note.probe_after_s == pytest.approx((0.004 + 0.001 * (k + 2), 0.005))
            assert note.rank_cores == pinned[3 * round_ + i]


def test_every_window_of_every_recording_is_pooled(tmp_path):
    """A configuration's recordings (old layout: one trace in the folder; new: window{k}/) are all kept; each
    recording's fastest and median step is over its windows, the pool holds every window, and the pooled
    figure's load is the most loaded recording's."""
    fastest = {0: 900.0, 1: 700.0, 2: 800.0}
    for round_, best in fastest.items():
        for config in (recording.Config(layers, world, batch) for layers in bench.LAYERS
                       for world in bench.WORLDS for batch in bench.BATCHES):
            folder = tmp_path / f"round{round_}" / config.name
            for window in range(2) if round_ else [None]:  # round 0 in the layout before the windows
                inside = folder if window is None else folder / f"window{window}"
                inside.mkdir(parents=True)
                for rank in range(config.world):  # every rank: a window's graph holds all of them
                    write(inside / f"rank{rank}.json", step_trace([best + 300.0, best + 100.0 * (window or 0),
                                                               best + 100.0], rank, config.world))
            recording.RecordingNote(round=round_, recorded="2026-12-01 22:00:00", seconds=4.0,
                                    load_before=1.0 + round_, load_after=1.5 + round_).write(folder / "recording.json")
    found = bench.find_recordings(tmp_path)
    assert bench.recording_windows(tmp_path / "round1" / "L2-dp1-b2") == [
        tmp_path / "round1" / "L2-dp1-b2" / f"window{k}" for k in range(2)]
    chosen = bench.choose_recordings(found)
    assert len(chosen) == 12
    for choice in chosen.values():
        assert len(choice["windows"]) == 5  # 1 + 2 + 2
        assert choice["minima_s"] == pytest.approx([900e-6, 700e-6, 800e-6])
        assert choice["medians_s"] == pytest.approx([1000e-6, 800e-6, 900e-6])  # round 1: 1000 700 800 1000 800 800
        assert choice["median_of_minima_s"] == pytest.approx(800e-6)
        assert choice["load"] == (3.0, 3.5) and choice["loads"] == [(1.0, 1.5), (2.0, 2.5), (3.0, 3.5)]


def test_the_trimmed_mean_cuts_a_tenth_at_each_end_and_moves_with_the_share_of_slow_steps():
    assert bench.trimmed_mean([1.0] * 9 + [100.0]) == pytest.approx(1.0)  # one preempted step of ten: cut
    assert bench.trimmed_mean([5.0, 1.0, 3.0]) == pytest.approx(3.0)  # too few to cut: the plain mean
    assert bench.trimmed_mean([2.0]) == 2.0
    # two speed levels 1.0 and 1.37: 45 % and 55 % slow steps move the median by the whole level, the mean by 3.7 %
    fewer, more = [1.0] * 11 + [1.37] * 9, [1.0] * 9 + [1.37] * 11
    assert float(bench.np.median(more)) / float(bench.np.median(fewer)) == pytest.approx(1.37)
    assert bench.trimmed_mean(more) / bench.trimmed_mean(fewer) == pytest.approx(1 + 2 * 0.37 / 16 / 1.185, rel=0.02)


def test_pooled_estimators_take_every_step_and_the_fastest_window():
    figures = bench.pooled([3.0, 1.0, 2.0, 10.0], fastest_ops=[0.9, 0.8])
    assert figures == pytest.approx({"wall": 1.0, "median": 2.5, "trimmed_mean": 4.0, "fastest_ops": 0.8})
    assert set(figures) == set(bench.ESTIMATORS)


def test_ranks_are_pinned_to_distinct_cores_while_they_suffice():
    assert recording.rank_cores(1, 0, {0, 1}) == (0,) and recording.rank_cores(1, 1, {1, 0}) == (1,)
    assert recording.rank_cores(2, 0, [0, 1]) == (0, 1) and recording.rank_cores(2, 1, [0, 1]) == (1, 0)
    assert recording.rank_cores(4, 0, [2, 5]) == (2, 5, 2, 5)  # 4 ranks on 2 cores: two each


def test_windows_are_spaced_to_last_the_cycle():
    # 10 ms steps, a 1 s cycle: 100 steps, of which the profiler's warm-up and the profiled steps are 5
    assert recording.wait_steps(0.010, 1.0) == 100 - recording.WINDOW_WARMUP - recording.ACTIVE
    assert recording.wait_steps(0.5, 1.0) == 1  # a long step: at least one unprofiled step between windows
    assert recording.wait_steps(0.010, 0.0) == 1


def test_an_older_single_recording_folder_is_one_round_without_a_note(tmp_path):
    folder = tmp_path / "L2-dp1-b2"
    folder.mkdir()
    write(folder / "rank0.json", step_trace([500.0, 400.0]))
    found = bench.find_recordings(tmp_path)
    assert list(found) == [recording.Config(2, 1, 2)] and found[recording.Config(2, 1, 2)] == [(folder, None)]


@pytest.mark.parametrize(("text", "field"), [
    ('{"round": 0}', "recording.json key"),
    ('{"round": -1, "recorded": "x", "seconds": 1, "load_before": 1, "load_after": 1}', "recording.json round"),
    ('{"round": 0, "recorded": "x", "seconds": 1, "load_before": "high", "load_after": 1}',
     "recording.json load_before"),
    ("[1, 2]", "recording.json key"),
    ("not json", "recording.json"),
    ('{"round": 0, "recorded": "x", "seconds": 1, "load_before": 1, "load_after": 1, "rank_cores": [0, -1]}',
     "recording.json rank_cores"),
    ('{"round": 0, "recorded": "x", "seconds": 1, "load_before": 1, "load_after": 1, "rank_cores": "0"}',
     "recording.json rank_cores"),
])
def test_a_bad_recording_note_is_a_one_line_error_naming_its_field(tmp_path, text, field):
    path = tmp_path / "recording.json"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        recording.RecordingNote.read(path)
    assert caught.value.field == field and "\n" not in str(caught.value)


def test_note_round_trips(tmp_path):
    note = recording.RecordingNote(round=2, recorded="2026-12-01 22:00:00", seconds=4.5, load_before=0.8,
                                   load_after=1.2, rank_cores=(1, 0))
    note.write(tmp_path / "recording.json")
    assert recording.RecordingNote.read(tmp_path / "recording.json") == note
    assert set(json.loads((tmp_path / "recording.json").read_text())) == {
        "round", "recorded", "seconds", "load_before", "load_after", "other_cores", "steal_cores", "probe_cores",
        "probe_before_s", "probe_after_s", "probe_work", "rank_cores"}


def test_a_note_without_other_cores_reads_as_unmeasured(tmp_path):
    path = tmp_path / "recording.json"
    path.write_text('{"round": 0, "recorded": "x", "seconds": 1, "load_before": 1, "load_after": 1}')
    assert recording.RecordingNote.read(path).other_cores is None
    path.write_text('{"round": 0, "recorded": "x", "seconds": 1, "load_before": 1, "load_after": 1, '
                    '"other_cores": -1}')
    with pytest.raises(SpecError, match="other_cores"):
        recording.RecordingNote.read(path)


def test_other_busy_cores_is_the_hosts_busy_time_less_our_own():
    # 10 s of wall time, the host busy 25 CPU s of which 22 were the recording's: others kept 0.3 cores busy
    assert recording.other_busy_cores(100.0, 125.0, 22.0, 10.0) == pytest.approx(0.3)
    assert recording.other_busy_cores(100.0, 120.0, 22.5, 10.0) == 0.0  # clock granularity: never negative
    assert recording.other_busy_cores(None, 125.0, 22.0, 10.0) is None  # no /proc/stat
    if recording._busy_cpu_s() is not None:  # Linux: the counter only grows
        before = recording._busy_cpu_s()
        sum(i * i for i in range(200_000))
        assert recording._busy_cpu_s() >= before


def test_quiet_uses_other_processes_busy_cores_where_measured():
    # a dp 4 recording on 2 cores: its own ranks put the load at 3, others were idle: quiet
    assert bench.quiet_recordings([(3.0, 3.1), (1.0, 1.0)], cores=2, others=[0.05, 0.1])
    assert not bench.quiet_recordings([(0.5, 0.5), (0.5, 0.5)], cores=2, others=[0.05, 0.6])  # another job ran
    assert bench.quiet_recordings([(1.0, 1.0), (1.2, 1.1)], cores=2, others=[0.05, None])  # one old note: load


def test_a_pair_is_quiet_only_when_both_recordings_were():
    assert bench.quiet_recordings([(1.1, 1.2), (1.5, 0.9)], cores=2)
    assert not bench.quiet_recordings([(1.1, 1.2), (1.4, 1.6)], cores=2)  # 1.6 > 0.75 per core on 2
    assert bench.quiet_recordings([(1.4, 1.6)], cores=4)
    assert not bench.quiet_recordings([(1.0, 1.0), None], cores=2)  # an old recording: its load is unknown
