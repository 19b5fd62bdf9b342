"""A capture's traces: found in the profile folder the user named, trusted only there, and
each laid on the probe's clock (:mod:`traceview.capture.clock`)."""

from __future__ import annotations

import glob
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from traceview.analysis.base.capture_document import ProbeClock, TraceClock
from traceview.capture.clock import activity_extent, fingerprint, profiler_span, trace_offset
from traceview.errors import CaptureError, TraceviewError

if TYPE_CHECKING:
    from traceview.capture.probe import ProbeConfig

TRACE_GLOBS = {
    "vllm": ["*.pt.trace.json.gz", "*.pt.trace.json"],
    "sglang": ["*.trace.json.gz", "*.trace.json"],
    "lab": ["*.pt.trace.json.gz"],
}


def collect(cfg: ProbeConfig, started: float) -> list[Path]:
    if not cfg.profile_dir:
        return []
    found: list[Path] = []
    for pattern in TRACE_GLOBS[cfg.engine]:
        for name in glob.glob(os.path.join(cfg.profile_dir, "**", pattern), recursive=True):
            p = Path(name)
            if "async_llm" in p.name or "capture_traces" in p.parts:
                continue  # vLLM's CPU-only frontend trace and graph-capture traces
            if p.stat().st_mtime >= started - 1 and p not in found:
                found.append(p)
    return sorted(found)


def trusted(cfg: ProbeConfig, traces: list[Path]) -> list[Path]:
    """The traces to copy, each checked to be a file under the profile folder the user
    gave: a path a server names is never trusted (it could name any file on this machine).
    Both sides are compared as absolute, resolved paths; a relative name is read against
    the profile folder, then against the working directory (a server started here names
    its traces relative to it), and either must land in the folder.

    Raises:
        CaptureError: a trace outside the profile folder, or no profile folder given.
    """
    if not traces:
        return []
    if not cfg.profile_dir:
        raise CaptureError(
            f"{traces[0]}: the server named this trace, but no --profile-dir was given; "
            "traceview copies only files under the profile folder you name"
        )
    root = Path(cfg.profile_dir).resolve()
    checked = []
    for t in traces:
        candidates = [t] if t.is_absolute() else [root / t, Path.cwd() / t]
        inside = [
            real
            for real in (c.resolve() for c in candidates)
            if real.is_relative_to(root) and real.is_file()
        ]
        if not inside:
            raise CaptureError(
                f"{t}: not a file under the profile folder {root}; refusing to copy it"
            )
        checked.append(inside[0])
    return checked


def offsets(clock: ProbeClock, traces: list[Path]) -> list[TraceClock]:
    """Per trace, its :func:`~traceview.capture.clock.fingerprint` and the offset from the
    probe's clock to the trace's (:func:`~traceview.capture.clock.trace_offset`); a trace
    that cannot be read gets none, and says why."""
    from traceview.loader import load

    out: list[TraceClock] = []
    for path in traces:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trace = load(path)
        except TraceviewError as exc:
            out.append(
                {
                    "trace": path.name,
                    "offset_ns": None,
                    "method": None,
                    "uncertainty_ns": None,
                    "why": str(exc),
                }
            )
            continue
        found = fingerprint(trace)
        span, extent = profiler_span(trace.events), activity_extent(trace)
        off = trace_offset(clock, trace.meta.base_time_ns, span, extent)
        out.append(  # the fingerprint, then the offset (its profiler span the same)
            {
                "trace": path.name,
                "base_time_ns": found["base_time_ns"],
                "profiler_start_ns": off["profiler_start_ns"],
                "profiler_end_ns": off["profiler_end_ns"],
                "events": found["events"],
                "offset_ns": off["offset_ns"],
                "method": off["method"],
                "uncertainty_ns": off["uncertainty_ns"],
                "evidence": off["evidence"],
                "why": off["why"],
            }
        )
    return out


def clock_notes(cfg: ProbeConfig, entries: list[TraceClock]) -> list[str]:
    """What a profiled capture could not give: a trace, or a trace's clock."""
    if not cfg.profile:
        return []
    if not entries:
        where = (
            f"under {cfg.profile_dir} (is it the folder the engine writes its traces to?)"
            if cfg.profile_dir
            else "(no --profile-dir was given: traceview collects traces from that folder)"
        )
        return [f"profiled, but no trace written during the capture was found {where}"]
    notes = []
    for e in entries:
        if e["offset_ns"] is None:
            notes.append(
                f"{e['trace']}: no clock offset ({e['why']}): the injection window "
                "cannot be placed on it"
            )
        elif e["uncertainty_ns"] is None:
            notes.append(
                f"{e['trace']}: the injection window is placed by the wall clock, "
                f"unchecked ({e['why']}): nothing bounds its error"
            )
    return notes
