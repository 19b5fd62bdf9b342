"""CUDA-graph capture and warm-up regions: engine start-up, not serving.

At start-up an engine runs its model a few times per batch size and records CUDA graphs:
vLLM names each range ``capture_{N}_{MODE}`` (``capture_8192_PIECEWISE``,
``capture_32_FULL``), SGLang ``capture_{bs}_{MODE}``, and the recording itself sits between
``cudaStreamBeginCapture`` and ``cudaStreamEndCapture`` (then ``cudaGraphInstantiate``) on the
host. The kernels seen there are warm-up runs of every batch size in turn: steps, cadence
and gaps drawn from them would be invented.

A **capture region** is one such range on a host thread (ranges that overlap are one region;
a ``cudaGraphInstantiate`` right after an end of capture belongs to it), or, where only the
GPU projection of a ``capture_*`` annotation exists, that range on its device. A kernel is
**under capture** when its launch lies in a host region on its own thread (linked through
its correlation id), or it starts on its device inside a GPU-projected region or inside the
span of the kernels so linked to one region (the kernels whose launch was not recorded).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from traceview.analysis.base.launches import launches_within, range_holding
from traceview.model import Trace

CAPTURE_ANNOTATION = re.compile(r"^capture_\d+(?:_[A-Za-z0-9_]+)?$")
BEGIN_CAPTURE = re.compile(
    r"^(cuda|hip)StreamBeginCapture(ToGraph)?(_v\d+)?$|^cuStreamBeginCapture"
)
END_CAPTURE = re.compile(r"^(cuda|hip)StreamEndCapture\w*$|^cuStreamEndCapture")
INSTANTIATE = re.compile(r"^(cuda|hip)GraphInstantiate\w*$|^cuGraphInstantiate")


RANGES = pl.Schema({"pid": pl.Int32, "tid": pl.Int32, "a0": pl.Int64, "a1": pl.Int64})


@dataclass(frozen=True)
class Capture:
    """The capture regions of a trace: how many (``regions``), per row of
    ``trace.kernels`` whether it runs under one (``mask``), and each region's
    ``(start_ns, end_ns)`` in start order (``spans``: on its host thread, or on its device
    where only the GPU projection of its annotation exists)."""

    regions: int
    mask: np.ndarray
    spans: tuple[tuple[int, int], ...] = ()

    @property
    def kernels(self) -> int:
        return int(self.mask.sum())


def _names(
    ev: pl.DataFrame, kinds: list[str], pattern: re.Pattern[str], columns: tuple[str, ...]
) -> pl.DataFrame:
    """``columns`` of the events of ``kinds`` whose name matches ``pattern``, the pattern
    tried once per distinct name (lazily: no copy of the events of those kinds)."""
    sel = ev.lazy().filter(pl.col("event_kind").is_in(kinds))
    distinct = sel.select(pl.col("name").unique()).collect()["name"].drop_nulls()
    hits = [n for n in (str(x) for x in distinct.to_list()) if pattern.search(n)]
    return (
        sel.filter(pl.col("name").cast(pl.String).is_in(hits)).select(columns).collect()
        if hits
        else ev.select(columns).clear()
    )


def _host_ranges(ev: pl.DataFrame) -> pl.DataFrame:
    """The host capture ranges (``pid``, ``tid``, ``a0``, ``a1``), overlapping ones merged."""
    rows: list[tuple[int, int, int, int]] = []
    cols = ("pid", "tid", "ts_ns", "dur_ns")
    ann = _names(ev, ["user_annotation"], CAPTURE_ANNOTATION, cols)
    for pid, tid, ts, dur in ann.iter_rows():
        rows.append((pid, tid, ts, ts + dur))
    calls = pl.concat(
        [
            _names(ev, ["runtime", "driver"], p, cols).with_columns(pl.lit(tag).alias("tag"))
            for tag, p in (("B", BEGIN_CAPTURE), ("E", END_CAPTURE), ("I", INSTANTIATE))
        ]
    ).sort("pid", "tid", "ts_ns")
    open_at: dict[tuple[int, int], int] = {}
    closed: dict[tuple[int, int], int] = {}  # the last region closed by an end of capture
    for pid, tid, ts, dur, tag in calls.select("pid", "tid", "ts_ns", "dur_ns", "tag").iter_rows():
        key = (pid, tid)
        if tag == "B":
            open_at.setdefault(key, ts)
            closed.pop(key, None)
        elif tag == "E" and key in open_at:
            rows.append((pid, tid, open_at.pop(key), ts + dur))
            closed[key] = len(rows) - 1
        elif tag == "I" and key in closed:
            p, t, a0, _ = rows[closed.pop(key)]
            rows.append((p, t, a0, ts + dur))
        elif tag == "I":
            rows.append((pid, tid, ts, ts + dur))
    end = int(ev.select((pl.col("ts_ns") + pl.col("dur_ns")).max()).item() or 0)
    rows += [(pid, tid, a0, max(end, a0 + 1)) for (pid, tid), a0 in open_at.items()]
    if not rows:
        return pl.DataFrame(
            schema={"pid": pl.Int32, "tid": pl.Int32, "a0": pl.Int64, "a1": pl.Int64}
        )
    ranges = pl.DataFrame(rows, schema=["pid", "tid", "a0", "a1"], orient="row").sort(
        "pid", "tid", "a0"
    )
    # merge overlapping ranges per thread
    new = pl.col("a0") > pl.col("a1").cum_max().shift(1).over("pid", "tid")
    return (
        ranges.with_columns(new.fill_null(True).cum_sum().over("pid", "tid").alias("_g"))
        .group_by("pid", "tid", "_g", maintain_order=True)
        .agg(pl.col("a0").min(), pl.col("a1").max())
        .drop("_g")
        .cast(RANGES)
    )


def _merged(a0: np.ndarray, a1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranges sorted by start, the overlapping ones merged."""
    order = np.argsort(a0, kind="stable")
    a0, a1 = a0[order], np.maximum.accumulate(a1[order])
    new = np.ones(a0.size, dtype=bool)
    new[1:] = a0[1:] > a1[:-1]
    last = np.append(np.flatnonzero(new)[1:] - 1, a0.size - 1)
    return a0[new], a1[last]


