"""Chrome/Kineto trace JSON (optionally gzipped) -> :class:`~traceview.model.Trace`.

This is the only module that reads raw JSON. The document is streamed: decompressed text is
cut into blocks of about 6 MB at event boundaries, each block is decoded with a typed
msgspec decoder that only materialises the fields traceview uses, and its columns are
appended to per-kind polars frames. Peak memory stays near the size of the final frames,
never a copy of the whole document.

Time conversion (the one place it happens): ``ts_ns = round(ts_us * 1000)``, computed as
``floor(ts_us) * 1000 + round(frac(ts_us) * 1000)`` so that the float's representation
error never reaches a whole nanosecond. Guarantee: a timestamp written with at most three
decimals converts to its exact nanosecond value while ``|ts_us| < 2**43`` (about 8.8e12 µs,
i.e. any relative or ``baseTimeNanoseconds``-based Kineto clock); integer-microsecond
timestamps are exact up to 2**53 µs. Beyond 2**43 µs (a Unix-epoch clock), a block's
plain decimal ``ts`` values are read again from their digits (:func:`columns.exact_ts`).
Durations are converted the same way and are never negative.
"""

from __future__ import annotations

import logging
import math
import re
import warnings
from collections import Counter
from dataclasses import replace
from typing import Any, BinaryIO

import msgspec
import polars as pl

from traceview.errors import TraceFormatError, TraceviewWarning
from traceview.loader import kinds, lenient
from traceview.loader.boundaries import array_end, error_byte, last_cut
from traceview.loader.columns import (
    DECODER,
    RAW_ARGS_DECODER,
    Block,
    as_number,
    with_exact_ts,
)
from traceview.loader.frames import (
    OVERLAY_CATEGORY,
    assemble,
    events_and_header,
    trace_meta,
)
from traceview.loader.in_order import SERIAL_BLOCKS, Decoded, InOrder, helpers_for
from traceview.model import (
    COUNTER_SCHEMA,
    EVENT_SCHEMA,
    FLOW_SCHEMA,
    KERNEL_SCHEMA,
    METADATA_SCHEMA,
    SHAPE_SCHEMA,
    Trace,
    wide,
)
from traceview.redact import line as one_line

# Said where helper processes stopped before the load ended (the CLI prints it as a warning;
# so does a pool's worker; elsewhere Python's logging shows it on stderr unless the caller
# configures logging). Its message is one escaped line.
LOG = logging.getLogger("traceview.loader")

# bytes of JSON text decoded at a time: the decoder's working set grows with it (peak RSS
# 0.310 -> 0.295 GB on benchmarks/load.py --shape vllm from 8 to 6 MB, ~10% slower;
# smaller blocks were slower still)
BLOCK_BYTES = 6 << 20
_MAX_HEADER = 64 << 20  # look this far for the "traceEvents" key before reading it whole
_MAX_PIECE = 512 << 20  # a single event larger than this is treated as malformed

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')

_PART_SCHEMAS = {
    "kernels": KERNEL_SCHEMA,
    "events": EVENT_SCHEMA,
    "flows": FLOW_SCHEMA,
    "counters": COUNTER_SCHEMA,
    "metadata": METADATA_SCHEMA,
    "shapes": SHAPE_SCHEMA,
}


def decode_block(piece: bytes, raw_args: bool) -> Decoded | None:
    """The events of ``piece`` (the text between two events' commas), decoded as the
    loader decodes a block; None where it does not end between two events. Raises where
    the block is bad: the loader then decodes it again in order, to name the event."""
    loader = _Loader("<block>", max(len(piece), 1), raw_args=raw_args)
    if not loader._consume_piece(piece, final=False):
        return None
    return Decoded(
        parts={key: frames for key, frames in loader.parts.items() if frames},
        skipped=dict(loader.skipped),
        overlay_events=loader.overlay_events,
        events=loader.total_events,
        wide_ids=loader.wide_ids,
    )


