"""The summary document (``traceview.summary/1``, docs/design.md) built from the analyses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import numpy as np
import orjson
import polars as pl

from traceview._deprecated import deprecated
from traceview._io import release_free_memory
from traceview.analysis.base.document import (
    DECODING,
    KINDS,
    SUMMARY_SCHEMA,
    Activity,
    Capture,
    FamilyRow,
    Phase,
    StepFacts,
    StepFinding,
    SummaryDocument,
    TraceFacts,
    Warmup,
    WarmupRegion,
    keep_deprecated_keys,
)
from traceview.analysis.base.intervals import Union, merge_windows
from traceview.analysis.base.names import short_name
from traceview.analysis.base.precision import sig
from traceview.analysis.classify.families import Rules, family_rows, kernel_rows
from traceview.analysis.documents import display
from traceview.analysis.steps.capture import capture_regions
from traceview.analysis.steps.find import StepResult, describe, empty_step_table, pick_device
from traceview.analysis.steps.serving import WARMUP
from traceview.analysis.steps.warmup import Region, capture_warmup
from traceview.analysis.timing.breakdown import (
    DeviceActivity,
    time_breakdown,
    timeline,
    with_fills,
)
from traceview.analysis.timing.busy import busy_document, no_busy
from traceview.analysis.timing.cadence import cadence, kind_cadence, phase_rows, token_cadence
from traceview.analysis.timing.gaps import (
    GAP_SCHEMA,
    gap_table,
    gap_warnings,
    summarize_gaps,
)
from traceview.analysis.timing.idle import (
    IDLE_SCHEMA,
    long_idle,
)
from traceview.analysis.work.cost import COST_STEP_SCHEMA, cost_section, cost_steps
from traceview.analysis.work.devices import GpuSpec
from traceview.analysis.work.efficiency import (
    device_peaks,
    efficiency_section,
    family_work,
    kernel_table_work,
)
from traceview.analysis.work.model_config import ModelSpec
from traceview.analysis.work.op_flops import kernel_work
from traceview.analysis.work.prompt import work
from traceview.errors import CaptureOnlyError
from traceview.model import Trace
from traceview.paths import stored

SCHEMA = SUMMARY_SCHEMA


@dataclass
class Summary:
    """The summary of one trace: ``to_dict()`` is the ``traceview.summary/1`` document.

    Attributes:
        document: the summary document (plain JSON-able data).
        steps: the step table (see :func:`traceview.steps`).
        families: the family table (see :func:`traceview.families`).
        families_rollup: the family table with dotted families rolled up.
        decode_gaps: the decode-gap table (see :func:`traceview.decode_gaps`); ``gaps`` is
            its deprecated name.
        kernel_table: time per kernel name on the device (see :func:`traceview.kernels`).
        warnings: what a reader should know before trusting a figure.
        timeline: with fewer than 2 steps (no cadence to draw), the analysed device's
            activity per family: ``family`` (String), ``start_ns``, ``end_ns`` (Int64), the
            union of each family's kernels (gaps under 1/4000 of the span closed); else
            None.
        idle: the device's idle intervals of at least 50 µs, each split by cause, none
            inside a step left out for warm-up
            (:func:`traceview.analysis.timing.idle.long_idle`: ``start_ns``, ``end_ns``,
            ``cause``, ``host_late_ns``, ``launch_ns``, ``sync_ns``, ``dependency_ns``,
            ``other_ns``); what ``annotate`` draws on its "traceview idle" track.
        cost_steps: the serving steps with the counts and times the ``cost`` section's
            fits read (:func:`traceview.analysis.work.cost.cost_steps`: ``index``,
            ``kind``, ``sequences``, ``prompt_tokens``, ``prompt_requests``,
            ``time_ns``); ``traceview cost`` pools several traces' rows.
    """

    document: SummaryDocument
    steps: pl.DataFrame
    families: pl.DataFrame
    families_rollup: pl.DataFrame
    decode_gaps: pl.DataFrame
    kernel_table: pl.DataFrame
    idle: pl.DataFrame
    warnings: list[str] = field(default_factory=list)
    timeline: pl.DataFrame | None = None
    cost_steps: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=COST_STEP_SCHEMA))

    @property
    def gaps(self) -> pl.DataFrame:
        """Deprecated: :attr:`decode_gaps` (``Analysis.gaps()`` draws the decode-gap
        chart)."""
        deprecated("Summary.gaps", "Summary.decode_gaps")
        return self.decode_gaps

    def to_dict(self) -> SummaryDocument:
        return self.document

    def to_json(self, indent: bool = True) -> str:
        option = orjson.OPT_INDENT_2 if indent else 0
        return orjson.dumps(self.document, option=option).decode()

    def __repr__(self) -> str:
        """About 15 lines: the trace, its steps and phases, the token cadence, the decode
        gaps, busy and the largest families (the whole document is ``to_dict()``)."""
        d = self.document
        t, st, b = d["trace"], d["steps"], d["busy"]

        def ms(ns: int | float | None) -> str:
            return "—" if ns is None else f"{ns / 1e6:,.3f} ms"

        def pct(x: float | None) -> str:
            return "—" if x is None else f"{x:.1%}"

        cad = st["token_cadence"]
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
            f"  token cadence   p50 {ms(cad['p50_ns'])}, p99 {ms(cad['p99_ns'])} "
            f"(n={cad['n']}, steps with decode work)",
            f"  decode gaps     p50 {ms(gaps['p50_ns'])}, p99 {ms(gaps['p99_ns'])} "
            f"(n={gaps['n']}, decode steps)",
            f"  busy            {pct(b['fraction'])}; in the widest gaps "
            f"{pct(b['in_widest_gaps'])}",
            f"  families        {fams}",
        ]
        said = warmup_line(d["warmup"])
        if said:
            lines.insert(4, f"  warm-up         {said}")
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
    gpu: GpuSpec | None = None,
) -> Summary:
    """The summary of the steps the step finder found (``result``): each figure computed
    by the module that defines it, assembled here into the document and its tables."""
    trace, table = result.trace, result.table
    every = result.kernels  # the device's activity, warm-up included
    k = result.serving_kernels  # what the serving figures are drawn from
    left = result.left_out
    # the loader's counts first (text read with U+FFFD, events skipped and why): a script
    # reading the document sees what the command's stderr says
    warnings = [w for w in trace.meta.warnings if w not in result.warnings]
    warnings += result.warnings
    if result.activity == "cpu_op":
        warnings.insert(
            0,
            "no device activity in this trace (a CPU capture): the innermost annotated ranges "
            "(else leaf cpu_ops) stand in for kernels",
        )
    peaks = device_peaks(trace, result.device, gpu)  # --gpu, else matched from the trace
    table, efficiency, said = efficiency_section(trace, result.device, table, model, peaks)
    warnings += said
    phases = phase_rows(result.phases, table)
    starts = table["start_ns"].to_numpy()
    gone = _spans(table.filter(pl.Series(left))) if left.any() else None
    gaps, marker, gap_family = gap_table(
        k,
        result.totals,
        result.phases,
        rules,
        starts,
        None if gone is None else (gone.starts, gone.ends),
    )
    gap_stats = summarize_gaps(gaps, gap_family)
    served = table.filter(pl.col("phase").is_not_null())
    if served.height == 0 and left.any():  # no population: say why, not "no decode steps"
        warnings.append(
            f"no serving steps: all {table.height} step(s) hold warm-up, and every serving "
            "figure (busy, cadence, phases, decode gaps, families) is left unmeasured "
            "(--keep-warmup keeps them in)"
        )
    else:
        warnings += gap_warnings(bool(served["kind"].is_in(DECODING).any()), marker, gap_stats)
    split = result.clocks.consistent  # else idle time is not split by cause
    device = DeviceActivity.of(trace, every, result.starts, result.union, result.host, split=split)
    release_free_memory()  # its temporaries (each kernel's end, family codes) go back
    gap_stats = with_fills(gaps, gap_stats, device)
    idle = long_idle(trace, device.ts, device.correlation, device.union, device.host, split=split)
    if gone is not None:  # an idle interval lies in one step: those of warm-up steps go
        at = gone.starts.searchsorted(idle["start_ns"].to_numpy(), side="right") - 1
        inside = (at >= 0) & (idle["start_ns"].to_numpy() < gone.ends[np.maximum(at, 0)])
        idle = idle.filter(pl.Series(~inside))
    shares = device.shares
    del device  # its correlation ids, before the phases' breakdown
    release_free_memory()
    op_work = kernel_work(trace, k)  # record_shapes' GEMM and attention ops, where present
    efficiency["families"] = family_work(k, op_work, peaks)
    facts = trace_facts(trace, every, result.device, result.activity)
    start_ns, end_ns = facts["start_ns"], facts["end_ns"]
    step_facts = _step_facts(describe(result), table, phases)
    fam = family_rows(result.totals)
    rolled = family_rows(result.totals, roll_up=True)
    # the cost's rows leave out the steps marked for warm-up, unless the figures keep them
    costed = cost_steps(table.drop(WARMUP) if result.warmup_kept else table)
    serving = result.serving_windows
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
        "busy": busy_document(result.union, result.device, gaps, gap_stats[0]["p99_ns"], serving),
        "time_breakdown": time_breakdown(table, phases, k, shares),
        "efficiency": efficiency,
        "cost": cost_section(costed, model, peaks),
        "capture": capture_section(
            result.capture_regions, result.capture_kernels, result.capture_spans
        ),
        "warmup": warmup_section(table, result.warmup, result.warmup_kept),
        "warnings": warnings,
    }
    keep_deprecated_keys(doc)
    return Summary(
        document=doc,
        steps=table,
        families=fam,
        families_rollup=rolled,
        decode_gaps=gaps,
        kernel_table=kernel_table_work(kernel_rows(result.totals), k, op_work, peaks),
        warnings=warnings,
        timeline=timeline(k, start_ns, end_ns) if served.height < 2 else None,
        idle=idle,
        cost_steps=costed,
    )


def trace_facts(trace: Trace, kernels: pl.DataFrame, device: int, activity: Activity) -> TraceFacts:
    """The summary's ``trace`` section, for every summary: the file's facts, and those of
    the analysed device's activity the summary is over (``kernels``, not empty: its
    kernels, capture left out unless it is all there is, or the CPU ranges that stand in
    for them): how many, on which streams, from their first start to their last end."""
    start_ns = int(kernels["ts_ns"].min())  # type: ignore[arg-type]
    end_ns = int((kernels["ts_ns"] + kernels["dur_ns"]).max())  # type: ignore[arg-type]
    return {
        "path": stored(trace.meta.path),  # a name's non-UTF-8 bytes as \xff
        "format": trace.meta.format,
        "gpu": trace.meta.gpu_name,
        "events": trace.meta.events,
        "kernels": kernels.height,
        "skipped_events": trace.meta.skipped_events,
        "devices": trace.devices,
        "device": device,
        "streams": sorted(kernels["stream"].drop_nulls().unique().to_list()),
        "start_ns": start_ns,
        "end_ns": end_ns,
        "span_ns": end_ns - start_ns,
        "activity": activity,
    }


def refuse_capture_only(summary: object) -> None:
    """Raise what the step finder said of a trace that holds only CUDA-graph capture, or
    whose every step holds warm-up left out: the surfaces that judge steps (``check``,
    ``diff``) have none to judge.

    Raises:
        CaptureOnlyError: ``summary`` is the 0-step summary of such a trace, or every
            step it found holds warm-up.
    """
    if not isinstance(summary, Summary):
        return
    d = summary.document
    if d["steps"]["method"] == "none":
        raise CaptureOnlyError(f"{d['trace']['path']}: {summary.warnings[0]}")
    w = d["warmup"]
    if not w["kept"] and w["steps"] and d["steps"]["count"] == 0:
        raise CaptureOnlyError(
            f"{d['trace']['path']}: no serving steps: all {w['steps']} step(s) hold warm-up "
            f"({warmup_line(w)}); --keep-warmup keeps them in"
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


def _spans(steps: pl.DataFrame) -> Union:
    """The steps' spans, merged."""
    return merge_windows(
        steps["start_ns"].to_numpy().astype(np.int64), steps["end_ns"].to_numpy().astype(np.int64)
    )


