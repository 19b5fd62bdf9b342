"""The figures a diff compares, each with its role (headline, rate, workload), the way an
improvement goes, its unit and its population's n: a trace's (:func:`metrics`: the headline,
then the rates, then the workload) and a run's (:func:`run_metrics`). How two sets are put
side by side and judged is :mod:`traceview.analysis.documents.compare`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from traceview.analysis.base.document import KINDS, QUANTILES, Interval95
from traceview.analysis.base.stats import mean
from traceview.analysis.documents.run import RunSummary
from traceview.analysis.documents.summary import Summary

Role = str  # headline | rate | workload


@dataclass(frozen=True)
class Metric:
    """One figure a diff compares: its identity (section, name), value, which way is
    better, unit, the size of the population it was computed over (None when it is not a
    statistic of a population), and its ``role``: ``headline`` and ``rate`` figures are
    normalised (per step, per token, per step of one kind, cadence, gaps, fractions) and
    get a verdict; ``workload`` figures are totals (steps, tokens, kernels, total time),
    which grow with the work done, and figures that move with the mix of steps (a family's
    time per step over all steps, its mean kernel), and get none."""

    section: str
    name: str
    value: float | None
    better: str | None  # "lower", "higher" or None (no direction)
    unit: str  # ns | count | fraction | ratio
    n: int | None = None
    role: Role = "rate"
    field: str | None = None  # the document's path of the figure (check's path syntax)
    # a fitted figure's 95% interval half-width: A and B are "same" where they differ by
    # less than their combined half-widths (the difference is not significant at 5%)
    spread: float | None = None


def _per(total: float | None, count: float | None) -> float | None:
    return None if total is None or not count else total / count


def headline(summary: Summary) -> list[Metric]:
    """The figures that answer "did decode slow down while prompts were prefilled?": the
    cadence a decoding request experiences (``steps.decoding_cadence``: the intervals
    between consecutive steps with decode work, decode and mixed; p50, p90, p99), the decode
    population's gap p99, the largest growth of prompt work within a mixed phase, and how
    busy the GPU is inside the widest gaps. Each carries ``field``, the summary document's
    path of the figure (as ``check`` reads it), and is labelled by that field's name."""
    doc = summary.to_dict()
    cad = doc["steps"]["decoding_cadence"]
    gaps = next(g for g in doc["decode_gaps"] if g["population"] == "decode")
    # None: unbounded (a document read back from JSON, which holds no infinity)
    growth = [
        math.inf if g["growth"] is None else g["growth"] for g in doc["work"]["prefill_growth"]
    ]
    h = "headline"
    return [
        *(
            Metric(
                h,
                f"decoding cadence {q[:-3]}",
                cad[q],
                "lower",
                "ns",
                cad["n"],
                h,
                f"steps.decoding_cadence.{q}",
            )
            for q in ("p50_ns", "p90_ns", "p99_ns")
        ),
        Metric(
            h,
            "decode gap p99 (decode steps)",
            gaps["p99_ns"],
            "lower",
            "ns",
            gaps["n"],
            h,
            "decode_gaps.decode.p99_ns",
        ),
        Metric(
            h,
            "prefill growth (largest)",
            max(growth, default=None),
            "lower",
            "ratio",
            None,
            h,
            None,  # the largest of the phases' growths: no one path (check: --prefill-growth)
        ),
        Metric(
            h,
            "busy in the widest gaps",
            doc["busy"]["in_widest_gaps"],
            None,
            "fraction",
            None,
            h,
            "busy.in_widest_gaps",
        ),
    ]


