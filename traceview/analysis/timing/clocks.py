"""Whether the host's clock and the device's agree, read from the trace itself
(docs/metrics.md, "Where the step time went").

The profiler stamps host calls with the CPU's clock and device activity with the GPU's,
converted to the CPU's; a bad conversion (or a trace edited by hand) shifts one against
the other. Two facts hold on every device, and each linked pair of events bounds the
shift:

- a kernel (or copy, or memset) cannot start before the call that submits it begins:
  where it does, the host clock reads ahead of the device's by at least the difference
  (one pair per submitting call: its first activity);
- a call that waits for the device cannot return before the work it waits for ends: a
  blocking copy to the host, its copy; a device synchronize, all the activity its process
  submitted before it began (on the device its ``Context Sync`` record names, else on the
  trace's only device); a stream synchronize with its ``Stream Sync`` record, the activity
  submitted before it on that stream. Where it returns first, the host clock reads behind
  by at least the difference. A stream synchronize without its record (Kineto writes them
  only when asked) is read against the copy to the host its thread submitted just before
  it (PyTorch's ``.item()``: a copy, then a synchronize of the same stream): that stream is
  inferred, not recorded, so those pairs count only where most of them (the median) show
  the shift.

A shift of up to :data:`CLOCK_JITTER_NS` is jitter: the profiler's conversion of GPU
timestamps, and traces that write whole microseconds, leave a few µs. Beyond it the
clocks disagree, and the idle split by cause (``host_late`` against ``dependency``,
decided by comparing a launch's end with the device's idle start) would be read across
the shift: traceview then leaves the split out (null) and says by how much the clocks
disagree. The measure is robust to a few mislinked pairs: the shift is the one that
:data:`ROBUST_SHARE` of the pairs, and at least :data:`ROBUST_LEAST` (all, where fewer),
show.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from traceview.analysis.base.intervals import I64
from traceview.analysis.timing.idle import CLOCK_JITTER_NS, THREAD_KEY, Calls, launches_of
from traceview.model import Trace

ROBUST_SHARE = 0.001  # the shift reported is the one this share of the pairs shows
ROBUST_LEAST = 3  # ... and at least this many (all, where fewer): one mislinked pair is none

# a copy call that returns only once its copy to the host has completed (cudaMemcpy and
# its 2D form, the driver's, HIP's with a stream): a copy to the device may return before
# its DMA ends, and an Async one returns at once
BLOCKING_COPY = re.compile(r"^((cuda|hip)Memcpy(2D)?|cuMemcpyDtoH|hipMemcpyWithStream)(_v\d+)?$")
TO_HOST = re.compile(r"DtoH|D2H|Device ?-> ?(Host|Pageable|Pinned)|DeviceToHost", re.IGNORECASE)
DEVICE_SYNC = re.compile(r"^((cuda|hip)(Device|Thread)Synchronize|cuCtxSynchronize)(_v\d+)?$")
STREAM_SYNC = re.compile(r"^((cuda|hip)StreamSynchronize|cuStreamSynchronize)(_v\d+)?$")


@dataclass(frozen=True)
class Clocks:
    """What the trace's linked pairs say of its clocks.

    Attributes:
        launches: submitting calls read against their first activity.
        early: of those, activity that starts more than :data:`CLOCK_JITTER_NS` before
            its call begins.
        ahead_ns: how far the host clock reads ahead of the device's, at least (the lead
            :data:`ROBUST_SHARE` of the pairs show); None within the jitter.
        waits: waiting calls read against the work they wait for.
        late: of those, calls that return more than :data:`CLOCK_JITTER_NS` before it ends.
        behind_ns: how far the host clock reads behind, at least; None within the jitter.
    """

    launches: int = 0
    early: int = 0
    ahead_ns: int | None = None
    waits: int = 0
    late: int = 0
    behind_ns: int | None = None

    @property
    def consistent(self) -> bool:
        """The clocks agree within the jitter: the idle split can be read."""
        return self.ahead_ns is None and self.behind_ns is None

    def warning(self) -> str | None:
        """One line for the summary's warnings; None where the clocks agree."""
        said = []
        if self.ahead_ns is not None:
            said.append(
                f"{self.early} of {self.launches} kernels start before their own launch call "
                f"begins (the host clock reads at least {_us(self.ahead_ns)} ahead of the "
                "device's)"
            )
        if self.behind_ns is not None:
            said.append(
                f"{self.late} of {self.waits} synchronising calls return before the device "
                f"work they wait for ends (the host clock reads at least {_us(self.behind_ns)} "
                "behind the device's)"
            )
        if not said:
            return None
        return (
            "host and device clocks disagree: "
            + "; ".join(said)
            + ": idle time is not split by cause (host_late, launch, sync, dependency, other "
            "are null), which the shift would misread"
        )


