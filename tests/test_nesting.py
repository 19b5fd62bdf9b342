"""Slice nesting in the embedded SQL engine: the array path (tracks whose slices nest) gives
the rows of the one-by-one slice tracker, on random tracks built to nest, to spill and to tie
(zero-length slices, equal starts, slices ending where the next begins), and on whole
traces, fixtures and shared ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import GENERATED, real_traces, trace_params

import traceview as tv
from traceview.loader import LoadOptions
from traceview.sqlengine import embedded
from traceview.sqlengine.embedded import Database
from traceview.sqlengine.nesting import nest_in_arrays, nest_one_by_one


def _one_by_one(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """The tracker's depths, parents and whether any slice spilled, for one track."""
    n = ts.size
    depth = np.zeros(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    track = np.zeros(n, dtype=np.int64)
    spilled: dict[int, int] = {}
    nest_one_by_one(range(n), ts, dur, ts + dur, depth, parent, track, spilled, 1, [0])
    return depth, parent, bool(spilled)


def _tracker(slices: pl.DataFrame, next_track: int) -> tuple[pl.DataFrame, dict[int, int]]:
    """The reference: the slice tracker over each whole track, slice by slice, its
    overflow lanes kept for the whole track (what ``_nesting`` did before runs)."""
    ordered = slices.with_row_index("_pos").sort(
        ["track_id", "ts_ns", "dur_ns"], descending=[False, False, True], maintain_order=True
    )
    tracks, ts, dur = (ordered[c].to_numpy() for c in ("track_id", "ts_ns", "dur_ns"))
    depth = np.zeros(ordered.height, dtype=np.int64)
    parent = np.full(ordered.height, -1, dtype=np.int64)
    track = tracks.copy()
    spilled: dict[int, int] = {}
    cuts = np.flatnonzero(tracks[1:] != tracks[:-1]) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, ordered.height], strict=True):
        next_track = nest_one_by_one(
            range(lo, hi),
            ts,
            dur,
            ts + dur,
            depth,
            parent,
            track,
            spilled,
            next_track,
            [int(tracks[lo])],
        )
    ids = ordered["id"].to_numpy()
    parent_id = np.where(parent >= 0, ids[np.maximum(parent, 0)], -1)
    ordered = ordered.with_columns(
        pl.Series("depth", depth),
        pl.Series("parent_id", parent_id).replace(-1, None),
        pl.Series("track_id", track),
    )
    return ordered.sort("_pos").drop("_pos"), spilled


def _tree(rng: np.random.Generator, lo: int, hi: int, level: int) -> list[tuple[int, int]]:
    """Slices that nest inside [lo, hi): children side by side, some touching, some
    zero-length, some as long as their parent."""
    out: list[tuple[int, int]] = []
    t = lo
    while t < hi and level < 6:
        start = int(rng.integers(t, hi)) if rng.random() < 0.7 else t
        end = int(rng.integers(start, hi + 1)) if rng.random() < 0.95 else start
        if rng.random() < 0.1:
            end = hi
        out.append((start, end - start))
        if end > start:
            out.extend(_tree(rng, start, end, level + 1))
        t = end if rng.random() < 0.5 and end > start else end + 1
    return out


def _ordered(slices: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    frame = pl.DataFrame(slices, schema={"ts": pl.Int64, "dur": pl.Int64}, orient="row")
    frame = frame.sort(["ts", "dur"], descending=[False, True], maintain_order=True)
    return frame["ts"].to_numpy(), frame["dur"].to_numpy()


@pytest.mark.parametrize("seed", range(300))
def test_the_array_path_is_the_tracker_or_declines(seed: int) -> None:
    rng = np.random.default_rng(seed)
    slices = _tree(rng, 0, int(rng.integers(5, 400)), 0)
    if seed % 3 == 1:  # and some that cross, or stack zero-length slices
        for _ in range(int(rng.integers(1, 4))):
            a = int(rng.integers(0, 400))
            slices.append((a, int(rng.integers(0, 50)) if rng.random() < 0.8 else 0))
    ts, dur = _ordered(slices)
    depth, parent, spilled = _one_by_one(ts, dur)
    got_depth, got_parent, flagged = nest_in_arrays(ts, dur, ts + dur)
    if not flagged.any():
        assert not spilled
        assert got_depth.tolist() == depth.tolist()
        assert got_parent.tolist() == parent.tolist()
    else:  # up to the first flagged slice, the arrays are the tracker's
        first = int(np.flatnonzero(flagged)[0])
        assert got_depth[:first].tolist() == depth[:first].tolist()
        assert got_parent[:first].tolist() == parent[:first].tolist()
        if seed % 3 != 1:  # built to nest: flagged only where zero-length slices share a time
            zero = ts[dur == 0]
            assert (zero[1:] == zero[:-1]).any()


def test_the_array_path_takes_most_nesting_tracks() -> None:
    """Not a vacuous comparison: of the tracks built to nest, most are placed by the arrays
    alone."""
    taken = 0
    for seed in range(0, 300, 3):
        ts, dur = _ordered(_tree(np.random.default_rng(seed), 0, 400, 0))
        taken += not nest_in_arrays(ts, dur, ts + dur)[2].any()
    assert taken >= 40


def _rows(db: Database) -> list[tuple]:
    return db.conn.execute(
        "select id, track_id, depth, parent_id from _slice order by id"
    ).fetchall()


@pytest.mark.parametrize(
    "path",
    trace_params(
        [
            *real_traces(),
            GENERATED / "hybrid_chunked.json.gz",
            GENERATED / "dense_vllm_detailed.json.gz",
        ]
    ),
)
def test_whole_traces_nest_as_the_tracker_does(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every track nested in arrays where its runs allow, against the tracker over each
    whole track."""
    trace = tv.load(path, options=LoadOptions(cache=False))
    fast = _rows(Database(trace))
    monkeypatch.setattr(embedded, "_nesting", _tracker)
    assert fast == _rows(Database(trace))


def test_runs_the_arrays_cannot_place_go_through_the_tracker() -> None:
    """Tracks of many runs, some crossing or stacking zero-length slices: only those runs go
    slice by slice, and the rows (depth, parent, overflow track) are the tracker's."""
    rng = np.random.default_rng(11)
    rows = []
    for tr in range(20):
        t0 = 0
        for _ in range(30):  # runs that share no time
            width = int(rng.integers(5, 200))
            run = _tree(rng, t0, t0 + width, 0)
            if rng.random() < 0.3:
                run += [(int(rng.integers(t0, t0 + width)), int(rng.integers(0, 40)))]
            rows += [(tr, a, d) for a, d in run]
            t0 += width + 300
    frame = pl.DataFrame(rows, schema=["track_id", "ts_ns", "dur_ns"], orient="row")
    frame = frame.with_row_index("id").with_columns(pl.col("id").cast(pl.Int64))
    fast, spilled = embedded._nesting(frame, next_track=20)
    slow, slow_spilled = _tracker(frame, next_track=20)
    assert len(spilled) >= 2 and spilled == slow_spilled
    assert fast.equals(slow)
