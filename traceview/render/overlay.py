"""The overlay writer behind ``traceview annotate``: a copy of a trace with traceview's findings
as extra tracks, for Perfetto UI (or another Chrome-JSON trace viewer).

The original text is streamed through unchanged; the overlay's events are inserted just
before the ``]`` that closes ``traceEvents``. They belong to a process named "traceview"
(pid ``OVERLAY_PID + device``) and carry categories starting ``traceview``, which the loader
recognises: an annotated trace summarizes exactly as the original.

Per analysed device, on threads of that process:
- ``steps``: one slice per engine step (``step 12 · decode``), args: its interval, kind,
  ``kind_source``, kernels and the engine's token counts;
- ``phases``: one slice per phase, with its median cadence;
- ``widest decode gaps``: one slice per decode gap at or above the p99 of all gaps;
- counters ``step interval`` (ms) at each step's anchor and ``step busy`` at its start;
- ``traceview idle``: one slice per device-idle interval of at least 50 µs, named by its
  cause (``idle · host_late``; the cause with the most of its time), args: its length and
  each cause's part (docs/metrics.md, "Where the step time went").

Times are written in the trace's own microseconds with three decimals, exact to the ns.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import orjson

from traceview._io import atomic_write
from traceview.analysis.documents.summary import Summary
from traceview.errors import UnsupportedTraceError
from traceview.loader import open_source
from traceview.loader.frames import OVERLAY_CATEGORY, OVERLAY_PID
from traceview.model import Trace

_CHUNK = 8 << 20


def _us(ns: int) -> str:
    """Nanoseconds as the trace's microseconds with three decimals (exact)."""
    sign = "-" if ns < 0 else ""
    ns = abs(int(ns))
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


ArgValue = str | int | float | None


@dataclass(frozen=True, slots=True)
class OverlayEvent:
    """One event of the overlay: a Chrome trace event on the overlay's process."""

    ph: str  # M (metadata), X (complete) or C (counter)
    name: str
    cat: str
    pid: int
    tid: int
    ts_ns: int
    dur_ns: int | None = None
    args: dict[str, ArgValue] | None = None

    def to_json(self) -> str:
        """The event as JSON text, its times in the trace's microseconds (exact to the ns);
        names as UTF-8 text (Perfetto UI v52 shows a JSON \\u escape in a name as is)."""
        fields = [
            f'"ph": "{self.ph}"',
            f'"cat": {orjson.dumps(self.cat).decode()}',
            f'"name": {orjson.dumps(self.name).decode()}',
            f'"pid": {self.pid}',
            f'"tid": {self.tid}',
            f'"ts": {_us(self.ts_ns)}',
        ]
        if self.dur_ns is not None:
            fields.append(f'"dur": {_us(self.dur_ns)}')
        if self.args is not None:
            fields.append(f'"args": {orjson.dumps(self.args).decode()}')
        return "{" + ", ".join(fields) + "}"


def overlay_events(summary: Summary) -> list[OverlayEvent]:
    """The overlay's events for one summarized trace."""
    doc = summary.to_dict()
    device = int(doc["trace"]["device"])
    pid = OVERLAY_PID + device
    cat = OVERLAY_CATEGORY
    out = [
        OverlayEvent(
            "M", "process_name", cat, pid, 0, doc["trace"]["start_ns"], args={"name": "traceview"}
        ),
        OverlayEvent(
            "M",
            "process_sort_index",
            cat,
            pid,
            0,
            doc["trace"]["start_ns"],
            args={"sort_index": -1},
        ),
    ]
    tracks = ((1, "steps"), (2, "phases"), (3, "widest decode gaps"), (4, "traceview idle"))
    for tid, label in tracks:
        out.append(
            OverlayEvent(
                "M",
                "thread_name",
                cat,
                pid,
                tid,
                doc["trace"]["start_ns"],
                args={"name": f"{label} (device {device})"},
            )
        )
    steps = summary.steps
    for r in steps.iter_rows(named=True):
        args: dict[str, ArgValue] = {
            "step": r["index"],
            "kind": r["kind"],
            "kind_source": r["kind_source"],
            "warmup": r["warmup"],
            "interval_ns": r["interval_ns"],
            "anchor_ns": r["anchor_ns"],
            "kernels": r["kernels"],
            "busy_fraction": r["busy_fraction"],
            "context_tokens": r["context_tokens"],
            "generation_tokens": r["generation_tokens"],
            "annotation": r["annotation"],
        }
        out.append(
            OverlayEvent(
                "X",
                f"step {r['index']} · {r['kind']}"
                + (f" · warm-up ({r['warmup']})" if r["warmup"] else ""),
                f"{cat}.step",
                pid,
                1,
                r["start_ns"],
                dur_ns=r["end_ns"] - r["start_ns"],
                args=args,
            )
        )
        if r["interval_ns"] is not None:
            out.append(
                OverlayEvent(
                    "C",
                    "step interval",
                    f"{cat}.counter",
                    pid,
                    1,
                    r["anchor_ns"],
                    args={"ms": r["interval_ns"] / 1e6},
                )
            )
        out.append(
            OverlayEvent(
                "C",
                "step busy",
                f"{cat}.counter",
                pid,
                1,
                r["start_ns"],
                args={"fraction": r["busy_fraction"]},
            )
        )
    for p in doc["steps"]["phases"]:
        out.append(
            OverlayEvent(
                "X",
                f"{p['kind']} phase · steps {p['first_step']}–{p['last_step']}",
                f"{cat}.phase",
                pid,
                2,
                p["start_ns"],
                dur_ns=p["end_ns"] - p["start_ns"],
                args={
                    "kind": p["kind"],
                    "steps": p["steps"],
                    "cadence_p50_ns": p["cadence_p50_ns"],
                },
            )
        )
    p99 = doc["decode_gaps"][0]["p99_ns"]
    if p99 is not None:
        gaps = summary.decode_gaps
        for g in gaps.filter(gaps["gap_ns"] >= p99).iter_rows(named=True):
            out.append(
                OverlayEvent(
                    "X",
                    f"decode gap {g['gap_ns'] / 1e3:.1f} µs",
                    f"{cat}.gap",
                    pid,
                    3,
                    g["start_ns"],
                    dur_ns=g["end_ns"] - g["start_ns"],
                    args={"gap_ns": g["gap_ns"], "population": g["population"], "p99_ns": p99},
                )
            )
    out.extend(_idle_slices(summary, pid))
    return out


