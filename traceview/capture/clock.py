"""One clock: the probe's monotonic clock laid on a trace's.

The probe times everything with ``time.monotonic_ns``; a torch-profiler trace is on the
profiler's clock (Kineto: the wall clock, ``baseTimeNanoseconds`` + ``ts``). At capture the
probe records ``wall − monotonic`` (read back to back, the closest of a few reads) and
brackets each profiler call on its monotonic clock (when it sent ``/start_profile`` and
``/stop_profile``, when the answer came). :func:`trace_offset` turns these into one offset,
``trace_ns = monotonic_ns + offset_ns``, with the bound on its error the evidence supports.

The evidence is an interval ``[lo, hi]`` that must hold the true offset. With Kineto's
``PyTorch Profiler`` span (the profiler's own start and stop), ``lo`` and ``hi`` are the
offsets that put its start inside the start call and its stop inside the stop call. A
trace without the span is bounded by its activity instead: its first event came after the
start call was sent, its last ended before the stop call was answered (a looser interval).

- ``wall clock``: ``wall − monotonic − base_time_ns``, kept when it lies in ``[lo, hi]``
  (within :data:`SLACK_NS`): the server's clock agrees with the client's. Its error is at
  most its distance to the farther end of the interval: the calls are all that checks it.
- ``bracket``: otherwise (a server whose clock is set apart), the interval's middle, ± half
  its width.
- no offset (None): the interval is empty. The trace's span does not fit between the calls
  (the engine was profiling before the capture began, or the trace is another's).
- ``wall clock, unchecked``: no calls recorded, or a trace with no events: nothing bounds
  the error (``uncertainty_ns`` None).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import polars as pl

from traceview.analysis.base.capture_document import Fingerprint, Offset, ProbeClock

if TYPE_CHECKING:
    from traceview.model import Trace

SLACK_NS = 1_000_000  # clock reads and the profiler's µs rounding: 1 ms either side


def wall_minus_monotonic() -> tuple[int, int]:
    """``time.time_ns() − time.monotonic_ns()`` and the read's width (ns): of five reads
    of the wall clock between two monotonic reads, the narrowest."""
    best: tuple[int, int] | None = None
    for _ in range(5):
        m0 = time.monotonic_ns()
        w = time.time_ns()
        m1 = time.monotonic_ns()
        width = m1 - m0
        if best is None or width < best[1]:
            best = (w - (m0 + m1) // 2, width)
    assert best is not None
    return best


def profiler_span(events: pl.DataFrame) -> tuple[int, int] | None:
    """The profiler's start and stop on the trace's clock (ns): Kineto's ``PyTorch
    Profiler (N)`` spans (category ``Trace``), first start to last end; None without one."""
    spans = events.filter(
        (pl.col("cat").cast(pl.String) == "Trace")
        & pl.col("name").cast(pl.String).str.starts_with("PyTorch Profiler")
    )
    if spans.height == 0:
        return None
    start = int(spans["ts_ns"].min())  # type: ignore[arg-type]
    end = int((spans["ts_ns"] + spans["dur_ns"]).max())  # type: ignore[arg-type]
    return start, end


def activity_extent(trace: Trace) -> tuple[int, int] | None:
    """The first start and the last end of the trace's events and device activity (ns, the
    trace's clock); None for a trace with neither."""
    lo: int | None = None
    hi: int | None = None
    for frame in (trace.events, trace.kernels):
        if frame.height == 0:
            continue
        start = frame["ts_ns"].min()
        end = (frame["ts_ns"] + frame["dur_ns"].fill_null(0)).max()
        if start is None or end is None:
            continue
        lo = int(start) if lo is None else min(lo, int(start))  # type: ignore[arg-type]
        hi = int(end) if hi is None else max(hi, int(end))  # type: ignore[arg-type]
    return None if lo is None or hi is None else (lo, hi)


def fingerprint(trace: Trace) -> Fingerprint:
    """What tells one trace from another without reading its bytes again: Kineto's
    ``baseTimeNanoseconds``, the profiler's span, and the number of events."""
    span = profiler_span(trace.events)
    return {
        "base_time_ns": trace.meta.base_time_ns,
        "profiler_start_ns": None if span is None else span[0],
        "profiler_end_ns": None if span is None else span[1],
        "events": trace.meta.events,
    }


