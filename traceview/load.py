"""Chrome/Kineto trace JSON (optionally gzipped) -> :class:`~traceview.model.Trace`.

This is the only module that reads raw JSON. The document is streamed: decompressed text is
cut into blocks of about 8 MB at event boundaries, each block is decoded with a typed
msgspec decoder that only materialises the fields traceview uses, and its columns are
appended to per-kind polars frames. Peak memory stays near the size of the final frames,
never a copy of the whole document.

Time conversion (the one place it happens): ``ts_ns = round(ts_us * 1000)``, computed as
``floor(ts_us) * 1000 + round(frac(ts_us) * 1000)`` so that the float's representation
error never reaches a whole nanosecond. Guarantee: a timestamp written with at most three
decimals converts to its exact nanosecond value while ``|ts_us| < 2**43`` (about 8.8e12 µs,
i.e. any relative or ``baseTimeNanoseconds``-based Kineto clock); integer-microsecond
timestamps are exact up to 2**53 µs. Durations are converted the same way and are never
negative.
"""

from __future__ import annotations

import gc
import io
import json
import math
import os
import re
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO

import msgspec
import orjson
import polars as pl

from traceview.errors import TraceFormatError, TraceviewWarning, describe_event
from traceview.model import (
    COUNTER_SCHEMA,
    EVENT_SCHEMA,
    FLOW_SCHEMA,
    KERNEL_SCHEMA,
    METADATA_SCHEMA,
    SHAPE_SCHEMA,
    Trace,
    TraceMeta,
    empty_frame,
)

Progress = Callable[[int, int], None]
"""``progress(bytes_read, total_bytes)``, called as the (compressed) file is consumed."""

_BLOCK = 8 << 20  # bytes of JSON text decoded at a time (larger blocks were slower)
_MAX_HEADER = 64 << 20  # look this far for the "traceEvents" key before reading it whole
_MAX_PIECE = 512 << 20  # a single event larger than this is treated as malformed
_TS_LIMIT_US = 9.2e15  # beyond this, microseconds no longer fit Int64 nanoseconds

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")
_BYTE_POS = re.compile(r"\(byte (\d+)\)")

_KNOWN_PH = frozenset("XiIBEstfCM")
_DEVICE_CATS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
}
_EVENT_CATS = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "cuda_runtime": "runtime",
    "cuda_driver": "driver",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation",
    "python_function": "python_function",
    "cpu_instant_event": "instant",
    "cuda_sync": "sync",
}


# --- typed decoding: only the fields traceview uses are materialised -------------------


class _Args(msgspec.Struct, frozen=True):
    device: int | None = None
    stream: int | None = None
    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
    name: str | None = None  # ph M: process_name / thread_name
    labels: str | None = None  # ph M: process_labels
    sort_index: int | None = None  # ph M: *_sort_index
    # record_shapes: kept as raw JSON text, never parsed here (empty: absent)
    input_dims: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input Dims")


_NO_ARGS = _Args()


class _Event(msgspec.Struct):
    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    id: int | str | None = None
    args: _Args = _NO_ARGS


_DECODER = msgspec.json.Decoder(list[_Event])


class _RawArgsEvent(msgspec.Struct):
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)  # empty: no args


_RAW_ARGS_DECODER = msgspec.json.Decoder(list[_RawArgsEvent])


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """Options of :func:`load`.

    Attributes:
        block_bytes: JSON text decoded per block (memory/speed trade-off).
        progress: optional ``progress(bytes_read, total_bytes)`` callback.
        raw_args: also keep each event's whole ``args`` object as JSON text, in an
            ``args_json`` column of ``kernels`` and ``events`` (for SQL's ``args`` table and
            ``EXTRACT_ARG``; costs memory and a second decode of each block).
        strict: a truncated trace is an error; by default its complete events load, with
            one warning giving the byte offset of the cut and how many events were kept.
    """

    block_bytes: int = _BLOCK
    progress: Progress | None = None
    raw_args: bool = False
    strict: bool = False