def warmup_section(table: pl.DataFrame, regions: tuple[Region, ...], kept: bool) -> Warmup:
    """The summary's ``warmup`` section: the steps that hold warm-up (the steps table's
    ``warmup`` not null), their span, whether the figures keep them, and each region."""
    held = table.filter(pl.col("warmup").is_not_null())
    rows: list[WarmupRegion] = [
        {
            "cause": r.cause,
            "first_step": r.first_step,
            "last_step": r.last_step,
            "start_ns": r.start_ns,
            "end_ns": r.end_ns,
            "span_ns": r.end_ns - r.start_ns,
            "kernel": r.kernel,
            "runs": r.runs,
            "fills": r.fills,
            "kernels": r.kernels,
            "gpu_ns": r.gpu_ns,
        }
        for r in regions
    ]
    return {
        "kept": kept,
        "steps": held.height,
        "span_ns": int((held["end_ns"] - held["start_ns"]).sum()),
        "regions": rows,
    }


# how the one line on the screen names each cause
CAUSE_WORDS = {
    "graph_capture": "CUDA-graph capture",
    "triton_autotune": "Triton autotuning",
    "compile": "compilation",
    "lazy_loading": "lazy kernel loading",
}


def _steps_said(spans: list[tuple[int, int]]) -> str:
    """Steps as runs of consecutive indices, e.g. "step 5", "steps 2–4, 9"."""
    held = sorted({i for a, b in spans for i in range(a, b + 1)})
    runs: list[list[int]] = []
    for i in held:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    said = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs)
    return f"step {said}" if len(held) == 1 else f"steps {said}"