def metrics(summary: Summary) -> list[Metric]:
    """The figures a diff compares, from one summary: the headline, the rates (judged),
    then the workload (shown, never judged)."""
    doc, t = summary.to_dict(), summary.steps
    w = doc["work"]
    load = "workload"
    out = headline(summary)
    out.append(
        Metric(
            "steps", "steps", doc["steps"]["count"], None, "count", role=load, field="steps.count"
        )
    )
    for q in QUANTILES:
        out.append(
            Metric(
                "cadence",
                f"all {q[:-3]}",
                doc["steps"]["cadence"][q],
                "lower",
                "ns",
                field=f"steps.cadence.{q}",
            )
        )
    for kind in KINDS:
        steps_of = t.filter(pl.col("kind") == kind)
        out.append(Metric("steps", f"{kind} steps", steps_of.height, None, "count", role=load))
        cad = doc["steps"]["cadence_by_kind"][kind]
        for q in QUANTILES:
            out.append(
                Metric(
                    "cadence",
                    f"{kind} {q[:-3]}",
                    cad[q],
                    "lower",
                    "ns",
                    cad["n"],
                    field=f"steps.cadence_by_kind.{kind}.{q}",
                )
            )
        if steps_of.height:
            per = f"per {kind} step"
            out.append(
                Metric("work", f"kernels {per}", mean(steps_of["kernels"]), "lower", "count")
            )
            if kind != "decode":
                out.append(
                    Metric("work", f"prefill ns {per}", mean(steps_of["prefill_ns"]), "lower", "ns")
                )
                out.append(
                    Metric(
                        "work",
                        f"prefill kernels {per}",
                        mean(steps_of["prefill_kernels"]),
                        "lower",
                        "count",
                    )
                )
    prefill_total = float(t["prefill_ns"].sum())
    # prompt work per prompt token: for one workload, more time per token means the prompt's
    # work got dearer (re-fed or slower kernels), whatever the number of tokens
    out.append(
        Metric(
            "work",
            "prefill ns per prompt token",
            _per(prefill_total, w["prompt_tokens"]),
            "lower",
            "ns",
        )
    )
    out.append(Metric("work", "prefill ns total", prefill_total, None, "ns", role=load))
    out.append(Metric("work", "prompt tokens total", w["prompt_tokens"], None, "count", role=load))
    out.append(Metric("work", "decode tokens total", w["decode_tokens"], None, "count", role=load))
    for g in doc["decode_gaps"]:
        pop = g["population"]
        out.append(
            Metric(
                "decode gaps",
                f"{pop} n",
                g["n"],
                None,
                "count",
                role=load,
                field=f"decode_gaps.{pop}.n",
            )
        )
        for q in QUANTILES:
            out.append(
                Metric(
                    "decode gaps",
                    f"{pop} {q[:-3]}",
                    g[q],
                    "lower",
                    "ns",
                    g["n"],
                    field=f"decode_gaps.{pop}.{q}",
                )
            )
    out += cost_metrics(summary)
    busy = doc["busy"]
    for key in ("fraction", "in_gaps", "in_widest_gaps"):
        out.append(Metric("busy", key, busy[key], None, "fraction", field=f"busy.{key}"))
    for p in doc["efficiency"]["phases"] or []:  # with --model: rates, so judged
        kind, n = p["kind"], p["steps"]
        for key, label, unit in (
            ("mfu_p50", "MFU p50", "fraction"),
            ("mbu_p50", "MBU p50", "fraction"),
            ("tflops_p50", "TFLOP/s p50", "count"),
            ("gbps_p50", "GB/s p50", "count"),
        ):
            value = p[key]  # type: ignore[literal-required]
            out.append(Metric("efficiency", f"{kind} {label}", value, "higher", unit, n))
    # a family's busy time per step within each step kind: a rate that another mix of
    # steps leaves alone (over all steps, or per kernel, a family's time moves with the mix:
    # more decode steps make attention cheaper per step and its kernels shorter on average)
    by_kind: dict[str, tuple[int, dict[str, int]]] = {}
    for phase in doc["time_breakdown"]:
        n, families = by_kind.get(phase["kind"], (0, {}))
        for family, busy_ns in phase["busy_by_family"].items():
            families[family] = families.get(family, 0) + busy_ns
        by_kind[phase["kind"]] = (n + phase["steps"], families)
    for kind, (n, families) in by_kind.items():
        for family, busy_ns in families.items():
            label = f"{kind} {family} busy per step"
            out.append(Metric("families", label, _per(busy_ns, n), "lower", "ns", n))
    steps = doc["steps"]["count"]
    for f in doc["families"]:  # over every step: shown beside the work, never judged
        name = f["family"]
        per_step = _per(f["total_ns"], steps)
        out.append(Metric("families", f"{name} time per step", per_step, None, "ns", role=load))
        out.append(Metric("families", f"{name} mean kernel", f["mean_ns"], None, "ns", role=load))
        out.append(Metric("families", f"{name} time", f["total_ns"], None, "ns", role=load))
        out.append(Metric("families", f"{name} kernels", f["count"], None, "count", role=load))
    return out