def load(path: str | os.PathLike[str], *, options: LoadOptions | None = None) -> Trace:
    """Load a Chrome/Kineto trace (``.json`` or gzipped, detected by magic bytes).

    Accepts the object form (``{"traceEvents": [...], ...}``) and the bare array form,
    including an array whose closing ``]`` is missing. Events that cannot be used are
    counted in ``trace.meta.skipped_events`` and reported with a
    :class:`~traceview.errors.TraceviewWarning`; device activity that cannot be placed in
    time is an error, since every figure would be wrong without it.

    Args:
        path: the trace file.
        options: :class:`LoadOptions`.

    Returns:
        The :class:`~traceview.model.Trace`.

    Raises:
        TraceFormatError: the file is missing, not JSON, a truncated gzip, not a trace, or
            holds a kernel with a missing or invalid ``ts``/``dur``.
    """
    opts = options or LoadOptions()
    name = os.fspath(path)
    if not os.path.exists(name):
        raise TraceFormatError(name, "no such file")
    if os.path.isdir(name):
        raise TraceFormatError(name, "is a directory, not a trace file")
    total = os.path.getsize(name)
    if total == 0:
        raise TraceFormatError(name, "empty file")

    gc_was_enabled = gc.isenabled()
    gc.disable()  # the cyclic GC costs several times the parse on millions of objects
    try:
        with _open_text(name, total, opts.progress) as stream:
            loader = _Loader(name, opts.block_bytes, raw_args=opts.raw_args, strict=opts.strict)
            reader = _EndsEarly(stream, name) if stream is not None and _is_gzip(name) else stream
            return loader.run(reader)  # type: ignore[arg-type]
    except EOFError as exc:
        raise TraceFormatError(name, f"truncated gzip file ({exc})") from None
    except RecursionError:
        raise TraceFormatError(
            name,
            "JSON nested too deeply to read (an 'args' value thousands of levels deep?); "
            "the trace cannot be loaded",
        ) from None
    except (OSError, ValueError) as exc:
        if isinstance(exc, TraceFormatError):
            raise
        raise TraceFormatError(name, f"cannot read: {exc}") from None
    finally:
        if gc_was_enabled:
            gc.enable()


# --- reading ----------------------------------------------------------------------------


class _CountingReader(io.RawIOBase):
    """A raw file that reports how many bytes have been read from it."""

    def __init__(self, raw: BinaryIO, total: int, progress: Progress | None) -> None:
        self._raw = raw
        self._total = total
        self._progress = progress
        self.done = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        self.done += n or 0
        if self._progress is not None:
            self._progress(self.done, self._total)
        return int(n or 0)

    def close(self) -> None:
        self._raw.close()
        super().close()


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


def _open_text(path: str, total: int, progress: Progress | None) -> BinaryIO:
    raw = open(path, "rb")  # noqa: SIM115 - closed by the returned stream
    magic = raw.read(4)
    raw.seek(0)
    counting = _CountingReader(raw, total, progress)
    if magic[:2] == _GZIP_MAGIC:
        from isal import igzip_threaded

        # Decompression runs in a background thread (ISA-L releases the GIL), overlapping
        # with JSON decoding in this one.
        stream: BinaryIO = igzip_threaded.open(  # type: ignore[no-untyped-call]
            counting, "rb", threads=1
        )
        return stream
    if magic == _ZSTD_MAGIC:
        counting.close()
        raise TraceFormatError(path, "zstd-compressed traces are not supported; run zstd -d")
    return io.BufferedReader(counting, buffer_size=1 << 20)


class _EndsEarly:
    """A stream whose compressed data may stop short (a profiler that died, a full disk).

    The fast decompressor raises EOFError at the cut and may lose what it had buffered, so
    the text from there on comes from a plain zlib stream over the same file, which yields
    every byte before the cut; ``cut_short`` says the text ended early."""

    def __init__(self, stream: BinaryIO, path: str) -> None:
        self._stream = stream
        self._path = path
        self._delivered = 0
        self._rest: Iterator[bytes] | None = None
        self._pending = b""
        self.cut_short = False

    def read(self, size: int = -1) -> bytes:
        if self._rest is None:
            try:
                data = self._stream.read(size)
                self._delivered += len(data)
                return data
            except EOFError:
                self.cut_short = True
                self._rest = _gzip_until_cut(self._path, skip=self._delivered)
        out = [self._pending]
        have = len(self._pending)
        while size < 0 or have < size:
            chunk = next(self._rest, b"")
            if not chunk:
                break
            out.append(chunk)
            have += len(chunk)
        data = b"".join(out)
        if size >= 0:
            data, self._pending = data[:size], data[size:]
        else:
            self._pending = b""
        return data


