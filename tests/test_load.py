"""The loader against planted truth, and its format handling."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from conftest import GENERATED, truth

import traceview as tv
from fixtures.build import TraceBuilder, us
from traceview.loader import LoadOptions
from traceview.model import DEPRECATED_COLUMNS, KERNEL_SCHEMA


def test_fixture_counts_and_times_match_truth(scenario: str) -> None:
    t = truth(scenario)
    trace = tv.load(GENERATED / f"{scenario}.json.gz")
    assert trace.meta.events == t["events"]
    assert trace.meta.skipped_events == 0
    held = t["in_trace"]  # start-up (CUDA-graph capture) included
    assert trace.kernels.height == held["kernels"]
    assert trace.bounds_ns() == (held["start_ns"], held["end_ns"])
    with pytest.warns(DeprecationWarning, match="bounds_ns"):  # the old name, same pair
        assert trace.span_ns() == trace.bounds_ns()
    assert sorted({s for _, s in trace.streams}) == t["streams"]
    assert trace.kernels["dur_ns"].sum() == sum(f["total_ns"] for f in held["families"].values())
    memory = held["families"].get("memory", {"count": 0})["count"]
    assert trace.kernels.filter(pl.col("event_kind") != "kernel").height == memory
    # every planted step start and anchor is a kernel start, to the nanosecond
    starts = set(trace.kernels["ts_ns"].to_list())
    for step in t["steps"]:
        assert step["start_ns"] in starts and step["anchor_ns"] in starts
    assert trace.meta.gpu_name == "NVIDIA H200"
    assert trace.kernels["ts_ns"].is_sorted()


def test_schema_and_dtypes() -> None:
    trace = tv.load(GENERATED / "hybrid_chunked.json.gz")
    assert dict(trace.kernels.drop(DEPRECATED_COLUMNS).schema) == KERNEL_SCHEMA
    assert trace.meta.base_time_ns == 1_767_189_312_000_000_000
    assert trace.meta.schema_version == 1
    assert trace.meta.format == "kineto"
    assert trace.events.filter(pl.col("event_kind") == "runtime").height == trace.kernels.height
    assert trace.flows.filter(pl.col("phase") == "s").height == trace.kernels.height


@pytest.mark.parametrize(
    "block",
    [pytest.param(2_048, id="2KB", marks=pytest.mark.slow), pytest.param(65_536, id="64KB")],
)
def test_block_size_does_not_change_result(block: int) -> None:
    path = GENERATED / "hybrid_tight.json.gz"
    whole = tv.load(path)
    cut = tv.load(path, options=LoadOptions(block_bytes=block))
    for name in ("kernels", "events", "flows", "metadata"):
        assert getattr(cut, name).equals(getattr(whole, name)), name


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("5117567635320.360", 5_117_567_635_320_360),
        ("5117567635320.361", 5_117_567_635_320_361),
        ("5117567635320.999", 5_117_567_635_320_999),
        ("8796093022207.001", 8_796_093_022_207_001),
        ("1683564902133354", 1_683_564_902_133_354_000),
        ("0.001", 1),
        ("-12.250", -12_250),
        ("87412.863", 87_412_863),
    ],
)
def test_microseconds_become_exact_nanoseconds(tmp_path: Path, text: str, ns: int) -> None:
    doc = (
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, '
        f'"ts": {text}, "dur": 1.001}}]}}'
    )
    (tmp_path / "t.json").write_text(doc)
    k = tv.load(tmp_path / "t.json").kernels
    assert k["ts_ns"].to_list() == [ns]
    assert k["dur_ns"].to_list() == [1_001]


def test_every_3_decimal_timestamp_in_a_range_is_exact(tmp_path: Path) -> None:
    base = 5_117_567_635_000_000
    lines = [
        f'{{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":{us(base + i)},'
        f'"dur":{us(i % 997)}}}'
        for i in range(20_000)
    ]
    (tmp_path / "t.json").write_text("[" + ",\n".join(lines) + "]")
    k = tv.load(tmp_path / "t.json").kernels
    assert k["ts_ns"].to_list() == [base + i for i in range(20_000)]
    assert k["dur_ns"].to_list() == [i % 997 for i in range(20_000)]


def _small(tmp_path: Path) -> TraceBuilder:
    tb = TraceBuilder()
    tb.kernel("gemm_a", 1_000_000, 5_000)
    tb.kernel("void f<{lambda()#1}, {lambda()#2}>(int)},\n{", 1_010_000, 2_000, stream=9)
    tb.kernel("Memset (Device)", 1_020_000, 1_000, cat="gpu_memset")
    tb.cpu_op("aten::mm", 999_000, 3_000)
    return tb


def test_gzip_detected_by_magic_not_name(tmp_path: Path) -> None:
    tb = _small(tmp_path)
    plain = tb.write(tmp_path / "a.json")
    zipped = tmp_path / "b.json"  # gzip content under a .json name
    zipped.write_bytes(gzip.compress(plain.read_bytes()))
    unzipped = tmp_path / "c.json.gz"  # plain content under a .gz name
    unzipped.write_bytes(plain.read_bytes())
    frames = [tv.load(p).kernels for p in (plain, zipped, unzipped)]
    assert frames[0].height == 3
    assert frames[0].equals(frames[1]) and frames[0].equals(frames[2])


def test_names_with_json_punctuation_survive(tmp_path: Path) -> None:
    trace = tv.load(
        _small(tmp_path).write(tmp_path / "a.json"), options=LoadOptions(block_bytes=64)
    )
    assert "void f<{lambda()#1}, {lambda()#2}>(int)},\n{" in trace.kernels["name"].to_list()


def _events_json(n: int) -> list[str]:
    return [
        json.dumps(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{i}",
                "pid": 0,
                "tid": 7,
                "ts": 10 + i,
                "dur": 0.5,
            }
        )
        for i in range(n)
    ]


@pytest.mark.parametrize(
    "text",
    [
        "[" + ",".join(_events_json(3)) + "]",
        "[" + ",\n".join(_events_json(3)) + "\n",  # Chrome accepts a missing ']'
        "[" + ",\n".join(_events_json(3)) + ",\n",  # ... and a trailing comma before it
        '{"traceEvents": [' + ", ".join(_events_json(3)) + '], "displayTimeUnit": "ns"}',
        '{"otherData": {"traceEvents": 1}, "traceEvents": [' + ",".join(_events_json(3)) + "]}",
        '{"displayTimeUnit": "ns", "traceEvents": [' + ",".join(_events_json(3)) + "]}\n\n",
    ],
    ids=[
        "array",
        "array-no-bracket",
        "array-trailing-comma",
        "object",
        "object-nested-key",
        "object-key-first",
    ],
)
def test_document_forms(tmp_path: Path, text: str) -> None:
    (tmp_path / "t.json").write_text(text)
    trace = tv.load(tmp_path / "t.json")
    assert trace.kernels["name"].cast(pl.String).to_list() == ["k0", "k1", "k2"]
    assert trace.kernels["ts_ns"].to_list() == [10_000, 11_000, 12_000]
    assert trace.meta.skipped_events == 0


def test_begin_end_pairs_become_complete_events(tmp_path: Path) -> None:
    events = [
        {"ph": "B", "name": "outer", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "B", "name": "inner", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 12},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 15},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 20},
    ]
    (tmp_path / "t.json").write_text(json.dumps(events))
    ev = tv.load(tmp_path / "t.json").events.sort("ts_ns")
    assert ev.select("name", "ts_ns", "dur_ns").rows() == [
        ("outer", 10_000, 10_000),
        ("inner", 12_000, 3_000),
    ]


def test_counters_and_metadata(tmp_path: Path) -> None:
    events = [
        {"ph": "C", "name": "Memory", "pid": 0, "ts": 5, "args": {"Total Allocated": 1024}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1},
    ]
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events}))
    trace = tv.load(tmp_path / "t.json")
    assert trace.counters.select("ts_ns", "series", "value").rows() == [
        (5_000, "Total Allocated", 1024.0)
    ]
    assert trace.metadata.rows() == [("thread_name", 0, 7, "stream 7")]


def test_window_and_device(tmp_path: Path) -> None:
    trace = tv.load(GENERATED / "dense_sglang.json.gz")
    t = truth("dense_sglang")
    s5, s6 = t["steps"][5]["start_ns"], t["steps"][6]["start_ns"]
    w = trace.window(s5, s6, absolute=True)
    assert w.kernels.height == t["steps"][5]["kernels"]
    assert w.kernels["ts_ns"].min() == s5
    # by default, ns from the trace's first kernel, as the CLI's --window counts
    zero = t["start_ns"]
    assert trace.window(s5 - zero, s6 - zero).kernels.equals(w.kernels)
    with pytest.raises(tv.TraceviewError, match=r"is empty \(it spans 0–"):
        trace.window(10 * (t["end_ns"] - zero), 11 * (t["end_ns"] - zero))
    with pytest.raises(tv.TraceviewError, match="is empty"):
        trace.window(5, 5)
    assert trace.device(0).kernels.height == trace.kernels.height
    assert trace.device(1).kernels.height == 0
    assert trace.kernels.height == t["kernels"]  # the original is unchanged


def test_old_kineto_categories_are_device_activity() -> None:
    trace = tv.load(GENERATED / "hybrid_tight.json.gz")
    assert set(trace.kernels["cat"].cast(pl.String).unique()) == {"Kernel", "Memcpy"}
    assert trace.kernels.height == truth("hybrid_tight")["kernels"]


def test_progress_callback_reports_the_file_read() -> None:
    path = GENERATED / "hybrid_chunked.json.gz"
    seen: list[tuple[int, int]] = []
    tv.load(
        path, options=LoadOptions(block_bytes=65_536, progress=lambda d, t: seen.append((d, t)))
    )
    assert seen and all(t == path.stat().st_size for _, t in seen)
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == path.stat().st_size


def test_ids_are_int32_and_a_trace_with_one_beyond_is_int64_everywhere(tmp_path: Path) -> None:
    """Ids (pid, tid, device, stream) are Int32 in every frame; one id that does not fit,
    met late in the file (after earlier blocks became frames), makes every id of the trace
    Int64, exact, in every frame."""
    from traceview.model import ID_COLUMNS

    big = 140_234_567_890_123  # a 64-bit thread id, as some profilers write
    events = [json.loads(e) for e in _events_json(400)]
    events.append({**events[-1], "ph": "X", "cat": "cpu_op", "name": "late", "tid": big})
    events.append({"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 2, "ts": 9})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))

    def id_types(trace: tv.Trace) -> set[pl.DataType]:
        frames = (trace.kernels, trace.events, trace.flows, trace.metadata, trace.shapes)
        return {f.schema[c] for f in frames for c in ID_COLUMNS if c in f.columns}

    small = tv.load(tmp_path / "t.json", options=LoadOptions(block_bytes=2_048, cache=False))
    assert id_types(small) == {pl.Int64}  # the late id widened the earlier parts too
    assert small.events.filter(pl.col("name") == "late")["tid"].to_list() == [big]
    assert small.kernels.height == 400 and small.kernels["tid"].unique().to_list() == [7]

    events.pop(-2)  # without it, every id fits
    path.write_text(json.dumps({"traceEvents": events}))
    narrow = tv.load(path, options=LoadOptions(block_bytes=2_048, cache=False))
    assert id_types(narrow) == {pl.Int32}
    assert narrow.flows["tid"].to_list() == [2]


def test_narrow_ids_keeps_int64_when_one_id_does_not_fit() -> None:
    """The protobuf reader's rule, on frames it builds with Int64 ids."""
    from traceview.model import narrow_ids

    fits = {"a": pl.DataFrame({"pid": [1, 2**31 - 1]}), "b": pl.DataFrame({"tid": [-(2**31)]})}
    assert {f.schema[c] for f in narrow_ids(fits).values() for c in f.columns} == {pl.Int32}
    beyond = {**fits, "c": pl.DataFrame({"stream": [2**31]})}
    assert {f.schema[c] for f in narrow_ids(beyond).values() for c in f.columns} == {pl.Int64}


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("1712195495985358.047", 1712195495985358047),
        ("1712195495985358.5", 1712195495985358500),
        ("1712195495985358.4996", 1712195495985358500),  # 499.6 ns
        ("1712195495985358.4994", 1712195495985358499),
        ("1712195495985358.0005", 1712195495985358001),  # half up, as to_ns rounds
        ("1712195495985358", 1712195495985358000),
        ("12", 12000),
        ('"12.5"', None),  # a string: its float stands
        ("1.5e15", None),
        ("-3.5", None),
    ],
)
def test_exact_ts_reads_the_digits(text: str, ns: int | None) -> None:
    from traceview.loader.columns import exact_ts

    doc = f'[{{"ts": {text}}}, {{"ph": "X"}}]'.encode()
    assert exact_ts(doc, 2).to_list() == [ns, None]  # type: ignore[union-attr]
    assert exact_ts(doc, 3) is None  # not the events just decoded


