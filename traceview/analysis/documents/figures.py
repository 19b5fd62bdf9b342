"""The per-trace figures that several documents share, read from the summary document
(each is computed once, by its own module: cadence in :mod:`traceview.analysis.timing.cadence`,
gaps in :mod:`traceview.analysis.timing.gaps`, busy in :mod:`traceview.analysis.timing.busy`).

A run document's rank row, a scan dataset's ``traces/`` row and a diff all report a trace's
step count, cadence, per-kind cadence, decode gaps and busy fraction under the same names;
each name means one population everywhere (docs/datasets.md lists them and the summary field
each equals):

- ``cadence_*``: every step-to-step interval (the summary's ``steps.cadence``);
- ``decode_cadence_*`` / ``mixed_cadence_*``: the intervals inside every phase of that kind,
  the intervals that cross a phase boundary excluded (the summary's
  ``steps.cadence_by_kind``);
- ``decode_gap_*``, ``decode_gaps_n``: the ``decode`` population of decode gaps (the
  summary's ``decode_gaps`` row whose population is ``decode``); the ``all`` population is
  always named ``all``;
- ``busy``: the busy fraction over the device's active window (``busy.fraction``);
- ``cost_decode_*``: the decode step-cost fit (``cost.decode``: its ``n``, ``fixed_ns``,
  ``per_sequence_ns``, ``r2``, the two coefficients' 95% intervals, ``idle_left_out`` and
  ``reason``).
"""

from __future__ import annotations

from traceview.analysis.base.document import GapStats, SummaryDocument, TraceFigures


def gap_population(doc: SummaryDocument, population: str) -> GapStats:
    """The summary's decode-gap row of one population (``all``, ``decode`` or ``mixed``)."""
    return next(g for g in doc["decode_gaps"] if g["population"] == population)


def trace_figures(doc: SummaryDocument) -> TraceFigures:
    """A summary's shared figures (see the module doc for each name's population)."""
    steps = doc["steps"]
    by_kind = steps["cadence_by_kind"]
    gaps = gap_population(doc, "decode")
    decode = doc["cost"]["decode"]
    fixed, per = decode["fixed_ci95"], decode["per_sequence_ci95"]
    return {
        "steps": steps["count"],
        "cadence_p50_ns": steps["cadence"]["p50_ns"],
        "cadence_p99_ns": steps["cadence"]["p99_ns"],
        "decode_cadence_n": by_kind["decode"]["n"],
        "decode_cadence_p50_ns": by_kind["decode"]["p50_ns"],
        "decode_cadence_p99_ns": by_kind["decode"]["p99_ns"],
        "mixed_cadence_n": by_kind["mixed"]["n"],
        "mixed_cadence_p50_ns": by_kind["mixed"]["p50_ns"],
        "mixed_cadence_p99_ns": by_kind["mixed"]["p99_ns"],
        "decode_gaps_n": gaps["n"],
        "decode_gap_p50_ns": gaps["p50_ns"],
        "decode_gap_p99_ns": gaps["p99_ns"],
        "busy": doc["busy"]["fraction"],
        "cost_decode_n": doc["cost"]["decode"]["n"],
        "cost_decode_fixed_ns": doc["cost"]["decode"]["fixed_ns"],
        "cost_decode_per_sequence_ns": doc["cost"]["decode"]["per_sequence_ns"],
        "cost_decode_r2": decode["r2"],
        "cost_decode_fixed_low_ns": None if fixed is None else fixed["low_ns"],
        "cost_decode_fixed_high_ns": None if fixed is None else fixed["high_ns"],
        "cost_decode_per_sequence_low_ns": None if per is None else per["low_ns"],
        "cost_decode_per_sequence_high_ns": None if per is None else per["high_ns"],
        "cost_decode_idle_left_out": decode["idle_left_out"],
        "cost_decode_reason": decode["reason"],
    }
