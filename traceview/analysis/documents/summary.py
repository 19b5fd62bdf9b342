"""The summary document (``traceview.summary/1``, docs/design.md) built from the analyses."""

from __future__ import annotations

import math
from copy import deepcopy
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import orjson
import polars as pl

from traceview._io import release_free_memory
from traceview.analysis.base.document import (
    DECODING,
    KINDS,
    SUMMARY_SCHEMA,
    Capture,
    FamilyRow,
    GapFill,
    GapStats,
    GrowthMeasure,
    Phase,
    PhaseWork,
    PrefillGrowth,
    StepFacts,
    StepFinding,
    StepTime,
    SummaryDocument,
    TimeBreakdown,
    TraceFacts,
    Work,
)
from traceview.analysis.base.intervals import Union, merge_windows, union
from traceview.analysis.base.names import short_name
from traceview.analysis.base.precision import line_ends, sig, sig_or_none
from traceview.analysis.base.stats import mean, percentiles
from traceview.analysis.classify.families import Rules, family_rows
from traceview.analysis.documents import display
from traceview.analysis.steps.capture import capture_regions
from traceview.analysis.steps.find import StepResult, describe, empty_step_table, pick_device
from traceview.analysis.timing.busy import busy_document
from traceview.analysis.timing.cadence import cadence, decoding_cadence, kind_cadence, phase_rows
from traceview.analysis.timing.gaps import GAP_SCHEMA, gap_table, summarize_gaps
from traceview.analysis.timing.idle import (
    CAUSES,
    IDLE_SCHEMA,
    FamilyActivity,
    HostCalls,
    idle_in_windows,
    long_idle,
)
from traceview.analysis.work.devices import DeviceSpec
from traceview.analysis.work.efficiency import (
    device_peaks,
    efficiency_section,
    family_work,
    kernel_table_work,
)
from traceview.analysis.work.model_config import ModelSpec
from traceview.analysis.work.op_flops import kernel_work
from traceview.model import Trace
from traceview.paths import stored

SCHEMA = SUMMARY_SCHEMA
SMALL_N = 100  # below this, a p99 is close to the maximum: say so


@dataclass
class Summary:
    """The summary of one trace: ``to_dict()`` is the ``traceview.summary/1`` document.

    Attributes:
        document: the summary document (plain JSON-able data).
        steps: the step table (see :func:`traceview.steps`).
        families: the family table (see :func:`traceview.families`).
        gaps: the decode-gap table (see :func:`traceview.decode_gaps`).
        kernel_table: time per kernel name on the device (see :func:`traceview.kernels`).
        warnings: what a reader should know before trusting a figure.
        timeline: with fewer than 2 steps (no cadence to draw), the analysed device's
            activity per family: ``family`` (String), ``start_ns``, ``end_ns`` (Int64), the
            union of each family's kernels (gaps under 1/4000 of the span closed); else
            None.
        idle: the device's idle intervals of at least 50 µs, each split by cause
            (:func:`traceview.analysis.timing.idle.long_idle`: ``start_ns``, ``end_ns``,
            ``cause``, ``host_late_ns``, ``launch_ns``, ``sync_ns``, ``dependency_ns``,
            ``other_ns``); what ``annotate`` draws on its "traceview idle" track.
    """

    document: SummaryDocument
    steps: pl.DataFrame
    families: pl.DataFrame
    gaps: pl.DataFrame
    kernel_table: pl.DataFrame
    idle: pl.DataFrame
    warnings: list[str] = field(default_factory=list)
    timeline: pl.DataFrame | None = None

    def to_dict(self) -> SummaryDocument:
        return self.document

    def to_json(self, indent: bool = True) -> str:
        option = orjson.OPT_INDENT_2 if indent else 0
        return orjson.dumps(self.document, option=option).decode()

    def __repr__(self) -> str:
        """About 15 lines: the trace, its steps and phases, the decode cadence, the decode
        gaps, busy and the largest families (the whole document is ``to_dict()``)."""
        d = self.document
        t, st, b = d["trace"], d["steps"], d["busy"]

        def ms(ns: int | float | None) -> str:
            return "—" if ns is None else f"{ns / 1e6:,.3f} ms"

        def pct(x: float | None) -> str:
            return "—" if x is None else f"{x:.1%}"

        cad = st["decoding_cadence"]
        gaps = next(g for g in d["decode_gaps"] if g["population"] == "decode")
        phases = ", ".join(
            f"{p['kind']} {p['first_step']}–{p['last_step']}" for p in st["phases"][:6]
        ) + (f", … ({len(st['phases'])} phases)" if len(st["phases"]) > 6 else "")
        fams = ", ".join(f"{f['family']} {pct(f['share'])}" for f in d["families"][:4])
        lines = [
            f"Summary({t['path']!r})",
            f"  GPU             {t['gpu'] or '—'} (device {t['device']}), span {ms(t['span_ns'])}",
            f"  activity        {t['kernels']:,} {t['activity']}s",
            f"  steps           {st['count']:,} by {st['method']}",
            f"  phases          {phases or '—'}",
            f"  decode cadence  p50 {ms(cad['p50_ns'])}, p99 {ms(cad['p99_ns'])} (n={cad['n']})",
            f"  decode gaps     p50 {ms(gaps['p50_ns'])}, p99 {ms(gaps['p99_ns'])} "
            f"(n={gaps['n']}, decode steps)",
            f"  busy            {pct(b['fraction'])}; in the widest gaps "
            f"{pct(b['in_widest_gaps'])}",
            f"  families        {fams}",
        ]
        if self.warnings:
            lines.append(f"  warnings        {len(self.warnings)} (summary.warnings)")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """The summary as an HTML table, for notebooks (drawn by
        :mod:`traceview.render.markup`, through :mod:`traceview.analysis.documents.display`)."""
        return display.summary_html(self.document)


