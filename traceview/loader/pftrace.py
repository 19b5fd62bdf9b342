"""Perfetto protobuf traces (``.pftrace``, ``.perfetto-trace``, optionally gzipped) ->
:class:`~traceview.model.Trace`.

Read packet by packet (the file is never held decoded as a whole): track descriptors name
processes, threads and GPU streams; TrackEvent slices (begin/end pairs per track, and legacy
complete events), instants, counters and flows become the same frames the JSON loader
builds. Interned event names, categories and debug-annotation names are resolved per
packet sequence. Times are the packets' integer nanoseconds on the trace's clock; a
sequence that writes them on a clock of its own (the Perfetto SDK's default: clock 64,
incremental, each packet's time a delta from the one before) is read through its
ClockSnapshot, which names that clock's value at a moment of the trace's clock. A packet
that needs its sequence's incremental state (``SEQ_NEEDS_INCREMENTAL_STATE``) while none is
known (before the sequence's first clean start, as where a ring buffer overwrote it, or
after lost packets) is skipped until the sequence starts clean, as Perfetto's trace
processor skips it; so is an event naming an interned string its sequence never defined.
Skipped events are counted, each by its reason.

What maps where: a slice's first category is ``cat`` (``kernel``/``gpu_memcpy``/
``gpu_memset`` make it device activity, as in Kineto JSON); its track's pid/tid are
``pid``/``tid``; debug annotations ``device``, ``stream``, ``correlation`` and
``External id`` fill those columns (``stream`` falls back to the tid, ``device`` to the pid;
device activity with neither is an error). An event without a ``track_uuid`` goes on its
sequence's default track (``track_event_defaults``), else the thread of the sequence's
legacy ThreadDescriptor, else the trace-global track; begin/end pairs match per track.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson
import polars as pl

from traceview.errors import TraceFormatError, shown_value
from traceview.loader.frames import DEVICE_CATS as _DEVICE_CATS
from traceview.loader.frames import EVENT_CATS as _EVENT_CATS
from traceview.loader.frames import unreadable
from traceview.loader.pftrace_packets import ID_KEYS, Message, fits_int64, ident, packets
from traceview.model import (
    COUNTER_SCHEMA,
    EVENT_SCHEMA,
    FLOW_SCHEMA,
    KERNEL_SCHEMA,
    METADATA_SCHEMA,
    SHAPE_SCHEMA,
    Trace,
    TraceMeta,
    narrow_ids,
    wide,
)

SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4
_SEQ_CLEARED = 1  # TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_SEQ_NEEDS_STATE = 2  # TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_NO_STATE = (
    "event that needs its sequence's incremental state (interned names, defaults, its "
    "clock) where none is known: the sequence's clean start is not in the trace (a ring "
    "buffer that wrapped overwrote it)"
)
_LOST_STATE = (
    "event that needs its sequence's incremental state (interned names, defaults, its "
    "clock) where none is known: packets of the sequence were lost mid-trace "
    "(previous_packet_dropped), until it started clean again"
)
_NOT_INTERNED = (
    "event that names an interned name, category or annotation its sequence never defined "
    "(the packet that defined it lost)"
)
_TRAILING_NUMBER = re.compile(r"(\d+)\s*$")


# clock ids 64-127 are scoped to one packet sequence (Perfetto's sequence clocks)
_SEQUENCE_CLOCKS = range(64, 128)
_BOOTTIME = 6  # the trace's clock where a snapshot names none
_MONOTONIC = 3
_ANY_SEQUENCE = -1  # the key of a clock the whole trace shares (ids from 128 on)
_UNKNOWN_CLOCK = (
    "event timed on a sequence's or a user's clock not known here (no ClockSnapshot, or "
    "packets lost since the sequence last started clean)"
)


@dataclass
class _Clock:
    """A sequence's own clock, from its ClockSnapshot: its value ``origin`` was the trace
    clock's ``at`` (ns); each unit is ``unit_ns``; ``last``: its latest value (incremental
    clocks add each packet's delta to it)."""

    origin: int
    at: int
    unit_ns: int
    incremental: bool
    last: int


_NO_TIME = "event with no timestamp (its packet gives none)"
# the debug-annotation values kept as arguments: scalars (a nested value is not read)
_SCALARS = (
    *("bool_value", "uint_value", "int_value", "double_value", "pointer_value"),
    *("string_value", "legacy_json_value"),
)


