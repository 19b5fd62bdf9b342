"""The event model: one immutable :class:`Trace` of polars frames.

All times are ``Int64`` nanoseconds. The loader converts Kineto's float microseconds
once (``ts_ns = round(ts_us * 1000)``, computed exactly as integer + fraction); nothing
downstream sees floats or microseconds. An event's end is ``ts_ns + dur_ns`` and is
never stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

# Normalised event kinds (the frames' ``event_kind``). Device activity is the first three.
DEVICE_KINDS = ("kernel", "memcpy", "memset")
EVENT_KINDS = (
    *DEVICE_KINDS,
    "cpu_op",
    "runtime",
    "driver",
    "user_annotation",
    "gpu_user_annotation",
    "python_function",
    "instant",
    "sync",
    "other",
)
Kind = pl.Enum(list(EVENT_KINDS))
FlowPhase = pl.Enum(["s", "t", "f"])

# The category of a whole CUDA-graph replay, as an Nsight export traced at graph level
# (``nsys profile --cuda-graph-trace=graph``) records it: one interval of device activity
# (kind ``kernel``) whose kernels are not itemised. Its family is ``cuda_graph``, and it is
# a step marker: it replays the step's layers, their attention among them.
GRAPH_REPLAY = "cuda_graph"


def replays_not_itemised(n: int) -> str:
    """What the loader warns of, and a summary of such a trace repeats: ``n`` replays."""
    return (
        f"{n:,} CUDA-graph replay{'s' if n != 1 else ''} traced whole (nsys "
        "--cuda-graph-trace=graph): the kernels inside a replay are not itemised; each "
        "replay counts as device activity (busy, steps, cadence) in family cuda_graph, and no "
        "family, decode gap or idle cause inside one is seen (record with "
        "--cuda-graph-trace=node to itemise them)"
    )


# Process, thread, device and stream ids: Int32 (OS pids and tids, CUDA devices and streams
# fit), so the largest frames of a big trace hold 4 bytes per id, not 8. A trace where any
# id does not fit Int32 has them all as Int64, in every frame (:func:`wide`): never a
# truncated id. benchmarks/load.py: the 1M-kernel trace's load peak 421 -> 380 MiB.
ID = pl.Int32()
WIDE_ID = pl.Int64()
ID_COLUMNS = ("pid", "tid", "device", "stream")


def wide(schema: dict[str, pl.DataType]) -> dict[str, pl.DataType]:
    """``schema`` with its id columns as Int64 (a trace whose ids do not all fit Int32)."""
    return {k: WIDE_ID if k in ID_COLUMNS else v for k, v in schema.items()}


def narrow_ids(frames: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """``frames`` (Int64 ids) with their ids as Int32 where every id of every frame fits,
    else as they are: one id type per trace."""
    lo, hi = -(2**31), 2**31 - 1
    for frame in frames.values():
        for c in ID_COLUMNS:
            if c in frame.columns and frame.height:
                low, high = frame[c].min(), frame[c].max()
                if low is not None and (int(low) < lo or int(high) > hi):  # type: ignore[arg-type]
                    return frames
    return {k: f.cast({c: ID for c in ID_COLUMNS if c in f.columns}) for k, f in frames.items()}


KERNEL_SCHEMA: dict[str, pl.DataType] = {
    "ts_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "name": pl.Categorical(),
    "cat": pl.Categorical(),
    "event_kind": Kind,
    "pid": ID,
    "tid": ID,
    "device": ID,
    "stream": ID,
    "correlation": pl.Int64(),
    "external_id": pl.Int64(),
}
"""Columns of :attr:`Trace.kernels` (device activity: kernels, memcpy, memset).

- ``ts_ns`` (Int64, ns): start time, on the trace's own clock.
- ``dur_ns`` (Int64, ns): duration, never negative.
- ``name`` (Categorical): kernel name as written by the profiler.
- ``cat`` (Categorical): the category as written (``kernel``, ``gpu_memcpy``, ``Kernel``...).
- ``event_kind`` (Enum): ``kernel`` | ``memcpy`` | ``memset``. A step's ``kind`` (decode,
  mixed, prefill) is another thing: the steps table's.
- ``kind``: the deprecated name of ``event_kind``, the same column beside it for one
  release (:data:`DEPRECATED_COLUMNS`); not in this schema.