def build(
    rules: Rules,
    result: StepResult,
    model: ModelSpec | None = None,
    gpu: DeviceSpec | None = None,
) -> Summary:
    trace, activity = result.trace, result.activity
    warnings = list(result.warnings)
    if activity == "cpu_op":
        warnings.insert(
            0,
            "no device activity in this trace (a CPU capture): the innermost annotated ranges "
            "(else leaf cpu_ops) stand in for kernels",
        )
    k = result.kernels
    fam = family_rows(result.totals)
    rolled = family_rows(result.totals, roll_up=True)
    peaks = device_peaks(trace, result.device, gpu)  # --gpu, else matched from the trace
    table, efficiency, said = efficiency_section(trace, result.device, result.table, model, peaks)
    warnings += said
    phases = phase_rows(result.phases, table)
    gaps, marker, gap_family = gap_table(k, result.totals, result.phases, rules)
    gap_stats = summarize_gaps(gaps, gap_family)
    decoding = table["kind"].is_in(DECODING).any()
    if not decoding:
        warnings.append("no decode steps (every step is prefill): decode gaps are not measured")
    elif marker is None:
        warnings.append(
            "no linear-attention decode nor full-attention kernels: decode gaps are not available"
        )
    elif marker.inferred:
        warnings.append(
            f"decode marker inferred: no kernel matches the preset's decode-marker pattern, "
            f"so decode gaps are measured between {short_name(marker.used)!r} kernels"
        )
    small = [f"{g['population']} n={g['n']}" for g in gap_stats if 0 < g["n"] < SMALL_N]
    if small:
        warnings.append(
            f"decode gaps: p99 rests on fewer than {SMALL_N} samples ({', '.join(small)}); "
            "it is close to the maximum"
        )
    device = DeviceActivity.of(result)
    release_free_memory()  # its temporaries (each kernel's end, family codes) go back
    every = gap_stats[0]  # the "all" population
    for g in gap_stats:
        if g is not every and g["n"] == every["n"]:  # the other one is empty: the same gaps
            g["filled"], g["widest"] = deepcopy(every["filled"]), deepcopy(every["widest"])
            continue
        g["filled"] = gap_fill(gaps, g, device)
        g["widest"] = gap_fill(gaps, g, device, p99=True)
    idle = long_idle(trace, device.ts, device.correlation, device.union, device.host)
    shares = device.shares
    del device  # its correlation ids, before the phases' breakdown
    release_free_memory()
    p99_all = gap_stats[0]["p99_ns"]
    start_ns, end_ns = int(result.union.starts[0]), int(result.union.ends[-1])
    streams = sorted(k["stream"].drop_nulls().unique().to_list())
    facts: TraceFacts = {
        "path": stored(trace.meta.path),  # a name's non-UTF-8 bytes as \xff
        "format": trace.meta.format,
        "gpu": trace.meta.gpu_name,
        "events": trace.meta.events,
        "kernels": k.height,
        "skipped_events": trace.meta.skipped_events,
        "devices": trace.devices,
        "device": result.device,
        "streams": streams,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "span_ns": end_ns - start_ns,
        "activity": activity,
    }
    step_facts: StepFacts = {
        **describe(result),
        "count": table.height,
        "cadence": cadence(table),
        "cadence_by_kind": {kind: kind_cadence(table, kind) for kind in KINDS},
        "decoding_cadence": decoding_cadence(table),
        "phases": phases,
    }
    doc: SummaryDocument = {
        "schema": SCHEMA,
        "trace": facts,
        "classification": rules.name,
        "families": _family_rows(fam),
        "families_rollup": _family_rows(rolled),
        "steps": step_facts,
        "work": work(table, phases),
        "decode_gaps": gap_stats,
        "decode_marker": None if marker is None else marker.used,
        "decode_marker_source": None if marker is None else marker.source,
        "decode_marker_kernels": [] if marker is None else list(marker.names),
        "busy": busy_document(result.union, result.device, gaps, p99_all),
        "time_breakdown": time_breakdown(table, phases, k, shares),
        "efficiency": efficiency,
        "capture": capture_section(
            result.capture_regions, result.capture_kernels, result.capture_spans
        ),
        "warnings": warnings,
    }
    op_work = kernel_work(trace, k)  # record_shapes' GEMM and attention ops, where present
    efficiency["families"] = family_work(k, op_work, peaks)
    per_name = result.totals.group_by("name", "family").agg(
        pl.col("count").sum(), pl.col("total_ns").sum()
    )
    all_ns = int(per_name["total_ns"].sum()) if per_name.height else 0
    kernel_table = kernel_table_work(
        per_name.with_columns(
            pl.col("name").cast(pl.String),
            pl.col("family").cast(pl.String),
            (pl.col("total_ns") / pl.col("count")).alias("mean_ns"),
            (pl.col("total_ns") / all_ns if all_ns else pl.lit(0.0)).alias("share"),
        ).sort(["total_ns", "name"], descending=[True, False]),
        k,
        op_work,
        peaks,
    )
    return Summary(
        document=doc,
        steps=table,
        families=fam,
        gaps=gaps,
        kernel_table=kernel_table,
        warnings=warnings,
        timeline=timeline(k, start_ns, end_ns) if table.height < 2 else None,
        idle=idle,
    )


