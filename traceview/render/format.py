"""Numbers out: the one nanosecond formatter, and the ratio and metric formatters, that
the terminal, charts, the HTML report, notebook HTML and markdown share. (Numbers in are
read by traceview/units.py.)"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

from traceview.analysis.base.document import (
    CostWeights,
    DecodeCost,
    GapFill,
    Interval95,
    Percentiles,
    PromptCost,
    StepFacts,
    SummaryDocument,
)
from traceview.analysis.base.names import short_name
from traceview.analysis.timing.idle import CAUSES

if TYPE_CHECKING:
    from traceview.analysis.base.document import DiffRow
    from traceview.analysis.documents.compare import Diff


def fmt_ns(ns: int | float | None) -> str:
    """A duration in ns as a human unit (ns, µs, ms, s); ``—`` for none."""
    if ns is None:
        return "—"
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3g} s" if a < 1e11 else f"{ns / 1e9:,.0f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def quantile_cells(p: Percentiles) -> list[str]:
    """A population's p50, p90, p99 and max as table cells (:func:`fmt_ns`)."""
    return [fmt_ns(p[q]) for q in ("p50_ns", "p90_ns", "p99_ns", "max_ns")]


def fmt_ratio(ratio: float | None) -> str:
    """B/A as ``1.25×``; ``∞`` where A was zero, ``—`` for none."""
    if ratio is None:
        return "—"
    return "∞" if math.isinf(ratio) else f"{ratio:.2f}×"


def fmt_pct(fraction: float | None) -> str:
    """A fraction as a percentage with one decimal; ``—`` for none."""
    return "—" if fraction is None else f"{fraction:.1%}"


def fmt_count(value: int | float | None) -> str:
    """A count as the engine or the client gave it, with thousands separators; — for None."""
    return "—" if value is None else f"{value:,}"


def fmt_value(value: float | None, unit: str) -> str:
    """A metric's value in its unit: ns as a duration, a fraction as a percentage, counts
    with thousands separators (one decimal where they are not whole)."""
    if value is None:
        return "—"
    if unit == "ns":
        return fmt_ns(value)
    if unit == "fraction":
        return fmt_pct(value)
    whole = not isinstance(value, float) or float(value).is_integer()
    return f"{value:,.0f}" if whole else f"{value:,.1f}"


PHASE_COLUMNS = ("phase", "steps", "n", "p50", "p90", "p99", "max")


def phase_rows(steps: StepFacts) -> list[tuple[int | None, list[str]]]:
    """The "steps and cadence by phase" table, shared by the terminal and the report: one row
    for all steps, then one per phase, each (first step of the phase, or None for the
    overall row; its cells under :data:`PHASE_COLUMNS`)."""
    rows: list[tuple[int | None, list[str]]] = []
    last = max((p["last_step"] for p in steps["phases"]), default=max(steps["count"] - 1, 0))
    every = f"0–{last}" if steps["count"] or steps["phases"] else "—"  # no serving step
    cadences: list[tuple[str, str, Percentiles, int | None]] = [
        ("all", every, steps["cadence"], None)
    ]
    cadences += [
        (p["kind"], f"{p['first_step']}–{p['last_step']}", p["cadence"], p["first_step"])
        for p in steps["phases"]
    ]
    for kind, span, c, first in cadences:
        cells = [kind, span, str(c["n"])]
        cells += quantile_cells(c)
        rows.append((first, cells))
    return rows


def gap_title(doc: SummaryDocument) -> str:
    """The decode-gap table's title, everywhere it is shown: what a gap is on this trace
    (between the recurrent-state updates of consecutive layers, or, where the marker is the
    full-attention kernel of each layer, the layer period) and the marker kernel by a short
    name, never a pattern; or why there are none."""
    kinds = {p["kind"] for p in doc["steps"]["phases"]}
    if not kinds & {"decode", "mixed"}:
        if not doc["steps"]["count"] and doc["warmup"]["steps"] and not doc["warmup"]["kept"]:
            return "decode gaps: no serving steps (every step holds warm-up)"
        return "decode gaps: no decode steps"
    names = doc["decode_marker_kernels"]
    if not names:
        return "decode gaps: no decode marker"
    marker = short_name(names[0]) + (f" and {len(names) - 1} more" if len(names) > 1 else "")
    inferred = ", inferred" if str(doc["decode_marker_source"]).endswith("inferred") else ""
    family = doc["decode_gaps"][0]["family"] or "?"
    if family.startswith("full_attention"):
        return (
            f"decode gaps = the layer period (between full-attention kernels: {marker}{inferred})"
        )
    return f"decode gaps (between {family} kernels: {marker}{inferred})"


UNCHANGED = (
    "A and B: nothing changed beyond noise (every figure, the work and the kernels within ±5%)"
)