- ``pid``, ``tid`` (Int32; Int64 in a trace with an id beyond Int32, see :data:`ID`): the
  event's pid/tid (GPU events: pid = device, tid = stream); null where the trace wrote a
  string.
- ``device`` (Int32, as pid): ``args.device``, else pid.
- ``stream`` (Int32, as pid): ``args.stream``, else tid.
- ``correlation`` (Int64, nullable): ``args.correlation``, links a kernel to its launch.
- ``external_id`` (Int64, nullable): ``args["External id"]``, links to the CPU op.
"""

EVENT_SCHEMA: dict[str, pl.DataType] = {
    "ts_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "name": pl.Categorical(),
    "cat": pl.Categorical(),
    "event_kind": Kind,
    "pid": ID,
    "tid": ID,
    "correlation": pl.Int64(),
    "external_id": pl.Int64(),
}
"""Columns of :attr:`Trace.events` (every complete or instant event that is not device
activity: cpu_op, cuda_runtime, annotations, python_function, instants with ``dur_ns`` 0).
Same meaning as in :data:`KERNEL_SCHEMA`; ``event_kind`` is one of :data:`EVENT_KINDS`
after the device kinds."""

# Renamed columns of :attr:`Trace.kernels` and :attr:`Trace.events`, old -> new: for one
# release a trace's frames hold the old column beside the new one, the same values
# (added by :class:`Trace`; a frame column cannot warn when it is read).
DEPRECATED_COLUMNS = {"kind": "event_kind"}

SHAPE_SCHEMA: dict[str, pl.DataType] = {
    "ts_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "name": pl.Categorical(),
    "pid": ID,
    "tid": ID,
    "input_dims": pl.String(),
    "input_types": pl.String(),
    "concrete_inputs": pl.String(),
}
"""Columns of :attr:`Trace.shapes`: the host ops recorded with ``record_shapes`` (those whose
``args`` carry ``Input Dims``), in file order. ``input_dims`` is that value as JSON text
(a list of each input's dimensions, e.g. ``[[888, 8, 64], [888, 1, 64], []]``), and
``input_types`` its ``Input type`` (each input's dtype, e.g. ``["c10::BFloat16", "float",
"Scalar"]``; null where the trace has none) and ``concrete_inputs`` its ``Concrete
Inputs`` (scalar arguments' values, e.g. a convolution's stride ``"[14, 14]"``)."""

FLOW_SCHEMA: dict[str, pl.DataType] = {
    "ts_ns": pl.Int64(),
    "id": pl.Int64(),
    "phase": FlowPhase,
    "cat": pl.Categorical(),
    "pid": ID,
    "tid": ID,
    "name": pl.Categorical(),
    "enclosing": pl.Boolean(),
}
"""Columns of :attr:`Trace.flows`: one row per flow event (``ph`` s/t/f), in file order.
``id`` is the flow id (Kineto: the correlation id for ``ac2g``; ``0x…`` strings are read as
hex; null where the event has none); ``phase`` is s (start),
t (step), f (finish); ``enclosing``: the event binds to the slice enclosing it (``"bp":
"e"``) rather than the next slice that begins on its thread."""

COUNTER_SCHEMA: dict[str, pl.DataType] = {
    "ts_ns": pl.Int64(),
    "name": pl.Categorical(),
    "series": pl.String(),
    "value": pl.Float64(),
    "pid": ID,
}
"""Columns of :attr:`Trace.counters`: one row per counter value (``ph: "C"``, one row per
key of its ``args``). ``value`` is a float in the counter's own unit."""

METADATA_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.String(),
    "pid": ID,
    "tid": ID,
    "value": pl.String(),
}
"""Columns of :attr:`Trace.metadata`: ``ph: "M"`` events (``process_name``,
``thread_name``, ``process_labels``, sort indices) with their value as a string."""