def capture_section(
    regions: int, kernels: int, spans: tuple[tuple[int, int], ...] | list[tuple[int, int]]
) -> Capture:
    """The summary's ``capture`` section: the CUDA-graph capture / warm-up regions, the
    kernels under them and each region's span, in start order."""
    return {
        "regions": regions,
        "kernels": kernels,
        "spans": [{"start_ns": a, "end_ns": b, "span_ns": b - a} for a, b in spans],
    }


def capture_only_summary(
    trace: Trace,
    rules: Rules,
    device: int | None,
    said: str,
    model: ModelSpec | None = None,
    gpu: DeviceSpec | None = None,
) -> Summary:
    """The summary of a trace that holds only CUDA-graph capture / warm-up (engine
    start-up): 0 steps, no families, gaps, busy or phases (every kernel is under capture,
    and none is analysed, as in a trace that serves after its start-up), the trace's facts
    over all its kernels, and the ``capture`` section. ``said``: the
    :class:`CaptureOnlyError` message, the summary's first warning."""
    capture = capture_regions(trace)
    device = pick_device(trace, device)
    k = trace.kernels
    mine = k.filter(pl.col("device") == device) if len(trace.devices) > 1 else k
    start_ns = int(mine["ts_ns"].min())  # type: ignore[arg-type]
    end_ns = int((mine["ts_ns"] + mine["dur_ns"]).max())  # type: ignore[arg-type]
    path = trace.meta.path
    warnings = [said.removeprefix(f"{path}: ")]
    peaks = device_peaks(trace, device, gpu)
    table, efficiency, more = efficiency_section(trace, device, empty_step_table(), model, peaks)
    warnings += more
    empty = percentiles(np.empty(0, dtype=np.int64))
    finding: StepFinding = {
        "method": "none",
        "marker": None,
        "layers": None,
        "detail": "CUDA-graph capture / warm-up only: no serving steps",
        "annotation_steps": 0,
        "disagreements": None,
        "kind_sources": {},
    }
    doc: SummaryDocument = {
        "schema": SCHEMA,
        "trace": {
            "path": stored(path),
            "format": trace.meta.format,
            "gpu": trace.meta.gpu_name,
            "events": trace.meta.events,
            "kernels": k.height,
            "skipped_events": trace.meta.skipped_events,
            "devices": trace.devices,
            "device": device,
            "streams": sorted(mine["stream"].drop_nulls().unique().to_list()),
            "start_ns": start_ns,
            "end_ns": end_ns,
            "span_ns": end_ns - start_ns,
            "activity": "kernel",
        },
        "classification": rules.name,
        "families": [],
        "families_rollup": [],
        "steps": {
            **finding,
            "count": 0,
            "cadence": empty,
            "cadence_by_kind": {kind: deepcopy(empty) for kind in KINDS},
            "decoding_cadence": deepcopy(empty),
            "phases": [],
        },
        "work": work(table, []),
        "decode_gaps": summarize_gaps(pl.DataFrame(schema=GAP_SCHEMA), None),
        "decode_marker": None,
        "decode_marker_source": None,
        "decode_marker_kernels": [],
        "busy": {
            "device": device,
            "fraction": None,
            "window_start_ns": None,
            "window_end_ns": None,
            "busy_ns": None,
            "in_gaps": None,
            "in_widest_gaps": None,
        },
        "time_breakdown": [],
        "efficiency": efficiency,
        "capture": capture_section(capture.regions, capture.kernels, capture.spans),
        "warnings": warnings,
    }
    no_kernels = pl.DataFrame(
        schema={"name": pl.String, "family": pl.String, "count": pl.UInt32, "total_ns": pl.Int64}
    )
    return Summary(
        document=doc,
        steps=table,
        families=family_rows(no_kernels.drop("name")),
        gaps=pl.DataFrame(schema=GAP_SCHEMA),
        kernel_table=kernel_table_work(
            no_kernels.with_columns(
                pl.lit(None, pl.Float64).alias("mean_ns"), pl.lit(None, pl.Float64).alias("share")
            ),
            k,
            None,
            peaks,
        ),
        idle=pl.DataFrame(schema=IDLE_SCHEMA),
        warnings=warnings,
    )


