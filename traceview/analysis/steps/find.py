"""Engine steps: candidates from bursts, annotations or idle gaps -> one choice -> steps,
their kinds and phases.

Definitions (docs/metrics.md): a step's **anchor** is the start of its first step-marker kernel;
its **start** is the start of the first device kernel after the longest device-idle gap
between the previous step's last marker kernel and this anchor (the anchor if there is no
idle gap; the trace's first kernel for the first step). Step k spans [start_k, start_k+1);
the last ends at the last kernel's end. A serving step before an autotuning that opens the
next step ends where the autotuning's region starts (:func:`.warmup.trim_lead_ins`).
A **phase** is a maximal run of steps of one kind.

A step's **kind**: :mod:`traceview.analysis.steps.kinds`.

How the candidates are found and chosen: :mod:`traceview.analysis.steps.candidates`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from traceview._io import release_free_memory
from traceview.analysis.base.document import Activity, StepFinding
from traceview.analysis.base.intervals import I64, Union, merge_windows, subtract, union
from traceview.analysis.base.launches import graph_launches_without_work
from traceview.analysis.classify.families import Rules, family_codes, load_rules
from traceview.analysis.classify.shapes import shape_families, shape_tokens
from traceview.analysis.steps.autotune import autotune_regions, benchmark_regions
from traceview.analysis.steps.bursts import burst_candidate, idle_candidate
from traceview.analysis.steps.candidates import (
    DeviceKernels,
    StepOptions,
    annotation_candidate,
    choose,
    device_kernels,
    replay_mask,
)
from traceview.analysis.steps.capture import capture_regions
from traceview.analysis.steps.host import with_host_columns
from traceview.analysis.steps.kinds import prefill_only, step_kinds
from traceview.analysis.steps.records import (
    RECORD_COLUMNS,
    STEP_ANNOTATION,
    record,
)
from traceview.analysis.steps.warmup import (
    COMPILE_RANGE,
    LAZY_LOADING,
    Region,
    capture_warmup,
    leave_out,
    mark_warmup,
    trim_lead_ins,
    with_regions,
)
from traceview.analysis.timing.clocks import Clocks, read_clocks
from traceview.analysis.timing.idle import CAUSES, HostCalls, idle_per_window
from traceview.errors import CaptureOnlyError, UnsupportedTraceError
from traceview.model import Trace, replays_not_itemised

RECORD_DTYPES: dict[str, pl.DataType] = {
    **{c: pl.Int64() for c in RECORD_COLUMNS if c != "forward_mode"},
    "forward_mode": pl.String(),
}


@dataclass
class StepResult:
    """Steps of one device and how they were found (see :func:`find_steps`)."""

    device: int
    kernels: pl.DataFrame  # the device's kernels with ``family`` (Enum), sorted by ts_ns
    table: pl.DataFrame  # one row per step (see :func:`traceview.steps`)
    phases: pl.DataFrame  # one row per phase
    method: str  # annotations | bursts | idle
    marker: str | None  # description of the step marker used (None: idle gaps)
    layers: int | None  # bursts per step (bursts method)
    detail: str  # how the boundaries were chosen, in words
    union: Union  # the union of the device's activity
    totals: pl.DataFrame  # per (name, cat): family, count, total_ns
    trace: Trace  # the trace analysed (a CPU capture's with its stand-ins)
    host: HostCalls  # the trace's submitting and synchronising calls, read once
    # the kernels' starts as read once (int64, time order): a frame of many chunks copies
    # its column on every read, 8 MB per million kernels
    starts: np.ndarray
    annotation_steps: int = 0
    disagreements: int | None = None  # steps the annotation and burst methods disagree on
    warnings: list[str] = field(default_factory=list)
    activity: Activity = "kernel"  # kernel | cpu_op (a CPU capture: CPU ranges stand in)
    capture_regions: int = 0  # CUDA-graph capture / warm-up regions left out
    capture_kernels: int = 0  # the kernels under them
    capture_spans: tuple[tuple[int, int], ...] = ()  # each region's (start_ns, end_ns)
    # what the host calls say of the host's and the device's clocks: where they disagree
    # beyond jitter, idle time is not split by cause (timing/clocks.py)
    clocks: Clocks = field(default_factory=Clocks)
    # the warm-up regions (graph capture's among them), in start order, and whether the
    # steps that hold them were kept in the serving figures (AnalysisConfig.keep_warmup)
    warmup: tuple[Region, ...] = ()
    warmup_kept: bool = False
    # per row of ``kernels``: it lies in a step the figures cover (None: every kernel does)
    serving: np.ndarray | None = None

    @property
    def serving_kernels(self) -> pl.DataFrame:
        """The device's kernels outside the steps left out for warm-up (all of them where
        none is)."""
        if self.serving is None:
            return self.kernels
        return self.kernels.filter(pl.Series(self.serving))

    @property
    def serving_union(self) -> Union:
        """The union of the serving kernels' intervals (:attr:`union` where no step is
        left out for warm-up)."""
        if self.serving is None:
            return self.union
        k = self.serving_kernels
        ts = k["ts_ns"].to_numpy().astype(np.int64)
        return union(ts, ts + k["dur_ns"].to_numpy().astype(np.int64))

    @property
    def serving_windows(self) -> Union | None:
        """The time the serving figures cover (None: the whole trace, where no step is
        left out for warm-up): the serving steps' spans, less every warm-up region's span
        (an autotuning's first compile may lie in the step before the one it opens).
        Empty where every step holds warm-up."""
        if self.serving is None:
            return None
        served = self.table.filter(pl.col("phase").is_not_null())
        spans = merge_windows(
            served["start_ns"].to_numpy().astype(np.int64),
            served["end_ns"].to_numpy().astype(np.int64),
        )
        gone = merge_windows(
            np.array([r.start_ns for r in self.warmup], dtype=np.int64),
            np.array([r.end_ns for r in self.warmup], dtype=np.int64),
        )
        return subtract(spans, gone)

    @property
    def left_out(self) -> np.ndarray:
        """Per step: it holds warm-up and the figures leave it out (its ``phase`` is null)."""
        return self.table["phase"].is_null().to_numpy()


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
    return (kernels["ts_ns"] + kernels["dur_ns"]).to_numpy().astype(np.int64, copy=False)


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
        w = np.searchsorted(lo, u.gap_ends, side="left")
        w -= 1  # in place: one array the size of the gaps, not two
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
    trace: Trace,
    k: DeviceKernels,
    u: Union,
    anchors: I64,
    last_markers: I64,
    names: list[list[str]],
    rules: Rules,
    starts: I64 | None = None,
    bounds: Union | None = None,
    lead_ins: list[Region] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, int]]:
    """The steps table and its phases. ``bounds``: the union the step starts are chosen
    on (the device's activity with its warm-up regions filled: no step starts inside one);
    ``u`` by default. ``lead_ins``: the warm-up regions whose idle lead-in no step's span
    holds (:func:`trim_lead_ins`; None: the steps tile the device's timeline)."""
    ts, dur = k.ts, k.dur
    end_all = int(u.ends[-1])  # the last kernel's end
    if starts is None:
        prev_last = np.concatenate(([ts[0]], last_markers[:-1])).astype(np.int64)
        starts = _step_starts(bounds or u, int(ts[0]), anchors, prev_last)
    ends = np.append(starts[1:], end_all).astype(np.int64)
    if lead_ins:
        ends = trim_lead_ins(starts, ends, lead_ins)

    step_of_kernel = np.searchsorted(starts, ts, side="right") - 1
    inside = step_of_kernel >= 0
    everywhere = bool(inside.all())
    step_in = step_of_kernel if everywhere else step_of_kernel[inside]
    dur_in = dur if everywhere else dur[inside]
    prefill = prefill_only(rules, k)[inside]
    # the work invariant: prompt work per step (kernel time and launches)
    prefill_ns = np.bincount(
        step_in[prefill], minlength=starts.size, weights=dur_in[prefill]
    ).astype(np.int64)
    prefill_kernels = np.bincount(step_in[prefill], minlength=starts.size)
    # kernel time per step and family, from one bincount over (step, family) pairs
    families = len(k.family.names)
    codes = k.family.codes if everywhere else k.family.codes[inside]
    fam_present = np.bincount(codes, minlength=families) > 0
    pair = step_in * families + codes
    shape = (starts.size, families)
    fam_ns = np.bincount(pair, weights=dur_in, minlength=starts.size * families).reshape(shape)
    del pair, codes
    counts = np.bincount(step_in, minlength=starts.size)
    busy = u.clipped_lengths(starts, ends)
    span = ends - starts
    recs = [record(n) for n in names]
    tokens, requests, shape_kv, shape_pairs, shape_ops = shape_tokens(trace, k.frame, starts)
    kinds = step_kinds((prefill_kernels > 0).tolist(), recs, tokens, requests)
    kind = np.array(kinds.kind, dtype=object)
    phase = np.concatenate(([0], np.cumsum(kind[1:] != kind[:-1]))).astype(np.int64)

    table = pl.DataFrame(
        {
            "index": np.arange(starts.size, dtype=np.int64),
            "start_ns": starts,
            "anchor_ns": anchors.astype(np.int64),
            "end_ns": ends,
            "kind": pl.Series(kinds.kind, dtype=pl.String),
            "kind_source": pl.Series(kinds.source, dtype=pl.String),
            "phase": phase,
            "kernels": counts.astype(np.int64),
            "busy_fraction": np.where(span > 0, busy / np.maximum(span, 1), 0.0),
            "prefill_ns": prefill_ns,
            "prefill_kernels": prefill_kernels.astype(np.int64),
            "annotation": pl.Series([n[0] if n else None for n in names], dtype=pl.String),
            **{
                c: pl.Series([r.get(c) for r in recs], dtype=dtype)
                for c, dtype in RECORD_DTYPES.items()
            },
            "shape_tokens": pl.Series(tokens, dtype=pl.Int64),
            "shape_kv_tokens": pl.Series(shape_kv, dtype=pl.Int64),
            "shape_attention_pairs": pl.Series(shape_pairs, dtype=pl.Int64),
            "shape_attention_ops": pl.Series(shape_ops, dtype=pl.Int64),
            **{
                f"ns_{name}": fam_ns[:, i].astype(np.int64)
                for i, name in enumerate(k.family.names)
                if fam_present[i]
            },
            "busy_ns": busy.astype(np.int64),
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
    return table, phase_table(table), kinds.disagreements


def phase_table(table: pl.DataFrame) -> pl.DataFrame:
    """One row per phase of the steps table (its steps with a ``phase``): ``phase``,
    ``kind``, ``first_step``, ``last_step``, ``steps``, ``start_ns``, ``end_ns``."""
    return (
        table.filter(pl.col("phase").is_not_null())
        .group_by("phase", maintain_order=True)
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


def empty_step_table() -> pl.DataFrame:
    """The step table of a trace with no steps (one that holds only CUDA-graph capture):
    no rows, and every column a step table always has (the ``ns_<family>`` columns come
    with the families present, so there are none)."""
    return pl.DataFrame(
        schema={
            "index": pl.Int64,
            "start_ns": pl.Int64,
            "anchor_ns": pl.Int64,
            "end_ns": pl.Int64,
            "interval_ns": pl.Int64,
            "kind": pl.String,
            "kind_source": pl.String,
            "phase": pl.Int64,
            "kernels": pl.Int64,
            "busy_fraction": pl.Float64,
            "prefill_ns": pl.Int64,
            "prefill_kernels": pl.Int64,
            "annotation": pl.String,
            **RECORD_DTYPES,
            "shape_tokens": pl.Int64,
            "shape_kv_tokens": pl.Int64,
            "shape_attention_pairs": pl.Int64,
            "shape_attention_ops": pl.Int64,
            "busy_ns": pl.Int64,
            **{f"idle_{cause}_ns": pl.Int64 for cause in CAUSES},
            "host_step_ns": pl.Int64,
            "host_before_gpu_ns": pl.Int64,
            "warmup": pl.String,
        }
    )


def with_time_breakdown(
    table: pl.DataFrame,
    trace: Trace,
    k: DeviceKernels,
    u: Union,
    host: HostCalls,
    *,
    split: bool = True,
) -> pl.DataFrame:
    """The steps with where their idle time went (:mod:`traceview.analysis.timing.idle`):
    one ``idle_<cause>_ns`` column per cause, over each step's span; with ``busy_ns`` they
    add up to ``end_ns - start_ns`` exactly. ``split`` False (the host's and the device's
    clocks disagree, :mod:`traceview.analysis.timing.clocks`): every cause null."""
    if not split:
        return table.with_columns(
            pl.lit(None, pl.Int64).alias(f"idle_{cause}_ns") for cause in CAUSES
        )
    lo = table["start_ns"].to_numpy().astype(np.int64, copy=False)
    hi = table["end_ns"].to_numpy().astype(np.int64, copy=False)
    idle = idle_per_window(trace, k.ts, k.frame["correlation"], u, lo, hi, host)
    release_free_memory()
    return table.with_columns(
        pl.Series(f"idle_{cause}_ns", idle[cause].astype(np.int64)) for cause in CAUSES
    )


def cpu_activity(trace: Trace) -> Trace:
    """For a trace with no device activity (a CPU-only capture), what stands in for kernels:
    the innermost ``user_annotation`` ranges that are not engine-step annotations nor the
    host's warm-up (compile ranges: :mod:`.warmup`) (the ops an engine names with
    ``record_function``), or, without any, the leaf ``cpu_op`` events.
    A range is innermost when no other candidate on its thread starts inside it. Its pid is
    the "device" and its tid the "stream"."""
    ev = trace.events
    name = pl.col("name").cast(pl.String)
    named = ev.filter(
        (pl.col("event_kind") == "user_annotation")
        & ~name.str.contains(STEP_ANNOTATION.pattern)
        & ~name.str.contains(COMPILE_RANGE.pattern)  # the host compiling: warm-up, no op
        & (name != LAZY_LOADING)
    )
    candidates = named if named.height else ev.filter(pl.col("event_kind") == "cpu_op")
    ops = candidates.sort(["pid", "tid", "ts_ns"])
    end = pl.col("ts_ns") + pl.col("dur_ns")
    nxt = pl.col("ts_ns").shift(-1).over(["pid", "tid"])
    leaves = ops.filter(nxt.is_null() | (nxt >= end))
    kernels = leaves.select(
        "ts_ns",
        "dur_ns",
        "name",
        "cat",
        pl.lit("kernel").cast(trace.kernels["event_kind"].dtype).alias("event_kind"),
        "pid",
        "tid",
        pl.col("pid").alias("device"),
        pl.col("tid").alias("stream"),
        "correlation",
        "external_id",
    ).sort("ts_ns", maintain_order=True)
    schema = {c: t for c, t in trace.kernels.schema.items() if c in kernels.columns}
    return replace(trace, kernels=kernels.cast(schema))  # type: ignore[arg-type]


def find_steps(
    trace: Trace, rules: Rules | None = None, options: StepOptions | None = None
) -> StepResult:
    """Find the engine steps of one device: each method proposes its steps (see
    :mod:`traceview.analysis.steps.candidates`), one arbiter chooses, and each step's kind
    is decided by the strongest evidence there is (see the module docstring).

    A trace with no device activity (a CPU-only capture) is analysed through its CPU ranges
    (:func:`cpu_activity`); there a step starts at its annotation's first op, since a CPU
    thread has no device-idle pause between steps and GIL stalls make idle gaps inside one.

    Raises:
        UnsupportedTraceError: no kernels (nor CPU ops), an unknown method, or
            ``annotations`` asked for on a trace without step annotations.
    """
    rules = rules or load_rules()
    opts = options or StepOptions()
    if opts.method not in ("auto", "bursts", "annotations"):
        raise UnsupportedTraceError(f"unknown step method {opts.method!r}")
    activity: Activity = "kernel"
    replays = int(replay_mask(trace.kernels).sum())  # the whole trace's, as the loader says
    capture = capture_regions(trace)
    captured = capture_warmup(trace, capture)
    if capture.kernels and not opts.keep_warmup:
        # engine start-up, not serving: no steps, cadence or gaps from it
        if capture.kernels == trace.kernels.height:
            raise CaptureOnlyError(
                f"{trace.meta.path}: CUDA-graph capture / warm-up only "
                f"({capture.regions} region(s), {capture.kernels} kernel(s)): no serving "
                "steps to analyse"
            )
        trace = replace(trace, kernels=trace.kernels.filter(pl.Series(~capture.mask)))
    if (
        trace.kernels.height == 0
        and trace.events.filter(pl.col("event_kind").is_in(["cpu_op", "user_annotation"])).height
    ):
        trace, activity = cpu_activity(trace), "cpu_op"
    device = pick_device(trace, opts.device)
    mine = trace.kernels
    if len(trace.devices) > 1:  # one device: no copy of its kernels
        mine = mine.filter(pl.col("device") == device)
    family = family_codes(mine, rules, shape_families(trace, mine))
    k = device_kernels(mine, family, rules.step_marker, rules.step_edge)
    u = union(k.ts, k.ts + k.dur)
    autotune: list[Region] = []
    if activity == "kernel":  # do_bench by its kernels; Inductor's by its host range
        autotune = autotune_regions(mine, k.ts, k.dur, u)
        autotune += benchmark_regions(trace, mine, k.ts, k.dur, u, autotune)
        autotune.sort(key=lambda r: r.start_ns)
    # the steps' boundaries never fall inside a warm-up region: its idle time (the host
    # compiling a config) is no pause between steps
    bounds = with_regions(u, autotune)

    bursts = burst_candidate(k, bounds, opts)
    # with --steps bursts the annotations still state each step's batch, where they match
    annotations = annotation_candidate(trace, k, device)
    if opts.method == "annotations" and annotations is None:
        raise UnsupportedTraceError(
            f"{trace.meta.path}: no per-step annotations (vLLM execute_context_…, SGLang "
            "step[…], ProfilerStep#…) linked to device kernels; use --steps bursts"
        )
    idle = idle_candidate(k, bounds) if bursts is None else None
    chosen = choose(
        bursts, annotations, idle, method=opts.method, cpu_activity=activity == "cpu_op"
    )
    c = chosen.candidate
    if c.method == "annotations" and autotune:  # an autotuning may open an annotated step
        bounds = with_regions(u, autotune, c.first_kernel)
    warnings = list(chosen.warnings)
    if capture.kernels and not opts.keep_warmup:
        warnings.append(
            f"CUDA-graph capture / warm-up: {capture.regions} region(s), {capture.kernels} "
            "kernel(s) left out (engine start-up, not serving)"
        )
    if c.method == "idle":
        how = c.detail.removeprefix("no step-marker kernels: ")  # said once, with the markers
        warnings.append(f"no step-marker kernels ({', '.join(rules.step_marker)}): {how}")
    replayed = bool(replays) and bool(replay_mask(mine).any())
    if replayed:  # the loader's line, which the command prints once
        warnings.append(replays_not_itemised(replays))
    if k.height and activity == "kernel":
        empty, graphs = graph_launches_without_work(trace, int(k.ts[0]), int(k.ts[-1]))
        if empty:
            why = (  # an export whose whole replays are read: those it could not read
                "their replays were skipped, untimed or started on the host: see the events skipped"
                if replays
                else "the profiler dropped their records, or an Nsight export traced graphs "
                "whole: record with --cuda-graph-trace=node"
            )
            warnings.append(
                f"{empty} of {graphs} CUDA-graph launches inside the trace have no device "
                f"activity ({why}): the steps, cadence and idle time around them are unreliable"
            )
    starts = c.first_kernel if c.method == "annotations" and activity == "cpu_op" else None
    # the pause before an autotuning that opens a step spans warm-up: it is neither step's
    lead_ins = None if opts.keep_warmup else autotune
    table, phases, disagree = _assemble(
        trace, k, u, c.anchors, c.last_markers, chosen.names, rules, starts, bounds, lead_ins
    )
    method, layers, detail = c.method, c.layers, c.detail
    annotation_steps, disagreements = chosen.annotation_steps, chosen.disagreements
    del bursts, annotations, idle, chosen, c  # the candidates, before the breakdown's arrays
    release_free_memory()
    host = HostCalls.of(trace)  # read once: the summary's gap fills split with it too
    clocks = (
        read_clocks(trace, device, k.frame, k.ts, k.ts + k.dur, host.calls)
        if activity == "kernel"
        else Clocks()  # a CPU capture's stand-ins run on the host's own clock
    )
    table = with_time_breakdown(table, trace, k, u, host, split=clocks.consistent)
    said = clocks.warning()
    if said is not None:
        warnings.append(said)
    table = with_host_columns(table, trace, k, host)
    table, regions, said_warmup = mark_warmup(table, trace, [*captured, *autotune], u)
    warnings.extend(said_warmup)
    serving: np.ndarray | None = None
    if not opts.keep_warmup and table["warmup"].is_not_null().any():
        table, serving = leave_out(table, k.ts)
        phases = phase_table(table)
    release_free_memory()  # the breakdown's temporaries, before the summary's
    warnings.extend(
        f"step kinds: the annotations state decode-only batches, but the {what} show prompt "
        f"work in {n} step(s); the annotations decide (kind_source)"
        for what, n in disagree.items()
    )
    return StepResult(
        device=device,
        kernels=mine.with_columns(family.series()),
        table=table,
        phases=phases,
        method=method,
        marker=(
            ", ".join(rules.step_marker) + (", CUDA-graph replays" if replayed else "")
            if method != "idle"
            else None
        ),
        layers=layers,
        detail=detail,
        annotation_steps=annotation_steps,
        disagreements=disagreements,
        warnings=warnings,
        union=u,
        totals=family.totals(k.dur, serving),
        activity=activity,
        trace=trace,
        capture_regions=capture.regions,
        capture_kernels=capture.kernels,
        capture_spans=capture.spans,
        host=host,
        starts=k.ts,
        clocks=clocks,
        warmup=tuple(regions),
        warmup_kept=opts.keep_warmup,
        serving=serving,
    )


def describe(result: StepResult) -> StepFinding:
    """Plain facts about how the steps were found (for the summary document)."""
    return {
        "method": result.method,
        "marker": result.marker,
        "layers": result.layers,
        "detail": result.detail,
        "annotation_steps": result.annotation_steps,
        "disagreements": result.disagreements,
        "kind_sources": {
            s: int(n) for s, n in result.table["kind_source"].value_counts(sort=True).iter_rows()
        },
    }