def capture_regions(trace: Trace) -> Capture:
    """The trace's capture regions and the kernels under them (see the module docstring)."""
    k = trace.kernels
    mask = np.zeros(k.height, dtype=bool)
    ev = trace.events
    host = _host_ranges(ev)
    cols = ("pid", "tid", "ts_ns", "dur_ns")
    gpu = _names(ev, ["gpu_user_annotation"], CAPTURE_ANNOTATION, cols).select(
        pl.col("pid").cast(pl.Int64).alias("device"),
        pl.col("ts_ns").alias("a0"),
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("a1"),
    )
    if host.height == 0 and gpu.height == 0:
        return Capture(0, mask)
    regions = host if host.height else gpu
    region_spans = tuple(
        (int(a0), int(a1)) for a0, a1 in regions.sort("a0", "a1").select("a0", "a1").iter_rows()
    )
    windows = [gpu]
    if host.height and k.height:
        corr, row = launches_within(trace, host)
        linked = pl.DataFrame({"correlation": corr, "_region": row})
        under = k.with_row_index("_k").join(linked, on="correlation", how="inner")
        mask[under["_k"].to_numpy()] = True
        spans = under.group_by("_region", "device").agg(
            pl.col("ts_ns").min().alias("a0"),
            (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("a1"),
        )
        windows.append(spans.select(pl.col("device").cast(pl.Int64), "a0", "a1"))
    dev = pl.concat(windows).sort("device", "a0")
    ts, devices = k["ts_ns"].to_numpy(), k["device"].to_numpy()
    for (device,), spans in dev.group_by("device", maintain_order=True):
        mine = np.flatnonzero(devices == device)
        a0, a1 = _merged(spans["a0"].to_numpy(), spans["a1"].to_numpy())
        at = range_holding(ts[mine], a0, a1)
        mask[mine[at >= 0]] = True
    return Capture(regions.height, mask, region_spans)
