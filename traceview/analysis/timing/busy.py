"""GPU-busy fraction: the union of device activity over a window, divided by its length."""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.analysis.base.document import Busy
from traceview.analysis.base.intervals import Union, merge_windows
from traceview.analysis.base.precision import sig, sig_or_none


def busy_fraction(u: Union, lo: np.ndarray, hi: np.ndarray) -> float | None:
    """Busy share of the union of windows ``[lo, hi)`` (None when they have no length)."""
    windows = merge_windows(lo.astype(np.int64), hi.astype(np.int64))
    total = windows.length()
    if total == 0:
        return None
    covered = int(u.clipped_lengths(windows.starts, windows.ends).sum())
    return covered / total


def no_busy(device: int) -> Busy:
    """The ``busy`` section of a device with no activity to measure: every figure null."""
    return {
        "device": device,
        "fraction": None,
        "window_start_ns": None,
        "window_end_ns": None,
        "window_ns": None,
        "busy_ns": None,
        "in_gaps": None,
        "in_widest_gaps": None,
    }


def busy_document(
    u: Union,
    device: int,
    gaps: pl.DataFrame,
    p99_ns: int | None,
    serving: Union | None = None,
) -> Busy:
    """The summary's ``busy`` section (window: first kernel start to last kernel end; where
    steps are left out for warm-up, ``serving``: the spans of the others); the fractions at
    the document's precision (:func:`~traceview.analysis.base.precision.sig`)."""
    if u.starts.size == 0:
        return no_busy(device)
    w0, w1 = int(u.starts[0]), int(u.ends[-1])
    busy_ns, window_ns = u.length(), w1 - w0
    if serving is not None and serving.starts.size:
        w0, w1 = int(serving.starts[0]), int(serving.ends[-1])
        busy_ns = int(u.clipped_lengths(serving.starts, serving.ends).sum())
        window_ns = serving.length()
    open_gaps = gaps.filter(~pl.col("overlap"))
    lo, hi = open_gaps["start_ns"].to_numpy(), open_gaps["end_ns"].to_numpy()
    widest = (
        open_gaps.filter(pl.col("gap_ns") >= p99_ns) if p99_ns is not None else open_gaps.clear()
    )
    return {
        "device": device,
        "fraction": sig(busy_ns / window_ns) if window_ns > 0 else None,
        "window_start_ns": w0,
        "window_end_ns": w1,
        "window_ns": window_ns,
        "busy_ns": busy_ns,
        "in_gaps": sig_or_none(busy_fraction(u, lo, hi)),
        "in_widest_gaps": sig_or_none(
            busy_fraction(u, widest["start_ns"].to_numpy(), widest["end_ns"].to_numpy())
        ),
    }
