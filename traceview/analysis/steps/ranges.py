"""The engine's per-step annotation ranges as the step finder and the host side of each
step read them: which ranges are step annotations, and which of them describe one step."""

from __future__ import annotations

import polars as pl

from traceview.analysis.steps.records import STEP_ANNOTATION
from traceview.model import Trace


def step_ranges(trace: Trace) -> pl.DataFrame | None:
    """The trace's per-step annotations, CPU and GPU-projected: ``name``, ``event_kind``, ``pid``,
    ``tid``, ``a0``, ``a1`` (ns); None if it has none. An engine's own step ranges win over
    torch.profiler's iterations, which may hold many engine steps (a benchmark loop
    profiled as one ProfilerStep)."""
    ev = trace.events
    ann = ev.filter(pl.col("event_kind").is_in(["user_annotation", "gpu_user_annotation"]))
    ann = ann.filter(pl.col("name").cast(pl.String).str.contains(STEP_ANNOTATION.pattern))
    if ann.height == 0:
        return None
    engine = ~pl.col("name").cast(pl.String).str.starts_with("ProfilerStep#")
    if ann.select(engine.any()).item():
        ann = ann.filter(engine)
    return ann.select(
        pl.col("name").cast(pl.String),
        "event_kind",
        "pid",
        "tid",
        pl.col("ts_ns").alias("a0"),
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("a1"),
    )


SAME_STEP_OVERLAP = 0.5  # ranges sharing this much of the shorter one's time are one step


def step_clusters(spans: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Step ranges (per ``by`` group) that describe one step, as one: ``a0``, ``a1`` (the
    union's bounds) and ``names`` (the distinct names, outermost first).

    Two ranges are one step when they share at least half of the shorter one's time:
    SGLang's ``execute_…`` around its ``step[…]``, or one range projected once per stream.
    Consecutive steps whose ranges merely touch or overlap a little (asynchronous
    scheduling, a range projected on a slow stream) stay apart."""
    spans = spans.sort([*by, "a0", pl.col("a1")], descending=[False] * len(by) + [False, True])
    keys = spans.select(by).rows() if by else [()] * spans.height
    cluster = []
    current_key: tuple[object, ...] | None = None
    c0 = c1 = 0
    n = -1
    for key, a0, a1 in zip(keys, spans["a0"].to_list(), spans["a1"].to_list(), strict=True):
        shared = min(a1, c1) - max(a0, c0)
        shorter = max(min(a1 - a0, c1 - c0), 1)
        if key == current_key and n >= 0 and shared >= SAME_STEP_OVERLAP * shorter:
            c0, c1 = min(c0, a0), max(c1, a1)
        else:
            n, current_key, c0, c1 = n + 1, key, a0, a1
        cluster.append(n)
    spans = spans.with_columns(pl.Series("_c", cluster, dtype=pl.Int64))
    return (
        spans.group_by([*by, "_c"])
        .agg(
            pl.col("a0").min(),
            pl.col("a1").max(),
            pl.col("name").unique(maintain_order=True).alias("names"),
        )
        .drop("_c")
        .sort("a0")
        .with_row_index("cid")
    )
