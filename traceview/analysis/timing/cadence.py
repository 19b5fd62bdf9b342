"""Cadence: the anchor-to-anchor intervals between engine steps, over each population the
documents report (docs/metrics.md). Every cadence figure is computed here:

- ``cadence``: every step-to-step interval (n = steps - 1);
- a **phase's** cadence and a **kind's** (``cadence_by_kind``): the intervals inside the
  phase, or inside every phase of that kind; the interval that crosses a phase boundary
  belongs to neither;
- the **token cadence**: the intervals between consecutive steps that carry decode work
  (decode and mixed), whatever runs between them: how often a decoding request gets a
  token;
- a **step's time** (``time_to_next``): its anchor to the next step's anchor, the interval
  cadence gives the next step, which the step-cost fits read.

A step left out for warm-up has no phase (``phase`` null): no interval to or from it is
counted, so an interval that spans warm-up belongs to neither side.
"""

from __future__ import annotations

import polars as pl

from traceview.analysis.base.document import DECODING, Percentiles, Phase
from traceview.analysis.base.stats import percentiles


def cadence(steps: pl.DataFrame) -> Percentiles:
    """Every step-to-step interval (the first step has none) between two steps the
    figures cover."""
    covered = pl.col("phase").is_not_null()
    inside = steps.filter(covered & covered.shift(1))
    return percentiles(inside["interval_ns"].drop_nulls().to_numpy())


def time_to_next(steps: pl.DataFrame) -> pl.Series:
    """Each step's time: its anchor to the next step's anchor (ns), read from the next
    row's ``interval_ns`` so that it is the interval cadence measures; null for the last
    step, wherever the next row's interval is null, and where either step is left out for
    warm-up (``phase`` null)."""
    covered = pl.col("phase").is_not_null()
    return steps.select(
        pl.when(covered & covered.shift(-1)).then(pl.col("interval_ns").shift(-1)).alias("time_ns")
    ).to_series()


def token_cadence(steps: pl.DataFrame) -> Percentiles:
    """The cadence a decoding request experiences, a token per step that carries its decode
    work: the anchor-to-anchor intervals between
    consecutive steps that carry decode work (``decode`` and ``mixed``), whatever runs
    between them (a prefill-only step between two decode steps lengthens the interval),
    save where a step left out for warm-up lies between them."""
    gone = pl.col("phase").is_null().cast(pl.Int64).cum_sum().alias("_gone")
    decoding = steps.with_columns(gone).filter(
        pl.col("kind").is_in(DECODING) & pl.col("phase").is_not_null()
    )
    same = decoding["_gone"] == decoding["_gone"].shift(1)
    intervals = decoding["anchor_ns"].diff().filter(same.fill_null(False))
    return percentiles(intervals.drop_nulls().to_numpy())


def kind_cadence(steps: pl.DataFrame, kind: str) -> Percentiles:
    """Cadence over the intervals inside every phase of one kind: a step's interval counts
    when the step before it is in the same phase (so a phase's first interval, which crosses
    from the previous phase, is left out)."""
    inside = steps.filter((pl.col("kind") == kind) & (pl.col("phase") == pl.col("phase").shift(1)))
    return percentiles(inside["interval_ns"].drop_nulls().to_numpy())


def phase_rows(phases: pl.DataFrame, steps: pl.DataFrame) -> list[Phase]:
    """Each phase with the cadence over the intervals inside it (its first step's interval,
    which crosses from the previous phase, left out)."""
    out: list[Phase] = []
    for row in phases.iter_rows(named=True):
        members = steps.filter(pl.col("phase") == row["phase"])
        stats = percentiles(members["interval_ns"].to_numpy()[1:])
        out.append(
            {
                "kind": row["kind"],
                "first_step": row["first_step"],
                "last_step": row["last_step"],
                "steps": row["steps"],
                "start_ns": row["start_ns"],
                "end_ns": row["end_ns"],
                "cadence_p50_ns": stats["p50_ns"],
                "cadence": stats,
            }
        )
    return out
