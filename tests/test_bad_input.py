"""A corpus of broken inputs: each gets one clear line and exit 2, or a counted skip."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceview as tv
from traceview.cli import cli

K = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.0, "dur": 2.0}
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 9.0, "dur": 3.0}


def doc(*events: dict | str) -> bytes:
    parts = [e if isinstance(e, str) else json.dumps(e) for e in events]
    return ('{"traceEvents": [\n' + ",\n".join(parts) + "\n]}").encode()


def big_valid() -> bytes:
    return doc(*[{**K, "name": f"k{i}", "ts": 10.0 + i} for i in range(3000)])


ERRORS: dict[str, tuple[bytes | Callable[[Path], Path], str]] = {
    "empty": (b"", r"empty file$"),
    "whitespace": (b"  \n\t ", r"empty file \(only whitespace\)$"),
    "not-json": (b"hello, world", r"not a trace file: a JSON trace starts with"),
    "json-scalar": (b"42", r"not a trace file"),
    "truncated-gzip": (gzip.compress(big_valid())[:4000], r"truncated gzip file"),
    "gzip-of-garbage": (gzip.compress(b"\x00\x01binary junk"), r"not a trace file"),
    "not-a-trace-object": (b'{"foo": 1, "bar": [1, 2]}', r"no 'traceEvents' array"),
    "traceEvents-not-array": (b'{"traceEvents": 5}', r"no 'traceEvents' array"),
    "array-of-numbers": (b"[1, 2, 3]", r"none of its 3 events is usable"),
    "truncated-json": (doc(K, K)[:-20], r"invalid JSON|truncated"),
    "syntax-error-mid-array": (doc(K, '{"ph": "X",, "ts": 1}', K), r"invalid JSON in events"),
    "invalid-utf8": (doc(K).replace(b'"k"', b'"\xff\xfe"'), r"invalid JSON|utf-8|UTF-8"),
    "kernel-missing-ts": (
        doc(OP, {k: v for k, v in K.items() if k != "ts"}),
        r"event #1 \(ph='X', name='k'\): 'ts' missing or not a finite number "
        r"on device activity",
    ),
    "kernel-missing-dur": (
        doc({k: v for k, v in K.items() if k != "dur"}),
        r"event #0 \(ph='X', name='k'\): 'dur' missing",
    ),
    "kernel-nan-ts": (
        doc(
            OP,
            OP,
            '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": NaN, "dur": 1}',
        ),
        r"event #2 \(ph='X', name='k'\): 'ts' missing or not a finite number",
    ),
    "kernel-negative-dur": (doc({**K, "dur": -3.0}), r"event #0 .*negative 'dur'"),
    "kernel-string-ts": (doc({**K, "ts": "soon"}), r"event #0 .*'ts' missing or not a finite"),
    "kernel-bool-dur": (doc({**K, "dur": True}), r"event #0 .*'dur' missing or not a finite"),
    "kernel-infinite-ts": (
        doc(
            K,
            '{"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, '
            '"tid": 7, "ts": Infinity, "dur": 1}',
        ),
        r"event #1 .*'ts'",
    ),
    "kernel-ts-overflow": (doc({**K, "ts": 1e300}), r"event #0 .*'ts' missing or not a finite"),
    "zstd": (b"\x28\xb5\x2f\xfd" + b"\x00" * 20, r"zstd-compressed traces are not supported"),
    "object-missing-close": (
        b'{"traceEvents": [' + json.dumps(K).encode() + b"]",
        r"file ends before the closing '}'",
    ),
    "garbage-after-array": (b"[" + json.dumps(K).encode() + b"] trailing", r"unexpected text"),
}


@pytest.mark.parametrize("case", sorted(ERRORS), ids=sorted(ERRORS))
def test_bad_input_is_one_clear_line(tmp_path: Path, case: str) -> None:
    content, pattern = ERRORS[case]
    path = tmp_path / f"{case}.json"
    path.write_bytes(content)  # type: ignore[arg-type]
    before = path.read_bytes()
    with pytest.raises(tv.TraceFormatError) as err:
        tv.load(path)
    assert re.search(pattern, str(err.value)), str(err.value)
    assert err.value.path == str(path)

    result = CliRunner().invoke(cli, ["info", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"Error: {path}: ")
    assert "Traceback" not in result.output
    assert path.read_bytes() == before  # nothing the user gave is modified


def test_missing_file_and_directory(tmp_path: Path) -> None:
    for path, message in (
        (tmp_path / "nope.json", "no such file"),
        (tmp_path, "is a directory, not a trace file"),
    ):
        result = CliRunner().invoke(cli, ["info", str(path)])
        assert result.exit_code == 2
        assert result.stderr.strip() == f"Error: {path}: {message}"


SKIPS: dict[str, tuple[bytes, int, str]] = {
    "cpu-op-missing-dur": (
        doc(K, {k: v for k, v in OP.items() if k != "dur"}),
        1,
        "'dur' missing or not a finite number",
    ),
    "cpu-op-nan-ts": (
        doc(
            K, '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": NaN, "dur": 1}'
        ),
        1,
        "'ts' missing or not a finite number",
    ),
    "cpu-op-negative-dur": (doc(K, {**OP, "dur": -1}), 1, "negative 'dur'"),
    "unknown-ph": (doc(K, {**OP, "ph": "Z"}, {**OP, "ph": "Z"}), 2, "unsupported ph 'Z'"),
    "flow-without-ts": (
        doc(K, {"ph": "s", "id": 1, "pid": 1, "tid": 1, "cat": "ac2g"}),
        1,
        "'ts' missing",
    ),
    "duplicated-kernel": (doc(K, K, OP), 1, "duplicated device events"),
    "non-object-entry": (doc(K, "17"), 1, "unsupported ph '<not an object>'"),
    "unmatched-end": (
        doc(K, {"ph": "E", "pid": 1, "tid": 1, "ts": 3}),
        1,
        "'E' without a matching 'B'",
    ),
}


@pytest.mark.parametrize("case", sorted(SKIPS), ids=sorted(SKIPS))
def test_unusable_events_are_counted_and_warned(tmp_path: Path, case: str) -> None:
    content, skipped, reason = SKIPS[case]
    path = tmp_path / f"{case}.json"
    path.write_bytes(content)
    with pytest.warns(tv.TraceviewWarning, match=re.escape(reason)):
        trace = tv.load(path)
    assert trace.meta.skipped_events == skipped
    assert any(reason in w for w in trace.meta.warnings)
    assert trace.kernels.height == 1  # the good kernel, once, with its exact times
    assert trace.kernels.select("ts_ns", "dur_ns").row(0) == (10_000, 2_000)

    result = CliRunner().invoke(cli, ["info", str(path), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["skipped_events"] == skipped
    assert "Warning:" in result.stderr and reason in result.stderr


def test_numeric_string_timestamps_are_read_exactly(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(doc({**K, "ts": "5117567635320.360", "dur": "1.5"}))
    assert tv.load(path).kernels.select("ts_ns", "dur_ns").row(0) == (5_117_567_635_320_360, 1_500)


def test_huge_and_unicode_names(tmp_path: Path) -> None:
    huge = "void k<" + "x" * 2_000_000 + ">()"
    names = [huge, "注意力_kernel_🚀", 'quote"and\\backslash', "tab\tnew\nline"]
    path = tmp_path / "t.json"
    path.write_bytes(doc(*[{**K, "name": n, "ts": 10.0 + i} for i, n in enumerate(names)]))
    trace = tv.load(path)
    assert trace.kernels["name"].cast(str).to_list() == names


def test_unsorted_events_are_sorted(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(doc(*[{**K, "name": f"k{t}", "ts": float(t)} for t in (30, 10, 20)]))
    k = tv.load(path).kernels
    assert k["ts_ns"].to_list() == [10_000, 20_000, 30_000]
    assert k["name"].cast(str).to_list() == ["k10", "k20", "k30"]


def test_empty_event_array_loads_as_empty_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": []}')
    trace = tv.load(path)
    assert trace.kernels.height == 0 and trace.meta.events == 0
