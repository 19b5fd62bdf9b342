"""Steps from step-marker bursts (docs/design.md, "How steps are found"): runs of
step-marker kernels on one stream, the idle gap that ends each, the kernels that run
between two, and the boundaries :mod:`periodic` chooses among them; eager stretches and
whole CUDA-graph replays are searched apart. Also the fallback where no step marker
runs: steps as bursts of device activity between idle gaps that stand out."""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.analysis.base.intervals import I64, Union, distinct
from traceview.analysis.steps.candidates import Candidate, DeviceKernels, StepOptions
from traceview.analysis.steps.marks import BoundaryNames
from traceview.analysis.steps.periodic import Boundaries, choose_boundaries, natural_break


def _bursts(k: DeviceKernels) -> tuple[I64, I64]:
    """Runs of consecutive step-marker kernels on one stream: each run's start and its last
    marker's start (ns), in order of start. A whole CUDA-graph replay is a run of its own
    (the markers it replays are its own layers, never a neighbour's)."""
    stream = k.ids("stream")
    if stream.size and bool((stream == stream[0]).all()):
        order = None  # one stream: already in (stream, ts) order
    else:
        order = np.argsort(stream, kind="stable")  # by stream, then ts (kernels are ts-sorted)
        stream = stream[order]
    marker = k.marker if order is None else k.marker[order]
    new_run = marker.copy()
    new_run[1:] &= ~(marker[:-1] & (stream[1:] == stream[:-1]))
    if k.replay is not None:
        replay = k.replay if order is None else k.replay[order]
        new_run |= replay  # a replay starts a run, and the marker after it another
        new_run[1:] |= replay[:-1] & marker[1:]
    idx = np.flatnonzero(marker) if order is None else order[marker]
    first = np.flatnonzero(new_run[marker])  # each run's first marker, among the markers
    last = np.append(first[1:] - 1, idx.size - 1)
    start = k.ts[idx[first]]
    by_start = np.argsort(start, kind="stable")
    return start[by_start], k.ts[idx[last]][by_start]


def _replay_bursts(k: DeviceKernels, starts: I64) -> np.ndarray:
    """Per burst (by its start), whether it is a whole CUDA-graph replay."""
    if k.replay is None:
        return np.zeros(starts.size, dtype=bool)
    replayed = np.sort(k.ts[k.replay & k.marker])
    if replayed.size == 0:
        return np.zeros(starts.size, dtype=bool)
    at = np.minimum(np.searchsorted(replayed, starts), replayed.size - 1)
    out: np.ndarray = replayed[at] == starts
    return out


