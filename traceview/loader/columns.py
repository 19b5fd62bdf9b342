"""Per-block columns of JSON events: the typed msgspec decoder (only the fields traceview
uses are materialised) and the careful path that coerces any JSON value, both into the
same columns, then one polars frame per block."""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson
import polars as pl

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
    input_types: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Concrete Inputs")


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
    bp: str | None = None  # flow binding point: "e" = the enclosing slice
    args: _Args = _NO_ARGS


DECODER = msgspec.json.Decoder(list[_Event])


class _RawArgsEvent(msgspec.Struct):
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)  # empty: no args


RAW_ARGS_DECODER = msgspec.json.Decoder(list[_RawArgsEvent])


class _TsText(msgspec.Struct):
    ts: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)  # empty: no ts


_TS_TEXT_DECODER = msgspec.json.Decoder(list[_TsText])

# A float64 holds microseconds to the nanosecond only below 2**43 (about 100 days): a clock
# counted from the Unix epoch (1.7e15 µs) is off by up to 125 ns. Where a block's times
# reach this far, they are read again from their text, exactly (:func:`exact_ts`).
EXACT_FROM_US = float(1 << 43)
EXACT_TS = "_ts_ns"  # a frame's column of those exact times (ns; null: read the float)


def with_exact_ts(frame: pl.DataFrame, doc: bytes) -> pl.DataFrame:
    """``frame`` (a block's, from the JSON array ``doc``) with :data:`EXACT_TS` where
    some time of it is too large for a float64 to hold to the ns and has decimals."""
    low, high = frame["ts"].min(), frame["ts"].max()
    if not any(isinstance(v, float) and EXACT_FROM_US <= abs(v) < math.inf for v in (low, high)):
        return frame
    if not _DECIMAL_TS.search(doc):  # whole microseconds: each float is exact
        return frame
    exact = exact_ts(doc, frame.height)
    return frame if exact is None else frame.with_columns(exact)


_DECIMAL_TS = re.compile(rb'"ts"\s*:\s*-?[0-9]+\.')
_TS = operator.attrgetter("ts")


def exact_ts(doc: bytes, n: int) -> pl.Series | None:
    """Each event's ``ts`` in ns, exact, from the text of ``doc`` (the JSON array of the
    ``n`` events just decoded): the whole microseconds times 1000 plus the first three
    decimals, rounded half up on the rest (what :func:`frames.to_ns` computes from an exact
    float). Null where a ``ts`` is not a plain decimal number (absent, negative, a string,
    an exponent, 17 digits or more before the point): its float stands (a time of 9.2e15
    µs or more is refused by the loader first). None where the text does not decode so."""
    try:
        texts = _TS_TEXT_DECODER.decode(doc)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if len(texts) != n:
        return None
    # one text of every ts, split by polars (no Python string per event)
    joined = b"\n".join(map(bytes, map(_TS, texts))).decode("ascii", "replace")
    del texts
    text = pl.Series("t", [joined]).str.split("\n").explode()
    if text.len() != n:  # a ts that is an array or object with a newline in it
        return None
    t = pl.col("t")
    parts = t.str.split_exact(".", 1)
    whole, frac = parts.struct.field("field_0"), parts.struct.field("field_1").fill_null("")
    plain = (
        t.str.contains(r"^[0-9]") & ~t.str.contains("e", literal=True)
        & ~t.str.contains("E", literal=True) & (whole.str.len_bytes() <= 16)
        & ((frac == "") | frac.cast(pl.Int64, strict=False).is_not_null())
    )  # fmt: skip
    ns = (
        whole.cast(pl.Int64, strict=False) * 1000
        + frac.str.slice(0, 3).str.pad_end(3, "0").cast(pl.Int64, strict=False)
        + (frac.str.slice(3, 1) >= "5").cast(pl.Int64)
    )
    return pl.DataFrame([text]).select(pl.when(plain).then(ns).alias(EXACT_TS)).to_series()


# --- per-block columns -------------------------------------------------------------------


