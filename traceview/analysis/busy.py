"""GPU-busy fraction: the union of device activity over a window, divided by its length."""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.analysis.document import Busy
from traceview.analysis.intervals import Union, merge_windows, union
from traceview.analysis.precision import sig, sig_or_none
from traceview.model import Trace


def busy_fraction(u: Union, lo: np.ndarray, hi: np.ndarray) -> float | None:
    """Busy share of the union of windows ``[lo, hi)`` (None when they have no length)."""
    windows = merge_windows(lo.astype(np.int64), hi.astype(np.int64))
    total = windows.length()
    if total == 0:
        return None
    covered = int(u.clipped_lengths(windows.starts, windows.ends).sum())
    return covered / total


def busy_document(u: Union, device: int, gaps: pl.DataFrame, p99_ns: int | None) -> Busy:
    """The summary's ``busy`` section (window: first kernel start to last kernel end); the
    fractions at the document's precision (:func:`~traceview.analysis.precision.sig`)."""
    if u.starts.size == 0:
        return {
            "device": device,
            "fraction": None,
            "window_start_ns": None,
            "window_end_ns": None,
            "busy_ns": None,
            "in_gaps": None,
            "in_widest_gaps": None,
        }
    w0, w1 = int(u.starts[0]), int(u.ends[-1])
    open_gaps = gaps.filter(~pl.col("overlap"))
    lo, hi = open_gaps["start_ns"].to_numpy(), open_gaps["end_ns"].to_numpy()
    widest = (
        open_gaps.filter(pl.col("gap_ns") >= p99_ns) if p99_ns is not None else open_gaps.clear()
    )
    return {
        "device": device,
        "fraction": sig(u.length() / (w1 - w0)) if w1 > w0 else None,
        "window_start_ns": w0,
        "window_end_ns": w1,
        "busy_ns": u.length(),
        "in_gaps": sig_or_none(busy_fraction(u, lo, hi)),
        "in_widest_gaps": sig_or_none(
            busy_fraction(u, widest["start_ns"].to_numpy(), widest["end_ns"].to_numpy())
        ),
    }


def busy(
    trace: Trace, t0_ns: int | None = None, t1_ns: int | None = None, *, device: int | None = None
) -> pl.DataFrame:
    """GPU-busy fraction per device over a window (default: each device's first kernel
    start to last kernel end).

    Returns:
        DataFrame: ``device`` (Int64), ``window_start_ns``, ``window_end_ns`` (Int64, ns),
        ``busy_ns`` (Int64, ns: length of the union of all streams' activity inside the
        window), ``fraction`` (Float64, busy_ns / window length).
    """
    rows = []
    devices = [device] if device is not None else trace.devices
    for d in devices:
        k = trace.kernels.filter(pl.col("device") == d)
        if k.height == 0:
            continue
        ts = k["ts_ns"].to_numpy()
        u = union(ts, ts + k["dur_ns"].to_numpy())
        lo = int(u.starts[0]) if t0_ns is None else t0_ns
        hi = int(u.ends[-1]) if t1_ns is None else t1_ns
        covered = int(u.clipped_lengths(np.array([lo]), np.array([hi]))[0])
        rows.append(
            {
                "device": d,
                "window_start_ns": lo,
                "window_end_ns": hi,
                "busy_ns": covered,
                "fraction": covered / (hi - lo) if hi > lo else None,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "device": pl.Int64,
            "window_start_ns": pl.Int64,
            "window_end_ns": pl.Int64,
            "busy_ns": pl.Int64,
            "fraction": pl.Float64,
        },
    )