def _us(ns: int) -> str:
    """``ns`` as the digits of microseconds with three decimals, marked for :func:`_json`."""
    return f"@@{ns // 1000}.{ns % 1000:03d}@@"


def _json(doc: object) -> str:
    """JSON text with each :func:`_us` value as a bare number (a float cannot hold it)."""
    return json.dumps(doc).replace('"@@', "").replace('@@"', "")


EPOCH = 1_712_195_495_985_358_000  # ns: 1.7e15 µs, where a float64 is 250 ns coarse


def _epoch_trace(odd: bool) -> tuple[str, list[int]]:
    """Kernels 1 ns apart on one stream at Unix-epoch microseconds, a B/E pair, a flow and
    a counter, as JSON text; and each kernel's exact start (ns). ``odd``: one event has a
    field the typed decoder refuses (its block takes the careful path)."""
    kernel = {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7}
    events: list[dict[str, object]] = []
    starts = []
    t = EPOCH + 123
    for i in range(40):
        dur = 1_000 + 7 * i
        starts.append(t)
        args = {"device": 0, "stream": 7, "correlation": i}
        events.append({**kernel, "name": f"k{i % 3}", "ts": _us(t), "dur": _us(dur), "args": args})
        t += dur + 1
    host = {"pid": 1, "tid": 1}
    events.append({**host, "ph": "B", "name": "span", "ts": _us(EPOCH + 1)})
    events.append({**host, "ph": "E", "ts": _us(EPOCH + 2_222_333)})
    events.append({**host, "ph": "s", "id": 5, "cat": "ac2g", "name": "ac2g", "ts": _us(EPOCH + 5)})
    events.append({**host, "ph": "C", "name": "mem", "ts": _us(EPOCH + 9), "args": {"bytes": 1}})
    if odd:
        op = {**host, "ph": "X", "cat": "cpu_op", "name": "op", "ts": _us(EPOCH + 7)}
        events.append({**op, "dur": 1, "args": {"device": "0"}})
    return _json({"traceEvents": events}), starts


