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
    assert any("packets lost since the sequence last started clean" in w for w in said)


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
