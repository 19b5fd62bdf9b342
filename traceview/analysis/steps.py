"""Engine steps: step-marker bursts (or the engine's own annotations) -> steps and phases.

Definitions (DESIGN.md): a step's **anchor** is the start of its first step-marker kernel;
its **start** is the start of the first device kernel after the longest device-idle gap
between the previous step's last marker kernel and this anchor (the anchor if there is no
idle gap; the trace's first kernel for the first step). Step k spans [start_k, start_k+1);
the last ends at the last kernel's end. A step is **mixed** when a prefill kernel starts in
its span, else **decode**; a **phase** is a maximal run of steps of one kind.

Finding the steps from kernels alone (``bursts``): consecutive step-marker kernels on a
stream form a per-layer burst. Between two bursts, the longest device-idle gap is the
boundary's score. A model has a constant number L of full-attention bursts per step, so
the step boundaries are every L-th boundary: L (and the phase of the pattern) is chosen
where the chosen boundaries beat every other boundary within L-1 of them; that holds even
when the between-step pause is barely longer than the gaps inside a step. ``--layers N``
fixes L; ``--step-gap`` instead cuts at every idle gap of at least that length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from traceview.analysis.families import Rules, classify, load_rules
from traceview.analysis.intervals import I64, Union, union
from traceview.errors import UnsupportedTraceError
from traceview.model import Trace

STEP_ANNOTATION = re.compile(
    # vLLM: execute_context_1(888)_generation_6(6), execute_32_context_0(sq0sk0…)_generation_…
    r"^(execute_(\d+_)?context_\d+\(.*\)_generation_\d+\(.*\)"
    r"|step\[[A-Z_]+[ \]]"  # SGLang: step[DECODE bs=…], step[EXTEND …], step[MIXED …]
    r"|ProfilerStep#\d+$)"  # torch.profiler's own iterations
)
# annotations of steps that carry prompt tokens: vLLM context_N with N > 0, SGLang EXTEND/MIXED
PROMPT_ANNOTATION = re.compile(r"^execute_(\d+_)?context_[1-9]|^step\[(EXTEND|MIXED|PREFILL)")
PERIODIC_MIN_SCORE = 0.8  # share of chosen boundaries that must beat their neighbourhood
PERIODIC_SURE = 0.95  # a period this clear ends the search
PERIODIC_MARGIN = 1.15  # ... by at least this factor (a tie or a drift is not a pause)
ANNOTATION_COVERAGE = 0.9  # share of kernels annotations must hold to beat a weak guess
PERIODIC_MIN_STEPS = 3  # chosen boundaries needed before a period is believed
MAX_LAYERS = 256


@dataclass(frozen=True, slots=True)
class StepOptions:
    """How to find steps.

    Attributes:
        method: ``auto`` (annotations where they cover the trace and agree with the bursts,
            else bursts), ``bursts`` or ``annotations``.
        layers: step-marker bursts per step (default: found from the trace).
        step_gap_ns: cut steps at every device-idle gap at least this long (ns) instead.
        device: the device to analyse (default: the one with the most kernel time).
        cpu_activity: the activity is CPU ranges (a CPU capture): with no device-idle
            pauses to go by, annotations that hold the activity decide the steps.
    """

    method: str = "auto"
    layers: int | None = None
    step_gap_ns: int | None = None
    device: int | None = None
    cpu_activity: bool = False  # the activity is CPU ranges (a CPU capture), not kernels


@dataclass
class StepResult:
    """Steps of one device and how they were found (see :func:`find_steps`)."""

    device: int
    kernels: pl.DataFrame  # the device's kernels with ``family``, sorted by ts_ns
    table: pl.DataFrame  # one row per step (see :func:`steps`)
    phases: pl.DataFrame  # one row per phase
    method: str  # annotations | bursts | idle
    marker: str | None  # description of the step marker used
    layers: int | None  # bursts per step (bursts method)
    detail: str  # how the boundaries were chosen, in words
    annotation_steps: int = 0
    disagreements: int | None = None  # steps the annotation and burst methods disagree on
    warnings: list[str] = field(default_factory=list)
    union: Union | None = None


def pick_device(trace: Trace, device: int | None) -> int:
    """The device to analyse: the one asked for, else the one with the most kernel time."""
    if trace.kernels.height == 0:
        raise UnsupportedTraceError(f"{trace.meta.path}: no device activity (no kernels)")
    per = (
        trace.kernels.group_by("device")
        .agg(pl.col("dur_ns").sum())
        .sort(["dur_ns", "device"], descending=[True, False])
    )
    devices = per["device"].to_list()
    if device is None:
        return int(devices[0])
    if device not in devices:
        raise UnsupportedTraceError(
            f"{trace.meta.path}: device {device} has no kernels "
            f"(devices: {', '.join(map(str, sorted(d for d in devices if d is not None)))})"
        )
    return device


def ends_of(kernels: pl.DataFrame) -> np.ndarray:
    """``ts_ns + dur_ns`` as an int64 array."""
    return (kernels["ts_ns"] + kernels["dur_ns"]).to_numpy().astype(np.int64)


def _is_family(col: pl.Expr, families: tuple[str, ...]) -> pl.Expr:
    expr = pl.lit(False)
    for f in families:
        expr = expr | (col == f) | col.str.starts_with(f + ".")
    return expr


# --- bursts ---------------------------------------------------------------------------------


def _bursts(k: pl.DataFrame) -> pl.DataFrame:
    """Runs of consecutive step-marker kernels on one stream: start, end, last marker start."""
    per_stream = k.with_row_index("_i").sort(["stream", "ts_ns"], maintain_order=True)
    marker = pl.col("_marker")
    new_run = marker & ~(
        marker.shift(1).fill_null(False) & (pl.col("stream") == pl.col("stream").shift(1))
    )
    runs = (
        per_stream.with_columns(new_run.cum_sum().alias("_run"))
        .filter(marker)
        .group_by("_run")
        .agg(
            pl.col("ts_ns").min().alias("start"),
            (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("end"),
            pl.col("ts_ns").max().alias("last_marker"),
            pl.len().alias("markers"),
        )
        .sort("start")
    )
    return runs


def _boundary_idle(u: Union, last_marker: I64, next_start: I64) -> tuple[I64, I64]:
    """For each boundary j: the longest idle gap ending in (last_marker[j], next_start[j]].

    Returns that length per boundary (0 where there is none) and the lengths of every other
    idle gap of the device (the gaps that are not a boundary's longest).
    """
    best = np.zeros(last_marker.size, dtype=np.int64)
    gap_len = u.gap_ends - u.gap_starts
    if gap_len.size == 0 or last_marker.size == 0:
        return best, gap_len
    # the windows are disjoint and ordered: find each gap's window by its end
    w = np.searchsorted(last_marker, u.gap_ends, side="left") - 1
    ok = (w >= 0) & (w < last_marker.size)
    ok[ok] &= u.gap_ends[ok] <= next_start[w[ok]]
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return best, gap_len
    order = idx[np.lexsort((-gap_len[idx], w[idx]))]  # per window, longest first
    first = np.ones(order.size, dtype=bool)
    first[1:] = w[order][1:] != w[order][:-1]
    winners = order[first]
    best[w[winners]] = gap_len[winners]
    others = np.delete(gap_len, winners)
    return best, others


def _periodic_score(idle: I64, period: int) -> tuple[float, int]:
    """Best (score, phase) for boundaries every ``period``: the share of chosen boundaries
    whose idle gap beats every other boundary within ``period - 1`` of them."""
    n = idle.size
    s = pl.Series(idle.astype(np.float64))
    w = period - 1
    left = s.shift(1).rolling_max(window_size=w, min_samples=1).fill_null(-1.0).to_numpy()
    right = (
        s.reverse()
        .shift(1)
        .rolling_max(window_size=w, min_samples=1)
        .fill_null(-1.0)
        .reverse()
        .to_numpy()
    )
    neighbours = np.maximum(left, right)
    wins = (idle > PERIODIC_MARGIN * neighbours) & (idle > 0)
    pos = np.arange(n) % period
    total = np.bincount(pos, minlength=period)
    won = np.bincount(pos, weights=wins, minlength=period)
    share = np.where(total > 0, won / np.maximum(total, 1), 0.0)
    phase = int(np.argmax(share))
    return float(share[phase]), phase


def _natural_break(values: I64) -> int | None:
    """A threshold at the widest ratio between consecutive sorted positive values, if that
    ratio is at least 2 (a clear break); None otherwise."""
    v = np.unique(values[values > 0]).astype(np.float64)
    if v.size < 2:
        return None
    ratios = v[1:] / v[:-1]
    i = int(np.argmax(ratios))
    if ratios[i] < 2.0:
        return None
    return int(np.ceil(np.sqrt(v[i] * v[i + 1])))


def _choose_boundaries(
    idle: I64, others: I64, opts: StepOptions
) -> tuple[np.ndarray, int | None, str, bool]:
    """Which burst boundaries are step boundaries (mask); L; how, in words; and whether the
    evidence is strong (a period, or the user's own option) rather than a weaker guess.

    ``others`` are the device's idle gaps that are no boundary's longest: when (nearly)
    every boundary's gap stands out above them, every burst is a step (one full-attention
    layer per step).
    """
    n = idle.size
    if n == 0:
        return np.zeros(0, dtype=bool), 1, "a single burst", False
    if opts.step_gap_ns is not None:
        return idle >= opts.step_gap_ns, None, f"--step-gap {opts.step_gap_ns} ns", True
    if opts.layers is not None:
        period = max(1, opts.layers)
        if period == 1:
            return np.ones(n, dtype=bool), 1, "--layers 1", True
        score, phase = _periodic_score(idle, period)
        mask = (np.arange(n) % period) == phase
        return mask, period, f"--layers {period} (boundary score {score:.2f})", True
    best: tuple[float, int, int] | None = None
    for period in range(2, min(MAX_LAYERS, n // PERIODIC_MIN_STEPS) + 1):
        score, phase = _periodic_score(idle, period)
        if best is None or score > best[0] + 1e-9:
            best = (score, period, phase)
        if score >= PERIODIC_SURE:
            break  # multiples of the period score lower, not higher: no need to look on
    if best is not None and best[0] >= PERIODIC_MIN_SCORE:
        score, period, phase = best
        mask = (np.arange(n) % period) == phase
        return (
            mask,
            period,
            (
                f"every {period} step-marker bursts: the between-step idle gap "
                f"beats every gap within {period - 1} bursts at {score:.0%} of "
                "boundaries"
            ),
            True,
        )
    if others.size:
        typical = float(np.quantile(others, 0.99))
        standing_out = float((idle > PERIODIC_MARGIN * typical).mean())
    else:
        standing_out = float((idle > 0).mean())
    if standing_out >= PERIODIC_MIN_SCORE:
        return (
            np.ones(n, dtype=bool),
            1,
            (
                f"every step-marker burst: {standing_out:.0%} of the idle gaps between bursts "
                "stand out above the device's other idle gaps"
            ),
            False,
        )
    threshold = _natural_break(idle)
    if threshold is not None:
        mask = idle >= threshold
        counts = np.diff(np.flatnonzero(np.concatenate(([True], mask, [True]))))
        if counts.size > 2:
            inner = counts[1:-1]
            if (inner == np.bincount(inner).argmax()).mean() >= PERIODIC_MIN_SCORE:
                return (
                    mask,
                    int(np.bincount(inner).argmax()),
                    (f"idle gaps ≥ {threshold} ns (a natural break in the gap distribution)"),
                    False,
                )
    return (
        np.zeros(n, dtype=bool),
        None,
        (
            "no step structure found in the step-marker bursts (no between-step pause stands "
            "out, no period): all of them are taken as one step; set --layers or --step-gap"
        ),
        False,
    )


# --- annotations --------------------------------------------------------------------------


def _outermost(spans: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Drop step annotations nested inside another one on the same track (vLLM's
    ``execute_…`` around SGLang's ``step[…]`` describe one step)."""
    spans = spans.sort([*by, "a0"])
    enclosing_end = (
        pl.col("a1").cum_max().shift(1).over(by) if by else pl.col("a1").cum_max().shift(1)
    )
    return spans.filter(enclosing_end.is_null() | (pl.col("a1") > enclosing_end)).sort("a0")


def _annotation_groups(trace: Trace, k: pl.DataFrame, device: int) -> pl.DataFrame | None:
    """Per-step annotations -> rows (annotation name, kernel row indices). None if none.

    GPU-projected annotations on this device take their kernels by time; CPU annotations
    take the kernels launched from inside them, through correlation ids.
    """
    ev = trace.events
    ann = ev.filter(pl.col("kind").is_in(["user_annotation", "gpu_user_annotation"]))
    ann = ann.filter(pl.col("name").cast(pl.String).str.contains(STEP_ANNOTATION.pattern))
    if ann.height == 0:
        return None
    ki = k.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("_k"), "ts_ns", "correlation")
    gpu = ann.filter((pl.col("kind") == "gpu_user_annotation") & (pl.col("pid") == device))
    if gpu.height:
        spans = _outermost(
            gpu.select(
                pl.col("name").cast(pl.String),
                pl.col("ts_ns").alias("a0"),
                (pl.col("ts_ns") + pl.col("dur_ns")).alias("a1"),
            ),
            [],
        )
        joined = ki.sort("ts_ns").join_asof(
            spans, left_on="ts_ns", right_on="a0", strategy="backward"
        )
        joined = joined.filter(pl.col("ts_ns") < pl.col("a1"))
        return (
            joined.group_by("a0", "name")
            .agg(pl.col("_k"))
            .sort("a0")
            .select("name", pl.col("_k").alias("kernels"))
        )
    cpu = _outermost(
        ann.filter(pl.col("kind") == "user_annotation").select(
            pl.col("name").cast(pl.String),
            "pid",
            "tid",
            pl.col("ts_ns").alias("a0"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("a1"),
        ),
        ["pid", "tid"],
    )
    runtime = ev.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
    runtime = runtime.select("pid", "tid", "ts_ns", "correlation").sort("ts_ns")
    # the enclosing step annotation on the same thread (nested ones were dropped above)
    linked = runtime.join_asof(
        cpu,
        left_on="ts_ns",
        right_on="a0",
        by=["pid", "tid"],
        strategy="backward",
        check_sortedness=False,
    ).filter(pl.col("ts_ns") < pl.col("a1"))
    hits = ki.filter(pl.col("correlation").is_not_null()).join(
        linked.select("correlation", "a0", "name").unique("correlation"), on="correlation"
    )
    if hits.height == 0:
        # no launches to follow (a CPU-only capture): the activity of the annotation's own
        # process that starts inside it
        kp = k.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("_k"), "ts_ns", "pid")
        hits = (
            kp.sort("ts_ns")
            .join_asof(
                cpu.sort("a0"),
                left_on="ts_ns",
                right_on="a0",
                by="pid",
                strategy="backward",
                check_sortedness=False,
            )
            .filter(pl.col("ts_ns") < pl.col("a1"))
        )
    if hits.height == 0:
        return None
    return (
        hits.group_by("a0", "name")
        .agg(pl.col("_k").sort())
        .sort("a0")
        .select("name", pl.col("_k").alias("kernels"))
    )