def _idle_slices(summary: Summary, pid: int) -> Iterator[OverlayEvent]:
    """One slice per idle interval of at least 50 µs on the "traceview idle" track."""
    if summary.idle is None:
        return
    parts = [
        c for c in summary.idle.columns if c.endswith("_ns") and c not in ("start_ns", "end_ns")
    ]
    for r in summary.idle.iter_rows(named=True):
        length = r["end_ns"] - r["start_ns"]
        args: dict[str, ArgValue] = {"idle_ns": length}
        args.update({p: r[p] for p in parts if r[p]})
        yield OverlayEvent(
            "X",
            f"idle · {r['cause'] or 'cause not split (the clocks disagree)'}",
            f"{OVERLAY_CATEGORY}.idle",
            pid,
            4,
            r["start_ns"],
            dur_ns=length,
            args=args,
        )


def _read_text(path: str) -> Iterator[bytes]:
    """The trace's text (a file or a URL's object), decompressed where it is gzip."""
    with open_source(path) as f:
        gz = f.read(2) == b"\x1f\x8b"
    with open_source(path) as raw:
        stream: BinaryIO | gzip.GzipFile = gzip.GzipFile(fileobj=raw) if gz else raw
        with stream:
            while chunk := stream.read(_CHUNK):
                yield chunk


# how the overlay's first event begins (the process_name metadata event overlay_events writes)
_OVERLAY_START = b'{"ph": "M", "cat": "traceview", "name": "process_name", "pid": '


def _overlay_start(source: str, end: int | None) -> tuple[int | None, bytes]:
    """The byte offset of an earlier overlay's first event (annotate wrote it as the last
    events before ``end``; the first occurrence of its opening bytes is where it starts),
    and the text from there to ``end``: what a new overlay replaces. One pass; ``(None,
    b"")`` where there is none."""
    seen = 0  # bytes of text before the chunk
    carry = b""
    found: int | None = None
    tail: list[bytes] = []
    for chunk in _read_text(source):
        if found is None:
            window = carry + chunk
            at = window.find(_OVERLAY_START)
            if at < 0:
                carry = window[-(len(_OVERLAY_START) - 1) :]
                seen += len(chunk)
                continue
            found = seen - len(carry) + at
            if end is not None and found >= end:
                return None, b""
            piece, piece_at = window[at:], found
        else:
            piece, piece_at = chunk, seen
        tail.append(piece if end is None else piece[: max(end - piece_at, 0)])
        seen += len(chunk)
        if end is not None and seen >= end:
            break
    return found, b"".join(tail)


def _only_overlay(tail: bytes) -> bool:
    """Whether ``tail`` (an earlier overlay's text, to the end of the events) holds
    traceview's overlay events and nothing else (a user may have added events after it)."""
    text = tail.strip().strip(b",").rstrip(b"]").strip()
    try:
        events = orjson.loads(b"[" + text + b"]")
    except orjson.JSONDecodeError:
        return False
    return all(
        isinstance(e, dict) and str(e.get("cat", "")).startswith(OVERLAY_CATEGORY) for e in events
    )


