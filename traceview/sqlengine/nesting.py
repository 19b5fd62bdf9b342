"""Slice nesting for the embedded SQL engine: each slice's ``depth`` and ``parent_id`` on its
track, as Perfetto's slice tracker nests complete events (docs/sql.md). Runs of a track
whose slices nest are placed in numpy; only the runs that spill go through the tracker one
slice at a time."""

from __future__ import annotations

import numpy as np
import polars as pl


def nesting(slices: pl.DataFrame, next_track: int) -> tuple[pl.DataFrame, dict[int, int]]:
    """``depth`` and ``parent_id`` of each slice on its track, as Perfetto's slice tracker
    nests complete events: in start order (the longer first on a tie), a slice closes when
    the next begins at or after its end (two zero-length slices at one time stack), and a
    slice that begins inside the open one but ends after it cannot nest: it *spills* to an
    overflow track of the same thread (the first whose open slices it fits, else a new
    one, numbered from ``next_track``), where it starts at depth 0.

    A track falls into runs that share no time (each begins after everything before it has
    ended); the tracker starts each run afresh. Runs whose slices nest are nested in numpy
    (:func:`_nest_in_arrays`), the others slice by slice (:func:`_nest_one_by_one`); both
    give the tracker's rows.

    Returns the slices with ``depth``, ``parent_id`` and their (maybe overflow)
    ``track_id``, and the overflow tracks (track id -> the thread track it spilled from)."""
    ordered = slices.with_row_index("_pos").sort(
        ["track_id", "ts_ns", "dur_ns"], descending=[False, False, True], maintain_order=True
    )
    tracks = ordered["track_id"].to_numpy()
    ts = ordered["ts_ns"].to_numpy()
    dur = ordered["dur_ns"].to_numpy()
    ends = ts + dur
    depth = np.zeros(ordered.height, dtype=np.int64)
    parent = np.full(ordered.height, -1, dtype=np.int64)
    track = tracks.copy()
    spilled_from: dict[int, int] = {}
    cuts = np.flatnonzero(tracks[1:] != tracks[:-1]) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, ordered.height], strict=True):
        d, p, bad = nest_in_arrays(ts[lo:hi], dur[lo:hi], ends[lo:hi])
        depth[lo:hi], parent[lo:hi] = d, np.where(p >= 0, p + lo, -1)
        if not bad.any():
            continue
        # the runs that hold a slice the arrays cannot place, slice by slice
        run_starts = np.r_[
            0, np.flatnonzero(np.maximum.accumulate(ends[lo:hi])[:-1] < ts[lo + 1 : hi]) + 1
        ]
        run_ends = np.r_[run_starts[1:], hi - lo]
        which = np.unique(np.searchsorted(run_starts, np.flatnonzero(bad), side="right") - 1)
        lane_ids = [int(tracks[lo])]  # the thread's own track, then its overflows
        for r in which.tolist():
            positions = range(lo + int(run_starts[r]), lo + int(run_ends[r]))
            next_track = nest_one_by_one(
                positions, ts, dur, ends, depth, parent, track, spilled_from, next_track, lane_ids
            )
    ids = ordered["id"].to_numpy()
    parent_id = np.where(parent >= 0, ids[np.maximum(parent, 0)], -1)
    ordered = ordered.with_columns(
        pl.Series("depth", depth),
        pl.Series("parent_id", parent_id).replace(-1, None),
        pl.Series("track_id", track),
    )
    return ordered.sort("_pos").drop("_pos"), spilled_from


def nest_in_arrays(
    ts: np.ndarray, dur: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One track's depths and parents (positions in the track, -1 for none), in the
    track's order, and the slices these cannot be trusted for (their runs need the
    tracker itself).

    Where no two zero-length slices share a time, a slice is closed at a later start ``t``
    exactly when it ends at or before ``t``, so the open slices at slice i are those before
    it that end after its start: depth(i) is their number, and its parent the nearest slice
    before it one level up. That is the tracker's stack up to the first slice that ends
    after its parent (a spill) or that is a second zero-length slice at one time (they
    stack): those are flagged."""
    n = ts.size
    zero = dur == 0
    stacked = np.zeros(n, dtype=bool)  # a zero-length slice right after one at its time
    stacked[1:] = zero[1:] & zero[:-1] & (ts[1:] == ts[:-1])
    closed = np.searchsorted(np.sort(ends), ts, side="right")  # slices ended by each start
    zts = ts[zero]
    if zts.size:  # zero-length slices at a start come after it in order (or are it)
        closed -= np.searchsorted(zts, ts, side="right") - np.searchsorted(zts, ts, side="left")
    depth = np.arange(n) - closed
    parent = np.full(n, -1, dtype=np.int64)
    inner = np.flatnonzero(depth > 0)
    if inner.size == 0:
        return depth, parent, stacked
    key = depth * n + np.arange(n)  # by level, then position
    by_level = np.sort(key)
    found = np.searchsorted(by_level, (depth[inner] - 1) * n + inner) - 1
    up = by_level[np.maximum(found, 0)]
    p = up % n
    parent[inner] = p
    nests = (found >= 0) & (up // n == depth[inner] - 1) & (ends[p] > ts[inner])
    nests &= ends[inner] <= ends[p]  # else it ends after the slice it starts in: it spills
    stacked[inner[~nests]] = True
    return depth, parent, stacked


def nest_one_by_one(
    positions: range,
    ts: np.ndarray,
    dur: np.ndarray,
    ends: np.ndarray,
    depth: np.ndarray,
    parent: np.ndarray,
    track: np.ndarray,
    spilled_from: dict[int, int],
    next_track: int,
    lane_ids: list[int],
) -> int:
    """The slice tracker on one run of a track (see :func:`_nesting`), slice by slice:
    fills ``depth``, ``parent`` (positions) and ``track`` at ``positions``. ``lane_ids``
    are the thread's track and the overflow tracks it has so far (empty at a run's
    start: nothing before it is open), appended to as slices spill; returns the next
    free overflow track id."""
    start, stop = positions.start, positions.stop
    # the run as Python lists: a numpy scalar read costs ten times a list's
    t, d, e = (a[start:stop].tolist() for a in (ts, dur, ends))
    depths, parents, tracks = [0] * len(t), [-1] * len(t), [0] * len(t)
    lanes: list[list[int]] = [[] for _ in lane_ids]
    for i in range(len(t)):
        for lane, stack in enumerate(lanes):
            while stack and (
                e[stack[-1]] < t[i]
                or (e[stack[-1]] == t[i] and not (d[stack[-1]] == 0 and d[i] == 0))
            ):
                stack.pop()
            if stack and t[i] < e[stack[-1]] < e[i]:
                continue  # crosses the open slice's end: try the next lane
            depths[i] = len(stack)
            parents[i] = stack[-1] + start if stack else -1
            tracks[i] = lane_ids[lane]
            stack.append(i)
            break
        else:
            lanes.append([i])
            spilled_from[next_track] = lane_ids[0]
            lane_ids.append(next_track)
            depths[i], parents[i], tracks[i] = 0, -1, next_track
            next_track += 1
    depth[start:stop], parent[start:stop], track[start:stop] = depths, parents, tracks
    return next_track
