import os

import pytest

from costmodel.replay import parse
from costmodel.replay.parse import read_trace
from costmodel.specs.errors import SpecError
from tests.replay.synth import synthetic_trace, write


def test_reads_json_and_gzip_alike(tmp_path):
    data = synthetic_trace()
    plain, zipped = read_trace(write(tmp_path / "t.json", data)), read_trace(write(tmp_path / "t.json.gz", data))
    assert len(plain.events) == len(zipped.events) == len(data["traceEvents"])
    assert plain.world_size == 2 and plain.device_name == "synthetic"


def test_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="regular file"):
        read_trace(fifo)
    with pytest.raises(SpecError, match="regular file"):
        read_trace(tmp_path)


def test_not_a_chrome_trace_is_refused(tmp_path):
    (tmp_path / "a.json").write_text("[1, 2]")
    with pytest.raises(SpecError, match="traceEvents"):
        read_trace(tmp_path / "a.json")
    (tmp_path / "b.json").write_text('{"traceEvents": [NaN]}')
    with pytest.raises(SpecError, match="JSON"):
        read_trace(tmp_path / "b.json")


def test_decompressed_size_is_capped(tmp_path, monkeypatch):
    path = write(tmp_path / "big.json.gz", {"traceEvents": [{"ph": "X", "name": "x" * 5000}]})
    monkeypatch.setattr(parse, "MAX_TRACE_BYTES", 4096)
    with pytest.raises(SpecError, match="decompressed"):
        read_trace(path)