@pytest.mark.parametrize("odd", [False, True], ids=["typed", "careful"])
@pytest.mark.parametrize("workers", [1, 2])
def test_epoch_microsecond_times_load_to_the_exact_ns(
    tmp_path: Path, odd: bool, workers: int
) -> None:
    """An unseen-trace probe's finding: times counted from the Unix epoch in µs with ns
    decimals (hta/v100_ns_resolution_rank0 has them) lost up to 125 ns each in the float,
    and kernels 1 ns apart overlapped. They are read from their digits."""
    text, starts = _epoch_trace(odd)
    assert json.loads(text)["traceEvents"][0]["ts"] == starts[0] / 1000  # numbers
    path = tmp_path / "epoch.json"
    path.write_text(text)
    options = tv.LoadOptions(cache=False, workers=workers, block_bytes=2048)
    t = tv.load(path, options=options)
    k = t.kernels.sort("ts_ns")
    assert k["ts_ns"].to_list() == starts
    assert (k["ts_ns"].shift(-1) - (k["ts_ns"] + k["dur_ns"])).drop_nulls().to_list() == [1] * 39
    span = t.events.filter(pl.col("name") == "span")
    assert span.select("ts_ns", "dur_ns").row(0) == (EPOCH + 1, 2_222_332)
    assert t.flows["ts_ns"].to_list() == [EPOCH + 5]
    assert t.counters["ts_ns"].to_list() == [EPOCH + 9]
    if odd:
        assert t.events.filter(pl.col("name") == "op")["ts_ns"].to_list() == [EPOCH + 7]