def warmup_line(warmup: Warmup) -> str | None:
    """The warm-up in the steps, in one line (None where no step holds any): per cause and
    kernel, the steps and what ran (an autotuning's runs and cache fills, else the time),
    then whether the figures leave those steps out, e.g. "Triton autotuning of
    chunk_fwd_kernel_o in steps 2–4 (13,713 runs, 11,047 cache fills) left out"."""
    groups: dict[tuple[str, str | None], list[WarmupRegion]] = {}
    for r in warmup["regions"]:
        if r["first_step"] is not None:
            groups.setdefault((r["cause"], r["kernel"]), []).append(r)
    if not groups:
        return None
    parts = []
    for (cause, kernel), rs in groups.items():
        where = _steps_said(
            [
                (r["first_step"], r["last_step"] if r["last_step"] is not None else r["first_step"])
                for r in rs
                if r["first_step"] is not None
            ]
        )
        if cause == "triton_autotune":
            runs = sum(r["runs"] or 0 for r in rs)
            fills = sum(r["fills"] or 0 for r in rs)
            parts.append(
                f"Triton autotuning of {short_name(kernel or '?')} in {where} "
                f"({runs:,} runs, {fills:,} cache fills)"
            )
        else:
            span_s = sum(r["span_ns"] for r in rs) / 1e9
            parts.append(f"{CAUSE_WORDS.get(cause, cause)} in {where} ({span_s:.3g} s)")
    return "; ".join(parts) + (" kept in" if warmup["kept"] else " left out")