HOST_BOUND = 0.2  # host_late + sync at least this share of a phase's span: host-bound
DEVICE_BOUND = 0.8  # busy at least this share (and not host-bound): device-bound


def verdict(span_ns: int, busy_ns: int, idle: dict[str, int]) -> str:
    """``host-bound`` when host_late plus sync is at least :data:`HOST_BOUND` of the span;
    ``device-bound`` when busy is at least :data:`DEVICE_BOUND` of it and the phase is not
    host-bound; ``balanced`` otherwise."""
    if span_ns > 0 and idle["host_late"] + idle["sync"] >= HOST_BOUND * span_ns:
        return "host-bound"
    if span_ns > 0 and busy_ns >= DEVICE_BOUND * span_ns:
        return "device-bound"
    return "balanced"


def family_activity(kernels: pl.DataFrame, ts: np.ndarray) -> FamilyActivity:
    """The device's kernels by family, prepared once for the busy-by-family shares (``ts``:
    their starts, as read already: a frame of many chunks copies on every read)."""
    family = kernels["family"]
    assert isinstance(family.dtype, pl.Enum)
    return FamilyActivity.of(
        ts,
        ts + kernels["dur_ns"].to_numpy(),
        family.to_physical().to_numpy(),
        len(family.dtype.categories),
    )


