"""Why the device idled: every idle interval split into host_late, launch, sync, dependency
or other (docs/metrics.md, "Where the step time went").

On the analysed device the idle intervals are the gaps in the union of all its activity.
Take an idle interval ``[i0, i1)`` that ends when activity K starts, and ``[L0, L1)`` K's
submitting call on the host (the runtime or driver call linked to K through its
correlation id: a kernel launch, a graph launch standing for every kernel of its replay, a
copy or a memset). First rule that applies:

- ``sync``: the launching thread was blocked in a synchronising call that ended inside
  ``[i0, L0]``: ``[i0, min(L1, i1))`` is sync (the GPU drained while the host waited for
  it, then the host took time to issue more work), the rest ``launch``;
- ``host_late``: otherwise, if ``L1 > i0``, the host had not finished submitting K when the
  GPU went idle: ``[i0, min(L1, i1))`` is host_late, the rest ``[max(L1, i0), i1)``
  ``launch`` (from submission to start);
- ``dependency``: if ``L1 <= i0`` the work was already queued and the GPU idled anyway
  (an event, another stream, a copy): the whole interval;
- ``other``: K has no linked submitting call, or it lies on a thread the trace lacks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

from traceview.analysis.base.intervals import I64, Union, distinct
from traceview.model import Trace

CAUSES = ("host_late", "launch", "sync", "dependency", "other")
# Beyond this, a kernel starting before its launch (or a wait returning before its work)
# is no jitter: CUPTI's conversion of GPU timestamps to the CPU clock and Kineto's whole
# microseconds (older versions) leave a few µs; this is a few times that, and a fifth of the
# shortest idle interval traceview lists one by one (50 µs), so a shift within it moves no
# listed interval's split by more than a fifth of its length. A wait that returns within it
# of the device going idle is the wait the idle follows.
CLOCK_JITTER_NS = 10_000
CHUNK = 1 << 16  # kernels per time slice when sharing busy time among families
# calls that block the host until the device has drained (a blocking copy included:
# ROCm's PyTorch copies a tensor to the host with hipMemcpyWithStream, where CUDA's issues
# cudaMemcpyAsync and cudaStreamSynchronize)
SYNC = re.compile(
    r"Synchronize|^(cuda|hip)Memcpy(WithStream|2D|DtoH|D2H)?(_v\d+)?$"
    r"|^cuMemcpy(DtoH)?(_v\d+)?$"
)


# a host thread as one int64: pid in the high half, tid in the low (-1 where absent)
THREAD_KEY = (
    pl.col("pid").cast(pl.Int64).fill_null(-1) * (1 << 32)
    + pl.col("tid").cast(pl.Int64).fill_null(-1)
).alias("thread")


def _ids_at(correlation: pl.Series, rows: np.ndarray) -> I64:
    """The correlation ids at ``rows``: int64, -1 where none."""
    picked = correlation.gather(rows).fill_null(-1)
    return picked.to_numpy().astype(np.int64, copy=False)


@dataclass(frozen=True)
class Calls:
    """The trace's host calls that may submit device work: their rows in ``trace.events``
    (runtime or driver calls with a correlation id) and those ids, read once, ordered by
    id and then by the call's start (so an id's first row is its earliest call)."""

    rows: np.ndarray  # int32 where the events allow
    correlation: I64

    @classmethod
    def of(cls, trace: Trace) -> Calls:
        ev = trace.events
        kinds = ev["event_kind"].dtype
        assert isinstance(kinds, pl.Enum)
        codes = [kinds.categories.to_list().index(k) for k in ("runtime", "driver")]
        rows = np.flatnonzero(
            np.isin(ev["event_kind"].to_physical().to_numpy(), codes)
            & ev["correlation"].is_not_null().to_numpy()
        )
        if ev.height < np.iinfo(np.int32).max:  # a launch per kernel: 4 bytes each saved
            rows = rows.astype(np.int32)
        corr = ev["correlation"].gather(rows).to_numpy().astype(np.int64)
        order = np.lexsort((ev["ts_ns"].gather(rows).to_numpy(), corr))
        return cls(rows[order], corr[order])


def launches_of(trace: Trace, calls: Calls, wanted: I64) -> tuple[I64, I64, I64, I64]:
    """The host calls linked to the correlation ids ``wanted``, sorted by correlation id
    (the earliest call where several share one): ``correlation``, ``l0``, ``l1`` and a
    thread key (pid, tid as one int64), as arrays. Each wanted id is looked up in the calls'
    sorted ids, then the matching rows gathered: a trace's launches can be millions, and
    neither a polars filter over them (~150 MB more at the summary's peak) nor an array per
    call is made here."""
    ids = distinct(wanted[wanted >= 0])
    none = np.zeros(0, dtype=np.int64)
    if ids.size == 0 or calls.rows.size == 0:
        return none, none, none, none
    at = np.searchsorted(calls.correlation, ids)  # the id's first, earliest call
    found = at < calls.correlation.size
    found[found] = calls.correlation[at[found]] == ids[found]
    c, at = ids[found], at[found]
    if c.size == 0:
        return none, none, none, none
    # gather the rows first: the thread key over every event would be a column per event
    picked = trace.events.select("ts_ns", "dur_ns", "pid", "tid")[calls.rows[at]]
    picked = picked.select("ts_ns", "dur_ns", THREAD_KEY)
    l0 = picked["ts_ns"].to_numpy().astype(np.int64)
    l1 = l0 + picked["dur_ns"].to_numpy()
    return c, l0, l1, picked["thread"].to_numpy()


def _sync_ends(trace: Trace) -> dict[int, I64]:
    """Per host thread (pid, tid as one int64), the sorted end times of its synchronising
    calls."""
    calls = trace.events.lazy().filter(pl.col("event_kind").is_in(["runtime", "driver"]))
    names = [str(n) for n in calls.select(pl.col("name").unique()).collect()["name"].to_list()]
    sync = [n for n in names if SYNC.search(n)]
    if not sync:
        return {}
    ends = (
        calls.filter(pl.col("name").cast(pl.String).is_in(sync))
        .select(THREAD_KEY, (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"))
        .collect()
        .sort("thread", "end")
    )
    return {
        int(thread): g["end"].to_numpy().astype(np.int64)
        for (thread,), g in ends.group_by(["thread"], maintain_order=True)
    }


GAP_CHUNK = 1 << 16  # idle intervals split at a time: the arrays per gap stay bounded


def _split_in_slices(
    trace: Trace,
    host: HostCalls,
    ts: I64,
    correlation: pl.Series,
    starts: I64,
    ends: I64,
    within: tuple[I64, I64] | None = None,
) -> Iterator[tuple[int, I64, dict[str, tuple[I64, I64]]]]:
    """The idle intervals ``[starts[i], ends[i])`` split by cause :data:`GAP_CHUNK` at a
    time, never all held at once: per slice, its first index, its starts and its parts.
    ``within``: disjoint windows ``(lo, hi)`` in order; only the intervals that reach one
    are split (the starts then those intervals')."""
    for c0 in range(0, starts.size, GAP_CHUNK):
        s, e = starts[c0 : c0 + GAP_CHUNK], ends[c0 : c0 + GAP_CHUNK]
        if within is not None:
            lo, hi = within
            # [s, e) reaches the first window ending after s, if that one starts before e
            j = np.searchsorted(hi, s, side="right")
            reach = j < lo.size
            reach[reach] = lo[j[reach]] < e[reach]
            s, e = s[reach], e[reach]
            del j, reach
        if s.size:
            yield c0, s, _split(trace, host, ts, correlation, s, e)


def idle_per_window(
    trace: Trace,
    ts: I64,
    correlation: pl.Series,
    u: Union,
    lo: I64,
    hi: I64,
    host: HostCalls,
) -> dict[str, I64]:
    """Per cause, its idle time inside each window ``[lo[i], hi[i])`` (ns), the union's
    idle intervals split by cause (the module docstring). ``ts`` and ``correlation`` are
    the device's activity in time order and its correlation column; ``host`` the
    trace's host calls."""
    out = {cause: np.zeros(lo.size, dtype=np.int64) for cause in CAUSES}
    slices = _split_in_slices(trace, host, ts, correlation, u.gap_starts, u.gap_ends)
    for _, _, parts in slices:
        for cause, (s, e) in parts.items():
            if s.size:
                out[cause] += Union(s, e).clipped_lengths(lo, hi)
    return out


def _split(
    trace: Trace,
    host: HostCalls,
    ts: I64,
    correlation: pl.Series,
    gap_starts: I64,
    gap_ends: I64,
) -> dict[str, tuple[I64, I64]]:
    """One slice of idle intervals split by cause, as disjoint intervals per cause in time
    order (see :func:`idle_per_window`)."""
    i0, i1 = gap_starts.astype(np.int64), gap_ends.astype(np.int64)
    empty = np.zeros(0, dtype=np.int64)
    if i0.size == 0:
        return dict.fromkeys(CAUSES, (empty, empty))
    # the activity that ends each gap: the first to start at its end, and its host call
    corr = _ids_at(correlation, np.searchsorted(ts, i1, side="left"))
    c_corr, c_l0, c_l1, c_thread = launches_of(trace, host.calls, corr)
    at = np.searchsorted(c_corr, corr)
    at_ok = np.minimum(at, max(c_corr.size - 1, 0))
    linked = (at < c_corr.size) & (corr >= 0)
    if c_corr.size:
        linked &= c_corr[at_ok] == corr
    del at
    l0 = np.where(linked, c_l0[at_ok] if c_corr.size else -1, -1)
    l1 = np.where(linked, c_l1[at_ok] if c_corr.size else -1, -1)
    # a synchronising call on the launching thread that ended inside [i0, L0]
    synced = np.zeros(i0.size, dtype=bool)
    if host.sync_ends and c_corr.size:  # no launch linked: no gap waits on a sync
        thread = np.where(linked, c_thread[at_ok], -1)
        for key, e in host.sync_ends.items():
            mine = np.flatnonzero(linked & (thread == key))
            if mine.size == 0:
                continue
            last = np.searchsorted(e, l0[mine], side="right") - 1
            ok = last >= 0
            # within the clocks' jitter of the gap's start: a wait that returned as the
            # device went idle, read on a host clock a few µs behind
            synced[mine[ok]] = e[last[ok]] >= i0[mine[ok]] - CLOCK_JITTER_NS
    del c_corr, c_l0, c_l1, c_thread, at_ok
    late = linked & (l1 > i0)
    cut = np.minimum(np.where(late, l1, i0), i1)
    parts = {
        "sync": (late & synced, i0, cut),
        "host_late": (late & ~synced, i0, cut),
        "launch": (late & (cut < i1), cut, i1),
        "dependency": (linked & ~late, i0, i1),
        "other": (~linked, i0, i1),
    }
    out = {}
    for cause, (sel, a, b) in parts.items():
        keep = sel & (a < b)
        out[cause] = (a[keep].astype(np.int64), b[keep].astype(np.int64))
    return out


@dataclass(frozen=True)
class FamilyActivity:
    """The device's activity by family, prepared once for :meth:`busy_by_family`: its
    starts (in time order) and its last end, and per family its kernels' positions in
    ``ts`` (int32: the starts themselves would be a second copy of ``ts``) and sorted ends.
    How many of a family run at an instant is then a count: those started by it, less
    those ended by it."""

    ts: I64
    last_end: int
    families: int
    by_family: dict[int, tuple[np.ndarray, I64]]

    @classmethod
    def of(cls, ts: I64, ends: I64, codes: np.ndarray, families: int) -> FamilyActivity:
        order = None if bool(np.all(ts[1:] >= ts[:-1])) else np.argsort(ts, kind="stable")
        if order is not None:
            ts, ends, codes = ts[order], ends[order], codes[order]
        by_family = {}
        position = np.int32 if ts.size < np.iinfo(np.int32).max else np.int64
        for f in range(families):
            mine = codes == f
            if mine.any():
                by_family[f] = (np.flatnonzero(mine).astype(position), np.sort(ends[mine]))
        return cls(ts, int(ends.max(initial=0)), families, by_family)

    def busy_by_family(self, lo: I64, hi: I64, *, summed: bool = False) -> np.ndarray:
        """Busy time per window and family (:func:`_busy_by_family`); ``summed``: over
        all the windows together, as one row (no array per window: a population's gaps
        can be a million windows)."""
        return _busy_by_family(self, lo, hi, summed=summed)


def busy_by_family(
    ts: I64, ends: I64, codes: np.ndarray, families: int, lo: I64, hi: I64
) -> np.ndarray:
    """:meth:`FamilyActivity.busy_by_family` of the given activity."""
    return FamilyActivity.of(ts, ends, codes, families).busy_by_family(lo, hi)


def _busy_by_family(
    activity: FamilyActivity, lo: I64, hi: I64, *, summed: bool = False
) -> np.ndarray:
    """Busy time per window ``[lo[i], hi[i])`` (disjoint, in order) and family code, where
    each instant is shared equally among the families running then, so a window's families
    add up to its busy time exactly (ns, int64; the rounding remainder goes to the window's
    largest family). Shape: (windows, families), or (1, families) ``summed``."""
    ts, families = activity.ts, activity.families
    sorted_by_family = activity.by_family
    points = np.sort(np.concatenate((lo, hi)))
    rows = 1 if summed else lo.size
    out = np.zeros((rows, families), dtype=np.float64)
    busy_f = np.zeros(rows, dtype=np.float64)
    first, last = (
        int(min(ts.min(initial=lo.min()), lo.min())),
        max(activity.last_end, int(hi.max())),
    )
    # time slices of about CHUNK kernels each: the segment bounds of one slice at a time
    cuts = [first, *np.sort(ts[CHUNK::CHUNK]).tolist(), last]
    for t_a, t_b in zip(cuts[:-1], cuts[1:], strict=True):
        # a slice that no window reaches adds nothing
        if t_b <= t_a or np.searchsorted(lo, t_b) == np.searchsorted(hi, t_a, side="right"):
            continue
        bounds = distinct(
            np.concatenate(
                (
                    [t_a, t_b],
                    ts[np.searchsorted(ts, t_a) : np.searchsorted(ts, t_b)],
                    *(
                        stops[np.searchsorted(stops, t_a) : np.searchsorted(stops, t_b)]
                        for _, stops in sorted_by_family.values()
                    ),
                    points[np.searchsorted(points, t_a) : np.searchsorted(points, t_b)],
                )
            )
        )
        seg_len = np.diff(bounds)
        seg_lo = bounds[:-1]
        first_lo, last_lo = seg_lo[0], seg_lo[-1]
        running = {}
        n = np.zeros(seg_lo.size, dtype=np.int16)  # families running in each segment
        # a family's kernels running at each segment's start: those started before the
        # slice, less those ended before it, then a running sum of the starts and ends
        # inside it (each is a segment bound)
        in_a, in_b = np.searchsorted(ts, t_a), np.searchsorted(ts, t_b)
        for f, (positions, stops) in sorted_by_family.items():
            p0, p1 = np.searchsorted(positions, in_a), np.searchsorted(positions, in_b)
            q0, q1 = np.searchsorted(stops, t_a), np.searchsorted(stops, t_b)
            delta = np.bincount(
                np.searchsorted(seg_lo, ts[positions[p0:p1]]), minlength=seg_lo.size
            )
            delta -= np.bincount(np.searchsorted(seg_lo, stops[q0:q1]), minlength=seg_lo.size)
            count = int(p0 - q0) + np.cumsum(delta)
            running[f] = count > 0
            n += running[f]
        window = _search_within(lo, seg_lo, first_lo, last_lo, "right") - 1
        inside = (window >= 0) & (seg_lo < hi[np.clip(window, 0, None)]) & (n > 0)
        if summed:
            window[:] = 0
        share = seg_len / np.maximum(n, 1)
        for f, on in running.items():
            sel = inside & on
            out[:, f] += np.bincount(window[sel], weights=share[sel], minlength=rows)
        busy_f += np.bincount(window[inside], weights=seg_len[inside], minlength=rows)
    busy = np.rint(busy_f).astype(np.int64)
    whole = np.floor(out).astype(np.int64)
    rest = busy - whole.sum(axis=1)
    whole[np.arange(rows), np.argmax(out, axis=1)] += rest
    return whole


def _search_within(
    haystack: np.ndarray,
    needles: np.ndarray,
    low: int | np.integer,
    high: int | np.integer,
    side: Literal["left", "right"],
) -> np.ndarray:
    """``np.searchsorted(haystack, needles, side)`` for sorted ``needles`` that all lie in
    ``[low, high]``: the search runs over the part of ``haystack`` between those two only
    (a slice of time searches its own values, not the trace's million)."""
    i0 = int(np.searchsorted(haystack, low, side=side))
    i1 = int(np.searchsorted(haystack, high, side=side))
    return i0 + np.searchsorted(haystack[i0:i1], needles, side=side)


@dataclass(frozen=True)
class HostCalls:
    """What the split reads from the host, once per trace: the submitting calls and, per
    thread, the synchronising calls' ends."""

    calls: Calls
    sync_ends: dict[int, I64]

    @classmethod
    def of(cls, trace: Trace) -> HostCalls:
        return cls(Calls.of(trace), _sync_ends(trace))


def idle_in_windows(
    trace: Trace,
    ts: I64,
    correlation: pl.Series,
    u: Union,
    lo: I64,
    hi: I64,
    host: HostCalls | None = None,
) -> dict[str, int]:
    """Per cause, its idle time inside the disjoint windows ``[lo[i], hi[i])`` (in order),
    added up: only the union's idle intervals that reach a window are split. ``host``: the
    trace's host calls, where the caller has read them already."""
    out = dict.fromkeys(CAUSES, 0)
    host = host or HostCalls.of(trace)
    slices = _split_in_slices(
        trace, host, ts, correlation, u.gap_starts, u.gap_ends, within=(lo, hi)
    )
    for _, _, parts in slices:
        for cause, (s, e) in parts.items():
            if s.size:
                out[cause] += int(Union(s, e).clipped_lengths(lo, hi).sum())
    return out


LONG_IDLE_NS = 50_000  # idle intervals at least this long are listed one by one


IDLE_SCHEMA = pl.Schema(
    {
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "cause": pl.String,
        **{f"{cause}_ns": pl.Int64 for cause in CAUSES},
    }
)


def long_idle(
    trace: Trace,
    ts: I64,
    correlation: pl.Series,
    u: Union,
    host: HostCalls,
    min_ns: int = LONG_IDLE_NS,
    *,
    split: bool = True,
) -> pl.DataFrame:
    """Each idle interval of the union at least ``min_ns`` long, split by cause:
    ``start_ns``, ``end_ns``, ``cause`` (the cause with the most of its time; the first in
    :data:`CAUSES` order on a tie) and one ``<cause>_ns`` column per cause (Int64), which
    add up to its length. ``split`` False (the host's and the device's clocks disagree):
    the intervals with their cause and its columns null."""
    keep = (u.gap_ends - u.gap_starts) >= min_ns
    starts, ends = u.gap_starts[keep].astype(np.int64), u.gap_ends[keep].astype(np.int64)
    del keep
    if not split:
        return pl.DataFrame(
            {
                "start_ns": starts,
                "end_ns": ends,
                "cause": pl.Series([None] * starts.size, dtype=pl.String),
                **{f"{c}_ns": pl.Series([None] * starts.size, dtype=pl.Int64) for c in CAUSES},
            },
            schema=IDLE_SCHEMA,
        )
    by_cause = np.zeros((len(CAUSES), starts.size), dtype=np.int64)
    for c0, s, parts in _split_in_slices(trace, host, ts, correlation, starts, ends):
        for row, cause in enumerate(CAUSES):
            a, b = parts[cause]
            if a.size:  # each part lies in one interval: the last to start at or before it
                at = np.searchsorted(s, a, side="right") - 1
                np.add.at(by_cause[row], c0 + at, b - a)
    top = np.argmax(by_cause, axis=0) if starts.size else np.zeros(0, dtype=np.int64)
    return pl.DataFrame(
        {
            "start_ns": starts,
            "end_ns": ends,
            "cause": [CAUSES[i] for i in top.tolist()],
            **{f"{cause}_ns": by_cause[row] for row, cause in enumerate(CAUSES)},
        },
        schema=IDLE_SCHEMA,
    )
