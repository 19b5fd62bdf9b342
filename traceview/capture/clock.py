"""One clock: the probe's monotonic clock laid on a trace's.

The probe times everything with ``time.monotonic_ns``; a torch-profiler trace is on the
profiler's clock (Kineto: the wall clock, ``baseTimeNanoseconds`` + ``ts``). At capture the
probe records ``wall − monotonic`` (read back to back, the closest of a few reads) and
brackets each profiler call on its monotonic clock (when it sent ``/start_profile`` and
``/stop_profile``, when the answer came). The trace holds the profiler's own start and stop
(Kineto's ``PyTorch Profiler`` span). :func:`trace_offset` turns these into one offset,
``trace_ns = monotonic_ns + offset_ns``:

- ``wall clock``: ``wall − monotonic − base_time_ns``, kept when it puts the profiler's
  start inside the start call and its stop inside the stop call (within
  :data:`SLACK_NS`): the server shares this machine's clock.
- ``bracket``: otherwise (a server on another machine, its clock set apart), the middle of
  the offsets the two calls allow, ± half their width.
- ``wall clock, unchecked``: a trace with no profiler span to check against.
"""

from __future__ import annotations

import time
from typing import Any

import polars as pl

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


def trace_offset(
    clock: dict[str, Any], base_time_ns: int | None, span: tuple[int, int] | None
) -> dict[str, Any]:
    """The offset that puts the probe's monotonic times on one trace's clock, as the
    module docstring defines it: ``offset_ns``, ``method``, ``uncertainty_ns`` (None when
    no offset holds), and the trace's ``profiler_start_ns``/``profiler_end_ns``.

    ``clock`` is ``run.json``'s: ``wall_minus_monotonic_ns``, ``read_width_ns``,
    ``profile_start`` and ``profile_stop`` (each ``sent_ns``/``answered_ns``)."""
    wall = int(clock["wall_minus_monotonic_ns"]) - (base_time_ns or 0)
    out: dict[str, Any] = {
        "offset_ns": wall,
        "method": "wall clock, unchecked",
        "uncertainty_ns": int(clock.get("read_width_ns") or 0),
        "profiler_start_ns": None if span is None else span[0],
        "profiler_end_ns": None if span is None else span[1],
    }
    start, stop = clock.get("profile_start"), clock.get("profile_stop")
    if span is None or not start or not stop:
        return out
    # the profiler started between sending /start_profile and its answer, and stopped
    # between sending /stop_profile and its answer: the offsets those allow
    lo = max(span[0] - start["answered_ns"], span[1] - stop["answered_ns"])
    hi = min(span[0] - start["sent_ns"], span[1] - stop["sent_ns"])
    if lo - SLACK_NS <= wall <= hi + SLACK_NS:
        out["method"] = "wall clock"
        return out
    if lo <= hi:
        out.update(offset_ns=(lo + hi) // 2, method="bracket", uncertainty_ns=(hi - lo + 1) // 2)
        return out
    out.update(offset_ns=None, method=None, uncertainty_ns=None)
    return out