def _named(names: pl.Series, pattern: re.Pattern[str]) -> np.ndarray:
    """Per row, whether its name matches ``pattern``: each distinct name matched once (a
    trace's calls are millions, their names a few hundred)."""
    distinct = [str(n) for n in names.unique().drop_nulls().to_list()]
    hits = [n for n in distinct if pattern.search(n)]
    if not hits:
        return np.zeros(names.len(), dtype=bool)
    mask: np.ndarray = names.is_in(hits).fill_null(False).to_numpy()
    return mask


def _us(ns: int) -> str:
    return f"{ns / 1000:,.1f} µs"


def _shift(values: I64) -> tuple[int, int | None]:
    """How many of the pairs' overshoots exceed the jitter, and the overshoot that
    :data:`ROBUST_SHARE` of them (at least :data:`ROBUST_LEAST`, or all where fewer)
    reach, where it exceeds the jitter."""
    n = int(values.size)
    if n == 0:
        return 0, None
    rank = min(n, max(ROBUST_LEAST, math.ceil(n * ROBUST_SHARE)))
    top = int(np.partition(values, n - rank)[n - rank])
    beyond = int((values > CLOCK_JITTER_NS).sum())
    return beyond, top if top > CLOCK_JITTER_NS else None


def read_clocks(
    trace: Trace, device: int, kernels: pl.DataFrame, ts: I64, ends: I64, calls: Calls
) -> Clocks:
    """The analysed ``device``'s activity (``kernels``, in time order, and its starts and
    ends as read once) against the trace's host calls (see the module docstring)."""
    corr = kernels["correlation"].fill_null(-1).to_numpy().astype(np.int64, copy=False)
    known = np.flatnonzero(corr >= 0)
    if known.size == 0 or calls.rows.size == 0:
        return Clocks()
    ids, first = np.unique(corr[known], return_index=True)  # each id's earliest activity
    first = known[first]
    c, l0, l1, thread = launches_of(trace, calls, ids)
    if c.size == 0:
        return Clocks()
    early, ahead = _shift(l0 - ts[first[np.searchsorted(ids, c)]])
    waits = _waits(trace, device, kernels, ends, corr, calls, (ids, first), (c, l1, thread))
    late, behind = _shift(waits)
    inferred = _inferred_waits(trace, kernels, ends, calls, (ids, first))
    if behind is None and inferred.size and float(np.median(inferred)) > CLOCK_JITTER_NS:
        behind = int(np.median(inferred))
    late += int((inferred > CLOCK_JITTER_NS).sum())
    return Clocks(int(c.size), early, ahead, int(waits.size + inferred.size), late, behind)