@dataclass
class _Track:
    pid: int | None = None
    tid: int | None = None
    name: str | None = None
    parent: int | None = None
    is_counter: bool = False


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path
        self.tracks: dict[int, _Track] = {}
        self.interned: dict[int, dict[str, dict[int, str]]] = {}
        # complete/instant events, a list per column (one dict an event took ~730 bytes);
        # each text once (``_shared``): a name repeats in every event that has it
        self.c_ts: list[int] = []
        self.c_dur: list[int | None] = []
        self.c_name: list[str] = []
        self.c_cat: list[str] = []
        self.c_pid: list[int | None] = []
        self.c_tid: list[int | None] = []
        self.c_args: list[dict[str, Any]] = []  # but the ids, in their own columns
        self.c_ids: dict[str, list[object]] = {key: [] for key in ID_KEYS}
        self.c_instant: list[bool] = []
        self.texts: dict[str, str] = {}
        self.open: dict[int, list[int]] = {}  # per track, its open slices' rows
        self.flows: list[tuple[int, int, str, str, int | None, int | None, str, bool]] = []
        self.counters: list[tuple[int, str, float, int | None]] = []
        self.metadata: list[tuple[str, int | None, int | None, str]] = []
        self.skipped: Counter[str] = Counter()
        self.packets = 0
        self.clock_of: dict[int, int] = {}  # per sequence, its packets' default clock
        self.lost: set[int] = set()  # sequences that lost packets since their last start
        # sequences whose incremental state is known: started clean, nothing lost since
        self.valid: set[int] = set()
        self.track_of: dict[int, int] = {}  # per sequence, its events' default track
        self.thread_of: dict[int, tuple[int, int]] = {}  # a legacy ThreadDescriptor's
        self.thread_tracks: dict[tuple[int, int], int] = {}  # its tracks, by (pid, tid)
        self.not_utf8 = 0  # string fields that were not UTF-8 (read with U+FFFD)
        self.clocks: dict[tuple[int, int], _Clock] = {}  # (sequence, clock id)

    def run(self, stream: BinaryIO) -> Trace:
        for packet in packets(stream, self.path):
            self.packets += 1
            self._packet(packet)
        unmatched = sum(len(v) for v in self.open.values())
        if unmatched:
            self.skipped["slice begin without an end"] += unmatched
        return self._trace()

    # - packets -

    def _packet(self, packet: Message) -> None:
        seq = packet.trusted_packet_sequence_id
        if packet.sequence_flags & _SEQ_CLEARED or packet.incremental_state_cleared:
            # a clean start: interned data, defaults
            self.interned[seq] = {}
            self.clock_of.pop(seq, None)
            self.track_of.pop(seq, None)
            self.lost.discard(seq)
            self.valid.add(seq)
        elif packet.previous_packet_dropped:
            # packets of this sequence were lost: its incremental clock's base is not known
            # until the sequence starts clean (as Perfetto's trace processor reads it)
            self.lost.add(seq)
            self.valid.discard(seq)
        if packet.sequence_flags & _SEQ_NEEDS_STATE and seq not in self.valid:
            # its interned names, defaults or clock are gone (a ring buffer that wrapped
            # overwrote the sequence's clean start): skipped until the sequence starts
            # clean, as Perfetto's trace processor skips it
            if packet.HasField("track_event") and packet.track_event.type != SLICE_END:
                # a slice is one event: its end packet is not counted again
                self.skipped[_LOST_STATE if seq in self.lost else _NO_STATE] += 1
            return
        if packet.HasField("thread_descriptor"):  # the legacy way to name a sequence's thread
            thread = packet.thread_descriptor
            self.thread_of[seq] = (thread.pid, thread.tid)
        if packet.HasField("trace_packet_defaults"):
            defaults = packet.trace_packet_defaults
            if defaults.HasField("timestamp_clock_id"):
                self.clock_of[seq] = defaults.timestamp_clock_id
            else:
                self.clock_of.pop(seq, None)  # new defaults replace the old ones whole
            event_defaults = defaults.track_event_defaults
            if defaults.HasField("track_event_defaults") and event_defaults.HasField("track_uuid"):
                self.track_of[seq] = event_defaults.track_uuid
            else:
                self.track_of.pop(seq, None)
        if packet.HasField("interned_data"):
            table = self.interned.setdefault(seq, {})
            data = packet.interned_data
            for kind, entries in (
                ("name", data.event_names),
                ("category", data.event_categories),
                ("annotation", data.debug_annotation_names),
            ):
                for e in entries:
                    table.setdefault(kind, {})[e.iid] = self._text(e.name)
            for e in data.debug_annotation_string_values:  # bytes, as InternedString holds
                table.setdefault("string", {})[e.iid] = self._text(e.str)
        if packet.HasField("clock_snapshot"):  # it shares no packet with events or tracks
            self._snapshot(packet.clock_snapshot, seq)
            return  # a snapshot's own time is not a delta of its sequence's clock
        # every timed packet moves its sequence's incremental clock, not only events
        ts = self._time(packet, seq) if packet.HasField("timestamp") else 0
        if packet.HasField("track_descriptor"):
            self._descriptor(packet.track_descriptor)
        if packet.HasField("track_event"):
            self._event(packet, seq, ts)

    def _snapshot(self, snapshot: Message, seq: int) -> None:
        """A sequence's own clocks, each against the trace's clock at one moment."""
        primary = snapshot.primary_trace_clock or _BOOTTIME
        builtin = {c.clock_id: c for c in snapshot.clocks if c.clock_id < _SEQUENCE_CLOCKS.start}
        # the trace's clock, else MONOTONIC (the SDK snapshots it where BOOTTIME is not its
        # clock), else another builtin one: traceview reads builtin clocks' times as they are
        ref = builtin.get(primary) or builtin.get(_MONOTONIC)
        ref = ref or next(iter(builtin.values()), None)
        if ref is None:
            return
        at = ref.timestamp
        for c in snapshot.clocks:
            own = c.clock_id in _SEQUENCE_CLOCKS
            if own or c.clock_id >= _SEQUENCE_CLOCKS.stop:  # 128 on: the whole trace's
                unit = c.unit_multiplier_ns or 1
                clock = _Clock(c.timestamp, at, unit, c.is_incremental, c.timestamp)
                self.clocks[(seq if own else _ANY_SEQUENCE, c.clock_id)] = clock

    def _time(self, packet: Message, seq: int) -> int | None:
        """The packet's time on the trace's clock (ns); None where it is on a sequence's or
        a user's clock that no snapshot has described."""
        clock_id = (
            packet.timestamp_clock_id
            if packet.HasField("timestamp_clock_id")
            else self.clock_of.get(seq)
        )
        if clock_id is None or clock_id < _SEQUENCE_CLOCKS.start:
            return int(packet.timestamp)
        own = clock_id in _SEQUENCE_CLOCKS
        clock = self.clocks.get((seq if own else _ANY_SEQUENCE, clock_id))
        if clock is None or (clock.incremental and seq in self.lost):
            return None
        value = packet.timestamp
        if clock.incremental:
            clock.last += value
            value = clock.last
        return int(clock.at + (value - clock.origin) * clock.unit_ns)

    def _shared(self, text: str) -> str:
        """``text``, one object for every event that holds it."""
        return self.texts.setdefault(text, text)

    def _text(self, value: str | bytes) -> str:
        """A string field as text: protobuf hands a proto2 string that is not UTF-8 over
        as bytes (and an interned string is bytes by its type); bytes that are not UTF-8
        read with U+FFFD for each invalid sequence, and are counted."""
        if isinstance(value, str):
            return value
        try:
            return value.decode()
        except UnicodeDecodeError:
            self.not_utf8 += 1
            return value.decode(errors="replace")

    def _descriptor(self, d: Message) -> None:
        t = self.tracks.setdefault(d.uuid, _Track())
        t.name = self._text(d.name) or t.name
        if d.HasField("parent_uuid"):
            t.parent = d.parent_uuid
        if d.HasField("thread"):
            t.pid, t.tid = d.thread.pid, d.thread.tid
            if d.thread.thread_name:
                t.name = self._text(d.thread.thread_name)
            self.metadata.append(("thread_name", t.pid, t.tid, t.name or ""))
        elif d.HasField("process"):
            t.pid = d.process.pid
            if d.process.process_name:
                t.name = self._text(d.process.process_name)
                self.metadata.append(("process_name", t.pid, 0, t.name))
        if d.HasField("counter"):
            t.is_counter = True

    def _track_of(self, ev: Message, seq: int) -> int:
        """The event's track, as Perfetto's trace processor places it: its own
        ``track_uuid``, else its sequence's default (``track_event_defaults``), else the
        thread a legacy ThreadDescriptor names for the sequence, else the trace-global
        track 0. Begin/end pairs match per track, so two sequences never pair each other's
        slices."""
        if ev.HasField("track_uuid"):
            return int(ev.track_uuid)
        if seq in self.track_of:
            return self.track_of[seq]
        thread = self.thread_of.get(seq)
        if thread is None:
            return 0
        if thread not in self.thread_tracks:  # a uuid no descriptor uses (they are >= 0)
            self.thread_tracks[thread] = -1 - len(self.thread_tracks)
            self.tracks[self.thread_tracks[thread]] = _Track(pid=thread[0], tid=thread[1])
        return self.thread_tracks[thread]

    def _where(self, uuid: int) -> tuple[int | None, int | None]:
        t = self.tracks.get(uuid)
        if t is None:
            return None, None
        pid, tid = t.pid, t.tid
        if pid is None and t.parent is not None:
            parent = self.tracks.get(t.parent)
            pid = parent.pid if parent else None
        if tid is None and t.name:  # a named track under a process: "stream 7" -> 7
            m = _TRAILING_NUMBER.search(t.name)
            tid = int(m.group(1)) if m else None
        return pid, tid

    def _intern(self, seq: int, kind: str, iid: int) -> str | None:
        return self.interned.get(seq, {}).get(kind, {}).get(iid)

    def _event(self, packet: Message, seq: int, ts: int | None) -> None:
        ev = packet.track_event
        if not packet.HasField("timestamp") or ts is None:
            # never at time 0, nor on an unknown clock: it would be a wrong time; a slice is
            # one event, so its end packet is not counted again
            if ev.type != SLICE_END:
                self.skipped[_UNKNOWN_CLOCK if packet.HasField("timestamp") else _NO_TIME] += 1
            return
        uuid = self._track_of(ev, seq)
        if ev.type == COUNTER:
            t = self.tracks.get(uuid, _Track())
            value = (
                ev.double_counter_value
                if ev.HasField("double_counter_value")
                else float(ev.counter_value)
            )
            self.counters.append((ts, t.name or f"track {uuid}", value, self._where(uuid)[0]))
            return
        name = (
            self._text(ev.name)
            if ev.HasField("name")
            else (self._intern(seq, "name", ev.name_iid) if ev.HasField("name_iid") else "")
        )
        interned_cats = [self._intern(seq, "category", i) for i in ev.category_iids]
        cats = [self._text(c) for c in ev.categories] or [c for c in interned_cats if c]
        args: dict[str, Any] = {}
        unknown = name is None or None in interned_cats
        for a in ev.debug_annotations:
            key = (
                self._text(a.name)
                if a.HasField("name")
                else self._intern(seq, "annotation", a.name_iid)
            )
            unknown |= key is None
            which = a.WhichOneof("value")
            given: object = None
            if which == "string_value_iid":
                given = self._intern(seq, "string", a.string_value_iid)
                unknown |= given is None
            elif which in _SCALARS:
                given = getattr(a, which)
                given = self._text(given) if isinstance(given, str | bytes) else given
            if key and given is not None:  # a nested value is not read
                args[key] = given
        if unknown and ev.type != SLICE_END:  # its name, category or an argument unknown:
            self.skipped[_NOT_INTERNED] += 1  # a kernel could read as a host event named ''
            return
        pid, tid = self._where(uuid)

        def row_of(dur: int | None, instant: bool = False) -> int:
            self.c_ts.append(ts)
            self.c_dur.append(dur)
            self.c_name.append(self._shared(name or ""))
            self.c_cat.append(self._shared(cats[0] if cats else ""))
            self.c_pid.append(pid)
            self.c_tid.append(tid)
            for key, column in self.c_ids.items():
                column.append(args.pop(key, None))
            self.c_args.append(args or _NO_ARGS)
            self.c_instant.append(instant)
            return len(self.c_ts) - 1

        if ev.type == SLICE_BEGIN:
            self.open.setdefault(uuid, []).append(row_of(None))
        elif ev.type == SLICE_END:
            stack = self.open.get(uuid)
            if not stack:
                self.skipped["slice end without a begin"] += 1
            else:
                row = stack.pop()
                self.c_dur[row] = ts - self.c_ts[row]
        elif ev.type == INSTANT:
            row_of(0, instant=True)
        elif ev.HasField("legacy_event") and ev.legacy_event.phase == ord("X"):
            row_of(ev.legacy_event.duration_us * 1000)
        else:
            self.skipped[f"unsupported TrackEvent type {ev.type}"] += 1
            return
        for fid in ev.flow_ids:
            self.flows.append((ts, fid, "s", "flow", pid, tid, "flow", True))
        for fid in ev.terminating_flow_ids:
            self.flows.append((ts, fid, "f", "flow", pid, tid, "flow", True))

    # - frames -

    def _in_range(self, rows: list[int]) -> list[int]:
        """``rows`` whose times and ids fit Int64 (a packet's time is a uint64; an
        annotation may be one). Device activity that does not fit is refused, as the JSON
        reader refuses it; a host event is skipped and counted."""
        TS, DUR, NAME, CAT = self.c_ts, self.c_dur, self.c_name, self.c_cat
        IDS, INSTANT = self.c_ids, self.c_instant
        kept = []
        for r in rows:
            times = {"ts": TS[r], "dur": DUR[r] or 0}
            bad = next(
                (k for k, v in times.items() if not fits_int64(v) or not fits_int64(TS[r] + v)),
                None,
            )
            if bad is None:
                bad = next(
                    (
                        k
                        for k in ID_KEYS
                        if isinstance(IDS[k][r], int) and not fits_int64(IDS[k][r])
                    ),
                    None,
                )
            if bad is None:
                kept.append(r)
                continue
            what = f"time ({bad})" if bad in ("ts", "dur") else f"'{bad}' annotation"
            if not INSTANT[r] and CAT[r].lower() in _DEVICE_CATS:
                raise TraceFormatError(
                    self.path,
                    f"a slice of device activity ({CAT[r]}, {shown_value(NAME[r])}) whose "
                    f"{what} does not fit a signed 64-bit integer; cannot place it",
                )
            self.skipped[f"event whose {what} does not fit a signed 64-bit integer"] += 1
        return kept

    def _trace(self) -> Trace:
        TS, DUR, NAME, CAT = self.c_ts, self.c_dur, self.c_name, self.c_cat
        PID, TID, ARGS, INSTANT = self.c_pid, self.c_tid, self.c_args, self.c_instant
        IDS = self.c_ids
        rows = [r for r, dur in enumerate(DUR) if dur is not None]
        rows = self._in_range(rows)

        def arg(r: int, key: str) -> int | None:
            return ident(IDS[key][r])

        device = [r for r in rows if not INSTANT[r] and CAT[r].lower() in _DEVICE_CATS]
        backwards = next((r for r in device if (DUR[r] or 0) < 0), None)
        if backwards is not None:  # as the JSON reader refuses a negative 'dur'
            raise TraceFormatError(
                self.path,
                f"a slice of device activity ({CAT[backwards]}, {NAME[backwards]!r:.80}) "
                "ends before it begins; cannot place it in time",
            )
        for key in ("device", "stream"):  # as the JSON reader refuses it
            bad = next((r for r in device if IDS[key][r] is not None and arg(r, key) is None), None)
            if bad is not None:
                raise TraceFormatError(
                    self.path,
                    f"a slice of device activity ({CAT[bad]}, {shown_value(NAME[bad])}) "
                    f"whose '{key}' annotation ({shown_value(IDS[key][bad])}) is not an "
                    "integer id; cannot place it on a device and stream",
                )
        for key, fallback in (("device", PID), ("stream", TID)):
            unplaced = next(
                (r for r in device if arg(r, key) is None and fallback[r] is None), None
            )
            if unplaced is not None:  # as the JSON reader refuses it: never another's time
                raise TraceFormatError(
                    self.path,
                    f"a slice of device activity ({CAT[unplaced]}, "
                    f"{shown_value(NAME[unplaced])}) with no '{key}' annotation, on a "
                    f"track that names no {'process' if key == 'device' else 'thread'}; "
                    "cannot place it on a device and stream",
                )
        host = [r for r in rows if INSTANT[r] or CAT[r].lower() not in _DEVICE_CATS]
        kernels = pl.DataFrame(
            {
                "ts_ns": [TS[r] for r in device],
                "dur_ns": [DUR[r] for r in device],
                "name": [NAME[r] for r in device],
                "cat": [CAT[r] for r in device],
                "event_kind": [_DEVICE_CATS[CAT[r].lower()] for r in device],
                "pid": [PID[r] for r in device],
                "tid": [TID[r] for r in device],
                "device": [
                    arg(r, "device") if arg(r, "device") is not None else PID[r] for r in device
                ],
                "stream": [
                    arg(r, "stream") if arg(r, "stream") is not None else TID[r] for r in device
                ],
                "correlation": [arg(r, "correlation") for r in device],
                "external_id": [arg(r, "External id") for r in device],
            },
            schema=wide(KERNEL_SCHEMA),
        ).sort("ts_ns", maintain_order=True)
        events = pl.DataFrame(
            {
                "ts_ns": [TS[r] for r in host],
                "dur_ns": [DUR[r] for r in host],
                "name": [NAME[r] for r in host],
                "cat": [CAT[r] for r in host],
                "event_kind": [
                    "instant" if INSTANT[r] else _EVENT_CATS.get(CAT[r].lower(), "other")
                    for r in host
                ],
                "pid": [PID[r] for r in host],
                "tid": [TID[r] for r in host],
                "correlation": [arg(r, "correlation") for r in host],
                "external_id": [arg(r, "External id") for r in host],
            },
            schema=wide(EVENT_SCHEMA),
        )
        flows = pl.DataFrame(self.flows, schema=list(FLOW_SCHEMA), orient="row")
        flows = flows.cast(wide(FLOW_SCHEMA))  # type: ignore[arg-type]
        counters = pl.DataFrame(
            [(ts, name, "value", v, pid) for ts, name, v, pid in self.counters],
            schema=list(COUNTER_SCHEMA),
            orient="row",
        ).cast(wide(COUNTER_SCHEMA))  # type: ignore[arg-type]
        metadata = pl.DataFrame(self.metadata, schema=list(METADATA_SCHEMA), orient="row")
        metadata = metadata.cast(wide(METADATA_SCHEMA))  # type: ignore[arg-type]
        warnings = tuple(
            f"{n} event{'s' if n != 1 else ''} skipped: {why}"
            for why, n in sorted(self.skipped.items())
        )
        if self.not_utf8:
            n = self.not_utf8
            warnings = (
                f"{n:,} string{'s' if n != 1 else ''} (names, categories, annotations) not "
                "UTF-8: read with U+FFFD for each invalid byte sequence",
                *warnings,
            )
        meta = TraceMeta(
            path=self.path,
            format="perfetto",
            events=len(self.c_ts),
            skipped_events=sum(self.skipped.values()),
            warnings=warnings,
            extra={"packets": self.packets},
        )
        shaped = [r for r in host if "Input Dims" in ARGS[r]]
        shapes = pl.DataFrame(
            {
                "ts_ns": [TS[r] for r in shaped],
                "dur_ns": [DUR[r] for r in shaped],
                "name": [NAME[r] for r in shaped],
                "pid": [PID[r] for r in shaped],
                "tid": [TID[r] for r in shaped],
                "input_dims": [_json_text(ARGS[r]["Input Dims"]) for r in shaped],
                **{
                    column: [_json_text(ARGS[r][key]) if key in ARGS[r] else None for r in shaped]
                    for column, key in (
                        ("input_types", "Input type"),
                        ("concrete_inputs", "Concrete Inputs"),
                    )
                },
            },
            schema=wide(SHAPE_SCHEMA),
        )
        frames = {
            "kernels": kernels,
            "events": events,
            "flows": flows,
            "counters": counters,
            "metadata": metadata,
            "shapes": shapes,
        }
        return Trace(meta=meta, **narrow_ids(frames))


_NO_ARGS: dict[str, Any] = {}  # the arguments of every event that has none (never changed)


def _json_text(value: Any) -> str:
    """A debug annotation's value as JSON text (a string holds it already)."""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def load_pftrace(path: str, stream: BinaryIO) -> Trace:
    """Read a Perfetto protobuf trace from ``stream`` (already decompressed). A value no
    frame column can hold (an id or a time of 2^63 or more) is the file's fault, one line."""
    try:
        return _Reader(path).run(stream)
    except (pl.exceptions.PolarsError, OverflowError, TypeError) as exc:
        raise TraceFormatError(path, f"not a readable Perfetto trace: {unreadable(exc)}") from None