def diff_rows(d: Diff, limit: int) -> list[DiffRow]:
    """The rows a diff shows, in every format: the headline, then up to ``limit`` rates
    and workload rows together, the workload last (it is never judged)."""
    rows = cast(list["DiffRow"], d.rows.to_dicts())
    headline = [r for r in rows if r["role"] == "headline"]
    rest = [r for r in rows if r["role"] != "headline"][:limit]
    return (
        headline
        + [r for r in rest if r["role"] == "rate"]
        + [r for r in rest if r["role"] == "workload"]
    )


def widest_line(fill: GapFill) -> str:
    """What filled gaps (all of a population's, or its widest), in one line: "97% busy:
    linear_attention.prefill 61%,
    gemm 30%; idle 3%: launch 3%" (shares of their span; the largest two families and
    causes)."""
    span = fill["span_ns"] or 1
    fams = ", ".join(f"{f} {v / span:.0%}" for f, v in list(fill["busy_by_family"].items())[:2])
    by_cause = fill["idle_ns"]
    idle = sorted(((v, c) for c, v in (by_cause or {}).items() if v), reverse=True)[:2]
    causes = ", ".join(f"{c} {v / span:.0%}" for v, c in idle) if by_cause else "causes —"
    busy = f"{fill['busy_ns'] / span:.0%} busy" + (f": {fams}" if fams else "")
    idle_ns = span - fill["busy_ns"] if fill["span_ns"] else 0
    return busy + f"; idle {idle_ns / span:.0%}" + (f": {causes}" if causes else "")


CAUSE_HEADS = {"host_late": "host", "dependency": "dep."}
BREAKDOWN_COLUMNS = ("phase", "steps", "busy", *(CAUSE_HEADS.get(c, c) for c in CAUSES), "verdict")
BREAKDOWN_CAPTION = (
    "idle by cause: host = the host was late, launch = submitted to started, sync = after a "
    "synchronising call, dep. = queued but waiting (docs/metrics.md)"
)


def breakdown_rows(doc: SummaryDocument) -> list[list[str]]:
    """The "where the step time went" table, shared by the terminal and the report: per
    phase, busy and idle by cause as shares of its span, and the verdict; cells under
    :data:`BREAKDOWN_COLUMNS`."""
    rows = []
    for r in doc["time_breakdown"]:
        span = r["span_ns"] or 1
        rows.append(
            [
                r["kind"],
                f"{r['first_step']}–{r['last_step']}",
                f"{r['busy_ns'] / span:.0%}",
                *("—" if r["idle_ns"] is None else f"{r['idle_ns'][c] / span:.0%}" for c in CAUSES),
                r["verdict"] or "—",
            ]
        )
    return rows


EFFICIENCY_COLUMNS = (
    "kind",
    "steps",
    "MFU p50",
    "MFU p90",
    "MBU p50",
    "MBU p90",
    "TFLOP/s",
    "GB/s",
)


def _share(x: float | None) -> str:
    return "—" if x is None else f"{x:.1%}"


def efficiency_rows(doc: SummaryDocument) -> list[list[str]]:
    """The "efficiency by phase" table, shared by the terminal and the report: per kind of
    step, MFU and MBU (p50, p90) and the p50 rates; empty without a model."""
    phases = doc["efficiency"]["phases"] or []
    return [
        [
            p["kind"],
            f"{p['steps']:,}",
            _share(p["mfu_p50"]),
            _share(p["mfu_p90"]),
            _share(p["mbu_p50"]),
            _share(p["mbu_p90"]),
            "—" if p["tflops_p50"] is None else f"{p['tflops_p50']:,.1f}",
            "—" if p["gbps_p50"] is None else f"{p['gbps_p50']:,.0f}",
        ]
        for p in phases
    ]


def efficiency_caption(doc: SummaryDocument) -> str:
    """Which GPU's peaks and which model the table is against."""
    eff = doc["efficiency"]
    gpu, model = eff["gpu"], eff["model"]
    peaks = (
        "no known peaks" if gpu["peak_bytes_per_s"] is None and not gpu["peak_flops"] else "peaks"
    )
    name = gpu["name"] or "an unnamed GPU"
    about = f"{model['name']}, {model['active_params'] / 1e9:.2f}B active params" if model else ""
    return f"{about}; {name} {peaks} (p50 rates over each step's busy time; docs/metrics.md)"


def _interval(ci: Interval95 | None) -> str:
    return "—" if ci is None else f"{fmt_ns(ci['low_ns'])} – {fmt_ns(ci['high_ns'])}"


def _small_ns(ns: float | None) -> str:
    """A coefficient that may be below 1 ns (per token²): ps where it is."""
    if ns is None:
        return "—"
    if abs(ns) < 1:
        return f"{ns * 1e3:.4g} ps"
    return f"{ns:.4g} ns" if abs(ns) < 1e3 else fmt_ns(ns)


COST_COLUMNS = ("term", "cost", "95% interval")


