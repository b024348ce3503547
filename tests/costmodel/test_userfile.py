"""Safe, bounded reading of user files (costmodel/specs/userfile.py)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from costmodel.specs.errors import SpecError
from costmodel.specs.userfile import MAX_DEPTH, MAX_FILE_BYTES, parse_yaml, read_user_file

# 9 levels of 9 aliases: 9^9 = 387M strings once expanded ("billion laughs"), in 318 bytes.
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, n in zip("abcdefgh", "bcdefghi"))


def _refused(path: Path, *fragments: str, field: str = "run spec") -> SpecError:
    start = time.perf_counter()
    with pytest.raises(SpecError) as info:
        read_user_file(path, field=field)
    assert time.perf_counter() - start < 1.0
    message = str(info.value)
    assert "\n" not in message and info.value.field == field
    for fragment in fragments:
        assert fragment in message, message
    return info.value


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_billion_laughs_is_refused_at_the_first_anchor(tmp_path: Path) -> None:
    error = _refused(_write(tmp_path, "run.yaml", LAUGHS), "anchors or aliases", "&a", "line 1")
    assert error.value == str(tmp_path / "run.yaml")  # the error names the file


def test_a_lone_alias_is_refused(tmp_path: Path) -> None:
    _refused(_write(tmp_path, "run.yaml", "a: &x 1\nb: *x\n"), "anchors or aliases")


@pytest.mark.parametrize("text", ["[" * 100_000, "{" * 100_000, "- " * 100_000 + "x",
                                  "".join("  " * i + "- \n" for i in range(2_000))])
def test_deep_yaml_is_one_line_not_a_recursion_error(tmp_path: Path, text: str) -> None:
    _refused(_write(tmp_path, "deep.yaml", text), f"nested at most {MAX_DEPTH} levels")


def test_deep_json_is_one_line_not_a_recursion_error(tmp_path: Path) -> None:
    _refused(_write(tmp_path, "deep.json", "[" * 100_000), f"JSON nested at most {MAX_DEPTH} levels")
    _refused(_write(tmp_path, "deep.json", "[" * 100 + "]" * 100), "nested at most")  # parses, still too deep


def test_nesting_up_to_the_bound_is_read(tmp_path: Path) -> None:
    for suffix in ("yaml", "json"):
        path = _write(tmp_path, f"ok.{suffix}", "[" * MAX_DEPTH + "]" * MAX_DEPTH)
        value = read_user_file(path)
        for _ in range(MAX_DEPTH - 1):
            value = value[0]
        assert value == []
        _refused(_write(tmp_path, f"no.{suffix}", "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)), "nested")


@pytest.mark.parametrize("name, text, where", [
    ("top.yaml", "model: a\nseq_length: 1\nmodel: b\n", "'model' repeated at line 3"),
    ("nested.yaml", "cluster: {gpu: a, num_gpus: 8, num_gpus: 16}\n", "'num_gpus' repeated"),
    ("dup.json", '{"cluster": {"num_gpus": 8, "num_gpus": 16}}', "'num_gpus' repeated"),
])
def test_duplicate_keys_are_refused(tmp_path: Path, name: str, text: str, where: str) -> None:
    _refused(_write(tmp_path, name, text), "without duplicate keys", where)


def test_merge_keys_and_python_tags_are_refused(tmp_path: Path) -> None:
    _refused(_write(tmp_path, "m.yaml", "a:\n  <<: {x: 2}\n  y: 3\n"), "merge keys")
    _refused(_write(tmp_path, "t.yaml", "!!python/object/apply:os.system [echo hi]\n"), "valid YAML")


def test_json_nan_and_infinity_are_refused(tmp_path: Path) -> None:
    _refused(_write(tmp_path, "n.json", '{"x": NaN}'), "without NaN")
    _refused(_write(tmp_path, "i.json", '{"x": -Infinity}'), "without -Infinity")


def test_dev_zero_is_refused_without_reading(tmp_path: Path) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    _refused(Path("/dev/zero"), "a regular file")


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    fifo = tmp_path / "run.yaml"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    reader = threading.Thread(target=lambda: outcome.append(pytest.raises(SpecError, read_user_file, fifo).value),
                              daemon=True)
    reader.start()
    reader.join(timeout=5)  # a blocking open or read would hang here until a writer appears
    if reader.is_alive():
        with open(fifo, "w"):  # release the reader so the test process can finish
            pass
        pytest.fail("reading a FIFO blocked")
    assert "a regular file" in str(outcome[0])


def test_a_folder_is_refused(tmp_path: Path) -> None:
    _refused(tmp_path, "a regular file")


def test_a_file_over_the_size_cap_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as handle:  # sparse: no 16 MiB written
        handle.truncate(MAX_FILE_BYTES + 1)
    _refused(path, "at most 16 MiB")


def test_bad_utf8_and_syntax_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"model: \xff\xfe\n")
    _refused(path, "UTF-8 text")
    _refused(_write(tmp_path, "s.yaml", "model: [unclosed\n"), "valid YAML", "line 2")
    _refused(_write(tmp_path, "s.json", '{"model": }'), "valid JSON", "line 1")


def test_missing_file(tmp_path: Path) -> None:
    _refused(tmp_path / "none.yaml", "a readable file (FileNotFoundError)")


def test_an_oversized_integer_is_one_line(tmp_path: Path) -> None:
    _refused(_write(tmp_path, "i.yaml", "seq_length: " + "9" * 5_000 + "\n"), "valid YAML")
    _refused(_write(tmp_path, "i.json", '{"seq_length": ' + "9" * 5_000 + "}"), "valid JSON")


def test_a_10_mb_value_is_read_quickly(tmp_path: Path) -> None:
    value = "x" * 10_000_000
    for suffix in ("yaml", "json"):
        path = _write(tmp_path, f"v.{suffix}", f'model: "{value}"\n' if suffix == "yaml" else f'{{"model": "{value}"}}')
        start = time.perf_counter()
        assert read_user_file(path)["model"] == value
        assert time.perf_counter() - start < 1.0


def test_ordinary_yaml_reads_as_safe_load_does(tmp_path: Path) -> None:
    import yaml

    text = "a: [1, 2.5, 1.0e+3, .nan, 1e12, true, null, 2024-01-02]\nb: {c: 'd'}\n"
    got, want = read_user_file(_write(tmp_path, "ok.yaml", text)), yaml.safe_load(text)
    assert str(got) == str(want)  # str: nan != nan
    assert read_user_file(_write(tmp_path, "empty.yaml", "")) is None


def test_catalog_mode_allows_aliases_but_not_duplicates() -> None:
    assert parse_yaml("a: &x [1]\nb: *x\n", allow_aliases=True) == {"a": [1], "b": [1]}
    with pytest.raises(ValueError, match="duplicate keys"):
        parse_yaml("a: 1\na: 2\n", allow_aliases=True)


def test_the_shipped_run_specs_and_studies_still_read() -> None:
    root = Path(__file__).resolve().parents[2] / "studies"
    files = sorted((root / "examples").glob("*.yaml")) + sorted((root / "validation").glob("*.yaml"))
    assert files
    for path in files:
        assert read_user_file(path) is not None, path
