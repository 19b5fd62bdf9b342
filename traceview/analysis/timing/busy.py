"""GPU-busy fraction: the union of device activity over a window, divided by its length.
Every busy figure is computed here: the summary's ``busy`` section (:func:`busy_document`)
and busy over any window of the trace (:func:`busy_window`, ``tv.busy(t, t0, t1)``,
``Analysis.busy_between``)."""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import polars as pl

from traceview.analysis.base.document import Busy
from traceview.analysis.base.intervals import Union, merge_windows
from traceview.analysis.base.precision import sig
from traceview.errors import UsageError

BUSY_SCHEMA: dict[str, pl.DataType] = {
    "device": pl.Int64(),
    "window_start_ns": pl.Int64(),
    "window_end_ns": pl.Int64(),
    "busy_ns": pl.Int64(),
    "fraction": pl.Float64(),
}


class BusyRow(TypedDict):
    """Busy over one window (:data:`BUSY_SCHEMA`'s columns)."""

    device: int
    window_start_ns: int
    window_end_ns: int
    busy_ns: int
    fraction: float | None


def busy_over(u: Union, windows: Union) -> tuple[int, float | None]:
    """The union's length inside ``windows`` (disjoint) and its share of their length, at
    the document's precision (:func:`~traceview.analysis.base.precision.sig`; None where
    they have no length). Every busy figure of this module is this one."""
    covered = int(u.clipped_lengths(windows.starts, windows.ends).sum())
    total = windows.length()
    return covered, sig(covered / total) if total > 0 else None


def busy_in(u: Union, t0_ns: int, t1_ns: int) -> tuple[int, float | None]:
    """:func:`busy_over` the one window ``[t0_ns, t1_ns)``."""
    lo, hi = np.array([t0_ns], dtype=np.int64), np.array([t1_ns], dtype=np.int64)
    return busy_over(u, Union(lo, hi))


def busy_window(
    u: Union,
    device: int,
    t0_ns: int | None,
    t1_ns: int | None,
    path: str,
    serving: Union | None = None,
) -> BusyRow:
    """Busy over ``[t0_ns, t1_ns)`` on the trace's clock; an end not given is the
    activity's own (its first start, its last end). ``u`` is the analysed device's
    activity (not empty) and ``path`` the trace's, for the message. ``serving``: where
    steps are left out for warm-up, the time the serving figures cover
    (:attr:`~traceview.analysis.steps.find.StepResult.serving_windows`); the window is
    then measured inside it alone, its ends default to its own, and no figure is given
    where the window holds none of it. With no ends given this is :func:`busy_document`'s
    figure.

    Raises:
        UsageError: an end not after the start, or a window that holds none of the
            activity (before or after it: 0.0 there would say nothing), giving the
            activity's span.
    """
    if serving is not None and serving.starts.size:
        start, end = int(serving.starts[0]), int(serving.ends[-1])
    else:
        start, end = int(u.starts[0]), int(u.ends[-1])
    t0 = start if t0_ns is None else t0_ns
    t1 = end if t1_ns is None else t1_ns
    if t1 <= t0:
        raise UsageError(f"busy window [{t0}, {t1}): its end is not after its start")
    if t1 <= start or t0 >= end:
        raise UsageError(
            f"{path}: the window [{t0}, {t1}) ns on the trace's clock holds none of the "
            f"analysed device's activity (it spans {start}–{end} ns)"
        )
    if serving is None:
        busy_ns, fraction = busy_in(u, t0, t1)
    else:  # the serving time inside the window
        inside = merge_windows(np.clip(serving.starts, t0, t1), np.clip(serving.ends, t0, t1))
        busy_ns, fraction = busy_over(u, inside)
    return {
        "device": device,
        "window_start_ns": t0,
        "window_end_ns": t1,
        "busy_ns": busy_ns,
        "fraction": fraction,
    }


def busy_fraction(u: Union, lo: np.ndarray, hi: np.ndarray) -> float | None:
    """Busy share of the union of windows ``[lo, hi)`` (:func:`busy_over`; None when they
    have no length)."""
    return busy_over(u, merge_windows(lo.astype(np.int64), hi.astype(np.int64)))[1]


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
    steps are left out for warm-up, ``serving``: the time the serving figures cover, see
    :attr:`~traceview.analysis.steps.find.StepResult.serving_windows`; every figure null
    where no step serves); the fractions at the document's precision
    (:func:`~traceview.analysis.base.precision.sig`)."""
    if u.starts.size == 0 or (serving is not None and serving.starts.size == 0):
        return no_busy(device)
    w0, w1 = int(u.starts[0]), int(u.ends[-1])
    if serving is not None:  # the serving steps' spans
        w0, w1 = int(serving.starts[0]), int(serving.ends[-1])
        busy_ns, fraction = busy_over(u, serving)
        window_ns = serving.length()
    else:
        busy_ns, fraction = busy_in(u, w0, w1)
        window_ns = w1 - w0
    open_gaps = gaps.filter(~pl.col("overlap"))
    lo, hi = open_gaps["start_ns"].to_numpy(), open_gaps["end_ns"].to_numpy()
    widest = (
        open_gaps.filter(pl.col("gap_ns") >= p99_ns) if p99_ns is not None else open_gaps.clear()
    )
    return {
        "device": device,
        "fraction": fraction,
        "window_start_ns": w0,
        "window_end_ns": w1,
        "window_ns": window_ns,
        "busy_ns": busy_ns,
        "in_gaps": busy_fraction(u, lo, hi),
        "in_widest_gaps": busy_fraction(
            u, widest["start_ns"].to_numpy(), widest["end_ns"].to_numpy()
        ),
    }