def _gzip_until_cut(path: str, *, skip: int) -> Iterator[bytes]:
    """The decompressed text of a gzip file whose end is missing, from byte ``skip`` of the
    text up to the cut (every gzip member in turn)."""
    with open(path, "rb") as f:
        d = zlib.decompressobj(wbits=31)
        while chunk := f.read(1 << 20):
            while chunk:
                try:
                    out = d.decompress(chunk)
                except zlib.error:
                    return  # damaged past this point: the text ends here
                chunk = d.unused_data if d.eof else b""
                if d.eof:
                    d = zlib.decompressobj(wbits=31)
                if skip >= len(out):
                    skip -= len(out)
                    continue
                yield out[skip:]
                skip = 0


# --- per-block columns -------------------------------------------------------------------


@dataclass
class _Block:
    """Columns of one block of events, as Python lists (one entry per event)."""

    base: int
    ph: list[Any] = field(default_factory=list)
    cat: list[Any] = field(default_factory=list)
    name: list[Any] = field(default_factory=list)
    pid: list[Any] = field(default_factory=list)
    tid: list[Any] = field(default_factory=list)
    ts: list[Any] = field(default_factory=list)
    dur: list[Any] = field(default_factory=list)
    id: list[Any] = field(default_factory=list)
    device: list[Any] = field(default_factory=list)
    stream: list[Any] = field(default_factory=list)
    correlation: list[Any] = field(default_factory=list)
    external_id: list[Any] = field(default_factory=list)
    meta_value: list[Any] = field(default_factory=list)
    input_dims: list[Any] | None = None  # None: no event of the block carries Input Dims
    args_json: list[Any] | None = None
    counters: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    @classmethod
    def from_structs(cls, events: list[_Event], base: int, shapes: bool = False) -> _Block:
        """Columns of typed events; ``shapes``: the block's text holds ``Input Dims``."""
        args = [e.args for e in events]
        ph = [e.ph for e in events]
        return cls(
            base=base,
            ph=ph,
            cat=[e.cat for e in events],
            name=[e.name for e in events],
            pid=[e.pid for e in events],
            tid=[e.tid for e in events],
            ts=[e.ts for e in events],
            dur=[e.dur for e in events],
            id=[e.id for e in events],
            device=[a.device for a in args],
            stream=[a.stream for a in args],
            correlation=[a.correlation for a in args],
            external_id=[a.external_id for a in args],
            # only metadata events carry a value: skip the pass in blocks without any
            meta_value=[
                a.name if a.name is not None else a.labels if a.labels is not None else a.sort_index
                for a in args
            ]
            if "M" in ph
            else [None] * len(events),
            input_dims=[bytes(a.input_dims).decode() if a.input_dims else None for a in args]
            if shapes
            else None,
        )

    @classmethod
    def from_dicts(cls, events: list[Any], base: int, keep_args: bool = False) -> _Block:
        """The careful path: any JSON value in any field, coerced or nulled."""
        block = cls(base=base)
        for i, e in enumerate(events):
            if not isinstance(e, dict):
                e = {"ph": "<not an object>", "name": f"<{type(e).__name__}>"}
            args = e.get("args")
            if not isinstance(args, dict):
                args = {}
            ph = e.get("ph")
            block.ph.append(ph if isinstance(ph, str) else None)
            block.cat.append(_text(e.get("cat")))
            block.name.append(_text(e.get("name")))
            block.pid.append(_ident(e.get("pid")))
            block.tid.append(_ident(e.get("tid")))
            block.ts.append(_number(e.get("ts")))
            block.dur.append(_number(e.get("dur")))
            block.id.append(_ident(e.get("id")))
            block.device.append(_integer(args.get("device")))
            block.stream.append(_integer(args.get("stream")))
            block.correlation.append(_integer(args.get("correlation")))
            block.external_id.append(_integer(args.get("External id")))
            block.meta_value.append(
                _meta_value(args.get("name"), args.get("labels"), args.get("sort_index"))
            )
            if ph == "C":
                block.counters.append((i, args))
            if "Input Dims" in args:
                if block.input_dims is None:
                    block.input_dims = [None] * i
                block.input_dims.append(orjson.dumps(args["Input Dims"]).decode())
            elif block.input_dims is not None:
                block.input_dims.append(None)
        if keep_args:
            block.args_json = [
                orjson.dumps(e["args"]).decode()
                if isinstance(e, dict) and isinstance(e.get("args"), dict)
                else None
                for e in events
            ]
        return block

    def frame(self) -> pl.DataFrame:
        n = len(self.ph)
        return pl.DataFrame(
            {
                "idx": pl.int_range(self.base, self.base + n, eager=True, dtype=pl.Int64),
                "ph": pl.Series(self.ph, dtype=pl.String),
                "cat": pl.Series(self.cat, dtype=pl.String),
                "name": pl.Series(self.name, dtype=pl.String),
                "pid": pl.Series(self.pid, dtype=pl.Int64, strict=False),
                "tid": pl.Series(self.tid, dtype=pl.Int64, strict=False),
                "ts": pl.Series(self.ts, dtype=pl.Float64, strict=False),
                "dur": pl.Series(self.dur, dtype=pl.Float64, strict=False),
                "id": pl.Series(self.id, dtype=pl.Int64, strict=False),
                "device": pl.Series(self.device, dtype=pl.Int64, strict=False),
                "stream": pl.Series(self.stream, dtype=pl.Int64, strict=False),
                "correlation": pl.Series(self.correlation, dtype=pl.Int64, strict=False),
                "external_id": pl.Series(self.external_id, dtype=pl.Int64, strict=False),
                "meta_value": pl.Series(self.meta_value, dtype=pl.String, strict=False),
                **(
                    {}
                    if self.input_dims is None
                    else {"input_dims": pl.Series(self.input_dims, dtype=pl.String)}
                ),
                **(
                    {}
                    if self.args_json is None
                    else {"args_json": pl.Series(self.args_json, dtype=pl.String)}
                ),
            }
        )


