"""Where the device's time went: each phase's span split into busy time by family (each
instant shared among the families running then) and idle time by cause, with its verdict
(``time_breakdown``, docs/metrics.md); what filled the decode gaps (``gap_fill``); the
device's activity per family for a trace of fewer than 2 steps (``timeline``)."""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass

import numpy as np
import polars as pl

from traceview.analysis.base.document import GapFill, GapStats, Phase, StepTime, TimeBreakdown
from traceview.analysis.base.intervals import Union, merge_windows, union
from traceview.analysis.timing.idle import (
    CAUSES,
    FamilyActivity,
    HostCalls,
    idle_in_windows,
)
from traceview.model import Trace


def with_fills(gaps: pl.DataFrame, stats: list[GapStats], device: DeviceActivity) -> list[GapStats]:
    """Each population's gap statistics with what filled its gaps (``filled``) and its
    widest gaps (``widest``: at or above its p99); a population holding the same gaps as
    ``all`` (the other is empty) shares its fills."""
    every = stats[0]  # the "all" population
    filled = gap_fill(gaps, every, device)
    widest = gap_fill(gaps, every, device, p99=True)
    out: list[GapStats] = [{**every, "filled": filled, "widest": widest}]
    for g in stats[1:]:
        if g["n"] == every["n"]:  # the other population is empty: the same gaps
            out.append({**g, "filled": deepcopy(filled), "widest": deepcopy(widest)})
        else:
            out.append(
                {
                    **g,
                    "filled": gap_fill(gaps, g, device),
                    "widest": gap_fill(gaps, g, device, p99=True),
                }
            )
    return out


HOST_BOUND = 0.2  # host_late + sync at least this share of a phase's span: host-bound


DEVICE_BOUND = 0.8  # busy at least this share (and not host-bound): device-bound


def verdict(span_ns: int, busy_ns: int, idle: dict[str, int] | None) -> str | None:
    """``host-bound`` when host_late plus sync is at least :data:`HOST_BOUND` of the span;
    ``device-bound`` when busy is at least :data:`DEVICE_BOUND` of it and the phase is not
    host-bound; ``balanced`` otherwise. Without the idle split (``idle`` None: the clocks
    disagree) only a busy share above :data:`DEVICE_BOUND` decides (``device-bound``: the
    idle left is below :data:`HOST_BOUND`, whatever its causes); else None."""
    if idle is None:
        return "device-bound" if span_ns > 0 and busy_ns > DEVICE_BOUND * span_ns else None
    if span_ns > 0 and idle["host_late"] + idle["sync"] >= HOST_BOUND * span_ns:
        return "host-bound"
    if span_ns > 0 and busy_ns >= DEVICE_BOUND * span_ns:
        return "device-bound"
    return "balanced"


def family_activity(kernels: pl.DataFrame, ts: np.ndarray) -> FamilyActivity:
    """The device's kernels by family, prepared once for the busy-by-family shares (``ts``:
    their starts, as read already: a frame of many chunks copies on every read)."""
    family = kernels["family"]
    assert isinstance(family.dtype, pl.Enum)
    return FamilyActivity.of(
        ts,
        ts + kernels["dur_ns"].to_numpy(),
        family.to_physical().to_numpy(),
        len(family.dtype.categories),
    )


@dataclass(frozen=True)
class DeviceActivity:
    """What the gap fills and the long idle intervals read of the analysed device, read
    out once per summary: its activity's starts (time order) and correlation ids (-1 where
    none), its union, its family names, and the host calls."""

    trace: Trace
    ts: np.ndarray
    correlation: pl.Series
    union: Union
    families: list[str]
    shares: FamilyActivity
    host: HostCalls
    split: bool = True  # the clocks agree: idle time is split by cause

    @classmethod
    def of(
        cls,
        trace: Trace,
        kernels: pl.DataFrame,
        starts: np.ndarray,
        union: Union,
        host: HostCalls,
        *,
        split: bool = True,
    ) -> DeviceActivity:
        """The analysed device's ``kernels`` (with their ``family`` Enum, in time order),
        their ``starts`` as read once, their ``union`` and the trace's host calls;
        ``split``: whether idle time is split by cause (the clocks agree)."""
        family = kernels["family"]
        assert isinstance(family.dtype, pl.Enum)
        ts = starts
        if ts.size != kernels.height:
            ts = kernels["ts_ns"].to_numpy().astype(np.int64, copy=False)
        return cls(
            trace,
            ts,
            kernels["correlation"],
            union,
            [str(x) for x in family.dtype.categories.to_list()],
            family_activity(kernels, ts),
            host,
            split,
        )