def _complete(events: int) -> str:
    """``"1 complete event"``, ``"2 complete events"``: the count a truncation note gives."""
    return f"{events:,} complete event{'' if events == 1 else 's'}"


# --- the loader ----------------------------------------------------------------------------


class _Loader:
    def __init__(
        self,
        path: str,
        block_bytes: int,
        *,
        raw_args: bool = False,
        strict: bool = False,
        workers: int = 1,
        size_hint: int = 0,
    ) -> None:
        self.strict = strict
        self.workers = workers
        # the helpers start with the first block where the text is known to be large
        self.serial_blocks = 0 if size_hint > SERIAL_BLOCKS * block_bytes else SERIAL_BLOCKS
        self.size_hint = size_hint
        self.in_order: InOrder | None = None
        self.truncated: tuple[int, int] | None = None  # (byte offset of the cut, events kept)
        self.truncation_note = ""
        self.events_end: int | None = None
        self.overlay_events = 0
        self.stream: Any = None
        self.path = path
        self.block_bytes = block_bytes
        self.raw_args = raw_args
        self.total_events = 0
        self.skipped: Counter[str] = Counter()
        self.parts: dict[str, list[pl.DataFrame]] = {
            "kernels": [],
            "events": [],
            "flows": [],
            "counters": [],
            "metadata": [],
            "shapes": [],
            "begin_end": [],
        }
        self.consumed = 0  # bytes of JSON text before the current buffer
        self.wide_ids = False  # an id beyond Int32 was met: every frame's ids are Int64

    # - document structure -

    def run(self, data: bytes, stream: BinaryIO) -> Trace:
        """Read the trace whose text begins with ``data`` and goes on in ``stream``."""
        self.stream = stream
        lead = 0  # whitespace and a BOM before the document: byte offsets count them
        if data.startswith(b"\xef\xbb\xbf"):
            data, lead = data[3:], 3
        while not (stripped := data.lstrip()):  # any amount of leading whitespace
            lead += len(data)
            data = stream.read(self.block_bytes)
            if not data:
                if getattr(stream, "cut_short", False):  # a gzip stream cut before any text
                    raise TraceFormatError(self.path, "truncated: its gzip stream ends early")
                raise TraceFormatError(self.path, "empty file (only whitespace)")
        lead += len(data) - len(stripped)
        data = stripped
        header: dict[str, Any] = {}
        if data[:1] == b"[":
            self.consumed = lead + 1
            self._stream_events(stream, data[1:], header_text=None)
        elif data[:1] == b"{":
            match = _EVENTS_KEY.search(data)
            while match is None and len(data) < _MAX_HEADER:
                more = stream.read(self.block_bytes)
                if not more:
                    break
                data += more
                match = _EVENTS_KEY.search(data)
            header_text = data[: match.end()] if match else None
            if header_text is not None and not self._header_ok(header_text):
                header_text = None
            if header_text is None:
                self.consumed = lead  # the document's first byte
                return self._whole_document(self._rest_of_header(data, stream))
            self.consumed = lead + len(header_text)
            header = self._stream_events(stream, data[len(header_text) :], header_text)
        else:
            raise TraceFormatError(
                self.path, "not a trace file: a JSON trace starts with '{' or '['"
            )
        return self._finish(header)

    def _rest_of_header(self, data: bytes, stream: BinaryIO) -> bytes:
        """The whole text, for a document whose ``traceEvents`` was not found in its first
        :data:`_MAX_HEADER` bytes: read whole only when it is no larger than that."""
        parts = [data]
        size = len(data)
        while more := stream.read(self.block_bytes):
            parts.append(more)
            size += len(more)
            if size > _MAX_HEADER:
                raise TraceFormatError(
                    self.path,
                    f"no 'traceEvents' array in the first {_MAX_HEADER >> 20} MB of text "
                    "(a header that large is not read)",
                )
        return b"".join(parts)

    @staticmethod
    def _header_ok(header_text: bytes) -> bool:
        try:
            return isinstance(msgspec.json.decode(header_text + b"]}"), dict)
        except msgspec.DecodeError:
            return False

    def _whole_document(self, text: bytes) -> Trace:
        doc = lenient.parse(text, self.path, base=None, where="the document", offset=self.consumed)
        events, header = events_and_header(doc, self.path)
        step = 200_000
        for start in range(0, len(events), step):
            self._add_events(events[start : start + step])
        return self._finish(header)

    def _stream_events(
        self, stream: BinaryIO, buf: bytes, header_text: bytes | None
    ) -> dict[str, Any]:
        """Decode the events array from ``buf`` + the rest of ``stream``; return trailer keys.

        With ``workers`` > 1, blocks after the first few are decoded by helper processes
        and by this one, and added in file order (:mod:`traceview.loader.in_order`)."""
        eof = False
        blocks = 0
        try:
            while not eof:
                chunk = stream.read(self.block_bytes)
                if chunk:
                    buf += chunk
                else:
                    eof = True
                if len(buf) < self.block_bytes and not eof:
                    continue
                if eof:
                    break
                cut = last_cut(buf)
                if cut < 0:
                    if len(buf) > _MAX_PIECE:
                        self._raise_json_error(buf, f"no event boundary in {len(buf)} bytes")
                    continue
                blocks += 1
                if self.workers > 1 and blocks > self.serial_blocks and self.in_order is None:
                    expected = max(self.size_hint // self.block_bytes, blocks)
                    self.in_order = InOrder(
                        helpers_for(self.workers, expected), decode_block, (self.raw_args,)
                    )
                if self.in_order is not None:
                    rest = buf[cut:].lstrip()
                    text = buf[: len(buf) - len(rest) + 1]
                    self.in_order.queue(text, cut, self.consumed)
                    self.consumed += len(text)
                    buf = rest[1:]
                    back = self._add_done(wait=False)
                    if back is not None:  # a block did not end between events: read on
                        buf = back + buf
                    continue
                if not self._consume_piece(memoryview(buf)[:cut], final=False):
                    continue  # the cut was not between two events: read on
                rest = buf[cut:].lstrip()
                self.consumed += len(buf) - len(rest) + 1
                buf = rest[1:]  # drop the ','
            back = self._add_done(wait=True)
            if back is not None:
                buf = back + buf
        finally:
            self._stop_helpers()
        return self._tail(buf, header_text)

    # - decoding blocks on several processes -

    def _add_done(self, *, wait: bool) -> bytes | None:
        """Add the decoded blocks at the head of the queue, in file order (all of them when
        ``wait``). A block the helpers could not decode is decoded here, in order; where it
        does not end between two events, the text from it on is returned, to be read on
        from without helpers."""
        if self.in_order is None:
            return None
        for item in self.in_order.done(wait=wait):
            if item.result is not None:
                self._add_decoded(item.result)
                continue
            after = self.consumed
            self.consumed = item.consumed  # byte offsets in its errors count from here
            if not self._consume_piece(memoryview(item.text)[: item.cut], final=False):
                back = self.in_order.text_from(item)
                self._stop_helpers()
                self.workers = 1
                return back
            self.consumed = after
        return None

    def _add_decoded(self, block: Decoded) -> None:
        """Add a block decoded on its own: its events numbered after those before it."""
        base = self.total_events
        self.total_events += block.events
        self.overlay_events += block.overlay_events
        self.skipped.update(block.skipped)
        if block.wide_ids and not self.wide_ids:
            self._widen()
        for key, frames in block.parts.items():
            for frame in frames:
                if key == "begin_end":  # raw rows, paired by their number at the end
                    frame = frame.with_columns(pl.col("idx") + base)
                else:
                    frame = self._cast(frame, _PART_SCHEMAS[key])
                self.parts[key].append(frame)

    def _stop_helpers(self) -> None:
        if self.in_order is not None:
            self.in_order.close()
            failure = self.in_order.helpers.failure
            self.in_order = None
            if failure is not None:
                said = (
                    f"helper processes stopped: {failure}; the rest was decoded by this "
                    "process alone (the same trace, more slowly)"
                )
                # the message escaped for any handler; the file and text for the CLI's
                extra = {"trace_source": self.path, "trace_said": said}
                LOG.warning("%s: %s", one_line(self.path), said, extra=extra)

    def _tail(self, buf: bytes, header_text: bytes | None) -> dict[str, Any]:
        """The last events, the closing ``]`` and (object form) the keys after it."""
        text = buf.rstrip()
        end = array_end(text)
        if end is None:
            body, trailer = text, b""  # bare array: Chrome accepts a missing ']'
        else:
            body, trailer = text[:end].rstrip()[:-1], text[end:]
            self.events_end = self.consumed + len(text[:end].rstrip()) - 1
        body = body.rstrip()
        if body.endswith(b","):
            body = body[:-1]
        if end is None:
            self._consume_cut_tail(body, array_form=header_text is None)
        else:
            self._consume_piece(body, final=True)
        if header_text is None:
            if trailer.strip():
                raise TraceFormatError(self.path, "unexpected text after the events array")
            return {}
        if not trailer.strip():  # the header alone: the trailer's keys were cut off
            self._truncated_at(self.consumed + len(text), kept_all=True)
            trailer = b"}"
        try:
            doc = lenient.parse(
                header_text + b"]" + trailer, self.path, base=None, where="the header"
            )
        except TraceFormatError:
            at = self.consumed + (len(text) if end is None else end)
            lenient.refuse_bad_trailer(trailer, self.path, offset=at)
            # the keys after the events were cut off
            self._truncated_at(self.consumed + len(text), kept_all=True)
            doc = lenient.parse(header_text + b"]}", self.path, base=None, where="the header")
        if not isinstance(doc, dict):
            raise TraceFormatError(self.path, "JSON is not a trace object")
        doc.pop("traceEvents", None)
        return doc

    def _consume_cut_tail(self, body: bytes, *, array_form: bool) -> None:
        """The events at the end of a file with no closing ``]``: a bare array may end so
        (Chrome allows it), or the file was cut off (a profiler that died, a full disk). Every
        complete event loads; a cut inside an event drops that event, with one warning."""
        doc = b"[" + body + b"]"
        try:
            DECODER.decode(doc)
            complete = True
        except msgspec.ValidationError:
            complete = True  # well-formed; the careful path reads odd field types
        except msgspec.DecodeError as exc:
            pos = error_byte(exc)
            complete = not (pos is None or pos >= len(doc) - 1)  # an error mid-text is not a cut
        if complete:
            self._consume_piece(body, final=True)
            if not array_form or getattr(self.stream, "cut_short", False):
                self._truncated_at(self.consumed + len(body), kept_all=True)
            return
        end = len(body)
        while True:
            cut = last_cut(body[:end])
            if cut < 0:
                break
            if self._consume_piece(memoryview(body)[:cut], final=False):
                self._truncated_at(self.consumed + cut, kept_all=False)
                return
            end = cut - 1
        self._truncated_at(self.consumed, kept_all=False)

    def _truncated_at(self, offset: int, *, kept_all: bool) -> None:
        """Record (or, strict, refuse) a trace cut off at ``offset`` bytes of its text."""
        if self.truncated is not None:
            return  # the first cut found is the one to report
        gz = " (its gzip stream ends early)" if getattr(self.stream, "cut_short", False) else ""
        where = (
            f"truncated at byte {offset:,}{gz}, after its last complete event"
            if kept_all
            else f"truncated inside an event after byte {offset:,}{gz} (that event is dropped)"
        )
        if self.strict:
            raise TraceFormatError(
                self.path,
                f"{where}; {_complete(self.total_events)} before the cut "
                "(without --strict they load, with a warning)",
            )
        self.truncated = (offset, self.total_events)
        self.truncation_note = f"{where}: {_complete(self.total_events)} kept"

    def _consume_piece(self, piece: bytes | memoryview, *, final: bool) -> bool:
        """Decode ``[piece]`` and add its events; False when it does not end between events."""
        doc = b"".join((b"[", piece, b"]"))
        try:
            events = DECODER.decode(doc)
        except msgspec.ValidationError:
            pass  # some field has an unexpected type: take the careful path below
        except msgspec.DecodeError as exc:
            pos = error_byte(exc)
            ends_early = pos is None or pos >= len(doc) - 1
            if ends_early and not final:
                return False
        else:
            self._add_events(events, typed_doc=doc)
            return True
        try:  # the typed decoder stopped at an odd field or value before the piece's end
            parsed = lenient.parse_events(
                doc, self.path, base=self.total_events, cut=not final, offset=self.consumed - 1
            )
        except lenient.CutInsideAnEvent:
            return False
        self._add_events(parsed, text=doc)
        return True

    def _raise_json_error(self, text: bytes, problem: str) -> None:
        doc = b"".join((b"[", text, b"]"))
        lenient.parse_events(doc, self.path, base=self.total_events, offset=self.consumed - 1)
        raise TraceFormatError(self.path, problem)

    # - converting events -

    def _add_events(
        self, events: list[Any], typed_doc: bytes | None = None, text: bytes | None = None
    ) -> None:
        """Add decoded events to the frames: typed structs decoded from ``typed_doc``, or
        plain JSON values (``typed_doc`` None) parsed from ``text`` where it is known (the
        JSON array of exactly these events)."""
        if not events:
            return
        text = typed_doc if typed_doc is not None else text
        base = self.total_events
        self.total_events += len(events)
        if typed_doc is not None:
            block = Block.from_structs(events, base, shapes=b'"Input Dims"' in typed_doc)
            if "C" in block.ph:  # counters carry arbitrary args: read this block generically
                generic = lenient.parse_events(typed_doc, self.path, base=base)
                block.counters = Block.from_dicts(generic, 0).counters
            if self.raw_args:
                block.args_json = [
                    bytes(e.args).decode() if len(e.args) else None
                    for e in RAW_ARGS_DECODER.decode(typed_doc)
                ]
        else:
            block = Block.from_dicts(list(events), base, keep_args=self.raw_args)
        frame = block.frame() if text is None else with_exact_ts(block.frame(), text)
        self._add_frame(frame, block.counters, base)

    def _add_frame(
        self, df: pl.DataFrame, counters: list[tuple[int, dict[str, Any]]], base: int
    ) -> None:
        df, skipped = kinds.usable(df, self.path)
        self.skipped.update(skipped)
        self.overlay_events += df.select(
            pl.col("cat").str.starts_with(OVERLAY_CATEGORY).sum()
        ).item()
        for key, frame in kinds.split(df).items():
            if key == "begin_end":  # raw rows, cast when they are paired
                self.parts[key].append(frame)
            else:
                self.parts[key].append(self._cast(frame, _PART_SCHEMAS[key]))
        if counters:
            self._add_counters(df, counters, base)

    def _schema(self, schema: dict[str, pl.DataType]) -> dict[str, pl.DataType]:
        return wide(schema) if self.wide_ids else schema

    def _cast(self, frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
        """``frame`` in ``schema``; the first id that does not fit Int32 makes every id of
        the trace Int64, the parts already read included."""
        try:
            return frame.cast(self._schema(schema))  # type: ignore[arg-type]
        except pl.exceptions.InvalidOperationError:
            if self.wide_ids:
                raise
        self._widen()
        return frame.cast(wide(schema))  # type: ignore[arg-type]

    def _widen(self) -> None:
        """Every id of the trace is Int64 from now on, the parts already read included."""
        self.wide_ids = True
        for key, parts in self.parts.items():
            if key != "begin_end":  # raw rows, cast when they are paired
                parts[:] = [p.cast(wide(dict(p.schema))) for p in parts]  # type: ignore[arg-type]

    def _add_counters(
        self, df: pl.DataFrame, counters: list[tuple[int, dict[str, Any]]], base: int
    ) -> None:
        rows: list[tuple[int, str, str, float, int | None]] = []
        good = df.filter(pl.col("ph") == "C").select(
            "idx", kinds.ts_ns(df).alias("ts"), "name", "pid"
        )
        lookup = {idx: (ts, name, pid) for idx, ts, name, pid in good.iter_rows()}
        for i, args in counters:
            found = lookup.get(base + i)
            if found is None:
                continue
            ts, name, pid = found
            for key, value in args.items():
                number = as_number(value)
                if number is not None and math.isfinite(number):
                    rows.append((ts, name or "", str(key), number, pid))
        if rows:
            frame = pl.DataFrame(
                rows, schema=["ts_ns", "name", "series", "value", "pid"], orient="row"
            )
            self.parts["counters"].append(self._cast(frame, COUNTER_SCHEMA))

    def _pair_begin_end(self) -> None:
        """Turn ``B``/``E`` pairs into complete events (:func:`kinds.pair_begin_end`)."""
        complete, skipped = kinds.pair_begin_end(self.parts.pop("begin_end"))
        self.skipped.update(skipped)
        if complete is not None:
            self._add_frame(complete, [], 0)

    def _finish(self, header: dict[str, Any]) -> Trace:
        self._pair_begin_end()
        if self.total_events and sum(self.skipped.values()) >= self.total_events:
            reasons = "; ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
            raise TraceFormatError(
                self.path,
                f"not a trace: none of its {self.total_events} events is usable ({reasons})",
            )
        schemas = {
            "kernels": self._schema(KERNEL_SCHEMA),
            "events": self._schema(EVENT_SCHEMA),
            "flows": self._schema(FLOW_SCHEMA),
            "counters": self._schema(COUNTER_SCHEMA),
            "metadata": self._schema(METADATA_SCHEMA),
            "shapes": self._schema(SHAPE_SCHEMA),
        }
        frames = assemble(self.parts, schemas)
        frames["kernels"], copies = kinds.without_copies(frames["kernels"])
        if copies:
            self.skipped["duplicated device events (identical copies dropped)"] += copies

        warnings_list = tuple(
            f"{count} event{'s' if count != 1 else ''} skipped: {why}"
            for why, count in sorted(self.skipped.items())
        ) + ((self.truncation_note,) if self.truncated else ())
        if not self.truncated and getattr(self.stream, "cut_short", False):
            warnings_list += (
                "truncated gzip stream (its end marker is missing); the JSON text inside is "
                "complete, every event loaded",
            )
        for line in warnings_list:
            warnings.warn(TraceviewWarning(f"{self.path}: {line}"), stacklevel=3)
        meta = trace_meta(self.path, header, self.total_events, self.skipped, warnings_list)
        if self.truncated:
            meta = replace(meta, truncated_at=self.truncated[0])
        meta = replace(
            meta,
            events=self.total_events - self.overlay_events,
            events_end=self.events_end,
            overlay_events=self.overlay_events,
        )
        return Trace(meta=meta, **frames)


def read_json(
    path: str,
    head: bytes,
    stream: BinaryIO,
    block_bytes: int = BLOCK_BYTES,
    *,
    raw_args: bool = False,
    strict: bool = False,
    workers: int = 1,
    size_hint: int = 0,
) -> Trace:
    """Read a Chrome/Kineto JSON trace whose text begins with ``head`` and goes on in
    ``stream`` (decompressed), decoding on ``workers`` processes (this one and helpers);
    ``size_hint``: bytes of text the stream is known to hold at least."""
    loader = _Loader(
        path, block_bytes, raw_args=raw_args, strict=strict, workers=workers, size_hint=size_hint
    )
    return loader.run(head, stream)