def _meta_value(name: Any, labels: Any, sort_index: Any) -> str | None:
    for v in (name, labels, sort_index):
        if v is not None:
            return str(v)
    return None


def _text(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return str(v)


def _number(v: Any) -> float | None:
    """A JSON number, or a string holding one; anything else is None (invalid)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _integer(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _ident(v: Any) -> Any:
    """pid/tid/id: ints stay ints; numeric strings become ints; other strings stay (→ null)."""
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return v
    return _integer(v) if not isinstance(v, int) else v


def _to_ns(col: str) -> pl.Expr:
    whole = pl.col(col).floor()
    frac_ns = ((pl.col(col) - whole) * 1000.0 + 0.5).floor()
    return whole.cast(pl.Int64) * 1000 + frac_ns.cast(pl.Int64)


def _finite(col: str) -> pl.Expr:
    c = pl.col(col)
    return c.is_not_null() & c.is_finite() & (c.abs() < _TS_LIMIT_US)


# --- the loader ----------------------------------------------------------------------------


class _Loader:
    def __init__(
        self, path: str, block_bytes: int, *, raw_args: bool = False, strict: bool = False
    ) -> None:
        self.strict = strict
        self.truncated: tuple[int, int] | None = None  # (byte offset of the cut, events kept)
        self.truncation_note = ""
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

    # - document structure -

    def run(self, stream: BinaryIO) -> Trace:
        self.stream = stream
        data = stream.read(self.block_bytes)
        if _is_protobuf(data):
            from traceview.load_pftrace import load_pftrace

            return load_pftrace(self.path, io.BufferedReader(_Prefixed(data, stream)))
        data = data.lstrip()
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:].lstrip()
        if not data:
            raise TraceFormatError(self.path, "empty file (only whitespace)")
        header: dict[str, Any] = {}
        if data[:1] == b"[":
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
                return self._whole_document(data + stream.read())
            self.consumed = len(header_text)
            header = self._stream_events(stream, data[len(header_text) :], header_text)
        else:
            raise TraceFormatError(
                self.path, "not a trace file: a JSON trace starts with '{' or '['"
            )
        return self._finish(header)

    @staticmethod
    def _header_ok(header_text: bytes) -> bool:
        try:
            return isinstance(msgspec.json.decode(header_text + b"]}"), dict)
        except msgspec.DecodeError:
            return False

    def _whole_document(self, text: bytes) -> Trace:
        doc = self._parse_lenient(text, base=0, where="the document")
        if isinstance(doc, dict):
            events = doc.pop("traceEvents", None)
            if not isinstance(events, list):
                raise TraceFormatError(
                    self.path,
                    "JSON is not a trace: no 'traceEvents' array "
                    f"(top-level keys: {', '.join(sorted(map(str, doc))[:6]) or 'none'})",
                )
            header = doc
        elif isinstance(doc, list):
            events, header = doc, {}
        else:
            raise TraceFormatError(self.path, f"JSON is not a trace: a {type(doc).__name__}")
        step = 200_000
        for start in range(0, len(events), step):
            self._add_events(events[start : start + step])
        return self._finish(header)

    def _stream_events(
        self, stream: BinaryIO, buf: bytes, header_text: bytes | None
    ) -> dict[str, Any]:
        """Decode the events array from ``buf`` + the rest of ``stream``; return trailer keys."""
        eof = False
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
            cut = _last_cut(buf)
            if cut < 0:
                if len(buf) > _MAX_PIECE:
                    self._raise_json_error(buf, f"no event boundary in {len(buf)} bytes")
                continue
            if not self._consume_piece(memoryview(buf)[:cut], final=False):
                continue  # the cut was not between two events: read on
            rest = buf[cut:].lstrip()
            self.consumed += len(buf) - len(rest) + 1
            buf = rest[1:]  # drop the ','
        return self._tail(buf, header_text)

    def _tail(self, buf: bytes, header_text: bytes | None) -> dict[str, Any]:
        """The last events, the closing ``]`` and (object form) the keys after it."""
        text = buf.rstrip()
        end = _array_end(text)
        if end is None:
            body, trailer = text, b""  # bare array: Chrome accepts a missing ']'
        else:
            body, trailer = text[:end].rstrip()[:-1], text[end:]
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
            doc = self._parse_lenient(header_text + b"]" + trailer, base=None, where="the header")
        except TraceFormatError:  # the keys after the events were cut off
            self._truncated_at(self.consumed + len(text), kept_all=True)
            doc = self._parse_lenient(header_text + b"]}", base=None, where="the header")
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
            _DECODER.decode(doc)
            complete = True
        except msgspec.ValidationError:
            complete = True  # well-formed; the careful path reads odd field types
        except msgspec.DecodeError as exc:
            pos = _error_byte(exc)
            complete = not (pos is None or pos >= len(doc) - 1)  # an error mid-text is not a cut
        if complete:
            self._consume_piece(body, final=True)
            if not array_form or getattr(self.stream, "cut_short", False):
                self._truncated_at(self.consumed + len(body), kept_all=True)
            return
        end = len(body)
        while True:
            cut = _last_cut(body[:end])
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
                f"{where}; {self.total_events:,} complete events before the cut "
                "(without --strict they load, with a warning)",
            )
        self.truncated = (offset, self.total_events)
        self.truncation_note = f"{where}: {self.total_events:,} complete events kept"

    def _consume_piece(self, piece: bytes | memoryview, *, final: bool) -> bool:
        """Decode ``[piece]`` and add its events; False when it does not end between events."""
        doc = b"".join((b"[", piece, b"]"))
        try:
            events = _DECODER.decode(doc)
        except msgspec.ValidationError:
            pass  # some field has an unexpected type: take the careful path below
        except msgspec.DecodeError as exc:
            pos = _error_byte(exc)
            ends_early = pos is None or pos >= len(doc) - 1
            if ends_early and not final:
                return False
        else:
            self._add_events(events, typed_doc=doc)
            return True
        self._add_events(list(self._parse_lenient(doc, self.total_events, "events")))
        return True

    def _parse_lenient(self, doc: bytes, base: int | None, where: str) -> Any:
        """orjson, else Python's json (which also reads NaN/Infinity), else a clear error."""
        try:
            return orjson.loads(doc)
        except orjson.JSONDecodeError:
            pass
        try:
            return json.loads(doc)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            pos = getattr(exc, "pos", None)
            after = f" (after event #{base - 1})" if base else ""
            at = f" at byte {self.consumed + pos}" if pos is not None else ""
            msg = getattr(exc, "msg", str(exc))
            problem = f"invalid JSON in {where}{at}{after}: {msg}"
            raise TraceFormatError(self.path, problem) from None

    def _raise_json_error(self, text: bytes, problem: str) -> None:
        self._parse_lenient(text, self.total_events, "events")
        raise TraceFormatError(self.path, problem)

    # - converting events -

    def _add_events(self, events: list[Any], typed_doc: bytes | None = None) -> None:
        """Add decoded events to the frames: typed structs decoded from ``typed_doc``, or
        plain JSON values (``typed_doc`` None)."""
        if not events:
            return
        base = self.total_events
        self.total_events += len(events)
        if typed_doc is not None:
            block = _Block.from_structs(events, base, shapes=b'"Input Dims"' in typed_doc)
            if "C" in block.ph:  # counters carry arbitrary args: read this block generically
                generic = self._parse_lenient(typed_doc, base, "events")
                block.counters = _Block.from_dicts(generic, 0).counters
            if self.raw_args:
                block.args_json = [
                    bytes(e.args).decode() if len(e.args) else None
                    for e in _RAW_ARGS_DECODER.decode(typed_doc)
                ]
        else:
            block = _Block.from_dicts(list(events), base, keep_args=self.raw_args)
        self._add_frame(block.frame(), block.counters, base)

    def _add_frame(
        self, df: pl.DataFrame, counters: list[tuple[int, dict[str, Any]]], base: int
    ) -> None:
        df = self._validate(df)
        cat = pl.col("cat").str.to_lowercase().fill_null("")
        complete = pl.col("ph") == "X"
        device = complete & cat.is_in(list(_DEVICE_CATS))
        instant = pl.col("ph").is_in(["i", "I"])
        raw = ["args_json"] if "args_json" in df.columns else []

        kernels = df.filter(device).select(
            _to_ns("ts").alias("ts_ns"),
            _to_ns("dur").alias("dur_ns"),
            pl.col("name").fill_null(""),
            pl.col("cat"),
            cat.replace_strict(_DEVICE_CATS, default="kernel").alias("kind"),
            "pid",
            "tid",
            pl.coalesce("device", "pid").alias("device"),
            pl.coalesce("stream", "tid").alias("stream"),
            "correlation",
            "external_id",
            *raw,
        )
        events = df.filter((complete & ~device) | instant).select(
            _to_ns("ts").alias("ts_ns"),
            pl.when(instant).then(0).otherwise(_to_ns("dur")).alias("dur_ns"),
            pl.col("name").fill_null(""),
            pl.col("cat").fill_null(""),
            pl.when(instant)
            .then(pl.lit("instant"))
            .otherwise(cat.replace_strict(_EVENT_CATS, default="other"))
            .alias("kind"),
            "pid",
            "tid",
            "correlation",
            "external_id",
            *raw,
        )
        flows = df.filter(pl.col("ph").is_in(["s", "t", "f"])).select(
            _to_ns("ts").alias("ts_ns"),
            "id",
            pl.col("ph").alias("phase"),
            pl.col("cat").fill_null(""),
            "pid",
            "tid",
        )
        if "input_dims" in df.columns:
            shapes = df.filter(complete & ~device & pl.col("input_dims").is_not_null()).select(
                _to_ns("ts").alias("ts_ns"),
                _to_ns("dur").alias("dur_ns"),
                pl.col("name").fill_null(""),
                "pid",
                "tid",
                "input_dims",
            )
            if shapes.height:
                self.parts["shapes"].append(shapes.cast(SHAPE_SCHEMA))  # type: ignore[arg-type]
        meta = df.filter(pl.col("ph") == "M").select(
            pl.col("name").fill_null(""), "pid", "tid", pl.col("meta_value").alias("value")
        )
        for key, frame, schema in (
            ("kernels", kernels, KERNEL_SCHEMA),
            ("events", events, EVENT_SCHEMA),
            ("flows", flows, FLOW_SCHEMA),
            ("metadata", meta, METADATA_SCHEMA),
        ):
            if frame.height:
                self.parts[key].append(frame.cast(schema))  # type: ignore[arg-type]
        begin_end = df.filter(pl.col("ph").is_in(["B", "E"]))
        if begin_end.height:
            self.parts["begin_end"].append(begin_end)
        if counters:
            self._add_counters(df, counters, base)

    def _validate(self, df: pl.DataFrame) -> pl.DataFrame:
        """Drop (and count) unusable events; raise for unusable device activity."""
        ph = pl.col("ph")
        known = ph.is_in(list(_KNOWN_PH))
        needs_ts = known & (ph != "M")
        ts_ok = _finite("ts")
        dur_ok = _finite("dur") & (pl.col("dur") >= 0)
        complete_ok = (ph != "X") | dur_ok
        good = known & (~needs_ts | ts_ok) & complete_ok
        if df.select(good.all()).item():
            return df
        checked = df.with_columns(
            good.alias("_good"),
            pl.when(~known)
            .then(pl.lit("unsupported ph"))
            .when(needs_ts & ~ts_ok)
            .then(pl.lit("'ts' missing or not a finite number"))
            .when(pl.col("dur").is_not_null() & pl.col("dur").is_finite() & (pl.col("dur") < 0))
            .then(pl.lit("negative 'dur'"))
            .otherwise(pl.lit("'dur' missing or not a finite number"))
            .alias("_why"),
        )
        bad = checked.filter(~pl.col("_good"))
        is_device = (ph == "X") & pl.col("cat").str.to_lowercase().is_in(list(_DEVICE_CATS))
        fatal = bad.filter(is_device)
        if fatal.height:
            row = fatal.row(0, named=True)
            raise TraceFormatError(
                self.path,
                f"{row['_why']} on device activity ({row['cat']}); cannot place it in time",
                index=row["idx"],
                event=describe_event(row["ph"], row["name"]),
            )
        for why, ph_value, count in (
            bad.group_by("_why", "ph").len().sort("_why", "ph", nulls_last=True).iter_rows()
        ):
            label = f"{why} {ph_value!r}" if why == "unsupported ph" else why
            self.skipped[label] += count
        return checked.filter(pl.col("_good")).drop("_good", "_why")

    def _add_counters(
        self, df: pl.DataFrame, counters: list[tuple[int, dict[str, Any]]], base: int
    ) -> None:
        rows: list[tuple[float, str, str, float, int | None]] = []
        good = df.filter(pl.col("ph") == "C").select("idx", "ts", "name", "pid")
        lookup = {idx: (ts, name, pid) for idx, ts, name, pid in good.iter_rows()}
        for i, args in counters:
            found = lookup.get(base + i)
            if found is None:
                continue
            ts, name, pid = found
            for key, value in args.items():
                number = _number(value)
                if number is not None and math.isfinite(number):
                    rows.append((ts, name or "", str(key), number, pid))
        if rows:
            frame = pl.DataFrame(
                rows, schema=["ts", "name", "series", "value", "pid"], orient="row"
            ).select(_to_ns("ts").alias("ts_ns"), "name", "series", "value", "pid")
            self.parts["counters"].append(frame.cast(COUNTER_SCHEMA))  # type: ignore[arg-type]

    def _pair_begin_end(self) -> None:
        """Turn ``B``/``E`` pairs into complete events (matched per pid/tid, as nested)."""
        parts = self.parts.pop("begin_end")
        if not parts:
            return
        rows = pl.concat(parts).sort("idx")
        stacks: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
        complete: list[dict[str, Any]] = []
        for row in rows.iter_rows(named=True):
            key = (row["pid"], row["tid"])
            if row["ph"] == "B":
                stacks.setdefault(key, []).append(row)
            elif stacks.get(key):
                begin = stacks[key].pop()
                complete.append({**begin, "ph": "X", "dur": row["ts"] - begin["ts"]})
            else:
                self.skipped["'E' without a matching 'B'"] += 1
        unmatched = sum(len(s) for s in stacks.values())
        if unmatched:
            self.skipped["'B' without a matching 'E'"] += unmatched
        if complete:
            self._add_frame(pl.DataFrame(complete, schema=rows.schema), [], 0)

    def _drop_duplicates(self, kernels: pl.DataFrame) -> pl.DataFrame:
        """Drop identical copies of a device event (counted). Copies share ``ts_ns``, so
        only the rows of tied start times are compared, not the whole frame."""
        ts = pl.col("ts_ns")
        tied = kernels.with_row_index("_row").filter((ts == ts.shift(1)) | (ts == ts.shift(-1)))
        if tied.height == 0:
            return kernels
        copies = tied.filter(~pl.struct(pl.exclude("_row")).is_first_distinct())["_row"]
        if copies.len() == 0:
            return kernels
        self.skipped["duplicated device events (identical copies dropped)"] += copies.len()
        keep = ~pl.int_range(pl.len(), dtype=pl.UInt32).is_in(copies.implode())
        return kernels.filter(keep)

    def _finish(self, header: dict[str, Any]) -> Trace:
        self._pair_begin_end()
        if self.total_events and sum(self.skipped.values()) >= self.total_events:
            reasons = "; ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
            raise TraceFormatError(
                self.path,
                f"not a trace: none of its {self.total_events} events is usable ({reasons})",
            )
        frames: dict[str, pl.DataFrame] = {}
        schemas = {
            "kernels": KERNEL_SCHEMA,
            "events": EVENT_SCHEMA,
            "flows": FLOW_SCHEMA,
            "counters": COUNTER_SCHEMA,
            "metadata": METADATA_SCHEMA,
            "shapes": SHAPE_SCHEMA,
        }
        for key, schema in schemas.items():
            parts = self.parts.pop(key)
            # no rechunk: copying the parts into one buffer would double the peak memory
            frame = pl.concat(parts, rechunk=False) if parts else empty_frame(schema)
            del parts
            # Only device activity is sorted: the analyses need it in time order, and sorting
            # the (larger, rarely needed in order) host-side frames would raise peak memory
            # by about their size. Events, flows and counters stay in file order.
            if key == "kernels" and not frame["ts_ns"].is_sorted():
                frame = frame.sort("ts_ns", maintain_order=True)
            frames[key] = frame
        frames["kernels"] = self._drop_duplicates(frames["kernels"])

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
        meta = _meta(self.path, header, self.total_events, self.skipped, warnings_list)
        if self.truncated:
            meta = replace(meta, truncated_at=self.truncated[0])
        return Trace(meta=meta, **frames)


