"""The host side of each step (docs/metrics.md, "Where the step time went"): the engine's
CPU step annotation that issued the step, its length (``host_step_ns``) and the time from
its start to the step's first submitting call (``host_before_gpu_ns``: scheduling and
input preparation).

A step's CPU annotation is the one (after merging the ranges that describe one step, as
the step finder does) from inside which most of the step's kernels were launched, on the
launching thread, when that annotation also launched more of this step's kernels than of
any other step's: one annotation never stands for two steps. Steps with no such annotation
(GPU-projected annotations only, bursts without annotations, a CPU capture) have nulls.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.analysis.base.launches import range_holding
from traceview.analysis.steps.candidates import DeviceKernels
from traceview.analysis.steps.ranges import step_clusters, step_ranges
from traceview.analysis.timing.idle import THREAD_KEY, HostCalls, launches_of
from traceview.model import Trace


def with_host_columns(
    table: pl.DataFrame, trace: Trace, k: DeviceKernels, host: HostCalls
) -> pl.DataFrame:
    """The steps with ``host_step_ns`` and ``host_before_gpu_ns`` (Int64, ns; null where the
    step has no CPU annotation of its own, see the module docstring). ``host``: the trace's
    submitting calls, where each kernel's launch is looked up."""
    host_step, before = _host_parts(table, trace, k, host)
    return table.with_columns(
        pl.Series("host_step_ns", host_step, dtype=pl.Int64),
        pl.Series("host_before_gpu_ns", before, dtype=pl.Int64),
    )


def _host_parts(
    table: pl.DataFrame, trace: Trace, k: DeviceKernels, host: HostCalls
) -> tuple[list[int | None], list[int | None]]:
    n = table.height
    nulls: list[int | None] = [None] * n
    ranges = step_ranges(trace)
    if ranges is None or n == 0:
        return nulls, list(nulls)
    cpu = ranges.filter(pl.col("event_kind") == "user_annotation").drop("event_kind")
    if cpu.height == 0:
        return nulls, list(nulls)
    clusters = step_clusters(cpu, ["pid", "tid"])  # row i is cluster i, in start order
    # per launching thread, its annotations' bounds (in start order) and their numbers
    threads = {
        int(key): (g["a0"].to_numpy(), g["a1"].to_numpy(), g["cid"].to_numpy())
        for (key,), g in clusters.select(THREAD_KEY, "a0", "a1", "cid").group_by(
            ["thread"], maintain_order=True
        )
    }
    lo = table["start_ns"].to_numpy().astype(np.int64, copy=False)
    hi = table["end_ns"].to_numpy().astype(np.int64, copy=False)
    c = clusters.height
    slices = []
    for c0 in range(0, k.height, CHUNK):  # per-kernel arrays one slice at a time
        key, start = _pairs(trace, host, k, c0, threads, lo, hi, c)
        slices.append(_per_pair(key, np.ones(key.size, dtype=np.int64), start))
    pairs, counts, first_call_of = _per_pair(
        *(np.concatenate([part[i] for part in slices]) for i in range(3))
    )
    if pairs.size == 0:
        return nulls, list(nulls)
    p_step, p_cid = pairs // c, pairs % c
    # each step's annotation: the one that launched most of its kernels (the earliest on a
    # tie); kept where that annotation launched most of its own kernels into this step
    by_step = np.lexsort((p_cid, -counts, p_step))
    top_of_step = by_step[np.r_[True, p_step[by_step][1:] != p_step[by_step][:-1]]]
    by_cid = np.lexsort((p_step, -counts, p_cid))
    top_of_cid = by_cid[np.r_[True, p_cid[by_cid][1:] != p_cid[by_cid][:-1]]]
    mutual = np.intersect1d(top_of_step, top_of_cid)
    best = np.full(n, -1, dtype=np.int64)
    best[p_step[mutual]] = p_cid[mutual]
    first_call = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    first_call[p_step[mutual]] = first_call_of[mutual]
    a0 = clusters["a0"].to_numpy().astype(np.int64)
    a1 = clusters["a1"].to_numpy().astype(np.int64)
    host_step: list[int | None] = list(nulls)
    before: list[int | None] = list(nulls)
    for i in np.flatnonzero(best >= 0).tolist():
        j = int(best[i])
        host_step[i] = int(a1[j] - a0[j])
        before[i] = int(first_call[i] - a0[j])
    return host_step, before


CHUNK = 1 << 18  # kernels per slice


def _pairs(
    trace: Trace,
    host: HostCalls,
    k: DeviceKernels,
    c0: int,
    threads: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]],
    lo: np.ndarray,
    hi: np.ndarray,
    clusters: int,
) -> tuple[np.ndarray, np.ndarray]:
    """For the kernels ``[c0, c0 + CHUNK)`` launched inside a CPU step annotation (the
    innermost on the launching thread; their launches looked up among the trace's
    submitting calls) and starting inside a step: the key ``step * clusters + annotation``
    of each, and its launch's start."""
    kc, known = k.correlation(c0, CHUNK)
    kern = np.flatnonzero(known)
    c_corr, c_l0, _, c_thread = launches_of(trace, host.calls, kc[kern])
    at = np.minimum(np.searchsorted(c_corr, kc[kern]), max(c_corr.size - 1, 0))
    linked = np.flatnonzero(c_corr[at] == kc[kern]) if c_corr.size else at[:0]
    kern, at = kern[linked], at[linked]
    start, thread = c_l0[at], c_thread[at]
    cid = np.full(kern.size, -1, dtype=np.int64)
    for key, (a0, a1, cids) in threads.items():
        mine = np.flatnonzero(thread == key)
        inside = range_holding(start[mine], a0, a1)
        ok = inside >= 0
        cid[mine[ok]] = cids[inside[ok]]
    ts = k.ts[c0 : c0 + CHUNK][kern]
    step = np.searchsorted(lo, ts, side="right") - 1
    ok = (step >= 0) & (cid >= 0)
    ok[ok] = ts[ok] < hi[step[ok]]
    return step[ok] * clusters + cid[ok], start[ok]


def _per_pair(
    keys: np.ndarray, counts: np.ndarray, firsts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of (key, count, first launch) reduced to one per key: counts added, the
    earliest launch kept; keys sorted."""
    if keys.size == 0:
        return keys, counts, firsts
    order = np.lexsort((firsts, keys))
    keys, counts, firsts = keys[order], counts[order], firsts[order]
    head = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return keys[head], np.add.reduceat(counts, head), firsts[head]