@dataclass(frozen=True)
class DeviceActivity:
    """What the gap fills and the long idle intervals read of the analysed device, read
    out once per summary: its activity's starts (time order) and correlation ids (-1 where
    none), its union, its family names, and the host calls."""

    trace: Trace
    ts: np.ndarray
    correlation: pl.Series
    union: Union
    families: list[str]
    shares: FamilyActivity
    host: HostCalls

    @classmethod
    def of(cls, result: StepResult) -> DeviceActivity:
        k = result.kernels
        family = k["family"]
        assert isinstance(family.dtype, pl.Enum)
        ts = result.starts
        if ts is None or ts.size != k.height:
            ts = k["ts_ns"].to_numpy().astype(np.int64, copy=False)
        return cls(
            result.trace,
            ts,
            k["correlation"],
            result.union,
            [str(x) for x in family.dtype.categories.to_list()],
            family_activity(k, ts),
            result.host,
        )


def gap_fill(
    gaps: pl.DataFrame, stats: GapStats, device: DeviceActivity, *, p99: bool = False
) -> GapFill | None:
    """What filled one population's gaps (overlaps aside), or only its widest (``p99``: at
    or above its p99): the merged windows' span, busy time by family and idle time by
    cause. In numpy over the gap table's columns: a filter of a million gaps' frame held
    ~40 MB at the summary's peak."""
    at_least = stats["p99_ns"]
    if at_least is None:
        return None
    keep = ~gaps["overlap"].to_numpy()
    if p99:
        keep &= gaps["gap_ns"].to_numpy() >= at_least
    if stats["population"] != "all":
        keep &= (gaps["population"] == stats["population"]).to_numpy()
    rows = np.flatnonzero(keep)
    del keep
    if rows.size == 0:
        return None
    w = merge_windows(gaps["start_ns"].to_numpy()[rows], gaps["end_ns"].to_numpy()[rows])
    lo, hi = w.starts, w.ends
    by_family = device.shares.busy_by_family(lo, hi, summed=True)[0]
    idle = idle_in_windows(
        device.trace, device.ts, device.correlation, device.union, lo, hi, device.host
    )
    return {
        "gaps": int(rows.size),
        "span_ns": int((hi - lo).sum()),
        "busy_ns": int(by_family.sum()),
        "busy_by_family": family_ns(device.families, by_family),
        "idle_ns": idle,
    }


def time_breakdown(
    table: pl.DataFrame, phases: list[Phase], kernels: pl.DataFrame, activity: FamilyActivity
) -> list[TimeBreakdown]:
    """Per phase: its span, busy time by family (each instant shared equally among the
    families running then) and idle time by cause, summed from its steps, and the verdict."""
    if not phases:
        return []
    family = kernels["family"]
    assert isinstance(family.dtype, pl.Enum)
    names = [str(x) for x in family.dtype.categories.to_list()]
    lo = np.array([p["start_ns"] for p in phases], dtype=np.int64)
    hi = np.array([p["end_ns"] for p in phases], dtype=np.int64)
    by_family = activity.busy_by_family(lo, hi)
    out: list[TimeBreakdown] = []
    for i, p in enumerate(phases):
        spent = step_time(table.slice(p["first_step"], p["steps"]))
        out.append(
            {
                "kind": p["kind"],
                "first_step": p["first_step"],
                "last_step": p["last_step"],
                "steps": p["steps"],
                "span_ns": spent["span_ns"],  # the steps tile the phase's span
                "busy_ns": spent["busy_ns"],
                "busy_by_family": family_ns(names, by_family[i]),
                "idle_ns": spent["idle_ns"],
                "verdict": spent["verdict"],
            }
        )
    return out


def step_time(steps: pl.DataFrame) -> StepTime:
    """Where the steps' time went, summed over them: their span, busy time, idle time by
    cause and the verdict."""
    span = int((steps["end_ns"] - steps["start_ns"]).sum())
    busy = int(steps["busy_ns"].sum())
    idle = {c: int(steps[f"idle_{c}_ns"].sum()) for c in CAUSES}
    return {"span_ns": span, "busy_ns": busy, "idle_ns": idle, "verdict": verdict(span, busy, idle)}


