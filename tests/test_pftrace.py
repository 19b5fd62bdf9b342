"""Perfetto protobuf traces load into the same model: the same events summarize the same."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb2
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

import traceview as tv
from fixtures.engine import SCENARIOS, build
from fixtures.pftrace import to_pftrace
from traceview.cli import cli
from traceview.errors import CaptureOnlyError


# two scenarios by default (one gzipped protobuf); CI runs every one (pytest -m slow)
@pytest.mark.slow  # about 2-3 s; CI runs it (the default run stays under 2 minutes)
@pytest.mark.parametrize(
    "sc",
    [
        pytest.param(
            s,
            id=s.name,
            marks=[] if s.name in ("dense_sglang", "hybrid_tight") else [pytest.mark.slow],
        )
        for s in SCENARIOS
    ],
)
def test_same_events_summarize_identically(tmp_path: Path, sc) -> None:  # type: ignore[no-untyped-def]
    tb, _plan = build(sc)
    json_path = tb.write(tmp_path / "t.json.gz")
    pf_path = to_pftrace(tb, tmp_path / "t.pftrace", compress=sc.name == "dense_sglang")
    if not sc.serve:  # engine start-up only: both say so, the same way
        with pytest.raises(CaptureOnlyError, match="capture / warm-up only"):
            tv.analyze(tv.load(json_path)).serving()
        with pytest.raises(CaptureOnlyError, match="capture / warm-up only"):
            tv.analyze(tv.load(pf_path)).serving()
        one = tv.summarize(tv.load(json_path)).to_dict()["capture"]
        assert one == tv.summarize(tv.load(pf_path)).to_dict()["capture"]
        return
    a = tv.summarize(tv.load(json_path)).to_dict()
    b_trace = tv.load(pf_path)
    assert b_trace.meta.format == "perfetto"
    b = tv.summarize(b_trace).to_dict()
    # time_breakdown reads the launches' durations: this fixture's launches (4 µs, one every
    # 2 µs) overlap on their thread, which a protobuf track's begin/end pairs cannot hold,
    # so the .pftrace closes them in stack order with other durations; busy agrees
    assert [p["busy_by_family"] for p in a["time_breakdown"]] == [
        p["busy_by_family"] for p in b["time_breakdown"]
    ]
    # a .pftrace carries no deviceProperties: the GPU's peaks are not known there, so
    # neither is a family's roofline bound; the work itself is the same
    assert b["efficiency"]["gpu"]["name"] is None and a["efficiency"]["gpu"]["name"]

    def unbound(eff: dict) -> dict:  # type: ignore[type-arg]
        families = [{**f, "bound": None} for f in eff["families"] or []]
        return {**eff, "gpu": None, "device": None, "families": families}

    assert unbound(a["efficiency"]) == unbound(b["efficiency"])
    assert all(f["bound"] is None for f in b["efficiency"]["families"] or [])
    for key in ("trace", "warnings", "time_breakdown", "efficiency"):
        a.pop(key), b.pop(key)
    for ga, gb in zip(a["decode_gaps"], b["decode_gaps"], strict=True):  # the same reason
        for key in ("filled", "widest"):
            wa, wb = ga.pop(key), gb.pop(key)
            assert (wa is None) == (wb is None)
            if wa is not None and wb is not None:
                assert wa["busy_by_family"] == wb["busy_by_family"]
    assert a == b
    j, p = tv.load(json_path), b_trace
    assert j.kernels.drop("cat").equals(p.kernels.drop("cat"))


def _packet(builder: TraceProtoBuilder, ts: int | None = None, *, seq: int = 1):  # type: ignore[no-untyped-def]
    p = builder.add_packet()
    if ts is not None:
        p.timestamp = ts
    p.trusted_packet_sequence_id = seq
    return p


def test_instants_counters_interning_and_unmatched(tmp_path: Path) -> None:
    b = TraceProtoBuilder()
    d = _packet(b).track_descriptor
    d.uuid, d.thread.pid, d.thread.tid, d.thread.thread_name = 1, 0, 7, "stream 7"
    c = _packet(b).track_descriptor
    c.uuid, c.name = 2, "Memory Total Allocated"
    c.counter.SetInParent()
    p = _packet(b, 1_000)
    p.sequence_flags = pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    e = p.interned_data.event_names.add()
    e.iid, e.name = 5, "nvjet_tst_128x64"
    cat = p.interned_data.event_categories.add()
    cat.iid, cat.name = 3, "kernel"
    p.track_event.type = pb2.TrackEvent.TYPE_SLICE_BEGIN
    p.track_event.track_uuid, p.track_event.name_iid = 1, 5
    p.track_event.category_iids.append(3)
    end = _packet(b, 3_500)
    end.track_event.type, end.track_event.track_uuid = pb2.TrackEvent.TYPE_SLICE_END, 1
    inst = _packet(b, 2_000)
    inst.track_event.type, inst.track_event.track_uuid = pb2.TrackEvent.TYPE_INSTANT, 1
    inst.track_event.name = "marker"
    cnt = _packet(b, 2_500)
    cnt.track_event.type, cnt.track_event.track_uuid = pb2.TrackEvent.TYPE_COUNTER, 2
    cnt.track_event.counter_value = 1024
    orphan = _packet(b, 4_000)
    orphan.track_event.type, orphan.track_event.track_uuid = pb2.TrackEvent.TYPE_SLICE_END, 1
    path = tmp_path / "t.perfetto-trace"
    path.write_bytes(b.serialize())
    trace = tv.load(path)
    assert trace.kernels.select("ts_ns", "dur_ns", "stream").rows() == [(1_000, 2_500, 7)]
    assert trace.kernels["name"].cast(str).to_list() == ["nvjet_tst_128x64"]
    assert trace.events.select("name", "dur_ns").rows() == [("marker", 0)]
    assert trace.counters.select("ts_ns", "name", "value").rows() == [
        (2_500, "Memory Total Allocated", 1024.0)
    ]
    assert trace.meta.skipped_events == 1
    assert "slice end without a begin" in trace.meta.warnings[0]
    info = CliRunner().invoke(cli, ["info", str(path), "--json"])
    assert info.exit_code == 0 and json.loads(info.stdout)["format"] == "perfetto"


def test_truncated_perfetto_trace_is_one_line(tmp_path: Path) -> None:
    tb, _ = build(SCENARIOS[1])
    data = to_pftrace(tb, tmp_path / "full.pftrace").read_bytes()
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(data[: len(data) // 2])
    result = CliRunner().invoke(cli, ["summarize", str(cut)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {cut}: truncated Perfetto trace in packet #")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def test_a_packet_that_claims_more_than_the_file_holds_is_one_line(tmp_path: Path) -> None:
    """A hostile probe's finding: a 107-byte .pftrace whose first packet claims 1 TiB raised
    MemoryError, and a claim of 1.9 GB allocated it before saying "truncated". A claim of a
    protobuf message's limit or more is refused as such; a smaller one is read as far as
    the file goes, in a process capped at 2 GiB."""
    import resource
    import subprocess
    import sys

    from conftest import ROOT

    huge = tmp_path / "tib.pftrace"
    huge.write_bytes(b"\x0a" + _varint(1 << 40) + b"\x08" * 100)
    assert huge.stat().st_size == 107
    done = CliRunner().invoke(cli, ["summarize", str(huge)])
    assert done.exit_code == 2, done.output
    assert done.stderr == (
        f"Error: {huge}: not a Perfetto trace: packet #0 claims 1,099,511,627,776 bytes, "
        "more than Perfetto's readers take in one packet (64 MiB)\n"
    )
    large = tmp_path / "large.pftrace"
    large.write_bytes(b"\x0a" + _varint(60 << 20) + b"\x08" * 100)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    run = subprocess.run(
        [sys.executable, "-m", "traceview", "--no-cache", "summarize", str(large)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert run.stderr == f"Error: {large}: truncated Perfetto trace in packet #0\n"


def test_a_gzipped_packet_of_zeros_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """The probe of issue 49: a 510 KB gzipped .pftrace whose one packet claims 500 MiB of
    zeros took 1.12 GB before "not a valid TracePacket" (the cap was protobuf's 2 GiB). A
    packet over Perfetto's own limit (64 MiB) is refused before any of it is read."""
    import gzip
    import resource
    import subprocess
    import sys

    from conftest import ROOT

    bomb = tmp_path / "bomb.pftrace.gz"
    with gzip.open(bomb, "wb") as f:
        f.write(b"\x0a" + _varint(500 << 20) + bytes(1 << 20))  # what follows is never read

    def cap() -> None:  # 1 GiB of address space, below the peak of a 500 MiB packet's read
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    run = subprocess.run(
        [sys.executable, "-m", "traceview", "--no-cache", "info", str(bomb)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert run.stderr == (
        f"Error: {bomb}: not a Perfetto trace: packet #0 claims 524,288,000 bytes, more than "
        "Perfetto's readers take in one packet (64 MiB)\n"
    )


@pytest.mark.parametrize(
    "key, value, what",
    [
        ("correlation", 2**64 - 1, "'correlation' annotation"),
        ("device", 2**63, "'device' annotation"),
        ("ts", 2**63, "time (ts)"),
        ("ts", 2**64 - 1, "time (ts)"),
    ],
)
def test_a_value_beyond_int64_is_one_line(tmp_path: Path, key: str, value: int, what: str) -> None:
    """The probe of issue 49: a kernel's uint64 annotation or time of 2^63 or more gave a
    traceback (polars: "found value of type Int128"). Device activity that no Int64 can
    place is refused, naming the field; a host event is skipped and counted."""
    for cat in ("kernel", "cpu_op"):
        t = _thread_trace()
        for i in range(3):
            begin, end = 1_000_000 + i * 10_000, 1_003_000 + i * 10_000
            if key == "ts" and i == 1:
                begin, end = value, value
            for ts, kind in (
                (begin, pb2.TrackEvent.TYPE_SLICE_BEGIN),
                (end, pb2.TrackEvent.TYPE_SLICE_END),
            ):
                p = _packet(t)
                p.timestamp, p.track_event.track_uuid, p.track_event.type = ts, _TRACK, kind
                if kind == pb2.TrackEvent.TYPE_SLICE_BEGIN:
                    p.track_event.name = "gemm"
                    p.track_event.categories.append(cat)
                    if key != "ts" and i == 1:
                        a = p.track_event.debug_annotations.add()
                        a.name, a.uint_value = key, value
        path = tmp_path / f"{cat}.pftrace"
        path.write_bytes(t.serialize())
        done = CliRunner().invoke(cli, ["--no-cache", "info", str(path)])
        if cat == "kernel":
            assert done.exit_code == 2 and len(done.stderr.splitlines()) == 1, done.output
            assert f"whose {what} does not fit a signed 64-bit integer" in done.stderr
        else:
            loaded = tv.load(path)
            assert loaded.events.height == 2 and loaded.meta.skipped_events == 1
            assert f"1 event skipped: event whose {what} does not fit" in loaded.meta.warnings[0]


_TRACK = 11  # the thread track of the hand-built traces below: pid 0, tid 7


def _thread_trace() -> TraceProtoBuilder:
    """A trace that describes one thread track (:data:`_TRACK`) to put slices on."""
    builder = TraceProtoBuilder()
    d = _packet(builder).track_descriptor
    d.uuid, d.thread.pid, d.thread.tid = _TRACK, 0, 7
    return builder


def test_a_device_slice_that_ends_before_it_begins_is_refused(tmp_path: Path) -> None:
    """A hostile probe's finding: such a slice was a kernel of negative duration, and busy
    read -0.30 (the JSON reader refuses a negative 'dur' on device activity)."""
    t = _thread_trace()
    for begin, end in ((1000, 21000), (101000, 121000), (300000, 200000)):
        for ts, kind in (
            (begin, pb2.TrackEvent.TYPE_SLICE_BEGIN),
            (end, pb2.TrackEvent.TYPE_SLICE_END),
        ):
            p = _packet(t)
            p.timestamp, p.track_event.track_uuid, p.track_event.type = ts, _TRACK, kind
            if kind == pb2.TrackEvent.TYPE_SLICE_BEGIN:
                p.track_event.name = "flash_fwd_kernel"
                p.track_event.categories.append("kernel")
    path = tmp_path / "neg.pftrace"
    path.write_bytes(t.serialize())
    done = CliRunner().invoke(cli, ["summarize", str(path)])
    assert done.exit_code == 2 and len(done.stderr.splitlines()) == 1, done.output
    assert "ends before it begins; cannot place it in time" in done.stderr


@pytest.mark.parametrize("unit_ns", [1, 1000])
def test_the_sdks_incremental_timestamps_read_as_absolute_ones(
    tmp_path: Path, unit_ns: int
) -> None:
    """An unseen-trace probe's finding: the Perfetto C++ SDK writes each packet's time on
    clock 64 of its sequence, incremental (a delta from the packet before), described by a
    ClockSnapshot against the trace's clock; such a .pftrace was refused ("a slice of device
    activity … ends before it begins"). Planted: the fixture's packets rewritten so (in ns,
    and in µs units where every time is a whole µs), the frames equal the absolute file's."""
    sc = next(s for s in SCENARIOS if s.name == "hybrid_tight")
    tb, _ = build(sc)
    absolute = to_pftrace(tb, tmp_path / "absolute.pftrace")
    trace = pb2.Trace()
    trace.ParseFromString(absolute.read_bytes())
    timed = [p for p in trace.packet if p.HasField("timestamp")]
    if unit_ns > 1:  # whole µs: round every time down, in both files
        for p in timed:
            p.timestamp -= p.timestamp % unit_ns
        absolute.write_bytes(trace.SerializeToString())
    first = min(p.timestamp for p in timed)
    out = pb2.Trace()
    last: dict[int, int] = {}
    for p in trace.packet:
        seq = p.trusted_packet_sequence_id
        if seq not in last:  # the sequence's defaults and its clock, before its first packet
            head = out.packet.add()  # the SDK's first packet of a sequence: a clean start
            head.trusted_packet_sequence_id = seq
            head.sequence_flags = pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            head.trace_packet_defaults.timestamp_clock_id = 64
            boot = head.clock_snapshot.clocks.add()
            boot.clock_id, boot.timestamp = 6, first
            own = head.clock_snapshot.clocks.add()
            own.clock_id, own.timestamp, own.is_incremental = 64, 1_000, True
            own.unit_multiplier_ns = unit_ns
            last[seq] = first
        q = out.packet.add()
        q.CopyFrom(p)
        q.sequence_flags &= ~pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED  # started above
        if p.HasField("timestamp"):
            assert p.timestamp >= last[seq]
            q.timestamp = (p.timestamp - last[seq]) // unit_ns
            last[seq] = p.timestamp
    incremental = tmp_path / "incremental.pftrace"
    incremental.write_bytes(out.SerializeToString())
    a, b = tv.load(absolute), tv.load(incremental)
    for frame in ("kernels", "events", "flows"):
        assert getattr(a, frame).equals(getattr(b, frame)), frame
    assert tv.summarize(a).to_dict()["steps"] == tv.summarize(b).to_dict()["steps"]


def _sequence_trace(
    path: Path,
    *,
    snapshot_clock: int = 6,
    head_ts: int | None = None,
    dropped_before_second: bool = False,
) -> Path:
    """One sequence on the SDK's incremental clock 64: a snapshot (clock 64 at 500 =
    ``snapshot_clock`` at 1,000,000 ns), then two kernels, each a begin 100 ns after the
    packet before and an end 1,000 ns after its begin; the second's begin may follow lost
    packets (``previous_packet_dropped``)."""
    trace = _thread_trace()
    head = _packet(trace)
    head.sequence_flags = pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    head.trace_packet_defaults.timestamp_clock_id = 64
    if head_ts is not None:
        head.timestamp = head_ts
    c = head.clock_snapshot.clocks.add()
    c.clock_id, c.timestamp = snapshot_clock, 1_000_000
    c = head.clock_snapshot.clocks.add()
    c.clock_id, c.timestamp, c.is_incremental = 64, 500, True
    begin, end = pb2.TrackEvent.TYPE_SLICE_BEGIN, pb2.TrackEvent.TYPE_SLICE_END
    for i, (delta, kind) in enumerate([(100, begin), (1000, end), (100, begin), (1000, end)]):
        p = _packet(trace)
        p.timestamp = delta
        p.sequence_flags = pb2.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        if dropped_before_second and i == 2:
            p.previous_packet_dropped = 1
        p.track_event.track_uuid, p.track_event.type = _TRACK, kind
        if kind == begin:
            p.track_event.name = "gemm_kernel"
            p.track_event.categories.append("kernel")
    path.write_bytes(trace.serialize())
    return path


def test_sequence_clocks_as_perfetto_reads_them(tmp_path: Path) -> None:
    """A review's findings on the incremental clocks: a snapshot that ties clock 64 to
    MONOTONIC (the SDK's choice where BOOTTIME is not its clock) dropped every event; a
    snapshot packet's own time was added as a delta; after lost packets, deltas were added
    to a stale base, so the next kernel moved early, silently (Perfetto skips such events
    until the sequence starts clean)."""

    def kernels(**kw: int) -> tuple[list[tuple[int, int]], tuple[str, ...]]:
        path = _sequence_trace(tmp_path / f"{sorted(kw)}.pftrace", **kw)  # type: ignore[arg-type]
        trace = tv.load(path)
        return trace.kernels.select("ts_ns", "dur_ns").rows(), tuple(trace.meta.warnings)

    both = [(1_000_100, 1000), (1_001_200, 1000)]
    assert kernels()[0] == both
    assert kernels(snapshot_clock=3)[0] == both
    assert kernels(head_ts=5000)[0] == both
    rows, said = kernels(dropped_before_second=True)
    assert rows == both[:1]
    assert any("packets of the sequence were lost mid-trace" in w for w in said)


def test_a_user_clock_and_names_interned_beside_a_snapshot(tmp_path: Path) -> None:
    """A review's findings: a user's clock (id 128 on) that a snapshot ties to the trace's
    is converted for every sequence, and names interned in the snapshot's own packet are
    kept (Perfetto reads interned data before it returns on a snapshot); a clean start
    drops the sequence's default clock."""
    trace = _thread_trace()
    head = _packet(trace, seq=2)  # the snapshot on another sequence: a user's clock is the trace's
    c = head.clock_snapshot.clocks.add()
    c.clock_id, c.timestamp = 6, 1_000_000
    c = head.clock_snapshot.clocks.add()
    c.clock_id, c.timestamp = 200, 10
    name = head.interned_data.event_names.add()
    name.iid, name.name = 5, "interned_gemm"
    begin, end = pb2.TrackEvent.TYPE_SLICE_BEGIN, pb2.TrackEvent.TYPE_SLICE_END
    for seq, at, kind in ((2, 20, begin), (2, 30, end)):
        p = _packet(trace, seq=seq)
        p.timestamp, p.timestamp_clock_id = at, 200
        p.track_event.track_uuid, p.track_event.type = _TRACK, kind
        if kind == begin:
            p.track_event.name_iid = 5
            p.track_event.categories.append("kernel")
    cleared = _packet(trace, seq=3)  # a sequence whose clean start drops its defaults' clock
    cleared.trace_packet_defaults.timestamp_clock_id = 64
    restart = _packet(trace, seq=3)
    restart.sequence_flags = pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    for at, kind in ((5_000_000, begin), (5_001_000, end)):
        p = _packet(trace, seq=3)
        p.timestamp = at
        p.track_event.track_uuid, p.track_event.type = _TRACK, kind
        if kind == begin:
            p.track_event.name = "absolute_gemm"
            p.track_event.categories.append("kernel")
    path = tmp_path / "user_clock.pftrace"
    path.write_bytes(trace.serialize())
    rows = tv.load(path).kernels.select("ts_ns", "dur_ns", pl.col("name").cast(pl.String)).rows()
    assert rows == [(1_000_010, 10, "interned_gemm"), (5_000_000, 1000, "absolute_gemm")]


def test_a_ring_buffer_that_overwrote_a_sequences_start_skips_until_it_starts_clean(
    tmp_path: Path,
) -> None:
    """A hostile probe's finding: where a ring buffer overwrote a sequence's clean start
    (and the interned names it defined), the packets that need that state loaded as host
    events named '' (kernels among them). Perfetto skips them until the sequence starts
    clean (SEQ_NEEDS_INCREMENTAL_STATE). Planted: a fixture's packets flagged as the SDK
    flags them, the first third lost, and a clean start (its names interned again) two
    thirds in: what follows it loads as in the whole file, each event before it is
    skipped and counted, and nothing is named ''."""
    from dataclasses import replace

    sc = next(s for s in SCENARIOS if s.name == "hybrid_chunked")  # kernels and host events
    tb, _ = build(replace(sc, decode_before=6, chunks=2, decode_after=6))
    whole = to_pftrace(tb, tmp_path / "whole.pftrace")
    trace = pb2.Trace()
    trace.ParseFromString(whole.read_bytes())
    names = {}  # every interned name, to define again at the clean start
    for p in trace.packet:
        names.update({e.iid: e.name for e in p.interned_data.event_names})
    timed = [i for i, p in enumerate(trace.packet) if p.HasField("track_event")]
    lost, restart = timed[len(timed) // 3], timed[2 * len(timed) // 3]
    out = pb2.Trace()
    for i, p in enumerate(trace.packet):
        if i == restart:  # the SDK's periodic clean start: names interned again
            clean = out.packet.add()
            clean.trusted_packet_sequence_id = p.trusted_packet_sequence_id
            clean.sequence_flags = pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            for iid, name in names.items():
                e = clean.interned_data.event_names.add()
                e.iid, e.name = iid, name
        if i < lost and p.HasField("track_event"):
            continue  # overwritten (the descriptors before it survive: emitted again)
        q = out.packet.add()
        q.CopyFrom(p)
        if q.HasField("track_event"):
            q.sequence_flags = pb2.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    ring = tmp_path / "ring.pftrace"
    ring.write_bytes(out.SerializeToString())
    got = tv.load(ring, options=tv.LoadOptions(cache=False))
    full = tv.load(whole)
    first = trace.packet[restart].timestamp
    assert got.kernels.equals(full.kernels.filter(pl.col("ts_ns") >= first))
    host = full.events.filter(pl.col("ts_ns") >= first)
    assert got.events.select("ts_ns", "name").equals(host.select("ts_ns", "name"))
    assert "" not in got.events["name"].cast(str).to_list()
    skipped = dict(w.split(" skipped: ", 1)[::-1] for w in got.meta.warnings if " skipped: " in w)
    assert (
        skipped[
            "event that needs its sequence's incremental state (interned names, defaults, its "
            "clock) where none is known: the sequence's clean start is not in the trace (a ring "
            "buffer that wrapped overwrote it)"
        ]
        == f"{sum(1 for i in timed if lost <= i < restart and not _is_end(trace.packet[i]))} events"
    )


def _is_end(packet: pb2.TracePacket) -> bool:
    return bool(packet.track_event.type == pb2.TrackEvent.TYPE_SLICE_END)


def test_a_skipped_slice_counts_once_and_a_loss_mid_trace_says_so(tmp_path: Path) -> None:
    """The probe of issue 49: a slice skipped for want of its sequence's state counted its
    begin and its end packets ("10 events skipped" for 5 slices), and packets lost
    mid-trace were worded as a ring buffer that overwrote the start. Planted: 4 kernels
    read, then a loss (previous_packet_dropped), 3 kernels that need the lost state, a
    clean start, 2 kernels read."""
    t = _thread_trace()
    begin, end = pb2.TrackEvent.TYPE_SLICE_BEGIN, pb2.TrackEvent.TYPE_SLICE_END
    head = _packet(t)
    head.sequence_flags = pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    for i in range(9):
        if i == 7:
            clean = _packet(t)
            clean.sequence_flags = pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        for ts, kind in ((i * 10_000, begin), (i * 10_000 + 2_000, end)):
            p = _packet(t, 1_000_000 + ts)
            p.sequence_flags = pb2.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            p.previous_packet_dropped = int(i == 4 and kind == begin)
            p.track_event.track_uuid, p.track_event.type = _TRACK, kind
            if kind == begin:
                p.track_event.name = "gemm_kernel"
                p.track_event.categories.append("kernel")
    path = tmp_path / "mid_loss.pftrace"
    path.write_bytes(t.serialize())
    trace = tv.load(path)
    assert trace.kernels.height == 6 and trace.meta.skipped_events == 3
    assert trace.meta.warnings == (
        "3 events skipped: event that needs its sequence's incremental state (interned "
        "names, defaults, its clock) where none is known: packets of the sequence were lost "
        "mid-trace (previous_packet_dropped), until it started clean again",
    )


def test_an_event_whose_interned_name_is_unknown_is_skipped_not_named_empty(
    tmp_path: Path,
) -> None:
    """A writer that sets no sequence flags, its names interned in a packet that was lost:
    an event naming an iid, or a category iid, its sequence never defined is skipped and
    counted (it read as a host event named '', a kernel among them); one whose names are
    known loads."""
    t = _thread_trace()
    head = _packet(t)
    head.sequence_flags = pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    e = head.interned_data.event_names.add()
    e.iid, e.name = 1, "gemm_known"
    begin, end = pb2.TrackEvent.TYPE_SLICE_BEGIN, pb2.TrackEvent.TYPE_SLICE_END
    for at, name_iid, cat_iid in ((1_000, 1, None), (5_000, 9, None), (9_000, 1, 4)):
        for ts, kind in ((at, begin), (at + 500, end)):
            p = _packet(t, ts)
            p.track_event.track_uuid, p.track_event.type = _TRACK, kind
            if kind == begin:
                p.track_event.name_iid = name_iid
                if cat_iid is None:
                    p.track_event.categories.append("kernel")
                else:
                    p.track_event.category_iids.append(cat_iid)
    path = tmp_path / "lost_names.pftrace"
    path.write_bytes(t.serialize())
    trace = tv.load(path)
    assert trace.kernels.select("ts_ns", "dur_ns", pl.col("name").cast(str)).rows() == [
        (1_000, 500, "gemm_known")
    ]
    assert trace.events.height == 0
    assert sorted(trace.meta.warnings) == [
        "2 events skipped: event that names an interned name, category or annotation its "
        "sequence never defined (the packet that defined it lost)",
        "2 events skipped: slice end without a begin",
    ]


def test_events_on_their_sequences_default_track_pair_per_track(tmp_path: Path) -> None:
    """A hostile probe's finding: the Perfetto SDK writes one sequence per thread and puts
    its events on the sequence's default track (``track_event_defaults.track_uuid``), with
    no track_uuid of their own; such a .pftrace was a TypeError traceback, and with two
    sequences begin/end pairs matched across threads. Planted: a fixture's packets written
    so (one sequence per track, names inline): the frames equal the file's with every
    event's track its own."""
    from dataclasses import replace

    sc = next(s for s in SCENARIOS if s.name == "hybrid_chunked")  # kernels and host events
    tb, _ = build(replace(sc, decode_before=6, chunks=2, decode_after=6))
    whole = to_pftrace(tb, tmp_path / "whole.pftrace")
    trace = pb2.Trace()
    trace.ParseFromString(whole.read_bytes())
    names: dict[int, str] = {}
    out = pb2.Trace()
    seq_of: dict[int, int] = {}
    for p in trace.packet:
        names.update({e.iid: e.name for e in p.interned_data.event_names})
        if p.HasField("track_descriptor"):
            uuid = p.track_descriptor.uuid
            seq_of[uuid] = 100 + len(seq_of)
            head = out.packet.add()  # the SDK's clean start: the defaults, then the track
            head.trusted_packet_sequence_id = seq_of[uuid]
            head.sequence_flags = pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            head.trace_packet_defaults.track_event_defaults.track_uuid = uuid
        q = out.packet.add()
        q.CopyFrom(p)
        q.ClearField("interned_data")
        q.sequence_flags = 0
        if p.HasField("track_descriptor"):
            q.trusted_packet_sequence_id = seq_of[p.track_descriptor.uuid]
        if p.HasField("track_event"):
            q.trusted_packet_sequence_id = seq_of[p.track_event.track_uuid]
            q.sequence_flags = pb2.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            q.track_event.ClearField("track_uuid")
            if p.track_event.HasField("name_iid"):
                q.track_event.name = names[p.track_event.name_iid]
    assert len(seq_of) > 2  # threads and streams, each its own sequence
    sdk = tmp_path / "sdk.pftrace"
    sdk.write_bytes(out.SerializeToString())
    a, b = tv.load(whole), tv.load(sdk, options=tv.LoadOptions(cache=False))
    for frame in ("kernels", "events", "flows"):
        assert getattr(a, frame).equals(getattr(b, frame)), frame
    done = CliRunner().invoke(cli, ["summarize", str(sdk), "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["steps"] == tv.summarize(a).to_dict()["steps"]


def test_a_legacy_thread_descriptor_places_events_and_the_global_track_does_not(
    tmp_path: Path,
) -> None:
    """Perfetto's other placements of an event without a track_uuid: a sequence whose
    legacy ThreadDescriptor names its thread puts them on that thread's track; without
    either, on the trace-global track, which names no process or thread: a kernel there
    cannot be placed on a device, and is one line (it was a TypeError traceback)."""
    begin, end = pb2.TrackEvent.TYPE_SLICE_BEGIN, pb2.TrackEvent.TYPE_SLICE_END

    def kernel_trace(path: Path, *, legacy: bool) -> Path:
        t = TraceProtoBuilder()
        head = _packet(t, seq=5)
        head.sequence_flags = pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        if legacy:
            head.thread_descriptor.pid, head.thread_descriptor.tid = 0, 9
        for ts, kind in ((6_000, begin), (6_500, end)):
            p = _packet(t, ts, seq=5)
            p.track_event.type = kind
            if kind == begin:
                p.track_event.name = "flash_fwd_kernel"
                p.track_event.categories.append("kernel")
        path.write_bytes(t.serialize())
        return path

    legacy = tv.load(kernel_trace(tmp_path / "legacy.pftrace", legacy=True))
    assert legacy.kernels.select("ts_ns", "dur_ns", "device", "stream").rows() == [
        (6_000, 500, 0, 9)
    ]
    nowhere = kernel_trace(tmp_path / "global.pftrace", legacy=False)
    done = CliRunner().invoke(cli, ["summarize", str(nowhere)])
    assert done.exit_code == 2, done.output
    assert done.stderr == (
        f"Error: {nowhere}: a slice of device activity (kernel, 'flash_fwd_kernel') with no "
        "'device' annotation, on a track that names no process; cannot place it on a "
        "device and stream\n"
    )


def _one_kernel_each(path: Path, kernels: list[dict]) -> Path:  # type: ignore[type-arg]
    """Slices on the thread track :data:`_TRACK` (pid 0, tid 7): each a ``begin`` and
    ``end`` time (None: the packet has no timestamp), a ``name`` and the debug
    ``annotations`` ``(name, field, value)`` its begin carries; a name ``gemm~`` is
    written as the bytes ``gemm\\xff``, which are not UTF-8."""
    t = _thread_trace()
    head = _packet(t)
    head.sequence_flags = pb2.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    s = head.interned_data.debug_annotation_string_values.add()
    s.iid, s.str = 4, b"9"
    for k in kernels:
        for ts, kind in ((k["begin"], pb2.TrackEvent.TYPE_SLICE_BEGIN), (k["end"], 2)):
            p = _packet(t, ts)
            p.track_event.track_uuid, p.track_event.type = _TRACK, kind
            if kind == pb2.TrackEvent.TYPE_SLICE_BEGIN:
                p.track_event.name = k.get("name", "gemm_kernel")
                p.track_event.categories.append("kernel")
                for key, field, value in k.get("annotations", ()):
                    a = p.track_event.debug_annotations.add()
                    a.name = key
                    if field == "nested_value":
                        a.nested_value.nested_type = 1
                    else:
                        setattr(a, field, value)
    path.write_bytes(t.serialize().replace(b"gemm~", b"gemm\xff"))  # the same length
    return path


def test_hostile_times_annotations_and_names_read_as_the_json_reader_reads_them(
    tmp_path: Path,
) -> None:
    """A hostile probe's findings on the .pftrace reader: an event whose packet has no
    timestamp read at time 0 (a kernel 6 µs long from 0); a 'stream' annotation interned
    (string_value_iid) read as the iid; a nested annotation value (``Input Dims``) was a
    TypeError traceback; a name that is not UTF-8 (protobuf hands it over as bytes) was a
    polars traceback. Planted: the kernels that can be placed, where they are; the rest
    skipped and counted."""
    path = _one_kernel_each(
        tmp_path / "hostile.pftrace",
        [
            {"begin": 1_000, "end": 2_000},
            {"begin": None, "end": 6_000},  # no time: skipped, its end without a begin
            {"begin": 7_000, "end": 7_500, "annotations": [("stream", "string_value_iid", 4)]},
            {"begin": 8_000, "end": 8_100, "annotations": [("Input Dims", "nested_value", 0)]},
            {"begin": 9_000, "end": 9_500, "name": "gemm~"},  # written as gemm\\xff
            {"begin": 10_000, "end": 10_200, "annotations": [("device", "double_value", 2.0)]},
        ],
    )
    trace = tv.load(path, options=tv.LoadOptions(cache=False))
    rows = trace.kernels.select("ts_ns", "dur_ns", pl.col("name").cast(str), "device", "stream")
    assert rows.rows() == [
        (1_000, 1_000, "gemm_kernel", 0, 7),
        (7_000, 500, "gemm_kernel", 0, 9),
        (8_000, 100, "gemm_kernel", 0, 7),
        (9_000, 500, "gemm\ufffd", 0, 7),
        (10_000, 200, "gemm_kernel", 2, 7),
    ]
    assert sorted(trace.meta.warnings) == [
        "1 event skipped: event with no timestamp (its packet gives none)",
        "1 event skipped: slice end without a begin",
        "1 string (names, categories, annotations) not UTF-8: read with U+FFFD for each "
        "invalid byte sequence",
    ]
    assert trace.meta.skipped_events == 2


@pytest.mark.parametrize(
    ("annotation", "shown"),
    [(("device", "double_value", 1.5), "1.5"), (("stream", "string_value", "gpu"), "'gpu'")],
    ids=["fractional-device", "text-stream"],
)
def test_a_device_or_stream_that_is_no_id_is_one_line(
    tmp_path: Path, annotation: tuple[str, str, object], shown: str
) -> None:
    """A 'device' annotation of 1.5 read as device 1, silently; the JSON reader refuses a
    device or stream that is no integer id on device activity, and so does this one."""
    path = _one_kernel_each(
        tmp_path / "no_id.pftrace",
        [{"begin": 1_000, "end": 2_000, "annotations": [annotation]}],
    )
    done = CliRunner().invoke(cli, ["summarize", str(path)])
    assert done.exit_code == 2, done.output
    assert done.stderr == (
        f"Error: {path}: a slice of device activity (kernel, 'gemm_kernel') whose "
        f"'{annotation[0]}' annotation ({shown}) is not an integer id; cannot place it on a "
        "device and stream\n"
    )


def test_the_reader_holds_its_events_in_columns() -> None:
    """The probe of issue 49: a .pftrace took about 20× its size to load (7.2 MB: 253 MB),
    one dict per event (~730 bytes). The reader now holds a list per column, each text
    once and the ids in columns of their own. Measured: what it holds after reading 5,000
    kernel slices, per slice (about 200 bytes; the dicts took over 700)."""
    import io
    import tracemalloc

    from traceview.loader.pftrace import _Reader
    from traceview.loader.pftrace_packets import packets

    t = _thread_trace()
    for i in range(5_000):
        for ts, kind in (
            (1_000_000 + i * 10_000, pb2.TrackEvent.TYPE_SLICE_BEGIN),
            (1_002_000 + i * 10_000, pb2.TrackEvent.TYPE_SLICE_END),
        ):
            p = _packet(t, ts)
            p.track_event.track_uuid, p.track_event.type = _TRACK, kind
            if kind == pb2.TrackEvent.TYPE_SLICE_BEGIN:
                p.track_event.name = f"gemm_{i % 2}"
                p.track_event.categories.append("kernel")
                a = p.track_event.debug_annotations.add()
                a.name, a.int_value = "stream", 7
    data = t.serialize()
    reader = _Reader("t.pftrace")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for packet in packets(io.BytesIO(data), "t.pftrace"):
            reader._packet(packet)
            reader.packets += 1
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert reader.packets == 10_001
    assert held / 5_000 < 350, held / 5_000