def cost_terms(fit: DecodeCost | PromptCost) -> list[list[str]]:
    """The fitted terms of a decode or prompt fit as rows: the term, its value and its 95%
    interval (empty where the fit is null)."""
    rows: list[list[str]] = []
    if fit["fixed_ns"] is None:
        return rows
    fixed = _coefficient(fit["fixed_ns"], fit["fixed_ci95"])
    rows.append(["fixed", fixed, _interval(fit["fixed_ci95"])])
    if fit["per_sequence_ns"] is not None:
        rows.append(
            [
                "per sequence",
                _coefficient(fit["per_sequence_ns"], fit["per_sequence_ci95"]),
                _interval(fit["per_sequence_ci95"]),
            ]
        )
    if "per_prompt_token_ns" in fit:
        p = cast("PromptCost", fit)
        if p["per_prompt_token_ns"] is not None:
            rows.append(
                [
                    "per prompt token",
                    _coefficient(p["per_prompt_token_ns"], p["per_prompt_token_ci95"]),
                    _interval(p["per_prompt_token_ci95"]),
                ]
            )
        if p["per_prompt_token_squared_ns"] is not None:
            ci = p["per_prompt_token_squared_ci95"]
            shown = "—" if ci is None else f"{_small_ns(ci['low_ns'])} – {_small_ns(ci['high_ns'])}"
            rows.append(["per prompt token²", _small_ns(p["per_prompt_token_squared_ns"]), shown])
    return rows


def _coefficient(ns: float, ci: Interval95 | None) -> str:
    """A fitted coefficient, flagged where its 95% interval holds 0 (no cost, or the other
    sign, is as likely as the figure), or lies wholly below 0 (no cost can be)."""
    if ci is not None and ci["low_ns"] <= 0 <= ci["high_ns"]:
        return f"{fmt_ns(ns)} (not told from 0)"
    if ci is not None and ci["high_ns"] < 0:
        return f"{fmt_ns(ns)} (below 0: no cost)"
    return fmt_ns(ns)


COST_TERM_WORDS = {
    "fixed": "fixed",
    "per_sequence": "per sequence × N",
    "per_prompt_token": "per token × T",
    "per_prompt_token_squared": "per token² × T²",
}


def cost_formula(fit: DecodeCost | PromptCost) -> str:
    """The fit's formula in words, from the terms it fitted: ``decode step = fixed + per
    sequence × N``; a prompt fit's as its ``terms`` say (all three where it is null)."""
    if "terms" not in fit:
        return "decode step = fixed + per sequence × N"
    terms = cast("PromptCost", fit)["terms"] or ["fixed", "per_sequence", "per_prompt_token"]
    return "prompt step = " + " + ".join(COST_TERM_WORDS[t] for t in terms)


def cost_caption(fit: DecodeCost | PromptCost) -> str:
    """The line under a fit: its population, R² and residual; the crossover (decode); why
    the T² term is in or out (prompt)."""
    if fit["fixed_ns"] is None:
        return f"no fit: {fit['reason']}"
    r2 = "—" if fit["r2"] is None else f"{fit['r2']:.4f}"
    said = f"n={fit['n']} steps, r² {r2}, residual {fmt_ns(fit['residual_ns'])}"
    if "crossover_sequences" in fit:
        crossover = cast("DecodeCost", fit)["crossover_sequences"]
        if crossover is not None:
            said += f"; crossover (fixed = per-sequence work) at N = {crossover:.1f}"
    if "quadratic" in fit:
        said += f"; T² term {cast('PromptCost', fit)['quadratic']}"
    return said


def weights_line(w: CostWeights) -> str:
    """The decode fit's fixed term against the weights a step reads (``--model``):
    ``fixed 19.1 ms = 8.10 GB at 424 GB/s: 70.6% of the 600 GB/s peak``."""
    gb = w["weight_bytes"] / 1e9
    said = f"{w['model']}: {gb:,.2f} GB of weights a decode step"
    if w["fixed_bytes_per_s"] is not None:
        fixed = w["weight_bytes"] / w["fixed_bytes_per_s"] * 1e9
        said = (
            f"fixed {fmt_ns(fixed)} = {gb:,.2f} GB ({w['model']}'s weights) at "
            f"{w['fixed_bytes_per_s'] / 1e9:,.0f} GB/s"
        )
        if w["fraction_of_peak"] is not None and w["peak_bytes_per_s"] is not None:
            said += (
                f": {fmt_pct(w['fraction_of_peak'])} of the {w['peak_bytes_per_s'] / 1e9:,.0f} "
                f"GB/s peak ({w['device']})"
            )
    if w["fraction_of_peak"] is not None and w["fraction_of_peak"] > 1:
        said += (
            " — more than the device can stream: the model or the device is not the traced "
            "one, or the trace is one rank of a tensor-parallel run"
        )
    if w["floor_ns"] is not None:
        said += f"; at the peak they take {fmt_ns(w['floor_ns'])}"
    else:
        said += "; the device's peak bandwidth is not known (--gpu)"
    return said