def gap_fill(
    gaps: pl.DataFrame, stats: GapStats, device: DeviceActivity, *, p99: bool = False
) -> GapFill | None:
    """What filled one population's gaps (overlaps aside), or only its widest (``p99``: at
    or above its p99): the merged windows' span, busy time by family and idle time by
    cause. In numpy over the gap table's columns: a filter of a million gaps' frame held
    ~40 MB at the summary's peak."""
    at_least = stats["p99_ns"]
    if at_least is None:
        return None
    keep = ~gaps["overlap"].to_numpy()
    if p99:
        keep &= gaps["gap_ns"].to_numpy() >= at_least
    if stats["population"] != "all":
        keep &= (gaps["population"] == stats["population"]).to_numpy()
    rows = np.flatnonzero(keep)
    del keep
    if rows.size == 0:
        return None
    w = merge_windows(gaps["start_ns"].to_numpy()[rows], gaps["end_ns"].to_numpy()[rows])
    lo, hi = w.starts, w.ends
    by_family = device.shares.busy_by_family(lo, hi, summed=True)[0]
    idle = (
        idle_in_windows(
            device.trace, device.ts, device.correlation, device.union, lo, hi, device.host
        )
        if device.split
        else None
    )
    return {
        "gaps": int(rows.size),
        "span_ns": int((hi - lo).sum()),
        "busy_ns": int(by_family.sum()),
        "busy_by_family": family_ns(device.families, by_family),
        "idle_ns": idle,
    }


def time_breakdown(
    table: pl.DataFrame, phases: list[Phase], kernels: pl.DataFrame, activity: FamilyActivity
) -> list[TimeBreakdown]:
    """Per phase: its span, busy time by family (each instant shared equally among the
    families running then) and idle time by cause, summed from its steps, and the verdict."""
    if not phases:
        return []
    family = kernels["family"]
    assert isinstance(family.dtype, pl.Enum)
    names = [str(x) for x in family.dtype.categories.to_list()]
    lo = np.array([p["start_ns"] for p in phases], dtype=np.int64)
    hi = np.array([p["end_ns"] for p in phases], dtype=np.int64)
    by_family = activity.busy_by_family(lo, hi)
    out: list[TimeBreakdown] = []
    for i, p in enumerate(phases):
        spent = step_time(table.slice(p["first_step"], p["steps"]))
        out.append(
            {
                "kind": p["kind"],
                "first_step": p["first_step"],
                "last_step": p["last_step"],
                "steps": p["steps"],
                "span_ns": spent["span_ns"],  # the steps tile the phase's span
                "busy_ns": spent["busy_ns"],
                "busy_by_family": family_ns(names, by_family[i]),
                "idle_ns": spent["idle_ns"],
                "verdict": spent["verdict"],
            }
        )
    return out


def step_time(steps: pl.DataFrame) -> StepTime:
    """Where the steps' time went, summed over them: their span, busy time, idle time by
    cause (None where the steps' split is null: the clocks disagree) and the verdict."""
    span = int((steps["end_ns"] - steps["start_ns"]).sum())
    busy = int(steps["busy_ns"].sum())
    unsplit = any(steps[f"idle_{c}_ns"].null_count() for c in CAUSES)
    idle = None if unsplit else {c: int(steps[f"idle_{c}_ns"].sum()) for c in CAUSES}
    return {"span_ns": span, "busy_ns": busy, "idle_ns": idle, "verdict": verdict(span, busy, idle)}


def family_ns(names: list[str], values: np.ndarray) -> dict[str, int]:
    """Busy time per family code as {family: ns}, largest first, families with none left
    out."""
    fams = {names[f]: int(v) for f, v in enumerate(values) if v}
    return dict(sorted(fams.items(), key=lambda x: (-x[1], x[0])))


TIMELINE_RESOLUTION = 4000  # a timeline's gaps shorter than its span over this are closed


def timeline(kernels: pl.DataFrame, start_ns: int, end_ns: int) -> pl.DataFrame:
    """Per family (by kernel time, largest first), the union of its kernels' intervals,
    gaps shorter than the span / :data:`TIMELINE_RESOLUTION` closed (a chart cannot show
    them, and a step of a million kernels stays a few thousand bars). In numpy over the
    family codes: no copy of the kernels' frame per family."""
    close = max((end_ns - start_ns) // TIMELINE_RESOLUTION, 0)
    schema = {"family": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64}
    if kernels.height == 0:
        return pl.DataFrame(schema=schema)
    family = kernels["family"]
    if not isinstance(family.dtype, pl.Enum):  # the step finder's kernels carry an Enum
        family = family.cast(pl.String).cast(pl.Enum(sorted(family.cast(pl.String).unique())))
    assert isinstance(family.dtype, pl.Enum)
    names = [str(x) for x in family.dtype.categories.to_list()]
    code = family.to_physical().to_numpy()
    ts = kernels["ts_ns"].to_numpy().astype(np.int64, copy=False)
    dur = kernels["dur_ns"].to_numpy()
    totals = np.bincount(code, weights=dur, minlength=len(names))
    ends = ts + dur
    del dur
    frames = []
    for c in sorted(np.flatnonzero(totals > 0), key=lambda c: (-totals[c], names[c])):
        mine = code == c
        u = union(ts[mine] - close, ends[mine])
        frames.append(
            pl.DataFrame(
                {
                    "family": [names[c]] * u.starts.size,
                    "start_ns": np.maximum(u.starts + close, start_ns),
                    "end_ns": u.ends,
                },
                schema=schema,
            )
        )
    # device activity that all lasts 0 ns (one memset) has no family with time
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)
