"""Decode gaps: how long the recurrent decode work waits between consecutive kernels.

For consecutive decode-marker kernels on one device (ordered by start), a gap is
``next.start - prev.end``; overlaps count as 0 and are counted. A gap belongs to the phase
whose span holds its start (``prev.end``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import polars as pl

from traceview.analysis.families import Rules, load_rules
from traceview.analysis.stats import percentiles
from traceview.analysis.steps import StepOptions, StepResult, find_steps
from traceview.model import Trace


def decode_markers(kernels: pl.DataFrame, rules: Rules) -> tuple[pl.DataFrame, str | None]:
    """The decode-marker kernels and the pattern(s) used.

    The preset's decode-marker patterns (recurrent state updates) when any kernel matches;
    otherwise the first full-attention decode pattern that matches any kernel.
    """
    names = kernels["name"].cast(pl.String)
    distinct = names.unique().to_list()
    hits = [n for n in distinct if rules.matches_any(n, rules.decode_marker)]
    used = " | ".join(rules.decode_marker)
    if not hits:
        for pattern in rules.full_attention_decode:
            hits = [n for n in distinct if rules.matches_any(n, (pattern,))]
            if hits:
                used = pattern
                break
    if not hits:
        return kernels.clear(), None
    return kernels.filter(names.is_in(hits)), used


def gap_table(result: StepResult, rules: Rules) -> tuple[pl.DataFrame, str | None, str | None]:
    """One row per decode gap: ``start_ns`` (prev end), ``end_ns`` (next start),
    ``gap_ns`` (Int64, ns, ≥ 0), ``overlap`` (Boolean), ``phase`` (Int64), ``population``
    (String: decode|mixed); plus the marker pattern and the markers' family."""
    markers, used = decode_markers(result.kernels, rules)
    family = None
    if markers.height:
        family = Counter(markers["family"].to_list()).most_common(1)[0][0]
    if markers.height < 2:
        empty = pl.DataFrame(
            schema={
                "start_ns": pl.Int64,
                "end_ns": pl.Int64,
                "gap_ns": pl.Int64,
                "overlap": pl.Boolean,
                "phase": pl.Int64,
                "population": pl.String,
            }
        )
        return empty, used, family
    m = markers.sort("ts_ns", maintain_order=True)
    prev_end = (m["ts_ns"] + m["dur_ns"]).to_numpy()[:-1]
    next_start = m["ts_ns"].to_numpy()[1:]
    raw = next_start - prev_end
    phases = result.phases
    p_start = phases["start_ns"].to_numpy()
    idx = np.clip(np.searchsorted(p_start, prev_end, side="right") - 1, 0, len(p_start) - 1)
    table = pl.DataFrame(
        {
            "start_ns": prev_end.astype(np.int64),
            "end_ns": next_start.astype(np.int64),
            "gap_ns": np.maximum(raw, 0).astype(np.int64),
            "overlap": raw < 0,
            "phase": phases["phase"].to_numpy()[idx].astype(np.int64),
            "population": phases["kind"].to_numpy()[idx],
        }
    )
    return table, used, family


def summarize_gaps(table: pl.DataFrame, family: str | None) -> list[dict[str, Any]]:
    """Per population (all, decode, mixed): n, overlaps, p50/p90/p99/max (ns)."""
    out = []
    for population in ("all", "decode", "mixed"):
        sel = table if population == "all" else table.filter(pl.col("population") == population)
        stats = percentiles(sel["gap_ns"].to_numpy())
        out.append(
            {
                "population": population,
                "family": family,
                "n": stats["n"],
                "overlaps": int(sel["overlap"].sum()),
                **{k: v for k, v in stats.items() if k != "n"},
            }
        )
    return out


def decode_gaps(
    trace: Trace, rules: Rules | None = None, *, options: StepOptions | None = None
) -> pl.DataFrame:
    """The decode gaps of one device, one row per gap.

    Returns:
        DataFrame: ``start_ns`` (Int64, ns: the earlier marker's end), ``end_ns`` (Int64,
        ns: the next marker's start), ``gap_ns`` (Int64, ns, overlaps as 0), ``overlap``
        (Boolean), ``phase`` (Int64), ``population`` (String: decode|mixed).
    """
    rules = rules or load_rules()
    return gap_table(find_steps(trace, rules, options), rules)[0]
