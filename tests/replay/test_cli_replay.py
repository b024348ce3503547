import json

from parplan.cli import main
from tests.replay.synth import synthetic_trace, write


def test_replay_json_has_the_contract_fields(tmp_path, capsys):
    path = write(tmp_path / "t.json.gz", synthetic_trace())
    assert main(["replay", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [it["name"] for it in out["iterations"]] == ["ProfilerStep#0", "ProfilerStep#1"]
    assert {"measured_s", "replayed_s"} <= set(out["iterations"][0]) and out["unplaced"] == {}


def test_what_if_prints_the_edited_time_beside_the_baseline(tmp_path, capsys):
    path = write(tmp_path / "t.json", synthetic_trace())
    assert main(["replay", str(path), "--what-if", "gemm=0.5", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["iterations"][0]
    assert row["replayed_s"] < row["baseline_replayed_s"]
    assert main(["replay", str(path)]) == 0
    assert "ProfilerStep#0" in capsys.readouterr().out


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "x.json").write_text("{}")
    for argv in (["replay", str(tmp_path / "x.json")], ["replay", str(tmp_path / "x.json"), "--what-if", "gemm=-1"],
                 ["replay", str(tmp_path / "missing.json")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("parplan: error:") and err.count("\n") == 1 and "Traceback" not in err


def test_a_trace_without_steps_is_refused(tmp_path, capsys):
    data = synthetic_trace()
    data["traceEvents"] = [e for e in data["traceEvents"] if e["cat"] != "user_annotation"]
    assert main(["replay", str(write(tmp_path / "t.json", data))]) == 2
    assert "ProfilerStep" in capsys.readouterr().err


def test_plot_writes_a_png_and_never_replaces_another_file(tmp_path, capsys):
    path = write(tmp_path / "t.json", synthetic_trace(allreduce_us=50.0))
    png = tmp_path / "replay.png"
    assert main(["replay", str(path), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(png) in capsys.readouterr().out
    assert main(["replay", str(path), "--what-if", "gemm=0.5", "--plot", str(png), "--json"]) == 0  # its own PNG
    assert json.loads(capsys.readouterr().out)["plot"] == str(png)
    other = tmp_path / "notes.png"
    other.write_text("not a png")
    assert main(["replay", str(path), "--plot", str(other)]) == 2
    assert "--plot" in capsys.readouterr().err and other.read_text() == "not a png"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left behind


def test_fit_only_flags_are_refused_outside_fit(tmp_path, capsys):
    path = write(tmp_path / "t.json", synthetic_trace())
    for argv in (["replay", str(path), "--gpu", "h100-sxm5-80gb"], ["replay", str(path), "--out", str(tmp_path / "o")],
                 ["replay", str(path), "--profile", str(tmp_path)]):
        assert main(argv) == 2
        assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "o").exists()