def _inferred_waits(
    trace: Trace, kernels: pl.DataFrame, ends: I64, calls: Calls, firsts: tuple[I64, I64]
) -> I64:
    """Per stream synchronize without its record, by how much the copy to the host its
    thread submitted just before it (the last submitting call on the thread that began
    before it) ends after it returns; none where that call is no copy to the host on the
    analysed device."""
    ev = trace.events
    host = ev.filter(pl.col("event_kind").is_in(["runtime", "driver"]))
    syncs = host.filter(_named(host["name"], STREAM_SYNC))
    del host
    recorded = ev.filter(pl.col("event_kind") == "sync")["correlation"].drop_nulls()
    syncs = syncs.filter(~pl.col("correlation").is_in(recorded.implode()).fill_null(False))
    none = np.zeros(0, dtype=np.int64)
    if syncs.height == 0 or calls.rows.size == 0:
        return none
    syncs = syncs.select("ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"), THREAD_KEY)
    submitted = (
        ev.select("ts_ns", "correlation", THREAD_KEY)[calls.rows]
        .sort("thread", "ts_ns")
        .with_row_index("at")
    )
    ids, first = firsts
    to_host = pl.Series(_named(kernels["name"], TO_HOST))
    streams = kernels["stream"].fill_null(-1).to_numpy().astype(np.int64)
    out = []
    for (thread,), mine in syncs.group_by(["thread"]):
        theirs = submitted.filter(pl.col("thread") == thread)
        if theirs.height == 0:
            continue
        starts = theirs["ts_ns"].to_numpy()
        before = np.searchsorted(starts, mine["ts_ns"].to_numpy(), side="left") - 1
        ok = before >= 0
        every = theirs["correlation"].to_numpy().astype(np.int64)
        at = np.minimum(np.searchsorted(ids, every), max(ids.size - 1, 0))
        work = np.where(ids[at] == every, first[at], -1)  # each submission's activity
        k = work[before[ok]]
        on = k >= 0
        k, b = k[on], before[ok][on]
        copy = to_host.gather(k).to_numpy()
        returned = mine["end"].to_numpy()[ok][on]
        keep = copy & ~_other_stream_drained(work, b, k, returned, streams, ends)
        out.append((ends[k] - returned)[keep])
    return np.concatenate(out) if out else none


LOOK_BACK = 64  # submissions looked through for one on another stream


def _other_stream_drained(
    work: np.ndarray, before: np.ndarray, copy: np.ndarray, returned: I64, streams: I64, ends: I64
) -> np.ndarray:
    """Per inferred pair, whether the thread's latest submission on another stream than
    its copy's, before the copy, had ended when the synchronize returned: the synchronize
    may have waited for that stream (Kineto does not record which), so the pair is no
    evidence of the clocks (a copy to the host on a side stream, then a synchronize of the
    compute stream, returns before the copy ends)."""
    out = np.zeros(copy.size, dtype=bool)
    if copy.size == 0:
        return out
    placed = np.flatnonzero(work >= 0)  # the submissions with activity, in order
    # among them, where the run of one stream that each lies in starts: the one before that
    # start is the latest earlier submission on another stream (the copy is ``before``'s)
    stream = streams[work[placed]]
    run_start = np.zeros(placed.size, dtype=np.int64)
    change = np.flatnonzero(stream[1:] != stream[:-1]) + 1
    run_start[change] = change
    np.maximum.accumulate(run_start, out=run_start)
    prev = run_start[np.searchsorted(placed, before)] - 1
    j = placed[np.maximum(prev, 0)]
    seen = (prev >= 0) & (j >= before - LOOK_BACK)  # within LOOK_BACK submissions
    out[seen] = ends[work[j[seen]]] <= returned[seen]
    return out


