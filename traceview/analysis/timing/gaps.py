"""Decode gaps: how long the recurrent decode work waits between consecutive kernels.

For consecutive decode-marker kernels on one device (ordered by start), a gap is
``next.start - prev.end``; overlaps count as 0 and are counted. A gap belongs to the phase
whose span holds its start (``prev.end``), and is kept only where that phase carries decode
work (``decode`` or ``mixed``): between prefill-only steps' kernels nothing decodes. A gap
across a whole CUDA-graph replay that holds its step's decode markers (an Nsight export
traced at graph level: a step whose only decode work is in replays) is not measured: its
two kernels are not consecutive. A gap that spans a step left out for warm-up belongs to no
population.

Beside each gap, its **period** ``next.start - prev.start`` (the gap plus the previous
marker's duration): the start-to-start interval scripts that read a trace by hand measure.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import polars as pl

from traceview.analysis.base.document import DECODING, GapStats
from traceview.analysis.base.names import short_name
from traceview.analysis.base.stats import percentiles, samples_for
from traceview.analysis.classify.families import Rules, distinct_names, family_is
from traceview.model import GRAPH_REPLAY


@dataclass(frozen=True, slots=True)
class Marker:
    """The decode marker used: the pattern or name, and where it came from (``source``:
    ``role`` — the preset's decode-marker pattern; ``inferred`` — the recurrent-state
    update among the ``linear_attention.decode`` kernels; ``full_attention`` — the first
    full-attention decode pattern that matches; ``full_attention_inferred`` — the most
    launched full-attention kernel that is not a KV-cache write or a merge)."""

    used: str
    source: str
    names: tuple[str, ...] = ()  # the kernel names it selected

    @property
    def inferred(self) -> bool:
        return self.source.endswith("inferred")


# Kernels beside the one that advances a layer: the conv1d update next to a recurrent state
# update, and the KV-cache writes and split-merges next to a full-attention kernel.
_NOT_THE_STATE_UPDATE = re.compile(r"conv1d|conv_update", re.IGNORECASE)
_NOT_THE_ATTENTION = re.compile(r"and_cache|store_kvcache|combine|merge|reduce", re.IGNORECASE)


def _most_launched(totals: pl.DataFrame, names: list[str]) -> str:
    """Of ``names``, the one launched most often (ties: the most kernel time, then name);
    ``totals`` adds the kernels up per (name, cat) (``count``, ``total_ns``)."""
    per = (
        totals.filter(pl.col("name").is_in(names))
        .group_by("name")
        .agg(pl.col("count").sum().alias("n"), pl.col("total_ns").sum().alias("t"))
        .with_columns(pl.col("name").cast(pl.String))
        .sort(["n", "t", "name"], descending=[True, True, False])
    )
    return str(per["name"][0])


def decode_markers(
    kernels: pl.DataFrame, totals: pl.DataFrame, rules: Rules
) -> tuple[pl.DataFrame, Marker | None]:
    """The decode-marker kernels (``ts_ns``, ``dur_ns``, ``name``, ``family``) and how they
    were chosen (None when there are none). ``kernels`` carry a ``family`` column;
    ``totals`` add them up per (name, cat) (``family``, ``count``, ``total_ns``), and the
    choice is made on those few rows.

    In order: the preset's decode-marker patterns (recurrent state updates); else, where
    ``linear_attention.decode`` kernels exist, the one kernel name among them that advances
    the recurrent state (the most launched that is not a conv1d update; the conv1d update
    only when nothing else is there); else the first full-attention decode pattern that
    matches; else the most launched ``full_attention`` kernel that is not a KV-cache write,
    combine or merge (FlashInfer's tensor-core decode runs ``BatchPrefillWith…``). None only
    when the trace has neither linear-attention decode nor full-attention kernels.
    """
    distinct = distinct_names(totals)
    hits = [n for n in distinct if rules.matches_any(n, rules.decode_marker)]
    marker: Marker | None = Marker(" | ".join(rules.decode_marker), "role") if hits else None
    family = totals["family"]
    if marker is None:
        linear = totals.filter(family == "linear_attention.decode")
        if linear.height:
            candidates = distinct_names(linear)
            updates = [n for n in candidates if not _NOT_THE_STATE_UPDATE.search(n)]
            hits = [_most_launched(linear, updates or candidates)]
            marker = Marker(hits[0], "inferred")
    if marker is None:
        for pattern in rules.full_attention_decode:
            hits = [n for n in distinct if rules.matches_any(n, (pattern,))]
            if hits:
                marker = Marker(pattern, "full_attention")
                break
    if marker is None:
        attention = totals.filter(family_is(family, "full_attention"))
        candidates = [n for n in distinct_names(attention) if not _NOT_THE_ATTENTION.search(n)]
        if candidates:
            hits = [_most_launched(attention, candidates)]
            marker = Marker(hits[0], "full_attention_inferred")
    columns = kernels.lazy().select("ts_ns", "dur_ns", "name", "family")
    if marker is None:
        return columns.clear().collect(), None
    chosen = columns.filter(pl.col("name").is_in(hits)).collect()
    return chosen, replace(marker, names=tuple(sorted(hits)))


GAP_SCHEMA = pl.Schema(
    {
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "gap_ns": pl.Int64,
        "period_ns": pl.Int64,
        "overlap": pl.Boolean,
        "phase": pl.Int64,
        "population": pl.String,
    }
)


def gap_table(
    kernels: pl.DataFrame,
    totals: pl.DataFrame,
    phases: pl.DataFrame,
    rules: Rules,
    step_starts: np.ndarray | None = None,
    left_out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[pl.DataFrame, Marker | None, str | None]:
    """One row per decode gap between the device's decode-marker kernels (``kernels``, with
    their ``family``; ``totals`` per name; the steps' ``phases``; ``step_starts``: each
    step's start, ns, in order): ``start_ns`` (prev end), ``end_ns`` (next start),
    ``gap_ns`` (Int64, ns, ≥ 0), ``period_ns`` (Int64, ns: next start - prev start),
    ``overlap`` (Boolean), ``phase`` (Int64), ``population`` (String: decode|mixed); plus
    the marker pattern and the markers' family. A gap across a whole CUDA-graph replay in a
    step with no decode-marker kernel of its own is left out (:func:`_across_replays`).
    ``left_out``: the spans ``(lo, hi)`` (sorted, disjoint) of the steps left out for
    warm-up: a gap that overlaps one is dropped."""
    markers, used = decode_markers(kernels, totals, rules)
    family = None
    if markers.height:
        family = Counter(markers["family"].to_list()).most_common(1)[0][0]
    if markers.height < 2:
        return pl.DataFrame(schema=GAP_SCHEMA), used, family
    # the device's kernels are in time order already: sort only when they are not
    m = markers if markers["ts_ns"].is_sorted() else markers.sort("ts_ns", maintain_order=True)
    prev_end = (m["ts_ns"] + m["dur_ns"]).to_numpy()[:-1]
    starts = m["ts_ns"].to_numpy()
    next_start = starts[1:]
    raw = next_start - prev_end
    p_start = phases["start_ns"].to_numpy()
    idx = np.clip(np.searchsorted(p_start, prev_end, side="right") - 1, 0, len(p_start) - 1)
    table = pl.DataFrame(
        {
            "start_ns": prev_end.astype(np.int64),
            "end_ns": next_start.astype(np.int64),
            "gap_ns": np.maximum(raw, 0).astype(np.int64),
            "period_ns": (next_start - starts[:-1]).astype(np.int64),
            "overlap": raw < 0,
            "phase": phases["phase"].to_numpy()[idx].astype(np.int64),
            "population": phases["kind"].to_numpy()[idx],
        }
    )
    keep = table["population"].is_in(DECODING).to_numpy()
    if step_starts is not None:
        blind = _blind_replays(kernels, m["ts_ns"].to_numpy(), step_starts)
        if blind is not None:
            keep &= ~_across_replays(prev_end, next_start, *blind)
    if left_out is not None and left_out[0].size:  # a gap across warm-up: neither side's
        lo, hi = left_out
        j = np.searchsorted(lo, next_start, side="left")  # the windows starting before its end
        last = np.maximum(j - 1, 0)
        keep &= ~((j > 0) & (hi[last] > prev_end))
    # decode gaps are measured only inside steps that carry decode work
    return table.filter(pl.Series(keep)), used, family


def _blind_replays(
    kernels: pl.DataFrame, marker_ts: np.ndarray, step_starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """The starts and ends (ns, each sorted) of the whole CUDA-graph replays that hold
    their step's decode markers: those in a step with no decode-marker kernel of its own
    (a decode step replayed as one graph). A replay in a step with itemised decode markers
    (a piecewise graph between eager attention layers) holds none. None where there are
    none."""
    replays = kernels.filter(pl.col("cat") == GRAPH_REPLAY)
    if replays.height == 0 or step_starts.size == 0:
        return None
    ts = replays["ts_ns"].to_numpy()
    step_of = np.searchsorted(step_starts, ts, side="right") - 1
    marked = np.unique(np.searchsorted(step_starts, marker_ts, side="right") - 1)
    blind = ~np.isin(step_of, marked)
    if not blind.any():
        return None
    ends = ts[blind] + replays["dur_ns"].to_numpy()[blind]
    return np.sort(ts[blind]), np.sort(ends)


def _across_replays(
    prev_end: np.ndarray, next_start: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """Per gap (``prev_end`` to ``next_start``): a replay of ``starts``/``ends`` (each
    sorted) lies in it in part: one starts before the gap ends and ends after it starts."""
    begun = np.searchsorted(starts, next_start, side="left")  # replays starting before b
    done = np.searchsorted(ends, prev_end, side="right")  # replays ending by a
    out: np.ndarray = (next_start > prev_end) & (begun > done)
    return out


def summarize_gaps(table: pl.DataFrame, family: str | None) -> list[GapStats]:
    """Per population (all, decode, mixed): n, overlaps, p50/p90/p99/max (ns)."""
    out: list[GapStats] = []
    populations: tuple[Literal["all", "decode", "mixed"], ...] = ("all", "decode", "mixed")
    for population in populations:
        sel = table if population == "all" else table.filter(pl.col("population") == population)
        stats = percentiles(sel["gap_ns"].to_numpy())
        period = percentiles(sel["period_ns"].to_numpy())
        out.append(
            {
                "population": population,
                "family": family,
                "n": stats["n"],
                "overlaps": int(sel["overlap"].sum()),
                "p50_ns": stats["p50_ns"],
                "p90_ns": stats["p90_ns"],
                "p99_ns": stats["p99_ns"],
                "max_ns": stats["max_ns"],
                "period": period,
                "filled": None,  # filled in by the summary, which holds the device's activity
                "widest": None,
            }
        )
    return out


SMALL_N = samples_for(0.99)  # below this, a p99 is close to the maximum: say so


def gap_warnings(decoding: bool, marker: Marker | None, stats: list[GapStats]) -> list[str]:
    """What a reader should know before trusting the decode gaps: no decode steps, no
    marker, an inferred marker, populations too small for their p99."""
    said = []
    if not decoding:
        said.append("no decode steps (every step is prefill): decode gaps are not measured")
    elif marker is None:
        said.append(
            "no linear-attention decode nor full-attention kernels: decode gaps are not available"
        )
    elif marker.inferred:
        said.append(
            f"decode marker inferred: no kernel matches the preset's decode-marker pattern, "
            f"so decode gaps are measured between {short_name(marker.used)!r} kernels"
        )
    small = [f"{g['population']} n={g['n']}" for g in stats if 0 < g["n"] < SMALL_N]
    if small:
        said.append(
            f"decode gaps: p99 rests on fewer than {SMALL_N} samples ({', '.join(small)}); "
            "it is close to the maximum"
        )
    return said