def empty_frame(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """An empty frame with the given schema."""
    return pl.DataFrame(schema=schema)


@dataclass(frozen=True, slots=True)
class TraceMeta:
    """What the trace says about itself.

    Attributes:
        path: the file it was loaded from.
        format: ``"kineto"`` (a torch profiler trace) or ``"chrome"`` (any other Chrome JSON).
        schema_version: Kineto's ``schemaVersion`` (None when absent).
        base_time_ns: Kineto's ``baseTimeNanoseconds`` (None when absent).
        device_properties: the ``deviceProperties`` list as written (GPU name, SMs, memory).
        gpu_name: the first GPU's name, or None.
        events: number of entries in ``traceEvents``, all kinds, skipped ones included.
        skipped_events: entries that could not be used (counted, never silently dropped).
        warnings: one line per kind of recoverable anomaly found while loading.
        truncated_at: where a truncated trace's text ends (byte offset of the cut, in the
            decompressed JSON); None for a whole trace.
        events_end: byte offset (in the decompressed JSON) of the ``]`` that closes
            ``traceEvents``; None where there is none (a bare array without it).
        overlay_events: events of a ``traceview annotate`` overlay, not counted in
            ``events``.
        strings_cut: JSON strings longer than 64 KiB, of which only the first 64 KiB were
            kept (followed by ``…``); byte offsets then no longer match the file's text.
        extra: every other top-level key of the document (distributedInfo, versions, ...).
    """

    path: str
    format: str = "chrome"
    schema_version: int | None = None
    base_time_ns: int | None = None
    device_properties: tuple[dict[str, Any], ...] = ()
    gpu_name: str | None = None
    events: int = 0
    skipped_events: int = 0
    warnings: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    truncated_at: int | None = None
    events_end: int | None = None
    overlay_events: int = 0
    strings_cut: int = 0

    @property
    def world_size(self) -> int | None:
        """Kineto's ``distributedInfo.world_size``: the ranks of the run the trace was part
        of; None where it does not say (or says no positive count)."""
        dist = self.extra.get("distributedInfo")
        size = dist.get("world_size") if isinstance(dist, dict) else None
        return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


@dataclass(frozen=True, slots=True)
class Trace:
    """An immutable trace: metadata plus polars frames.

    Attributes:
        meta: :class:`TraceMeta`.
        kernels: device activity, sorted by ``ts_ns`` (stable); :data:`KERNEL_SCHEMA`.
        events: all other complete/instant events, in file order; :data:`EVENT_SCHEMA`.
        flows: flow events, in file order; :data:`FLOW_SCHEMA`.
        counters: counter values, in file order; :data:`COUNTER_SCHEMA`.
        metadata: ``ph: "M"`` events; :data:`METADATA_SCHEMA`.
        shapes: the input shapes of host ops, where the trace was recorded with
            ``record_shapes``; :data:`SHAPE_SCHEMA` (empty otherwise).

    Transformations (:meth:`window`, :meth:`device`) return new traces.

    ``kernels`` and ``events`` hold each deprecated column (:data:`DEPRECATED_COLUMNS`)
    beside its new one; a frame given without it gets it here.
    """

    meta: TraceMeta
    kernels: pl.DataFrame
    events: pl.DataFrame
    flows: pl.DataFrame
    counters: pl.DataFrame
    metadata: pl.DataFrame
    shapes: pl.DataFrame = field(default_factory=lambda: empty_frame(SHAPE_SCHEMA))

    def __post_init__(self) -> None:
        for name in ("kernels", "events"):
            frame: pl.DataFrame = getattr(self, name)
            old = [
                pl.col(new).alias(old)
                for old, new in DEPRECATED_COLUMNS.items()
                if new in frame.columns and old not in frame.columns
            ]
            if old:  # the same column under its old name (no copy of its values)
                object.__setattr__(self, name, frame.with_columns(old))

    @property
    def devices(self) -> list[int]:
        """Devices that ran at least one kernel, ascending."""
        return sorted(self.kernels["device"].drop_nulls().unique().to_list())

    @property
    def streams(self) -> list[tuple[int, int]]:
        """``(device, stream)`` pairs that carry device activity, ascending."""
        pairs = self.kernels.select("device", "stream").unique().drop_nulls()
        return sorted(pairs.iter_rows())

    def bounds_ns(self) -> tuple[int, int] | None:
        """``(first start, last end)`` over device activity, else over all events, in ns on
        the trace's clock (None for a trace without either); every device's, start-up
        included (a summary's ``span_ns`` is a length, over the analysed device's)."""
        for frame in (self.kernels, self.events):
            if frame.height:
                row = frame.select(
                    pl.col("ts_ns").min().alias("a"),
                    (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("b"),
                ).row(0)
                return int(row[0]), int(row[1])
        return None

    def span_ns(self) -> tuple[int, int] | None:
        """Deprecated: the pair :meth:`bounds_ns` gives (``span_ns`` everywhere else is a
        length: the summary's, a dataset's)."""
        import warnings

        warnings.warn(
            "Trace.span_ns() is the (start, end) pair: call Trace.bounds_ns() (span_ns in a "
            "summary or a dataset is a length)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.bounds_ns()

    def window(self, t0_ns: int, t1_ns: int, *, absolute: bool = False) -> Trace:
        """The events that start in ``[t0_ns, t1_ns)``, in ns from the trace's first device
        activity (its first event without any), as the CLI's ``--window`` counts; with
        ``absolute=True``, on the trace's own clock.

        Events are kept whole (not clipped); flows and counters are filtered the same way.

        Raises:
            UsageError: the window is empty (its end is not after its start) or holds no
                event; the message gives the trace's span.
        """
        from traceview.errors import UsageError

        span = self.bounds_ns()
        zero = 0 if absolute or span is None else span[0]
        lo, hi = t0_ns + zero, t1_ns + zero

        def keep(frame: pl.DataFrame) -> pl.DataFrame:
            return frame.filter((pl.col("ts_ns") >= lo) & (pl.col("ts_ns") < hi))

        kernels, events = keep(self.kernels), keep(self.events)
        if hi <= lo or (kernels.height == 0 and events.height == 0):
            where = "on the trace's clock" if absolute else "from the trace's start"
            spans = "" if span is None else f" (it spans {span[0] - zero}–{span[1] - zero} ns)"
            raise UsageError(
                f"{self.meta.path}: the window [{t0_ns}, {t1_ns}) ns {where} is empty{spans}"
            )
        return replace(
            self,
            kernels=kernels,
            events=events,
            flows=keep(self.flows),
            counters=keep(self.counters),
            shapes=keep(self.shapes),
        )

    def __repr__(self) -> str:
        """A few lines: the file, its GPU, what it holds, and its span (the frames
        themselves are ``trace.kernels``, ``trace.events``, …)."""
        lines = [f"Trace({self.meta.path!r})"]
        lines += [f"  {label:<9}  {value}" for label, value in self._facts()]
        return "\n".join(lines)

    def _facts(self) -> list[tuple[str, str]]:
        m, span = self.meta, self.bounds_ns()
        version = "" if m.schema_version is None else f" (schemaVersion {m.schema_version})"
        host = (
            f"{self.events.height:,} events, {self.flows.height:,} flows, "
            f"{self.counters.height:,} counters"
        )
        kernels = (
            f"{self.kernels.height:,} on {len(self.devices)} device(s), "
            f"{len(self.streams)} stream(s)"
        )
        facts = [
            ("format", m.format + version),
            ("GPU", m.gpu_name or "—"),
            ("events", f"{m.events:,} ({m.skipped_events:,} skipped)"),
            ("kernels", kernels),
            ("host", host),
            ("shapes", f"{self.shapes.height:,} ops with input shapes"),
            ("span", "—" if span is None else f"{(span[1] - span[0]) / 1e6:,.3f} ms"),
        ]
        if m.warnings:
            facts.append(("warnings", f"{len(m.warnings)} (trace.meta.warnings)"))
        return facts

    def _repr_html_(self) -> str:
        """The same facts as a small HTML table, for notebooks (every value escaped)."""
        import html

        cell = "style='text-align:left'"
        rows = "".join(
            f"<tr><th {cell}>{html.escape(k)}</th><td {cell}>{html.escape(v)}</td></tr>"
            for k, v in self._facts()
        )
        return f"<b>Trace</b> <code>{html.escape(self.meta.path)}</code><table>{rows}</table>"

    def with_wide_ids(self) -> Trace:
        """The trace with every id column as Int64 (for code that builds its own Int64 ids
        beside the trace's, as the SQL engine does)."""

        def widen(frame: pl.DataFrame) -> pl.DataFrame:
            return frame.cast({c: WIDE_ID for c in ID_COLUMNS if c in frame.columns})

        return replace(
            self,
            kernels=widen(self.kernels),
            events=widen(self.events),
            flows=widen(self.flows),
            counters=widen(self.counters),
            metadata=widen(self.metadata),
            shapes=widen(self.shapes),
        )

    def device(self, device: int) -> Trace:
        """The trace restricted to one device's activity (host events are kept)."""
        return replace(self, kernels=self.kernels.filter(pl.col("device") == device))