@dataclass
class Block:
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
    bp: list[Any] = field(default_factory=list)
    device: list[Any] = field(default_factory=list)
    stream: list[Any] = field(default_factory=list)
    correlation: list[Any] = field(default_factory=list)
    external_id: list[Any] = field(default_factory=list)
    meta_value: list[Any] = field(default_factory=list)
    input_dims: list[Any] | None = None  # None: no event of the block carries Input Dims
    input_types: list[Any] | None = None  # beside input_dims: each input's dtype (JSON text)
    concrete: list[Any] | None = None  # beside input_dims: scalar inputs' values (JSON text)
    args_json: list[Any] | None = None
    counters: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    @classmethod
    def from_structs(cls, events: list[_Event], base: int, shapes: bool = False) -> Block:
        """Columns of typed events; ``shapes``: the block's text holds ``Input Dims``."""
        args = [e.args for e in events]
        ph = [e.ph for e in events]
        any_flow = "s" in ph or "f" in ph or "t" in ph
        return cls(
            base=base,
            ph=ph,
            cat=[e.cat for e in events],
            name=[e.name for e in events],
            pid=[e.pid for e in events],
            tid=[e.tid for e in events],
            ts=[e.ts for e in events],
            dur=[e.dur for e in events],
            id=_flow_ids([e.id for e in events]) if any_flow else [None] * len(events),
            bp=[e.bp for e in events] if any_flow else [None] * len(events),
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
            input_types=[bytes(a.input_types).decode() if a.input_types else None for a in args]
            if shapes
            else None,
            concrete=[bytes(a.concrete).decode() if a.concrete else None for a in args]
            if shapes
            else None,
        )

    @classmethod
    def from_dicts(cls, events: list[Any], base: int, keep_args: bool = False) -> Block:
        """The careful path: any JSON value in any field, coerced or nulled."""
        block = cls(base=base)
        for i, e in enumerate(events):
            if not isinstance(e, dict):
                e = {"ph": "<not an object>", "name": f"<{type(e).__name__}>"}
            args = e.get("args")
            if not isinstance(args, dict):
                args = {}
            ph = e.get("ph")
            block.ph.append(_text(ph) if isinstance(ph, str) else None)
            block.cat.append(_text(e.get("cat")))
            block.name.append(_text(e.get("name")))
            block.pid.append(_ident(e.get("pid")))
            block.tid.append(_ident(e.get("tid")))
            block.ts.append(as_number(e.get("ts")))
            block.dur.append(as_number(e.get("dur")))
            block.id.append(_flow_id(e.get("id")))
            bp = e.get("bp")
            block.bp.append(_text(bp) if isinstance(bp, str) else None)
            block.device.append(_place(args.get("device")))
            block.stream.append(_place(args.get("stream")))
            block.correlation.append(_integer(args.get("correlation")))
            block.external_id.append(_integer(args.get("External id")))
            block.meta_value.append(
                _meta_value(args.get("name"), args.get("labels"), args.get("sort_index"))
            )
            if ph == "C":
                block.counters.append((i, args))
            if "Input Dims" in args:
                if block.input_dims is None or block.input_types is None or block.concrete is None:
                    block.input_dims, block.input_types, block.concrete = (
                        [None] * i,
                        [None] * i,
                        [None] * i,
                    )
                block.input_dims.append(_json_text(args["Input Dims"]))
                for column, key in (
                    (block.input_types, "Input type"),
                    (block.concrete, "Concrete Inputs"),
                ):
                    value = args.get(key)
                    column.append(None if value is None else _json_text(value))
            elif (
                block.input_dims is not None
                and block.input_types is not None
                and block.concrete is not None
            ):
                block.input_dims.append(None)
                block.input_types.append(None)
                block.concrete.append(None)
        if keep_args:
            block.args_json = [
                _json_text(e["args"])
                if isinstance(e, dict) and isinstance(e.get("args"), dict)
                else None
                for e in events
            ]
        return block

    def frame(self) -> pl.DataFrame:
        n = len(self.ph)
        device = pl.Series(self.device, dtype=pl.Int64, strict=False)
        stream = pl.Series(self.stream, dtype=pl.Int64, strict=False)
        frame = pl.DataFrame(
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
                "bp": pl.Series(self.bp, dtype=pl.String),
                "device": device,
                "stream": stream,
                "correlation": pl.Series(self.correlation, dtype=pl.Int64, strict=False),
                "external_id": pl.Series(self.external_id, dtype=pl.Int64, strict=False),
                "meta_value": pl.Series(self.meta_value, dtype=pl.String, strict=False),
                **(
                    {}
                    if self.input_dims is None
                    else {
                        "input_dims": pl.Series(self.input_dims, dtype=pl.String),
                        "input_types": pl.Series(self.input_types, dtype=pl.String),
                        "concrete_inputs": pl.Series(self.concrete, dtype=pl.String),
                    }
                ),
                **(
                    {}
                    if self.args_json is None
                    else {"args_json": pl.Series(self.args_json, dtype=pl.String)}
                ),
            }
        )
        # a device or stream the trace gives that is no id (1.5, 2**70, text): where it is
        # device activity's, the loader refuses it (:func:`kinds.usable`), never its pid
        if device.null_count() != self.device.count(None) or (
            stream.null_count() != self.stream.count(None)
        ):
            said = [
                _not_an_id("device", d) or _not_an_id("stream", s)
                for d, s in zip(self.device, self.stream, strict=True)
            ]
            frame = frame.with_columns(pl.Series(NOT_AN_ID, said, dtype=pl.String))
        return frame