def capture_only_summary(
    trace: Trace,
    rules: Rules,
    device: int | None,
    said: str,
    model: ModelSpec | None = None,
    gpu: GpuSpec | None = None,
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
    path = trace.meta.path
    warnings = [said.removeprefix(f"{path}: ")]
    peaks = device_peaks(trace, device, gpu)
    table, efficiency, more = efficiency_section(trace, device, empty_step_table(), model, peaks)
    warnings += more
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
        "trace": trace_facts(trace, mine, device, "kernel"),
        "classification": rules.name,
        "families": [],
        "families_rollup": [],
        "steps": _step_facts(finding, table, []),
        "work": work(table, []),
        "decode_gaps": summarize_gaps(pl.DataFrame(schema=GAP_SCHEMA), None),
        "decode_marker": None,
        "decode_marker_source": None,
        "decode_marker_kernels": [],
        "busy": no_busy(device),
        "time_breakdown": [],
        "efficiency": efficiency,
        "cost": cost_section(cost_steps(table), model, peaks),
        "capture": capture_section(capture.regions, capture.kernels, capture.spans),
        "warmup": warmup_section(table, tuple(capture_warmup(trace, capture)), False),
        "warnings": warnings,
    }
    keep_deprecated_keys(doc)
    no_kernels = pl.DataFrame(
        schema={"name": pl.String, "family": pl.String, "count": pl.UInt32, "total_ns": pl.Int64}
    )
    no_families = family_rows(no_kernels.drop("name"))
    return Summary(
        document=doc,
        steps=table,
        families=no_families,
        families_rollup=no_families,
        decode_gaps=pl.DataFrame(schema=GAP_SCHEMA),
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


def _step_facts(finding: StepFinding, table: pl.DataFrame, phases: list[Phase]) -> StepFacts:
    """The summary's ``steps`` section: how the steps were found, the count and the kinds'
    sources of the steps the figures cover (a step left out for warm-up is not counted),
    their cadence over each population (:mod:`~traceview.analysis.timing.cadence`) and
    phases."""
    served = table.filter(pl.col("phase").is_not_null())  # a step left out has no phase
    return {
        "method": finding["method"],
        "marker": finding["marker"],
        "layers": finding["layers"],
        "detail": finding["detail"],
        "annotation_steps": finding["annotation_steps"],
        "disagreements": finding["disagreements"],
        "kind_sources": {
            s: int(n) for s, n in served["kind_source"].value_counts(sort=True).iter_rows()
        },
        "count": served.height,
        "cadence": cadence(table),
        "cadence_by_kind": {kind: kind_cadence(table, kind) for kind in KINDS},
        "token_cadence": token_cadence(table),
        "phases": phases,
    }


def _family_rows(table: pl.DataFrame) -> list[FamilyRow]:
    """The family table's rows, typed (its columns are FamilyRow's, checked by the tests),
    with the mean and share at the document's precision."""
    rows = cast(list[FamilyRow], table.to_dicts())
    for row in rows:
        row["mean_ns"], row["share"] = sig(row["mean_ns"]), sig(row["share"])
    return rows