def family_ns(names: list[str], values: np.ndarray) -> dict[str, int]:
    """Busy time per family code as {family: ns}, largest first, families with none left
    out."""
    fams = {names[f]: int(v) for f, v in enumerate(values) if v}
    return dict(sorted(fams.items(), key=lambda x: (-x[1], x[0])))


TIMELINE_RESOLUTION = 4000  # a timeline's gaps shorter than its span over this are closed


def timeline(kernels: pl.DataFrame, start_ns: int, end_ns: int) -> pl.DataFrame:
    """Per family (by kernel time, largest first), the union of its kernels' intervals,
    gaps shorter than the span / :data:`TIMELINE_RESOLUTION` closed (a chart cannot show
    them, and a step of a million kernels stays a few thousand bars). In numpy over the
    family codes: no copy of the kernels' frame per family."""
    close = max((end_ns - start_ns) // TIMELINE_RESOLUTION, 0)
    schema = {"family": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64}
    if kernels.height == 0:
        return pl.DataFrame(schema=schema)
    family = kernels["family"]
    if not isinstance(family.dtype, pl.Enum):  # the step finder's kernels carry an Enum
        family = family.cast(pl.String).cast(pl.Enum(sorted(family.cast(pl.String).unique())))
    assert isinstance(family.dtype, pl.Enum)
    names = [str(x) for x in family.dtype.categories.to_list()]
    code = family.to_physical().to_numpy()
    ts = kernels["ts_ns"].to_numpy().astype(np.int64, copy=False)
    dur = kernels["dur_ns"].to_numpy()
    totals = np.bincount(code, weights=dur, minlength=len(names))
    ends = ts + dur
    del dur
    frames = []
    for c in sorted(np.flatnonzero(totals > 0), key=lambda c: (-totals[c], names[c])):
        mine = code == c
        u = union(ts[mine] - close, ends[mine])
        frames.append(
            pl.DataFrame(
                {
                    "family": [names[c]] * u.starts.size,
                    "start_ns": np.maximum(u.starts + close, start_ns),
                    "end_ns": u.ends,
                },
                schema=schema,
            )
        )
    return pl.concat(frames)


def _family_rows(table: pl.DataFrame) -> list[FamilyRow]:
    """The family table's rows, typed (its columns are FamilyRow's, checked by the tests),
    with the mean and share at the document's precision."""
    rows = cast(list[FamilyRow], table.to_dicts())
    for row in rows:
        row["mean_ns"], row["share"] = sig(row["mean_ns"]), sig(row["share"])
    return rows


def prefill_growth(table: pl.DataFrame, phases: list[Phase]) -> list[PrefillGrowth]:
    """Per mixed phase of at least 3 steps: how prompt work per step grows from its first
    chunk to its last, read off a least-squares line through the steps' prompt work (a
    healthy chunked prefill is flat; re-feeding the prompt from token 0 grows linearly, and
    the total work quadratically). The line is fitted exactly (:func:`line_ends`) and the
    ratio rounded to the document's precision, so it is the same on every machine.

    Prompt work is the engine's own count of context tokens where every step of the phase
    states it (``measure: prompt_tokens``), else the prefill-only kernel time
    (``measure: prefill_ns``); a phase with neither is left out."""
    out: list[PrefillGrowth] = []
    for phase in phases:
        if phase["kind"] != "mixed" or phase["steps"] < 3:
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
                "first": int(y[0]),
                "last": int(y[-1]),
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
    together) with the number of steps they were read for (``shape_token_steps``)."""
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
    return {
        "kernels_per_step": sig_or_none(mean(table["kernels"])),
        "prefill_ns": int(table["prefill_ns"].sum()),
        "prefill_kernels": int(table["prefill_kernels"].sum()),
        "prompt_tokens": _sum_or_none(table["context_tokens"]),
        "decode_tokens": _sum_or_none(table["generation_tokens"]),
        "token_steps": int(table["context_tokens"].is_not_null().sum()),
        "shape_tokens": _sum_or_none(table["shape_tokens"]),
        "shape_token_steps": int(table["shape_tokens"].is_not_null().sum()),
        "phases": per_phase,
        "prefill_growth": prefill_growth(table, phases),
    }