def annotate(
    source: str,
    out: str | os.PathLike[str],
    trace: Trace,
    summary: Summary,
    *,
    overwrite: bool = False,
) -> Path:
    """Write ``source`` with the overlay of ``summary`` (of ``trace``, loaded from
    ``source``) to ``out`` (gzip when its name ends ``.gz``), atomically. The original text
    is kept byte for byte: the overlay goes in just before the ``]`` that closes
    ``traceEvents`` (at the end of a bare array that lacks it). An earlier overlay (the
    trace was annotated before) is replaced, not stacked. An existing ``out`` is replaced
    only with ``overwrite`` (``--force``).

    Raises:
        UnsupportedTraceError: a Perfetto protobuf trace, an Nsight Systems export, or a
            truncated trace.
    """
    meta = trace.meta
    if meta.format == "perfetto":
        raise UnsupportedTraceError(f"{source}: annotate writes JSON traces; this is protobuf")
    if meta.format == "nsys":
        raise UnsupportedTraceError(
            f"{source}: annotate writes JSON traces; this is an Nsight Systems export"
        )
    if meta.truncated_at is not None:
        raise UnsupportedTraceError(f"{source}: truncated; annotate needs a whole trace")
    if meta.strings_cut:
        raise UnsupportedTraceError(
            f"{source}: {meta.strings_cut:,} strings longer than 64 KiB were cut on loading; "
            "annotate needs the text as it is"
        )
    events = ",\n".join(e.to_json() for e in overlay_events(summary)).encode()
    target = Path(out)
    cut, tail = _overlay_start(source, meta.events_end) if meta.overlay_events else (None, b"")
    if cut is not None and not _only_overlay(tail):
        raise UnsupportedTraceError(
            f"{source}: holds events after traceview's earlier overlay; annotate replaces "
            "the overlay at the end of the events whole, and would drop them: annotate the "
            "trace as it was before its first annotate"
        )

    def write(tmp: Path) -> None:
        if target.name.endswith(".gz"):
            with gzip.open(tmp, "wb", compresslevel=6) as w:
                _copy_with_overlay(source, meta.events_end, events, w, cut=cut)
        else:
            with open(tmp, "wb") as w:
                _copy_with_overlay(source, meta.events_end, events, w, cut=cut)

    return atomic_write(target, write, overwrite=overwrite)


def _separator(before: bytes) -> bytes:
    """What goes between the original text and the overlay: a comma unless the last
    non-blank byte ``before`` it is ``[`` or ``,`` already, then a newline."""
    return (b"" if before in (b"[", b",") else b",") + b"\n"


def _drop_separator(held: bytes, before: bytes) -> bytes:
    """``held`` (the blanks and commas just before an earlier overlay, ``before`` the last
    byte written ahead of them) less exactly the separator annotate wrote there
    (:func:`_separator`): the original's own blanks and commas are kept byte for byte."""
    if held.endswith(b"\n"):
        held = held[:-1]
    if held.endswith(b","):
        rest = held[:-1]
        prev = rest.rstrip()[-1:] if rest.rstrip() else before
        if prev not in (b"[", b","):  # annotate wrote this comma: it adds one only then
            held = rest
    return held


def _copy_with_overlay(
    source: str,
    end: int | None,
    events: bytes,
    w: BinaryIO | gzip.GzipFile,
    *,
    cut: int | None = None,
) -> None:
    """Copy the text, inserting ``events`` before byte ``end`` (the closing ``]``), or at
    the end with a ``]`` of its own when there is none. With ``cut``, the bytes from
    ``cut`` to ``end`` (an earlier overlay) are left out, with the separator annotate wrote
    before them (and nothing of the original's own blanks)."""
    stop = cut if cut is not None else end  # where the original text is left
    written = 0
    pending = b""  # trailing blanks and (before an old overlay) commas, held back
    inserted = False

    def insert() -> None:
        held = _drop_separator(pending, last_byte[0]) if cut is not None else pending
        w.write(held)
        last = held.rstrip()[-1:] if held.rstrip() else last_byte[0]
        w.write(_separator(last) + events + b"\n")

    last_byte = [b""]
    for chunk in _read_text(source):
        if not inserted and stop is not None and written + len(chunk) > stop:
            pending += chunk[: stop - written]
            insert()
            inserted = True
            if end is not None and written + len(chunk) > end:
                w.write(chunk[end - written :])
        elif not inserted:
            pending += chunk
            body = pending.rstrip(b" \t\r\n,")
            if body:
                last_byte[0] = body[-1:]
                w.write(body)
                pending = pending[len(body) :]
        elif end is not None and written + len(chunk) > end:
            w.write(chunk[max(0, end - written) :])
        written += len(chunk)
    if not inserted:
        insert()
    if end is None:  # a bare array without its closing ']' (Chrome allows it)
        w.write(b"]")