def _segments(replay: np.ndarray) -> list[tuple[int, int]]:
    """The bursts cut where a stretch of eager steps meets CUDA-graph replays: each
    ``[first, end)`` burst range. A whole-graph replay is one burst that holds a whole
    step's layers, while an eager step holds one burst a layer: a period cannot span both.
    An eager stretch is a run of bursts between replays (or before the first, after the
    last) of at least 2, longer than twice the usual run between two replays plus one
    (piecewise graphs run each layer's attention eagerly between their pieces)."""
    at = np.flatnonzero(replay)
    if at.size == 0 or at.size == replay.size:
        return [(0, int(replay.size))]
    between = np.diff(at) - 1
    usual = float(np.median(between)) if between.size else 0.0
    runs = (
        [(0, int(at[0]))]
        + [(int(a) + 1, int(b)) for a, b in zip(at[:-1], at[1:], strict=True)]
        + [(int(at[-1]) + 1, int(replay.size))]
    )
    cuts = sorted(
        {x for a, b in runs if b - a >= 2 and b - a > 2 * usual + 1 for x in (a, b)}
        - {0, int(replay.size)}
    )
    edges = [0, *cuts, int(replay.size)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def _boundary_idle(u: Union, last_marker: I64, next_start: I64) -> tuple[I64, I64, I64]:
    """For each boundary j: the longest idle gap ending in (last_marker[j], next_start[j]].

    Returns that length per boundary (0 where there is none), the lengths of every other
    idle gap of the device (the gaps that are not a boundary's longest), and where each
    boundary's longest gap ends (ns; 0 where there is none).
    """
    best = np.zeros(last_marker.size, dtype=np.int64)
    end = np.zeros(last_marker.size, dtype=np.int64)
    gap_len = u.gap_ends - u.gap_starts
    if gap_len.size == 0 or last_marker.size == 0:
        return best, gap_len, end
    # the windows are disjoint and ordered: find each gap's window by its end
    w = np.searchsorted(last_marker, u.gap_ends, side="left")
    w -= 1  # in place: one array the size of the gaps, not two
    ok = (w >= 0) & (w < last_marker.size)
    ok[ok] &= u.gap_ends[ok] <= next_start[w[ok]]
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return best, gap_len, end
    order = idx[np.lexsort((-gap_len[idx], w[idx]))]  # per window, longest first
    first = np.ones(order.size, dtype=bool)
    first[1:] = w[order][1:] != w[order][:-1]
    winners = order[first]
    best[w[winners]] = gap_len[winners]
    end[w[winners]] = u.gap_ends[winners]
    others = np.delete(gap_len, winners)
    return best, others, end


def burst_candidate(k: DeviceKernels, u: Union, opts: StepOptions) -> Candidate | None:
    """Steps from step-marker bursts; None when the device has no step-marker kernels."""
    if not k.marker.any():
        return None
    bs, bl = _bursts(k)
    idle, others, pause_end = _boundary_idle(u, bl[:-1], bs[1:])
    names = _boundary_names(k, bl[:-1], bs[1:], pause_end)
    segments = _segments(_replay_bursts(k, bs))
    if len(segments) > 1 and opts.layers is None and opts.step_gap_ns is None:
        mask, layers, detail, strong, caveat = _by_segment(idle, others, names, segments)
    else:
        mask, layers, detail, strong, caveat = choose_boundaries(
            idle, others, opts.layers, opts.step_gap_ns, names
        )
    first_burst = np.concatenate(([0], np.flatnonzero(mask) + 1))
    last_burst = np.append(first_burst[1:] - 1, bs.size - 1)
    return Candidate(
        "bursts",
        bs[first_burst],
        bl[last_burst],
        detail,
        strong,
        layers,
        burst_starts=bs,
        caveat=caveat,
    )


def _by_segment(
    idle: I64, others: I64, names: BoundaryNames, segments: list[tuple[int, int]]
) -> Boundaries:
    """:func:`choose_boundaries` on each segment of bursts apart (:func:`_segments`), with
    the boundaries at its edges, which are step boundaries: a switch between eager steps
    and graph replays falls between two steps. L, the words and the strength are the
    largest segment's."""
    mask = np.zeros(idle.size, dtype=bool)
    best: tuple[int, Boundaries] | None = None
    caveat = None
    for first, end in segments:
        lo, hi = max(first - 1, 0), min(end, idle.size)  # its boundaries, edges included
        found = choose_boundaries(idle[lo:hi], others, None, None, names.window(lo, hi))
        mask[lo:hi] = found.mask
        caveat = caveat or found.caveat
        if best is None or end - first > best[0]:
            best = (end - first, found)
        for edge in (first - 1, end - 1):
            if 0 <= edge < idle.size:
                mask[edge] = True
    assert best is not None
    _, largest = best
    said = f"eager steps and CUDA-graph replays searched apart ({len(segments)} stretches): "
    return Boundaries(mask, largest.layers, said + largest.detail, largest.strong, caveat)


def _boundary_names(
    k: DeviceKernels, last_marker: I64, next_start: I64, pause_end: I64
) -> BoundaryNames:
    """The kernels that start between two bursts, strictly after one's last marker and
    before the next one's start: per boundary, each kernel name (as a code) once, and
    whether that name runs at a step's edge only (:attr:`DeviceKernels.edge`); and apart,
    those that start after the boundary's longest idle gap (``pause_end``, 0: none)."""
    none = np.zeros(0, dtype=np.int64)
    empty = BoundaryNames(none, none, np.zeros(0, dtype=bool), none, none)
    if last_marker.size == 0:
        return empty
    between = np.flatnonzero(~k.marker)
    ts = k.ts[between]
    at = np.searchsorted(last_marker, ts, side="left") - 1
    ok = (at >= 0) & (ts < next_start[np.maximum(at, 0)])
    if not ok.any():
        return empty
    rows = between[ok]
    # the categorical's codes of those kernels alone (null as one code of its own), each
    # (boundary, code) pair packed into one int64 and made distinct by a sort
    physical = k.frame["name"].cast(pl.Categorical).to_physical().gather(rows)
    codes = physical.fill_null(np.iinfo(np.uint32).max).to_numpy().astype(np.int64)
    at, ts = at[ok].astype(np.int64), ts[ok]
    width = int(codes.max()) + 1
    pairs = distinct(at * width + codes)
    pair_code = pairs % width
    # a name is an edge kernel or not: a pair's flag is its name's
    edge_codes = np.zeros(0, dtype=np.int64) if k.edge is None else codes[k.edge[rows]]
    edge = np.isin(pair_code, edge_codes)
    end = pause_end[at]
    after = (end > 0) & (ts >= end)
    late = distinct(at[after] * width + codes[after])
    return BoundaryNames(pairs // width, pair_code, edge, late // width, late % width)


def idle_candidate(k: DeviceKernels, u: Union) -> Candidate:
    """Steps as bursts of device activity between idle gaps that stand out (a natural
    break in the gap distribution), else one step."""
    ts = k.ts
    threshold = natural_break(u.gap_ends - u.gap_starts)
    if threshold is None:
        cut = np.zeros(0, dtype=np.int64)
    else:
        cut = u.gap_ends[(u.gap_ends - u.gap_starts) >= threshold]
    anchors = np.concatenate((ts[:1], cut)).astype(np.int64)
    detail = "no step-marker kernels: steps are bursts of device activity separated by " + (
        f"idle gaps ≥ {threshold} ns" if threshold else "nothing (one step)"
    )
    return Candidate("idle", anchors, anchors.copy(), detail, False)