def _meta_value(name: Any, labels: Any, sort_index: Any) -> str | None:
    for v in (name, labels, sort_index):
        if v is not None:
            return _text(v)
    return None


# A lone UTF-16 surrogate: JSON's "\ud800" escape without its pair (Python's json reads it;
# no UTF-8 text can hold it). Shown as U+FFFD, as any UTF-8 reader shows what it cannot read.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(v: Any) -> str | None:
    if v is None:
        return None
    text = v if isinstance(v, str) else str(v)
    if text.isascii():
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


def _json_text(value: Any) -> str:
    """``value`` as JSON text (record shapes, raw args) by orjson; where a string or key
    holds a lone surrogate (orjson refuses it), each as U+FFFD, as :func:`_text` shows it."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return orjson.dumps(_replaced(value)).decode()


def _replaced(value: Any) -> Any:
    """``value`` with each lone surrogate in its strings and keys as U+FFFD."""
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, dict):
        return {_text(str(k)): _replaced(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_replaced(v) for v in value]
    return value


def as_number(v: Any) -> float | None:
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


# a device or stream the trace gives that is no Int64 id (its column is null there): the
# column says which and what it was (``'args.device' (1.5)``), null where both are ids
NOT_AN_ID = "_not_an_id"
# in a column of ids: a value Int64 refuses (so it shows as one), then the value given
_NOT_AN_ID = "<not an id>"
_INT64 = range(-(1 << 63), 1 << 63)


def _place(v: Any) -> int | str | None:
    """``args.device`` / ``args.stream``: an int (a numeric string too, as a pid is read),
    None where absent, else a value an Int64 column refuses (so :meth:`Block.frame` marks
    it), holding the value given."""
    if v is None:
        return None
    number = _ident(v) if isinstance(v, str) else _integer(v)
    return number if isinstance(number, int) and number in _INT64 else _NOT_AN_ID + _shown(v)


def _not_an_id(key: str, v: object) -> str | None:
    """What :data:`NOT_AN_ID` says of ``args.<key>`` = ``v`` as a column holds it: None
    where it is absent or an Int64 id."""
    if v is None or (isinstance(v, int) and v in _INT64):
        return None
    if isinstance(v, str) and v.startswith(_NOT_AN_ID):
        return f"'args.{key}' ({v[len(_NOT_AN_ID) :]})"
    return f"'args.{key}' ({_shown(v)})"


def _shown(v: object) -> str:
    """A value of the trace as an error message shows it: Python's repr, cut at 40."""
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _integer(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


_PLAIN_IDS = frozenset((int, type(None)))


def _flow_ids(ids: list[object]) -> list[object]:
    """:func:`_flow_id` of each; a column of ints and nulls (the usual one) is as it is."""
    if set(map(type, ids)) <= _PLAIN_IDS:
        return ids
    return [_flow_id(v) for v in ids]


def _flow_id(v: Any) -> Any:
    """A flow's ``id``: an int, or a numeric / ``0x`` string. A flow event without one is
    kept with a null id and binds to nothing, as Perfetto drops it (``id2`` scopes async
    events, not v1 flows)."""
    return _ident(v) if v is not None else None


def _ident(v: Any) -> Any:
    """pid/tid/id: ints stay ints; numeric strings become ints; other strings stay (→ null)."""
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return v
    return _integer(v) if not isinstance(v, int) else v
