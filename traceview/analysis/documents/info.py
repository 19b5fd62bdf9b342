"""``info``: what a trace holds (events by category, kernels, devices, streams, span)."""

from __future__ import annotations

from typing import cast

import polars as pl

from traceview.analysis.base.document import INFO_SCHEMA, CategoryCount, DeviceFacts, InfoDocument
from traceview.model import Trace
from traceview.paths import stored


def categories(trace: Trace) -> pl.DataFrame:
    """Events per category, over every frame.

    Returns:
        DataFrame with ``frame`` (String: kernels|events|flows|counters|metadata),
        ``cat`` (String: the category; for counters and metadata, the event name),
        ``count`` (UInt32), sorted by count descending.
    """
    parts = [
        trace.kernels.select(pl.lit("kernels").alias("frame"), pl.col("cat").cast(pl.String)),
        trace.events.select(pl.lit("events").alias("frame"), pl.col("cat").cast(pl.String)),
        trace.flows.select(pl.lit("flows").alias("frame"), pl.col("cat").cast(pl.String)),
        trace.counters.select(pl.lit("counters").alias("frame"), pl.col("name").cast(pl.String)),
        trace.metadata.select(pl.lit("metadata").alias("frame"), pl.col("name").cast(pl.String)),
    ]
    frame = pl.concat([p.rename({p.columns[1]: "cat"}) for p in parts])
    return (
        frame.group_by("frame", "cat")
        .len("count")
        .sort(["count", "frame", "cat"], descending=[True, False, False])
    )


def info(trace: Trace) -> InfoDocument:
    """A plain summary of what the trace holds (the ``traceview info --json`` document).

    All times are integer nanoseconds; absent figures are None.
    """
    span = trace.bounds_ns()
    per_device = (
        trace.kernels.group_by("device")
        .agg(
            pl.len().alias("kernels"),
            pl.col("dur_ns").sum().alias("kernel_time_ns"),
            pl.col("stream").unique().sort().alias("streams"),
        )
        .sort("device")
    )
    by_kind = trace.kernels.group_by("event_kind").len().sort("event_kind").iter_rows()
    doc: InfoDocument = {
        "schema": INFO_SCHEMA,
        "path": stored(trace.meta.path),
        "format": trace.meta.format,
        "schema_version": trace.meta.schema_version,
        "gpu": trace.meta.gpu_name,
        "base_time_ns": trace.meta.base_time_ns,
        "events": trace.meta.events,
        "skipped_events": trace.meta.skipped_events,
        "warnings": list(trace.meta.warnings),
        "kernels": trace.kernels.height,
        "kernels_by_event_kind": dict(by_kind),
        "devices": cast(list[DeviceFacts], per_device.to_dicts()),
        "streams": [list(p) for p in trace.streams],
        "start_ns": span[0] if span else None,
        "end_ns": span[1] if span else None,
        "span_ns": span[1] - span[0] if span else None,
        "categories": cast(list[CategoryCount], categories(trace).to_dicts()),
        "flows": trace.flows.height,
        "counters": trace.counters.height,
    }
    doc["kernels_by_kind"] = dict(doc["kernels_by_event_kind"])  # deprecated, for one release
    return doc
