"""What the two readers share: the category map, kind mapping, time conversion, the trace's
metadata from its header, and how the per-block frames become a :class:`Trace`'s frames."""

from __future__ import annotations

from collections import Counter
from typing import Any

import polars as pl

from traceview.errors import NotATraceError
from traceview.model import TraceMeta, empty_frame

TS_LIMIT_US = 9.2e15  # beyond this, microseconds no longer fit Int64 nanoseconds

# ``traceview annotate``'s overlay: its events' categories start with this, and its process
# is OVERLAY_PID + device. The loader counts them apart, so an annotated trace summarizes as
# the original did.
OVERLAY_CATEGORY = "traceview"
OVERLAY_PID = 2_000_000_000

# Chrome trace phases traceview reads (others are counted and skipped)
KNOWN_PH = frozenset("XiIBEstfCM")
# device activity by category (any case) -> kind
DEVICE_CATS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
}
# host-side categories -> kind (anything else is "other")
EVENT_CATS = {
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


def to_ns(col: str) -> pl.Expr:
    """Float microseconds -> Int64 nanoseconds, exactly: floor(us)·1000 + round(frac·1000)
    (a float64 cannot hold 5117567635320.360 µs·1000 to the ns, but holds each part)."""
    whole = pl.col(col).floor()
    frac_ns = ((pl.col(col) - whole) * 1000.0 + 0.5).floor()
    return whole.cast(pl.Int64) * 1000 + frac_ns.cast(pl.Int64)


def finite(col: str) -> pl.Expr:
    """A usable time: present, finite, and small enough for Int64 nanoseconds."""
    c = pl.col(col)
    return c.is_not_null() & c.is_finite() & (c.abs() < TS_LIMIT_US)


def assemble(
    parts: dict[str, list[pl.DataFrame]], schemas: dict[str, Any]
) -> dict[str, pl.DataFrame]:
    """Each frame from its per-block parts (empty with its schema where there are none).

    Only device activity is sorted: the analyses need it in time order, and sorting the
    (larger, rarely needed in order) host-side frames would raise peak memory by about
    their size. Events, flows and counters stay in file order. No rechunk: copying the
    parts into one buffer would double the peak memory."""
    frames: dict[str, pl.DataFrame] = {}
    for key, schema in schemas.items():
        pieces = parts.pop(key)
        frame = pl.concat(pieces, rechunk=False) if pieces else empty_frame(schema)
        del pieces
        if key == "kernels" and not frame["ts_ns"].is_sorted():
            frame = frame.sort("ts_ns", maintain_order=True)
        frames[key] = frame
    return frames


def trace_meta(
    path: str,
    header: dict[str, Any],
    events: int,
    skipped: Counter[str],
    warnings_list: tuple[str, ...],
) -> TraceMeta:
    """The trace's metadata from its top-level keys (``header``; what is left of it after
    the known keys are taken becomes ``extra``)."""
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


def events_and_header(doc: object, path: str) -> tuple[list[object], dict[str, object]]:
    """A whole JSON document's events and its other top-level keys (none for the bare
    array form). Raises NotATraceError where it is no trace: no ``traceEvents`` array (its
    keys named), a ``traceEvents`` that is not an array, a document that is a scalar."""
    if isinstance(doc, list):
        return doc, {}
    if not isinstance(doc, dict):
        raise NotATraceError(path, f"JSON is not a trace: a {type(doc).__name__}")
    events = doc.pop("traceEvents", None)
    if events is not None and not isinstance(events, list):
        kind = {dict: "an object", str: "a string", bool: "a boolean"}.get(type(events), "a number")
        raise NotATraceError(path, f"JSON is not a trace: 'traceEvents' is {kind}, not an array")
    if not isinstance(events, list):
        raise NotATraceError(
            path,
            "JSON is not a trace: no 'traceEvents' array "
            f"(top-level keys: {', '.join(sorted(map(str, doc))[:6]) or 'none'})",
        )
    return events, doc


def unreadable(exc: Exception) -> str:
    """What a column builder said of a value it could not hold (a Perfetto trace's, an
    Nsight export's): its first line, short."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return first if len(first) <= 160 else first[:157] + "..."
