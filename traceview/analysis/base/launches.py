"""Which host range a kernel launch comes from: the one link from a launch (a runtime event
with a correlation id) to the CPU range around it on the launching thread, shared by the
step annotations (which steps' kernels) and the record_shapes ops (which op's inputs)."""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.model import Trace


def range_holding(ts: np.ndarray, a0: np.ndarray, a1: np.ndarray) -> np.ndarray:
    """For each time in ``ts``: the last range of ``[a0, a1)`` (sorted by ``a0``) starting
    at or before it, if it has not ended by then; -1 where there is none (int32)."""
    at = np.searchsorted(a0, ts, side="right") - 1
    inside = at >= 0
    inside[inside] = ts[inside] < a1[at[inside]]
    return np.where(inside, at, -1).astype(np.int32)


def launches_within(
    trace: Trace, ranges: pl.DataFrame, kinds: tuple[str, ...] = ("runtime", "driver")
) -> tuple[np.ndarray, np.ndarray]:
    """The launches that lie inside one of ``ranges`` (``pid``, ``tid``, ``a0``, ``a1``, ns)
    on their own thread: their correlation ids and the row of ``ranges`` each falls in.
    ``kinds``: the event kinds that count as launches: runtime and driver calls
    (``cuLaunchKernel`` launches Triton's and cuBLASLt's kernels in real traces).

    A launch falls in the last range of its thread starting at or before it (the innermost,
    for nested ranges), if it starts before that range's end. Per thread, launches come in
    time order. In numpy over each thread's launch times and correlation ids: polars joins
    of the million launches of a large trace held about 140 MB more at the summary's peak.
    The rows are int32 (a frame of ranges has fewer than 2^31 rows).
    """
    corrs, rows = [], []
    ordered = ranges.with_row_index("_row").sort("a0")
    for (pid, tid), spans in ordered.group_by(["pid", "tid"], maintain_order=True):
        launches = (
            trace.events.lazy()
            .filter(
                pl.col("event_kind").is_in(kinds)
                & (pl.col("pid") == pid)
                & (pl.col("tid") == tid)
                & pl.col("correlation").is_not_null()
            )
            .select("ts_ns", "correlation")
            .collect()
        )
        if not launches["ts_ns"].is_sorted():  # a thread's launches are in time order
            launches = launches.sort("ts_ns", maintain_order=True)
        ts = launches["ts_ns"].to_numpy()
        corr = launches["correlation"].to_numpy().astype(np.int64, copy=False)
        del launches
        at = range_holding(ts, spans["a0"].to_numpy(), spans["a1"].to_numpy())
        inside = at >= 0
        del ts
        if not inside.all():
            corr, at = corr[inside], at[inside]
        corrs.append(corr)
        rows.append(spans["_row"].to_numpy().astype(np.int32)[at])
        del corr, at, inside
    if not corrs:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    if len(corrs) == 1:
        return corrs[0], rows[0]
    return np.concatenate(corrs), np.concatenate(rows)


GRAPH_LAUNCH = r"^(cuda|hip)GraphLaunch"  # a CUDA/HIP graph's replay (nsys: `_v10000` cut)


def graph_launches_without_work(trace: Trace, lo: int, hi: int) -> tuple[int, int]:
    """Graph launches starting in ``[lo, hi]`` (the analysed device's activity) whose
    correlation id no device activity has, and all graph launches there: a replay's
    records dropped by the profiler, or an Nsight export traced at graph level, which
    records no kernels of a replay. Launches at the edges of a capture are left out (their
    work may fall outside it)."""
    launches = trace.events.filter(
        pl.col("event_kind").is_in(["runtime", "driver"])
        & pl.col("name").cast(pl.String).str.contains(GRAPH_LAUNCH)
        & pl.col("correlation").is_not_null()
        & pl.col("ts_ns").is_between(lo, hi)
    ).select("correlation")
    if launches.height == 0:
        return 0, 0
    worked = trace.kernels["correlation"].drop_nulls().unique().implode()
    idle = launches.filter(~pl.col("correlation").is_in(worked)).height
    return idle, launches.height
