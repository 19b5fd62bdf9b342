"""A corpus of broken inputs: each gets one clear line and exit 2, or a counted skip."""

from __future__ import annotations

import gzip
import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GENERATED

import traceview as tv
from traceview.cli import cli
from traceview.errors import TraceviewWarning

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
    "gzip-of-garbage": (gzip.compress(b"\x00\x01binary junk"), r"not a trace file"),
    "not-a-trace-object": (b'{"foo": 1, "bar": [1, 2]}', r"no 'traceEvents' array"),
    "traceEvents-not-array": (b'{"traceEvents": 5}', r"'traceEvents' is a number, not an array$"),
    "traceEvents-object": (b'{"traceEvents": {}}', r"'traceEvents' is an object, not an array$"),
    "kernel-dur-too-large": (
        doc({**K, "dur": 1e18}),
        r"event #0 .*'dur' too large for ns \(>= 9.2e\+15 us\) on device activity",
    ),
    "array-of-numbers": (b"[1, 2, 3]", r"none of its 3 events is usable"),
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
    "kernel-ts-overflow": (doc({**K, "ts": 1e300}), r"event #0 .*'ts' too large for ns"),
    "zstd": (b"\x28\xb5\x2f\xfd" + b"\x00" * 20, r"zstd-compressed traces are not supported"),
    "gzip-cut-in-its-header": (
        gzip.compress(big_valid())[:6],
        r"truncated: its gzip stream ends early$",
    ),
    "deep-nesting": (
        doc(
            K,
            '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1, '
            '"dur": 1, "args": {"x": ' + "[" * 5000 + "]" * 5000 + "}}",
        ),
        r"nested too deeply",
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
    with pytest.warns(TraceviewWarning, match="1 string longer than 64 KiB cut to 64 KiB"):
        trace = tv.load(path)
    got = trace.kernels["name"].cast(str).to_list()
    assert got[1:] == names[1:]
    # one string over the cap keeps its first 64 KiB, then '…'
    assert got[0] == huge[: 64 << 10] + "…" and trace.meta.strings_cut == 1


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


def _kernels_text(n: int, array_form: bool) -> tuple[bytes, list[tuple[int, int]]]:
    """A trace of ``n`` kernels, and each event's span (first byte, one past its '}')."""
    head = b"[\n" if array_form else b'{"schemaVersion": 1, "traceEvents": [\n'
    parts, ends, pos = [head], [], len(head)
    for i in range(n):
        text = json.dumps({**K, "name": f"k{i}", "ts": 10.0 + i}).encode()
        if i:
            parts.append(b",\n")
            pos += 2
        parts.append(text)
        ends.append((pos, pos + len(text)))
        pos += len(text)
    parts.append(b"\n]" if array_form else b'\n], "traceName": "t"}')
    return b"".join(parts), ends


@pytest.mark.slow
@pytest.mark.parametrize("array_form", [False, True], ids=["object", "array"])
@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
def test_a_trace_cut_anywhere_loads_every_complete_event(
    tmp_path: Path, array_form: bool, gz: bool
) -> None:
    """A profiler that died, a full disk: every event wholly before the cut loads, with one
    warning naming the byte offset and the count; --strict refuses."""
    text, spans = _kernels_text(400, array_form)
    data = gzip.compress(text) if gz else text
    start = 0 if gz else spans[0][0]
    cuts = sorted({*range(start, len(data) - 1, max(1, len(data) // 97)), len(data) - 2})
    for cut in cuts:
        path = tmp_path / f"cut{cut}.json{'.gz' if gz else ''}"
        path.write_bytes(data[:cut])
        if gz:  # the text that survives the cut, by Python's own zlib
            d = __import__("zlib").decompressobj(wbits=31)
            survived = len(d.decompress(data[:cut]))
        else:
            survived = cut
        expected = sum(1 for _, e in spans if e <= survived)
        if survived < spans[0][0]:  # cut in the header: one clear line, or nothing to load
            try:
                assert tv.load(path).kernels.height == 0
            except tv.TraceFormatError as exc:
                assert exc.path == str(path)
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trace = tv.load(path)
        assert trace.kernels.height == expected, (cut, survived)
        assert trace.kernels["name"].cast(str).to_list() == [f"k{i}" for i in range(expected)]
        notes = [w for w in trace.meta.warnings if "truncated" in w]
        inside_an_event = any(a < survived < e for a, e in spans)
        if not array_form or gz or inside_an_event:
            assert len(notes) == 1, (cut, trace.meta.warnings)
            assert len([w for w in caught if "truncated" in str(w.message)]) == 1
            if survived == len(text):  # only the gzip trailer is gone: every event is there
                assert "truncated gzip stream" in notes[0] and trace.meta.truncated_at is None
                continue
            assert re.search(r"truncated (inside an event after )?(at )?byte [\d,]+", notes[0])
            n = trace.meta.events
            assert f"{n:,} complete event{'' if n == 1 else 's'} kept" in notes[0]
            assert trace.meta.truncated_at is not None
            with pytest.raises(tv.TraceFormatError, match="truncated"):
                tv.load(path, options=tv.LoadOptions(strict=True))


def test_the_cli_loads_a_cut_trace_with_a_warning_and_strict_refuses(tmp_path: Path) -> None:
    text, _ = _kernels_text(50, array_form=False)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(gzip.compress(text)[: len(gzip.compress(text)) * 2 // 3])
    before = path.read_bytes()
    ok = CliRunner().invoke(cli, ["info", str(path)])
    assert ok.exit_code == 0 and "truncated" in ok.stderr and "Warning:" in ok.stderr
    strict = CliRunner().invoke(cli, ["info", str(path), "--strict"])
    assert strict.exit_code == 2 and len(strict.stderr.strip().splitlines()) == 1
    assert strict.stderr.startswith(f"Error: {path}: truncated")
    summary = CliRunner().invoke(cli, ["summarize", str(path), "--strict"])
    assert summary.exit_code == 2 and "truncated" in summary.stderr
    assert path.read_bytes() == before


def _pretty_kernels(name: str, n: int = 40) -> list[bytes]:
    """``n`` kernels named ``name``, pretty-printed as Kineto writes them."""
    return [
        json.dumps(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": 1000 + i,
                "dur": 1,
                "args": {"device": 0, "stream": 7, "correlation": i},
            },
            ensure_ascii=False,
            indent=1,
        ).encode()
        for i in range(n)
    ]


HEAD = b'{"schemaVersion": 1, "traceEvents": [\n'


def _with_a_bad_event(name: str, bad: bytes, where: str) -> tuple[bytes, int]:
    """40 kernels named ``name`` with ``bad`` planted inside event #29 (``where`` "inside")
    or right after event #28's ``}`` ("after": in place of the comma); returns the text and
    the byte offset of ``bad`` in it."""
    events = _pretty_kernels(name)
    if where == "inside":
        events[29] = events[29].replace(b'"dur": 1', b'"dur": ' + bad)
        body = b",\n".join(events)
    else:
        body = b",\n".join(events[:29]) + bad + b"\n" + b",\n".join(events[29:])
    text = HEAD + body + b"]}"
    before = len(HEAD) + sum(len(e) + 2 for e in events[:29])
    return text, text.index(bad, before - 2)


# the default run plants each fault after multi-byte names (where characters and bytes
# differ); CI's slow run after ASCII names too
@pytest.mark.parametrize(
    "name",
    [pytest.param("gemm", marks=pytest.mark.slow), "ядро→注意"],
    ids=["ascii", "multibyte"],
)
@pytest.mark.parametrize(
    ("bad", "where", "problem"),
    [
        (b"@", "inside", "Expecting value"),
        (b"\xff", "inside", "not UTF-8 (a sequence from 0xff: invalid start byte)"),
        (b"\x00", "inside", "Expecting value"),
        (b", @", "after", "Expecting value"),
        (b" ", "after", "Expecting ',' delimiter"),  # a missing comma
    ],
    ids=["syntax", "utf8", "nul", "after-an-event", "no-comma"],
)
def test_an_invalid_event_is_named_by_its_byte_and_the_event_before_it(
    tmp_path: Path, name: str, bad: bytes, where: str, problem: str
) -> None:
    """The byte is the planted one's offset in the JSON text and the event the last
    complete one before it: the same for every block size and worker count (the numbers
    once counted characters, and from the block's first event)."""
    text, byte = _with_a_bad_event(name, bad, where)
    if bad == b", @":
        byte += 2  # the comma is fine: the error is at the @
    elif bad == b" ":
        byte = text.index(b"{", byte)  # the error is at the next event's {
    path = tmp_path / "bad.json"
    path.write_bytes(text)
    want = f"invalid JSON in events at byte {byte} (after event #28): {problem}"
    for block_bytes, workers in ((1 << 20, 1), (300, 1), (2000, 1), (300, 3)):
        options = tv.LoadOptions(cache=False, block_bytes=block_bytes, workers=workers)
        with pytest.raises(tv.TraceFormatError) as err:
            tv.load(path, options=options)
        assert str(err.value) == f"{path}: {want}", (block_bytes, workers)


def test_a_cut_inside_an_event_after_multibyte_names_is_read_on(tmp_path: Path) -> None:
    """A block cut at a ``}, {`` inside an event (objects in an array in ``args``) after
    multi-byte names, on the careful path (a ``ts`` in a string): the cut was taken for an
    error where characters were compared with bytes; every block size reads the trace."""
    events = _pretty_kernels("ядро→注意")
    for i in range(0, 40, 3):
        event = json.loads(events[i])
        event["ts"] = str(event["ts"])
        event["args"]["shapes"] = [{"a": 1}, {"b": 2}, {"c": 3}]
        events[i] = json.dumps(event, ensure_ascii=False, indent=1).encode()
    path = tmp_path / "t.json"
    path.write_bytes(HEAD + b",\n".join(events) + b"]}")
    whole = tv.load(path, options=tv.LoadOptions(cache=False))
    assert whole.kernels.height == 40
    for block_bytes in (300, 1000, 4096):
        cut = tv.load(path, options=tv.LoadOptions(cache=False, block_bytes=block_bytes))
        assert cut.kernels.equals(whole.kernels), block_bytes


@pytest.mark.parametrize(
    "text",
    [
        b'  {"displayTimeUnit": "ns", "x": [1, @], "traceEvents": []}',
        b'\xef\xbb\xbf{"name": "\xd1\x8f\xd0\xb4", "b": @}',  # a BOM and a Cyrillic name
    ],
    ids=["whitespace", "bom-multibyte"],
)
def test_invalid_json_in_a_document_read_whole_names_its_byte(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(text)
    with pytest.raises(tv.TraceFormatError) as err:
        tv.load(path, options=tv.LoadOptions(cache=False))
    at = text.index(b"@")
    assert str(err.value) == f"{path}: invalid JSON in the document at byte {at}: Expecting value"


@pytest.mark.parametrize("block_bytes", [300, 1 << 20])
def test_bad_text_after_the_events_array_is_invalid_json_not_a_cut(
    tmp_path: Path, block_bytes: int
) -> None:
    """`"displayTimeUnit": ms}` after the array was read as a trace cut off there (a
    warning, every figure given); it is refused, naming its byte. Keys cut off mid-way
    are still a cut."""
    events = ",\n".join(e.decode() for e in _pretty_kernels("gemm", 20))
    options = tv.LoadOptions(cache=False, block_bytes=block_bytes)
    bad = f'{{"traceEvents": [\n{events}\n], "\u044f": 1, "displayTimeUnit": ms}}'.encode()
    path = tmp_path / "bad.json"
    path.write_bytes(bad)
    with pytest.raises(tv.TraceFormatError) as err:
        tv.load(path, options=options)
    want = f"invalid JSON after the events array at byte {bad.index(b'ms}')}: Expecting value"
    assert str(err.value) == f"{path}: {want}"
    cut = tmp_path / "cut.json"
    cut.write_bytes(bad[: bad.index(b"ms}")] + b'"m')
    trace = tv.load(cut, options=options)
    assert trace.kernels.height == 20
    assert [w for w in trace.meta.warnings if "truncated" in w], trace.meta.warnings


@pytest.mark.parametrize(
    ("trailer", "said"),
    [
        (b', "a": "\xff", "b": 1}', "not UTF-8 (a sequence from 0xff: invalid start byte)"),
        (b', "a": NaN, "b": @}', "Expecting value"),
        (b', "a": 1.', None),  # cut inside a number
        (b', "a": 1e+', None),
        (b', "b": [1, 2.', None),
        (b', "a": "\xc3', None),  # cut inside a character
        (b', "a": "\xe2\x82', None),
        (b', "a": {"b": tr', None),
        (b', "a": NaN, "b": tr', None),  # read only by Python's decoder, then cut
        (b', "a": "\xed\xa0\x80", "b": 1.', None),  # a surrogate's raw bytes, then cut
        (b', "a": 1}@', "Extra data"),  # the last byte, but after the object
        (b', "a": [1, 2@', "Expecting ',' delimiter"),
        # ^ marks the byte named (and is taken out)
        (b', "a": ^-NaN}', "Expecting value"),  # Python reads NaN, never -NaN
        (b', "a": NaN^e5}', "Expecting ',' delimiter"),
    ],
    ids=[
        *("bad-utf8", "after-nan", "number", "exponent", "array", "char", "char2", "literal"),
        *("nan-then-cut", "surrogate-then-cut", "extra-data", "last-byte", "-nan", "nan-e5"),
    ],
)
def test_the_keys_after_the_events_are_refused_where_bad_and_a_cut_where_cut(
    tmp_path: Path, trailer: bytes, said: str | None
) -> None:
    """Keys cut off inside a number or a character are a cut (a warning, as before the
    trailer's check), a byte that is not UTF-8 or a bad value is refused at its byte."""
    events = b",\n".join(_pretty_kernels("gemm", 5))
    text = b'{"traceEvents": [\n' + events + b"\n]" + trailer
    marked = text.find(b"^")
    text = text.replace(b"^", b"")
    path = tmp_path / "t.json"
    path.write_bytes(text)
    if said is None:
        trace = tv.load(path, options=tv.LoadOptions(cache=False))
        assert trace.kernels.height == 5
        assert [w for w in trace.meta.warnings if "truncated" in w], trace.meta.warnings
        return
    with pytest.raises(tv.TraceFormatError) as err:
        tv.load(path, options=tv.LoadOptions(cache=False))
    at = marked if marked >= 0 else text.index(b"\xff") if b"\xff" in text else text.index(b"@")
    assert str(err.value) == f"{path}: invalid JSON after the events array at byte {at}: {said}"


def test_the_event_before_an_error_counts_every_value_of_the_array(tmp_path: Path) -> None:
    """Nulls and an array among the events (read as unusable entries, counted) and a name
    holding 100 closing braces before the fault: the event named is the one before it."""
    events = [e.decode() for e in _pretty_kernels("gemm", 60)]
    events += ["null"] * 9 + ['[{"a": 1}]']
    events.append('{"name": "' + "}" * 100 + '", "ph": "X", "dur": @}')
    text = (HEAD.decode() + ",\n".join(events) + "]}").encode()
    path = tmp_path / "t.json"
    path.write_bytes(text)
    for block_bytes, workers in ((1 << 20, 1), (500, 1), (500, 3)):
        options = tv.LoadOptions(cache=False, block_bytes=block_bytes, workers=workers)
        with pytest.raises(tv.TraceFormatError) as err:
            tv.load(path, options=options)
        want = f"at byte {text.index(b'@')} (after event #69): Expecting value"
        assert str(err.value).endswith(want), (block_bytes, workers, str(err.value))


@pytest.mark.parametrize(
    "name",
    [b"gemm\\ud800x", b"gemm\xed\xa0\x80x"],  # an escape without its pair; its raw bytes
    ids=["escape", "raw-bytes"],
)
def test_a_lone_surrogate_in_a_name_or_args_reads_as_a_replacement_character(
    tmp_path: Path, name: bytes
) -> None:
    """JSON can escape half a UTF-16 pair; no UTF-8 text can hold one. It was refused
    ("cannot read: 'utf-8' codec can't encode") and, in raw args, a traceback from `sql`:
    it reads as U+FFFD, as any UTF-8 reader shows what it cannot read."""
    kernel = (
        b'{"ph": "X", "cat": "kernel", "name": "' + name + b'", "pid": 0, "tid": 7, '
        b'"ts": 1000, "dur": 5, "args": {"device": 0, "stream": 7, "note": "a\\udc00b", '
        b'"x": NaN, "k\\ud803": 1, '
        b'"Input Dims": [["\\ud801"]]}}'
    )
    meta = b'{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "p\\ud802"}}'
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [' + kernel + b", " + meta + b"]}")
    trace = tv.load(path, options=tv.LoadOptions(cache=False))
    assert trace.kernels["name"].to_list() == ["gemm\ufffdx"]
    r = CliRunner().invoke(
        cli, ["--no-cache", "sql", "-e", "select key, display_value from args", str(path)]
    )
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert "a\ufffdb" in r.stdout and "args.k\ufffd" in r.stdout


def test_a_byte_counted_after_a_cut_string_says_so(tmp_path: Path) -> None:
    """A name over 64 KiB is cut as the text is read, so the byte of a later error counts
    the text read, not the file: the message says which."""
    events = [e.decode() for e in _pretty_kernels("gemm", 60)]
    events[10] = events[10].replace('"gemm"', '"' + "n" * 70_000 + '"')
    events[50] = events[50].replace('"dur": 1', '"dur": @')
    path = tmp_path / "t.json"
    path.write_bytes((HEAD.decode() + ",\n".join(events) + "]}").encode())
    with pytest.raises(tv.TraceFormatError) as err:
        tv.load(path, options=tv.LoadOptions(cache=False))
    assert "(after event #49): Expecting value (a byte of the text read, in which strings " in str(
        err.value
    )


# every command that loads a trace takes --strict and refuses a cut one in one line (scan
# keeps going and records it: its traces table's truncated column)
_STRICT_COMMANDS = {
    "info": [],
    "summarize": [],
    "steps": [],
    "heartbeat": ["-o", "{out}/h.png"],
    "gaps": ["-o", "{out}/g.png"],
    "report": ["-o", "{out}/r.html"],
    "annotate": ["-o", "{out}/a.json.gz"],
    "check": ["--max", "busy.fraction=100%"],
    "sql": [],
    "diff": [],
    "cost": ["-j", "1", "-o", "{out}/c.png"],
}


@pytest.mark.parametrize("command", sorted(_STRICT_COMMANDS))
def test_every_command_that_loads_refuses_a_cut_trace_with_strict(
    tmp_path: Path, command: str
) -> None:
    text, _ = _kernels_text(50, array_form=False)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(gzip.compress(text)[: len(gzip.compress(text)) * 2 // 3])
    before = path.read_bytes()
    traces = {"sql": ["kernel_families", str(path)], "diff": [str(path), str(path)]}
    extra = [a.format(out=tmp_path) for a in _STRICT_COMMANDS[command]]
    done = CliRunner().invoke(cli, [command, *traces.get(command, [str(path)]), *extra, "--strict"])
    assert done.exit_code == 2, done.output
    assert done.stderr.startswith(f"Error: {path}: truncated"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.json.gz"]  # nothing written


def test_strict_names_every_loading_command() -> None:
    """The commands whose help offers --strict are those above (a new loading command
    without it, or one given it without a test, fails here)."""
    offered = {
        name
        for name, command in cli.commands.items()  # type: ignore[attr-defined]
        if any("--strict" in p.opts for p in command.params)
    }
    assert offered == set(_STRICT_COMMANDS)


@pytest.mark.parametrize(
    "value", [2**70, 2**64, 2**63, 1.5, "x", "99999999999999999999", True], ids=repr
)
@pytest.mark.parametrize("key", ["device", "stream"])
def test_a_device_or_stream_that_is_no_id_is_refused_on_device_activity(
    tmp_path: Path, key: str, value: object
) -> None:
    """A hostile probe's finding: ``args.device`` of 2**70, 2**64 or 1.5 became the pid
    (device 0), silently: the kernel's time was counted on a device it did not run on.
    Only an absent device or stream falls back to pid or tid; on a host event the value
    is not read. The refusal names the key and the value given (a reviewer's finding:
    it said "'args.device' or 'args.stream'", and no value)."""
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2}
    good = {**kernel, "args": {"device": 0, "stream": 7}}
    host = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1, "dur": 2}
    path = tmp_path / "t.json"
    path.write_text(json.dumps([good, {**host, "args": {key: value}}]))
    assert tv.load(path).kernels.height == 1  # a host event's odd device is not read
    path.write_text(json.dumps([good, {**kernel, "args": {"device": 0, "stream": 7, key: value}}]))
    done = CliRunner().invoke(cli, ["info", str(path)])
    assert done.exit_code == 2 and len(done.stderr.strip().splitlines()) == 1, done.output
    said = f"'args.{key}' ({value!r}) is not an integer id on device activity (kernel)"
    assert done.stderr == (
        f"Error: {path}: event #1 (ph='X', name='k'): {said}; "
        "cannot place it on a device and stream\n"
    )


@pytest.mark.parametrize(
    ("place", "said"),
    [
        ({"pid": "GPU 0", "tid": 7, "args": {"stream": 7}}, "no 'args.device' and a pid"),
        ({"pid": 0, "tid": "stream 7", "args": {"device": 0}}, "no 'args.stream' and a tid"),
    ],
    ids=["pid", "tid"],
)
def test_device_activity_on_no_device_is_refused(
    tmp_path: Path, place: dict[str, object], said: str
) -> None:
    """A probe's finding: kernels with ``"pid": "GPU 0"`` and no ``args.device`` loaded on
    a null device, and every analysing command ended in a TypeError traceback (exit 1);
    two such devices read as one. Refused in one line, exit 2."""
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{**kernel, **place}]))
    for command in ("info", "summarize"):
        done = CliRunner().invoke(cli, [command, str(path)])
        assert done.exit_code == 2 and done.stderr.count("\n") == 1, done.output
        assert done.stderr.startswith(f"Error: {path}: event #0 (ph='X', name='k'): ")
        assert f"device activity (kernel) with {said} that is not an integer id" in done.stderr


def test_a_numeric_string_device_is_read_as_its_number(tmp_path: Path) -> None:
    """As a pid or tid written as text is read (``"0"``, ``"0x7"``)."""
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 9, "tid": 9, "ts": 1, "dur": 2}
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{**kernel, "args": {"device": "1", "stream": "0x7"}}]))
    assert tv.load(path).kernels.select("device", "stream").row(0) == (1, 7)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["summarize", "{trace}", "--rules", "{bad}"], "not a rules file: not UTF-8 text (byte 0)"),
        (["sql", "{bad}", "{trace}"], "not a query file: not UTF-8 text (byte 0)"),
    ],
    ids=["rules", "query"],
)
def test_an_option_file_that_is_not_text_is_one_line(
    tmp_path: Path, args: list[str], said: str
) -> None:
    """A hostile probe's finding: a rules or query file of bytes that are not UTF-8 was a
    UnicodeDecodeError traceback (--checks, --gpu and --model said so in one line)."""
    suffix = ".toml" if "--rules" in args else ".sql"
    bad = tmp_path / f"bin{suffix}"
    bad.write_bytes(b"\xff\xfe")
    trace = str(GENERATED / "dense_sglang.json.gz")
    done = CliRunner().invoke(cli, [a.format(trace=trace, bad=bad) for a in args])
    assert done.exit_code == 2, done.output
    assert done.stderr == f"Error: {bad}: {said}\n"


def test_a_pipe_or_a_device_says_what_it_is(tmp_path: Path) -> None:
    """A hostile probe's finding: a FIFO and /dev/zero were "empty file", and in a scan
    "no such file or directory"."""
    import os

    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    for path, what in ((fifo, "a pipe (FIFO)"), (Path("/dev/zero"), "a character device")):
        if not path.exists():
            continue
        for argv in (["info", str(path)], ["scan", str(path), "-o", str(tmp_path / "ds")]):
            done = CliRunner().invoke(cli, argv)
            assert done.exit_code == 2, done.output
            assert done.stderr == f"Error: {path}: is {what}, not a trace file\n"