def _meta(
    path: str,
    header: dict[str, Any],
    events: int,
    skipped: Counter[str],
    warnings_list: tuple[str, ...],
) -> TraceMeta:
    props_raw = header.pop("deviceProperties", None)
    listed = props_raw if isinstance(props_raw, list) else []
    props = tuple(p for p in listed if isinstance(p, dict))
    gpu = next((str(p["name"]) for p in props if p.get("name")), None)
    schema = header.pop("schemaVersion", None)
    base = header.pop("baseTimeNanoseconds", None)
    is_kineto = schema is not None or props_raw is not None or "distributedInfo" in header
    return TraceMeta(
        path=path,
        format="kineto" if is_kineto else "chrome",
        schema_version=schema if isinstance(schema, int) else None,
        base_time_ns=base if isinstance(base, int) else None,
        device_properties=props,
        gpu_name=gpu,
        events=events,
        skipped_events=sum(skipped.values()),
        warnings=warnings_list,
        extra=header,
    )


def _is_protobuf(head: bytes) -> bool:
    """A Perfetto trace starts with field 1 (``packet``), length-delimited: byte 0x0A then a
    varint length, then binary; JSON starts with '{' or '[' after optional whitespace."""
    if not head.startswith(b"\x0a"):
        return False
    return head.lstrip()[:1] not in (b"{", b"[")