# --- assembling steps -----------------------------------------------------------------------


def _step_starts(u: Union, first_kernel: int, anchors: I64, prev_last_marker: I64) -> I64:
    """Start of each step by the definition: first kernel after the longest idle gap in
    (previous step's last marker start, anchor]; the anchor if none; first kernel for 0."""
    starts = anchors.copy()
    if anchors.size == 0:
        return starts
    starts[0] = first_kernel
    if u.gap_ends.size and anchors.size > 1:
        lo, hi = prev_last_marker[1:], anchors[1:]
        gap_len = u.gap_ends - u.gap_starts
        w = np.searchsorted(lo, u.gap_ends, side="left") - 1
        ok = (w >= 0) & (w < lo.size)
        ok[ok] &= u.gap_ends[ok] <= hi[w[ok]]
        if ok.any():
            gw, gl, ge = w[ok], gap_len[ok], u.gap_ends[ok]
            order = np.lexsort((ge, -gl, gw))  # per window: longest, then earliest
            gw, ge = gw[order], ge[order]
            first = np.ones(gw.size, dtype=bool)
            first[1:] = gw[1:] != gw[:-1]
            starts[1 + gw[first]] = ge[first]
    return starts


def _assemble(
    k: pl.DataFrame,
    u: Union,
    anchors: I64,
    last_markers: I64,
    names: list[str | None],
    rules: Rules,
    starts: I64 | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    ts = k["ts_ns"].to_numpy()
    end_all = int(ends_of(k).max())
    if starts is None:
        prev_last = np.concatenate(([ts[0]], last_markers[:-1])).astype(np.int64)
        starts = _step_starts(u, int(ts[0]), anchors, prev_last)
    ends = np.append(starts[1:], end_all).astype(np.int64)

    prefill = _is_family(pl.col("family"), rules.prefill_family)
    if rules.prefill:
        prefill = prefill | pl.col("name").cast(pl.String).str.contains(
            "(?i)" + "|".join(f"(?:{p})" for p in rules.prefill)
        )
    prefill_k = k.filter(prefill)
    prefill_ts = prefill_k["ts_ns"].to_numpy()
    step_of_prefill = np.searchsorted(starts, prefill_ts, side="right") - 1
    inside = step_of_prefill >= 0
    mixed = np.zeros(starts.size, dtype=bool)
    mixed[step_of_prefill[inside]] = True
    # the work invariant: prompt work per step (kernel time and launches)
    prefill_ns = np.bincount(
        step_of_prefill[inside],
        minlength=starts.size,
        weights=prefill_k["dur_ns"].to_numpy()[inside],
    ).astype(np.int64)
    prefill_kernels = np.bincount(step_of_prefill[inside], minlength=starts.size)

    step_of_kernel = np.searchsorted(starts, ts, side="right") - 1
    per_step = (
        k.with_columns(pl.Series("step", step_of_kernel, dtype=pl.Int64))
        .filter(pl.col("step") >= 0)
        .group_by("step", "family")
        .agg(pl.col("dur_ns").sum())
        .pivot(on="family", index="step", values="dur_ns", sort_columns=True)
    )
    counts = np.bincount(step_of_kernel[step_of_kernel >= 0], minlength=starts.size)
    busy = u.clipped_lengths(starts, ends)
    span = ends - starts
    # the engine's own annotation can say so too (one attention kernel may serve both)
    mixed |= np.array([bool(n and PROMPT_ANNOTATION.search(n)) for n in names], dtype=bool)
    kind = np.where(mixed, "mixed", "decode")
    phase = np.concatenate(([0], np.cumsum(kind[1:] != kind[:-1]))).astype(np.int64)

    table = pl.DataFrame(
        {
            "index": np.arange(starts.size, dtype=np.int64),
            "start_ns": starts,
            "anchor_ns": anchors.astype(np.int64),
            "end_ns": ends,
            "kind": kind,
            "phase": phase,
            "kernels": counts.astype(np.int64),
            "busy_fraction": np.where(span > 0, busy / np.maximum(span, 1), 0.0),
            "prefill_ns": prefill_ns,
            "prefill_kernels": prefill_kernels.astype(np.int64),
            "annotation": pl.Series(names, dtype=pl.String),
        }
    )
    table = table.with_columns(pl.col("anchor_ns").diff().alias("interval_ns")).select(
        "index",
        "start_ns",
        "anchor_ns",
        "end_ns",
        "interval_ns",
        pl.exclude("index", "start_ns", "anchor_ns", "end_ns", "interval_ns"),
    )
    fam_cols = per_step.rename({c: f"ns_{c}" for c in per_step.columns if c != "step"})
    table = table.join(fam_cols, left_on="index", right_on="step", how="left").with_columns(
        pl.col("^ns_.*$").fill_null(0)
    )
    phases = (
        table.group_by("phase", maintain_order=True)
        .agg(
            pl.col("kind").first(),
            pl.col("index").first().alias("first_step"),
            pl.col("index").last().alias("last_step"),
            pl.len().cast(pl.Int64).alias("steps"),
            pl.col("start_ns").first(),
            pl.col("end_ns").last(),
        )
        .sort("phase")
    )
    return table, phases


def find_steps(
    trace: Trace, rules: Rules | None = None, options: StepOptions | None = None
) -> StepResult:
    """Find the engine steps of one device (see the module docstring for the method).

    Raises:
        UnsupportedTraceError: no kernels, or no way to find steps.
    """
    rules = rules or load_rules()
    opts = options or StepOptions()
    if opts.method not in ("auto", "bursts", "annotations"):
        raise UnsupportedTraceError(f"unknown step method {opts.method!r}")
    device = pick_device(trace, opts.device)
    k = classify(trace.kernels.filter(pl.col("device") == device), rules)
    ts = k["ts_ns"].to_numpy().astype(np.int64)
    ends = ends_of(k)
    u = union(ts, ends)
    k = k.with_columns(_is_family(pl.col("family"), rules.step_marker).alias("_marker"))
    warnings: list[str] = []

    burst_confident = False
    burst_anchor: I64 | None = None
    burst_last: I64 | None = None
    layers: int | None = None
    detail = ""
    n_markers = int(k["_marker"].sum())
    if n_markers:
        b = _bursts(k)
        bs = b["start"].to_numpy().astype(np.int64)
        bl = b["last_marker"].to_numpy().astype(np.int64)
        idle, others = _boundary_idle(u, bl[:-1], bs[1:])
        mask, layers, detail, burst_confident = _choose_boundaries(idle, others, opts)
        first_burst = np.concatenate(([0], np.flatnonzero(mask) + 1))
        last_burst = np.append(first_burst[1:] - 1, bs.size - 1)
        burst_anchor, burst_last = bs[first_burst], bl[last_burst]

    groups = _annotation_groups(trace, k, device) if opts.method != "bursts" else None
    ann_anchor: I64 | None = None
    ann_names: list[str | None] = []
    ann_first: I64 | None = None
    covered = 0.0
    if groups is not None and groups.height:
        marker_idx = set(np.flatnonzero(k["_marker"].to_numpy()).tolist())
        rows = []
        for name, ks in groups.iter_rows():
            ks = sorted(ks)
            marks = [i for i in ks if i in marker_idx] or ks
            rows.append((int(ts[marks[0]]), int(ts[marks[-1]]), name, int(ts[ks[0]])))
        rows.sort()
        ann_anchor = np.array([r[0] for r in rows], dtype=np.int64)
        ann_last = np.array([r[1] for r in rows], dtype=np.int64)
        ann_names = [r[2] for r in rows]
        ann_first = np.array([r[3] for r in rows], dtype=np.int64)
        covered = sum(len(ks) for ks in groups["kernels"].to_list()) / max(k.height, 1)

    disagreements: int | None = None
    if burst_anchor is not None and ann_anchor is not None:
        a, bset = set(ann_anchor.tolist()), set(burst_anchor.tolist())
        disagreements = len(a ^ bset)

    use_annotations = ann_anchor is not None and (
        opts.method == "annotations"
        or burst_anchor is None
        or (opts.method == "auto" and disagreements == 0)
        # a weak burst guess yields to annotations that cover the device's kernels
        or (opts.method == "auto" and not burst_confident and covered >= ANNOTATION_COVERAGE)
        # a CPU capture has no device-idle pauses to go by: its own annotations decide
        or (opts.method == "auto" and opts.cpu_activity and covered >= ANNOTATION_COVERAGE)
    )
    if opts.method == "annotations" and ann_anchor is None:
        raise UnsupportedTraceError(
            f"{trace.meta.path}: no per-step annotations (vLLM execute_context_…, SGLang "
            "step[…], ProfilerStep#…) linked to device kernels; use --steps bursts"
        )
    n_bursts = 0 if burst_anchor is None else burst_anchor.size
    if use_annotations:
        assert ann_anchor is not None
        method = "annotations"
        anchors, lasts, names = ann_anchor, ann_last, ann_names
        if disagreements:
            warnings.append(
                f"per-step annotations and step-marker bursts disagree on {disagreements} "
                f"step(s) ({ann_anchor.size} annotated vs {n_bursts} found from kernels); "
                "using the annotations"
                + (
                    ""
                    if burst_confident
                    else f" (they cover {covered:.0%} of the kernels; the "
                    "bursts show no clear step structure)"
                )
            )
        detail = "the engine's per-step annotations"
    elif burst_anchor is not None:
        assert burst_last is not None
        method = "bursts"
        if not burst_confident:
            warnings.append(detail)
        anchors, lasts = burst_anchor, burst_last
        names = [None] * anchors.size
        if ann_anchor is not None and disagreements:
            warnings.append(
                f"per-step annotations and step-marker bursts disagree on {disagreements} "
                f"step(s) ({ann_anchor.size} annotated vs {anchors.size} found from kernels); "
                "using the bursts"
            )
        if ann_anchor is not None and not disagreements:
            lookup = dict(zip(ann_anchor.tolist(), ann_names, strict=True))
            names = [lookup.get(int(x)) for x in anchors]
    else:
        method = "idle"
        threshold = _natural_break(u.gap_ends - u.gap_starts)
        if threshold is None:
            cut = np.zeros(0, dtype=np.int64)
        else:
            cut = u.gap_ends[(u.gap_ends - u.gap_starts) >= threshold]
        anchors = np.concatenate(([ts[0]], cut)).astype(np.int64) if ts.size else cut
        lasts = anchors.copy()
        names = [None] * anchors.size
        detail = "no step-marker kernels: steps are bursts of device activity separated by " + (
            f"idle gaps ≥ {threshold} ns" if threshold else "nothing (one step)"
        )
        warnings.append(f"no step-marker kernels ({', '.join(rules.step_marker)}); {detail}")

    # A CPU capture has no device-idle pause between steps (the thread is always busy, and
    # GIL stalls make idle gaps inside a step): there, a step starts at its annotation's
    # first op, so its ops stay inside it
    cpu_starts = ann_first if method == "annotations" and opts.cpu_activity else None
    table, phases = _assemble(k, u, anchors, lasts, names, rules, cpu_starts)
    return StepResult(
        device=device,
        kernels=k.drop("_marker"),
        table=table,
        phases=phases,
        method=method,
        marker=", ".join(rules.step_marker) if method != "idle" else None,
        layers=layers,
        detail=detail,
        annotation_steps=0 if ann_anchor is None else int(ann_anchor.size),
        disagreements=disagreements,
        warnings=warnings,
        union=u,
    )


def steps(
    trace: Trace,
    rules: Rules | None = None,
    *,
    method: str = "auto",
    layers: int | None = None,
    step_gap_ns: int | None = None,
    device: int | None = None,
) -> pl.DataFrame:
    """The engine steps of one device, one row per step.

    Returns:
        DataFrame: ``index`` (Int64), ``start_ns``, ``anchor_ns``, ``end_ns`` (Int64, ns),
        ``interval_ns`` (Int64, ns, anchor-to-anchor; null for the first step), ``kind``
        (String: decode|mixed), ``phase`` (Int64, index of the phase), ``kernels`` (Int64,
        kernels starting in the step), ``busy_fraction`` (Float64, device-busy share of the
        step's span), ``prefill_ns`` and ``prefill_kernels`` (Int64: ns and count of the
        prefill kernels starting in the step, its prompt work), ``annotation`` (String, the
        engine's step annotation, when there is
        one), and ``ns_<family>`` (Int64, ns of kernel time per family in the step).

    Raises:
        UnsupportedTraceError: no kernels on the device.
    """
    opts = StepOptions(method=method, layers=layers, step_gap_ns=step_gap_ns, device=device)
    return find_steps(trace, rules, opts).table


def describe(result: StepResult) -> dict[str, Any]:
    """Plain facts about how the steps were found (for the summary document)."""
    return {
        "method": result.method,
        "marker": result.marker,
        "layers": result.layers,
        "detail": result.detail,
        "annotation_steps": result.annotation_steps,
        "disagreements": result.disagreements,
    }
