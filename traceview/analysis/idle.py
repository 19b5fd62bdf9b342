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
from dataclasses import dataclass

import numpy as np
import polars as pl

from traceview.analysis.intervals import I64, Union, union
from traceview.model import Trace

CAUSES = ("host_late", "launch", "sync", "dependency", "other")
# calls that block the host until the device has drained (a blocking copy included)
SYNC = re.compile(
    r"Synchronize|^(cuda|hip)Memcpy(_v\d+)?$|^(cuda|hip)Memcpy(DtoH|D2H)|^cuMemcpy(DtoH)?(_v\d+)?$"
)


@dataclass(frozen=True)
class IdleParts:
    """Per cause, its disjoint intervals ``(starts, ends)`` in ns, in time order."""

    parts: dict[str, tuple[I64, I64]]

    def per_window(self, lo: I64, hi: I64) -> dict[str, I64]:
        """Per cause, its length inside each window ``[lo[i], hi[i])`` (ns)."""
        out = {}
        for cause, (s, e) in self.parts.items():
            out[cause] = (
                union(s, e).clipped_lengths(lo, hi) if s.size else np.zeros(lo.size, dtype=np.int64)
            )
        return out


def _launches(trace: Trace, corr: np.ndarray) -> pl.DataFrame:
    """The first host call linked to each correlation id in ``corr``: ``correlation``,
    ``l0``, ``l1``, ``pid``, ``tid``."""
    wanted = pl.Series("correlation", np.unique(corr[corr >= 0]), dtype=pl.Int64)
    return (
        trace.events.lazy()
        .filter(pl.col("kind").is_in(["runtime", "driver"]) & pl.col("correlation").is_in(wanted))
        .select(
            pl.col("correlation").cast(pl.Int64),
            pl.col("ts_ns").alias("l0"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("l1"),
            "pid",
            "tid",
        )
        .sort("l0")
        .unique("correlation", keep="first")
        .collect()
    )


def _sync_ends(trace: Trace) -> dict[tuple[int, int], I64]:
    """Per host thread, the sorted end times of its synchronising calls."""
    calls = trace.events.lazy().filter(pl.col("kind").is_in(["runtime", "driver"]))
    names = [str(n) for n in calls.select(pl.col("name").unique()).collect()["name"].to_list()]
    sync = [n for n in names if SYNC.search(n)]
    if not sync:
        return {}
    ends = (
        calls.filter(pl.col("name").cast(pl.String).is_in(sync))
        .select("pid", "tid", (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"))
        .collect()
        .sort("pid", "tid", "end")
    )
    return {
        (int(pid), int(tid)): g["end"].to_numpy().astype(np.int64)
        for (pid, tid), g in ends.group_by(["pid", "tid"], maintain_order=True)
        if pid is not None and tid is not None
    }


def idle_parts(trace: Trace, ts: I64, correlation: np.ndarray, u: Union) -> IdleParts:
    """Every idle interval of the union ``u`` split by cause (the module docstring).
    ``ts`` and ``correlation`` are the device's activity in time order (correlation -1
    where there is none)."""
    i0, i1 = u.gap_starts.astype(np.int64), u.gap_ends.astype(np.int64)
    empty = np.zeros(0, dtype=np.int64)
    if i0.size == 0:
        return IdleParts(dict.fromkeys(CAUSES, (empty, empty)))
    # the activity that ends each gap: the first to start at its end
    corr = correlation[np.searchsorted(ts, i1, side="left")]
    launches = _launches(trace, corr)
    by_corr = pl.DataFrame({"correlation": corr}).join(
        launches, on="correlation", how="left", maintain_order="left"
    )
    l0 = by_corr["l0"].fill_null(-1).to_numpy()
    l1 = by_corr["l1"].fill_null(-1).to_numpy()
    linked = by_corr["l0"].is_not_null().to_numpy()
    # a synchronising call on the launching thread that ended inside [i0, L0]
    synced = np.zeros(i0.size, dtype=bool)
    ends = _sync_ends(trace)
    if ends:
        pid = by_corr["pid"].fill_null(-1).to_numpy()
        tid = by_corr["tid"].fill_null(-1).to_numpy()
        for (p, t), e in ends.items():
            mine = np.flatnonzero(linked & (pid == p) & (tid == t))
            if mine.size == 0:
                continue
            last = np.searchsorted(e, l0[mine], side="right") - 1
            ok = last >= 0
            synced[mine[ok]] = e[last[ok]] >= i0[mine[ok]]
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
    return IdleParts(out)


def busy_by_family(
    ts: I64, ends: I64, codes: np.ndarray, families: int, lo: I64, hi: I64
) -> np.ndarray:
    """Busy time per window ``[lo[i], hi[i])`` (disjoint, in order) and family code, where
    each instant is shared equally among the families running then, so a window's families
    add up to its busy time exactly (ns, int64; the rounding remainder goes to the window's
    largest family). Shape: (windows, families)."""
    bounds = np.unique(np.concatenate((ts, ends, lo, hi)))
    if bounds.size < 2:
        return np.zeros((lo.size, families), dtype=np.int64)
    seg_len = np.diff(bounds)
    seg_lo = bounds[:-1]
    del bounds
    present = [f for f in range(families) if (codes == f).any()]

    def running(f: int) -> np.ndarray:
        mine = codes == f
        starts, stops = np.sort(ts[mine]), np.sort(ends[mine])
        count = np.searchsorted(starts, seg_lo, side="right")
        count -= np.searchsorted(stops, seg_lo, side="right")
        return count > 0

    n = np.zeros(seg_lo.size, dtype=np.int16)  # families running in each segment
    for f in present:
        n += running(f)
    share = seg_len / np.maximum(n, 1)
    window = np.searchsorted(lo, seg_lo, side="right") - 1
    inside = (window >= 0) & (seg_lo < hi[np.clip(window, 0, None)]) & (n > 0)
    out = np.zeros((lo.size, families), dtype=np.float64)
    for f in present:
        sel = inside & running(f)
        out[:, f] = np.bincount(window[sel], weights=share[sel], minlength=lo.size)
    busy = np.bincount(window[inside], weights=seg_len[inside], minlength=lo.size)
    busy = np.rint(busy).astype(np.int64)
    whole = np.floor(out).astype(np.int64)
    rest = busy - whole.sum(axis=1)
    whole[np.arange(lo.size), np.argmax(out, axis=1)] += rest
    return whole