class _Prefixed(io.RawIOBase):
    """``prefix`` followed by the rest of ``stream``, as one readable raw stream."""

    def __init__(self, prefix: bytes, stream: BinaryIO) -> None:
        self._prefix = memoryview(prefix)
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._prefix.nbytes:
            n = min(len(buffer), self._prefix.nbytes)
            buffer[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _last_cut(buf: bytes) -> int:
    """Offset just after the last ``}`` that is followed by ``, {`` (a likely event boundary).

    The candidate is only likely: the decoder validates it (a cut inside a string or a
    nested object cannot decode, since raw JSON strings cannot hold an unescaped quote).
    """
    end = len(buf)
    while True:
        pos = buf.rfind(b"}", 0, end)
        if pos < 0:
            return -1
        if _CUT.match(buf, pos):
            return pos + 1
        end = pos


def _array_end(text: bytes) -> int | None:
    """Offset in ``text`` just past the ``]`` that closes the events array (None: no ``]``).

    ``text`` is what follows the array's opening ``[``.
    """
    doc = b"[" + text
    try:
        _DECODER.decode(doc)
        return len(text)
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as exc:
        pos = _error_byte(exc)
        if pos is not None and "trailing characters" in str(exc):
            return pos - 2
    try:  # Python's decoder tolerates NaN and stops at the array's end
        s = doc.decode("utf-8", errors="replace")
        _, end = json.JSONDecoder().raw_decode(s)
        return len(s[:end].encode("utf-8")) - 1
    except ValueError:
        return None


def _error_byte(exc: Exception) -> int | None:
    """msgspec's ``(byte N)``: N is one past the offending byte's offset."""
    match = _BYTE_POS.search(str(exc))
    return int(match.group(1)) if match else None