def _ns(value: int) -> str:
    return f"{value / 1e6:,.1f} ms" if abs(value) < 10**9 else f"{value / 1e9:,.2f} s"


def trace_offset(
    clock: ProbeClock,
    base_time_ns: int | None,
    span: tuple[int, int] | None,
    extent: tuple[int, int] | None = None,
) -> Offset:
    """The offset that puts the probe's monotonic times on one trace's clock, as the
    module docstring defines it: ``offset_ns``, ``method``, ``uncertainty_ns`` (the
    largest error the evidence allows; None when nothing bounds it), ``evidence`` (what
    bounded it: ``profiler span`` or ``trace activity``), ``why`` (a sentence where there
    is no offset, or no bound), and the trace's ``profiler_start_ns``/``profiler_end_ns``.

    ``clock`` is ``run.json``'s: ``wall_minus_monotonic_ns``, ``read_width_ns``,
    ``profile_start`` and ``profile_stop`` (each ``sent_ns``/``answered_ns``). ``span``
    is the profiler's span in the trace (:func:`profiler_span`), ``extent`` its activity
    (:func:`activity_extent`)."""
    wall = int(clock["wall_minus_monotonic_ns"]) - (base_time_ns or 0)
    width = int(clock.get("read_width_ns") or 0)
    out: Offset = {
        "offset_ns": wall,
        "method": "wall clock, unchecked",
        "uncertainty_ns": None,
        "evidence": None,
        "why": None,
        "profiler_start_ns": None if span is None else span[0],
        "profiler_end_ns": None if span is None else span[1],
    }
    start, stop = clock.get("profile_start"), clock.get("profile_stop")
    if not start or not stop:
        out["why"] = "the capture recorded no profiler calls to check the wall clock against"
        return out
    if span is not None:
        # the profiler started between sending /start_profile and its answer, and stopped
        # between sending /stop_profile and its answer: the offsets those allow
        lo = max(span[0] - start["answered_ns"], span[1] - stop["answered_ns"])
        hi = min(span[0] - start["sent_ns"], span[1] - stop["sent_ns"])
        out["evidence"] = "profiler span"
    elif extent is not None:
        # every event came after /start_profile was sent and ended before /stop_profile
        # was answered
        lo, hi = extent[1] - stop["answered_ns"], extent[0] - start["sent_ns"]
        out["evidence"] = "trace activity"
    else:
        out["why"] = "the trace has no profiler span and no events to check the wall clock by"
        return out
    if lo - SLACK_NS <= wall <= hi + SLACK_NS:
        out["method"], out["uncertainty_ns"] = "wall clock", max(wall - lo, hi - wall, width)
        return out
    if lo <= hi:
        mid = (lo + hi) // 2
        out["offset_ns"], out["method"] = mid, "bracket"
        out["uncertainty_ns"] = (hi - lo + 1) // 2
        out["why"] = (
            f"the wall clock misses the profiler calls: the server's clock is taken to be "
            f"{_ns(mid - wall)} off this machine's"
        )
        return out
    out["offset_ns"], out["method"], out["uncertainty_ns"] = None, None, None
    out["why"] = _misfit(clock, wall, span, extent)
    return out


def _misfit(
    clock: ProbeClock,
    wall: int,
    span: tuple[int, int] | None,
    extent: tuple[int, int] | None,
) -> str:
    """Why no offset fits: the trace's profiling against the capture's calls, on the
    wall clock (the server's, if it shares this machine's)."""
    start, stop = clock["profile_start"], clock["profile_stop"]
    first, last = span if span is not None else extent  # type: ignore[misc]
    what = "profiler span" if span is not None else "activity"
    early = start["sent_ns"] - (first - wall)
    if early > SLACK_NS:
        return (
            f"the trace's {what} began {_ns(early)} before this capture sent /start_profile "
            "(by the wall clock): the engine was already profiling, or the trace is another's"
        )
    late = (last - wall) - stop["answered_ns"]
    if late > SLACK_NS:
        return (
            f"the trace's {what} ended {_ns(late)} after /stop_profile was answered (by the "
            "wall clock): the trace is another's"
        )
    return (
        f"the trace's {what} ({_ns(last - first)}) does not fit between this capture's "
        f"/start_profile and /stop_profile calls ({_ns(stop['answered_ns'] - start['sent_ns'])} "
        "apart at most): the trace is another's"
    )
