"""The prompt's and the tokens' work (the summary's ``work`` section, docs/metrics.md):
kernels per step, prefill-only kernel time and launches, the engine's own token counts,
and how a mixed phase's prompt work per step grows from its first chunk to its last
(``prefill_growth``)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from traceview.analysis.base.document import GrowthMeasure, Phase, PhaseWork, PrefillGrowth, Work
from traceview.analysis.base.precision import line_ends, sig, sig_or_none
from traceview.analysis.base.stats import mean

GROWTH_STEPS = 3  # the steps a mixed phase needs for its growth (2 fit a line exactly)


def prefill_growth(table: pl.DataFrame, phases: list[Phase]) -> list[PrefillGrowth]:
    """Per mixed phase of at least :data:`GROWTH_STEPS` steps: how prompt work per step
    grows from its first chunk to its last, read off a least-squares line through the
    steps' prompt work (a healthy chunked prefill is flat; re-feeding the prompt from token
    0 grows linearly, and the total work quadratically). The line is fitted exactly
    (:func:`line_ends`) and the ratio rounded to the document's precision, so it is the
    same on every machine.

    Prompt work is the engine's own count of context tokens where every step of the phase
    states it (``measure: prompt_tokens``), else the prefill-only kernel time
    (``measure: prefill_ns``); a phase with neither is left out. ``measured_first`` and
    ``measured_last`` are the first and last steps' prompt work as measured; ``growth``
    is the fitted line's last value over its first, not their ratio."""
    out: list[PrefillGrowth] = []
    for phase in phases:
        if phase["kind"] != "mixed" or phase["steps"] < GROWTH_STEPS:
            continue
        steps = table.slice(phase["first_step"], phase["steps"])
        tokens = steps["context_tokens"]
        measure: GrowthMeasure
        if tokens.null_count() == 0 and int(tokens.sum()) > 0:
            measure, y = "prompt_tokens", tokens.to_numpy().astype(np.int64)
        elif int(steps["prefill_ns"].sum()) > 0:
            measure, y = "prefill_ns", steps["prefill_ns"].to_numpy().astype(np.int64)
        else:
            continue
        first, last = line_ends(y.tolist())
        out.append(
            {
                "first_step": phase["first_step"],
                "last_step": phase["last_step"],
                "steps": int(y.size),
                "measure": measure,
                "measured_first": int(y[0]),
                "measured_last": int(y[-1]),
                "prefill_ns_first": int(steps["prefill_ns"][0]),
                "prefill_ns_last": int(steps["prefill_ns"][-1]),
                "growth": sig(float(last / first)) if first > 0 else math.inf,
            }
        )
    return out


def _sum_or_none(values: pl.Series) -> int | None:
    return None if values.null_count() == values.len() else int(values.sum())


def work(table: pl.DataFrame, phases: list[Phase]) -> Work:
    """The ``work`` section: kernels per step, prefill-only kernel time and launches, and
    the engine's own token counts where its annotations state them (null where no step
    does): ``prompt_tokens`` (context tokens processed), ``decode_tokens`` (generation
    tokens), ``token_steps`` (steps whose record states its context tokens), per phase; and
    the query tokens read from ``record_shapes`` (``shape_tokens``, prompt and decode
    together) with the number of steps they were read for (``shape_token_steps``). The
    steps left out for warm-up (``phase`` null) count in none of them."""
    per_phase: list[PhaseWork] = []
    for phase in phases:
        steps = table.slice(phase["first_step"], phase["steps"])
        per_phase.append(
            {
                "kind": phase["kind"],
                "first_step": phase["first_step"],
                "last_step": phase["last_step"],
                "prompt_tokens": _sum_or_none(steps["context_tokens"]),
                "decode_tokens": _sum_or_none(steps["generation_tokens"]),
                "prefill_ns": int(steps["prefill_ns"].sum()),
            }
        )
    served = table.filter(pl.col("phase").is_not_null())
    return {
        "kernels_per_step": sig_or_none(mean(served["kernels"])),
        "prefill_ns": int(served["prefill_ns"].sum()),
        "prefill_kernels": int(served["prefill_kernels"].sum()),
        "prompt_tokens": _sum_or_none(served["context_tokens"]),
        "decode_tokens": _sum_or_none(served["generation_tokens"]),
        "token_steps": int(served["context_tokens"].is_not_null().sum()),
        "shape_tokens": _sum_or_none(served["shape_tokens"]),
        "shape_token_steps": int(served["shape_tokens"].is_not_null().sum()),
        "phases": per_phase,
        "prefill_growth": prefill_growth(table, phases),
    }