def _waits(
    trace: Trace,
    device: int,
    kernels: pl.DataFrame,
    ends: I64,
    corr: I64,
    calls: Calls,
    firsts: tuple[I64, I64],
    linked: tuple[I64, I64, I64],
) -> I64:
    """Per waiting call, by how much the device work it waits for ends after it returns
    (negative where it returns after, as it must)."""
    ev = trace.events
    rows = calls.rows
    names = ev["name"].gather(rows)
    copying = _named(names, BLOCKING_COPY)
    syncing = _named(names, DEVICE_SYNC)
    records = ev.filter(
        (pl.col("event_kind") == "sync")
        & pl.col("name").cast(pl.String).is_in(["Context Sync", "Stream Sync"])
        & pl.col("correlation").is_not_null()
    ).select("name", "pid", "tid", "correlation")
    if not (copying.any() or syncing.any() or records.height):
        return np.zeros(0, dtype=np.int64)
    picked = ev.select("ts_ns", "dur_ns", "correlation", THREAD_KEY)[rows]
    call_ids = picked["correlation"].to_numpy().astype(np.int64)
    call_start = picked["ts_ns"].to_numpy().astype(np.int64)
    call_end = call_start + picked["dur_ns"].to_numpy().astype(np.int64)
    call_pid = picked["thread"].to_numpy() >> 32
    del picked
    out: list[I64] = []
    ids, first = firsts
    copies = np.flatnonzero(copying)
    if copies.size:  # a blocking copy to the host: its own copy, where it is on the device
        at = np.minimum(np.searchsorted(ids, call_ids[copies]), max(ids.size - 1, 0))
        on = ids[at] == call_ids[copies]
        copies, k = copies[on], first[at[on]]
        to_host = _named(kernels["name"].gather(k), TO_HOST)
        out.append((ends[k] - call_end[copies])[to_host])
    scoped: list[tuple[int, int, int, int | None]] = []  # (pid, start, end, stream)
    by_id = {int(x): j for j, x in enumerate(call_ids.tolist())}
    recorded = set()
    for name, pid, tid, cid in records.iter_rows():
        j = by_id.get(int(cid))
        if j is None or pid is None:
            continue
        recorded.add(int(cid))
        if int(pid) != device:
            continue
        stream = int(tid) if name == "Stream Sync" and tid is not None else None
        scoped.append((int(call_pid[j]), int(call_start[j]), int(call_end[j]), stream))
    if len(trace.devices) == 1:  # a device synchronize without its record: the only device
        for j in np.flatnonzero(syncing).tolist():
            if int(call_ids[j]) not in recorded:
                scoped.append((int(call_pid[j]), int(call_start[j]), int(call_end[j]), None))
    if scoped:
        c, l1, thread = linked
        # each activity's submitting call: when it ended, and its process
        at = np.minimum(np.searchsorted(c, corr), max(c.size - 1, 0))
        mine = (corr >= 0) & (c[at] == corr)
        sub_end = np.where(mine, l1[at], np.iinfo(np.int64).max)
        sub_pid = np.where(mine, thread[at] >> 32, -2)
        del at, mine
        streams = kernels["stream"].fill_null(-1).to_numpy().astype(np.int64)
        out.append(_scoped_waits(scoped, sub_end, sub_pid, ends, streams))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def _scoped_waits(
    scoped: list[tuple[int, int, int, int | None]],
    sub_end: I64,
    sub_pid: I64,
    ends: I64,
    streams: I64,
) -> I64:
    """Per synchronize (its process, start, end, stream or None for the whole device), by
    how much the last activity its process submitted before it began ends after it."""
    none = np.iinfo(np.int64).min
    out = np.full(len(scoped), none, dtype=np.int64)
    groups: dict[tuple[int, int | None], list[int]] = {}
    for i, (pid, _, _, stream) in enumerate(scoped):
        groups.setdefault((pid, stream), []).append(i)
    for (pid, stream), members in groups.items():
        sel = sub_pid == pid
        if stream is not None:
            sel &= streams == stream
        idx = np.flatnonzero(sel)
        if idx.size == 0:
            continue
        order = np.argsort(sub_end[idx], kind="stable")
        submitted = sub_end[idx][order]
        reach = np.maximum.accumulate(ends[idx][order])
        for i in members:
            _, start, end, _ = scoped[i]
            k = int(np.searchsorted(submitted, start, side="right")) - 1
            if k >= 0:
                out[i] = int(reach[k]) - end
    kept: I64 = out[out != none]
    return kept