def test_exact_times_never_break_a_load_nor_go_negative(tmp_path: Path) -> None:
    """A reviewer's cases: a ``ts`` that is an array holding a newline, beside epoch
    kernels, gave more texts than events (a ShapeError traceback); a B/E pair whose E is
    2 ns before its B (one float step apart: the float says 0) got a negative duration."""
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7}
    kernel |= {"dur": 1, "args": {"device": 0, "stream": 7}}
    host = {"pid": 1, "tid": 1}
    events = [
        {**kernel, "ts": _us(EPOCH + 1)},
        {**kernel, "ts": _us(EPOCH + 2_001)},
        {**host, "ph": "B", "name": "span", "ts": _us(EPOCH + 5_003)},
        {**host, "ph": "E", "ts": _us(EPOCH + 5_001)},
    ]
    path = tmp_path / "t.json"
    path.write_text(_json({"traceEvents": events}))
    t = tv.load(path, options=tv.LoadOptions(cache=False))
    assert t.kernels["ts_ns"].to_list() == [EPOCH + 1, EPOCH + 2_001]
    assert t.events.filter(pl.col("name") == "span")["dur_ns"].to_list() == [0]
    odd = {**host, "ph": "X", "name": "odd", "ts": "@@[1,\n 2]@@", "dur": 1}
    path.write_text(_json({"traceEvents": [*events[:2], odd]}).replace("\\n", "\n"))
    t = tv.load(path, options=tv.LoadOptions(cache=False))  # the floats stand
    assert t.kernels.height == 2 and abs(t.kernels["ts_ns"][0] - (EPOCH + 1)) <= 125


@pytest.mark.parametrize("name", ["hybrid_chunked.json.gz", "nsys/nsys_vllm.sqlite"])
def test_the_old_kind_column_is_event_kind_for_one_release(name: str) -> None:
    """``event_kind`` (kernel, memcpy, memset, cpu_op, runtime, …) is the frames' column; a
    step's ``kind`` (decode, mixed, prefill) is the steps table's. ``kind`` stays beside
    ``event_kind`` in ``kernels`` and ``events`` for one release, the same values, on a
    trace however it was made: loaded, windowed, read back from the cache."""
    trace = tv.load(GENERATED / name)
    for t in (trace, trace.window(0, 10**15), trace.device(trace.devices[0])):
        for frame in (t.kernels, t.events):
            assert frame["kind"].equals(frame["event_kind"].alias("kind"))
    assert set(trace.kernels["event_kind"].unique().to_list()) <= {"kernel", "memcpy", "memset"}