def _half(ci: Interval95 | None) -> float | None:
    return None if ci is None else (ci["high_ns"] - ci["low_ns"]) / 2


def cost_metrics(summary: Summary) -> list[Metric]:
    """The step-cost fits as a diff compares them: the decode fit's fixed and per-sequence
    cost and the prompt fit's per-token cost are rates, each within its kind of step and
    over at least ``MIN_STEPS`` steps (else null), judged with their 95% intervals; the
    weights a decode step reads (``--model``, ``--model-b``) are shown, never judged."""
    cost = summary.to_dict()["cost"]
    d, p = cost["decode"], cost["prompt"]
    out = [
        Metric(
            "cost",
            "decode fixed per step",
            d["fixed_ns"],
            "lower",
            "ns",
            d["n"],
            field="cost.decode.fixed_ns",
            spread=_half(d["fixed_ci95"]),
        ),
        Metric(
            "cost",
            "decode per sequence",
            d["per_sequence_ns"],
            "lower",
            "ns",
            d["n"],
            field="cost.decode.per_sequence_ns",
            spread=_half(d["per_sequence_ci95"]),
        ),
        Metric(
            "cost",
            "prompt per token",
            p["per_prompt_token_ns"],
            "lower",
            "ns",
            p["n"],
            field="cost.prompt.per_prompt_token_ns",
            spread=_half(p["per_prompt_token_ci95"]),
        ),
    ]
    w = cost["weights"]
    if w is not None:
        out.append(
            Metric(
                "cost",
                "weight bytes per decode step",
                w["weight_bytes"],
                None,
                "count",
                role="workload",
                field="cost.weights.weight_bytes",
            )
        )
    return out


def run_metrics(run: RunSummary) -> list[Metric]:
    """The figures a diff of two runs compares: the skew and the straggler's excess
    (headline), per rank its cadence, compute, collective wait, gaps and busy fraction
    (rates), and the ranks and aligned steps (workload)."""
    doc = run.to_dict()
    h, load = "headline", "workload"
    skew, s = doc["skew"], doc["straggler"]
    out = [
        Metric(h, "compute skew p50", skew["p50_ns"], "lower", "ns", skew["n"], h, "skew.p50_ns"),
        Metric(h, "compute skew p99", skew["p99_ns"], "lower", "ns", skew["n"], h, "skew.p99_ns"),
        Metric(
            h,
            "straggler excess p50",
            None if s is None else s["excess_p50_ns"],
            "lower",
            "ns",
            None,
            h,
            "straggler.excess_p50_ns",
        ),
        Metric("run", "ranks", len(doc["ranks"]), None, "count", role=load),
        Metric(
            "run",
            "aligned steps",
            doc["alignment"]["steps"],
            None,
            "count",
            role=load,
            field="alignment.steps",
        ),
        Metric(
            "skew",
            "compute skew max",
            skew["max_ns"],
            "lower",
            "ns",
            skew["n"],
            field="skew.max_ns",
        ),
    ]
    for r in doc["ranks"]:
        rank = f"rank {r['rank']}"
        at = f"ranks.{r['rank']}"
        for key, label, unit, better, role in (
            ("cadence_p50_ns", "cadence p50", "ns", "lower", "rate"),
            ("cadence_p99_ns", "cadence p99", "ns", "lower", "rate"),
            ("compute_p50_ns", "compute p50", "ns", "lower", "rate"),
            ("collective_wait_p50_ns", "collective wait p50", "ns", "lower", "rate"),
            ("decode_gap_p99_ns", "decode gap p99", "ns", "lower", "rate"),
            ("busy", "busy", "fraction", None, "rate"),
            ("steps", "steps", "count", None, "workload"),
        ):
            value = r[key]  # type: ignore[literal-required]
            out.append(Metric(rank, label, value, better, unit, role=role, field=f"{at}.{key}"))
    return out
