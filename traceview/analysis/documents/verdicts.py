"""What a diff compares and which of it it judges: each figure of a summary (or a run) as a
:class:`Metric` (its value, direction, population size, percentile, whether it pools step
kinds), and :func:`judgement`, the one rule that gives a row its verdict or says why it
gets none (docs/ci.md). ``diff`` (:mod:`.compare`) lays the rows out; ``check
--max-regression`` (:mod:`.checks`) bounds the rows judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import polars as pl

from traceview.analysis.base.document import KINDS, QUANTILES, Interval95
from traceview.analysis.base.stats import mean, samples_for
from traceview.analysis.documents.run import RunSummary
from traceview.analysis.documents.summary import Summary
from traceview.analysis.work.prompt import GROWTH_STEPS

SAME = 0.05  # a ratio within ±5% is "same"


Role = str  # headline | rate | workload


@dataclass(frozen=True)
class Metric:
    """One figure a diff compares: its identity (section, name), value, which way is
    better, unit, the size of the population it was computed over (None when it is not a
    statistic of a population), and its ``role``: ``headline`` and ``rate`` figures are
    normalised (per step, per token, per step of one kind, cadence, gaps, fractions);
    ``workload`` figures are totals (steps, tokens, kernels, total time), which grow with
    the work done, and figures that move with the mix of steps (a family's time per step
    over all steps, its mean kernel). ``quantile``: the percentile the figure is (0.5,
    0.9, 0.99; 1 for a maximum), None for another statistic; ``pooled``: it is taken over
    the steps (or gaps) of every kind together, so it moves with their mix. Whether a row
    is judged is :func:`judgement`'s."""

    section: str
    name: str
    value: float | None
    better: str | None  # "lower", "higher" or None (no direction)
    unit: str  # ns | count | fraction | ratio
    n: int | None = None
    role: Role = "rate"
    field: str | None = None  # the document's path of the figure (check's path syntax)
    quantile: float | None = None
    pooled: bool = False
    # the least n the figure exists at, where that is not its percentile's
    # (stats.samples_for): a prefill growth needs a mixed phase of GROWTH_STEPS steps
    need: int | None = None
    # a fitted figure's 95% interval half-width: A and B are "same" where they differ by
    # less than their combined half-widths (the difference is not significant at 5%)
    spread: float | None = None
    # a fitted figure's fit, its terms ("fixed + per_prompt_token"): a coefficient means
    # something else in a fit with other terms, so two such are never judged
    terms: str | None = None
    # the figure may be negative (a difference between two times): a ratio of two such
    # values says nothing (-21 µs to +50 µs is ×-2.4, -21 to -122 is ×5.8), so no verdict
    signed: bool = False
    # a rate within a group of steps (a step kind) that is 0 where the figure is absent but
    # the group is not: a family that never runs in a side's decode steps costs it 0 ns a
    # step there (an empty population only where that side has no such step)
    group: str | None = None


def _quantile(key: str) -> float:
    """``p90_ns`` (or ``p90``) -> 0.9; ``max_ns`` -> 1."""
    return 1.0 if key.startswith("max") else int(key[1:].split("_")[0]) / 100


def _per(total: float | None, count: float | None) -> float | None:
    return None if total is None or not count else total / count


def headline(summary: Summary) -> list[Metric]:
    """The figures that answer "did decode slow down while prompts were prefilled?": the
    cadence a decoding request experiences (``steps.token_cadence``: the intervals
    between consecutive steps with decode work, decode and mixed; p50, p90, p99), the decode
    population's gap p99, the largest growth of prompt work within a mixed phase, and how
    busy the GPU is inside the widest gaps. Each carries ``field``, the summary document's
    path of the figure (as ``check`` reads it), and is labelled by that field's name."""
    doc = summary.to_dict()
    cad = doc["steps"]["token_cadence"]
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
                f"token cadence {q[:-3]}",
                cad[q],
                "lower",
                "ns",
                cad["n"],
                h,
                f"steps.token_cadence.{q}",
                _quantile(q),
                pooled=True,  # decode and mixed steps together
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
            0.99,
        ),
        Metric(
            h,
            "prefill growth (largest)",
            max(growth, default=None),
            "lower",
            "ratio",
            # the longest mixed phase: a growth needs GROWTH_STEPS steps in one
            max((p["steps"] for p in doc["steps"]["phases"] if p["kind"] == "mixed"), default=0),
            h,
            None,  # the largest of the phases' growths: no one path (check: --prefill-growth)
            need=GROWTH_STEPS,
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
            pooled=True,  # the widest of every population's gaps
        ),
    ]


def metrics(summary: Summary) -> list[Metric]:
    """The figures a diff compares, from one summary: the headline, the rates (judged),
    then the workload (shown, never judged)."""
    doc = summary.to_dict()
    t = summary.steps.filter(pl.col("phase").is_not_null())  # warm-up steps left out
    w = doc["work"]
    load = "workload"
    out = headline(summary)
    out.append(
        Metric(
            "steps", "steps", doc["steps"]["count"], None, "count", role=load, field="steps.count"
        )
    )
    every = doc["steps"]["cadence"]
    for q in QUANTILES:
        out.append(
            Metric(
                "cadence",
                f"all {q[:-3]}",
                every[q],
                "lower",
                "ns",
                every["n"],
                field=f"steps.cadence.{q}",
                quantile=_quantile(q),
                pooled=True,  # every step kind's intervals together
            )
        )
    for kind in KINDS:
        steps_of = t.filter(pl.col("kind") == kind)
        n = steps_of.height
        out.append(Metric("steps", f"{kind} steps", n, None, "count", role=load))
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
                    quantile=_quantile(q),
                )
            )
        if steps_of.height:
            per = f"per {kind} step"
            out.append(
                Metric("work", f"kernels {per}", mean(steps_of["kernels"]), "lower", "count", n)
            )
            if kind != "decode":
                out.append(
                    Metric(
                        "work", f"prefill ns {per}", mean(steps_of["prefill_ns"]), "lower", "ns", n
                    )
                )
                out.append(
                    Metric(
                        "work",
                        f"prefill kernels {per}",
                        mean(steps_of["prefill_kernels"]),
                        "lower",
                        "count",
                        n,
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
            w["prompt_tokens"] or 0,  # a mean over the prompt tokens the engine states
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
                    quantile=_quantile(q),
                    pooled=pop == "all",  # the decode and the mixed steps' gaps together
                )
            )
    busy = doc["busy"]
    for key in ("fraction", "in_gaps", "in_widest_gaps"):
        out.append(
            Metric("busy", key, busy[key], None, "fraction", field=f"busy.{key}", pooled=True)
        )
    for p in doc["efficiency"]["phases"] or []:  # with --model: rates, so judged
        kind, n = p["kind"], p["steps"]
        for key, label, unit in (
            ("mfu_p50", "MFU p50", "fraction"),
            ("mbu_p50", "MBU p50", "fraction"),
            ("tflops_p50", "TFLOP/s p50", "count"),
            ("gbps_p50", "GB/s p50", "count"),
        ):
            value = p[key]  # type: ignore[literal-required]
            out.append(
                Metric("efficiency", f"{kind} {label}", value, "higher", unit, n, quantile=0.5)
            )
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
            per_step = _per(busy_ns, n)
            out.append(Metric("families", label, per_step, "lower", "ns", n, group=kind))
    steps = doc["steps"]["count"]
    for f in doc["families"]:  # over every step: shown beside the work, never judged
        name = f["family"]
        per_step = _per(f["total_ns"], steps)
        out.append(Metric("families", f"{name} time per step", per_step, None, "ns", role=load))
        out.append(Metric("families", f"{name} mean kernel", f["mean_ns"], None, "ns", role=load))
        out.append(Metric("families", f"{name} time", f["total_ns"], None, "ns", role=load))
        out.append(Metric("families", f"{name} kernels", f["count"], None, "count", role=load))
    out += cost_metrics(summary)
    return out


def _half(ci: Interval95 | None) -> float | None:
    return None if ci is None else (ci["high_ns"] - ci["low_ns"]) / 2


def cost_metrics(summary: Summary) -> list[Metric]:
    """The step-cost fits as a diff compares them: the decode fit's fixed and per-sequence
    cost and the prompt fit's per-token cost are rates, each within its kind of step (null
    where the fit is), judged with their 95% intervals; the weights a decode step reads
    (``--model``, ``--model-b``) are shown, never judged."""
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
            terms=" + ".join(p["terms"]) or None,
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


def zero_where_absent(m: Metric, side: list[Metric]) -> Metric | None:
    """The figure ``m`` (of one side) as the other ``side`` has it where that side lacks
    it: 0 over that side's steps of ``m``'s group, where it has any (another of its
    figures of the group, in the same section, gives their number); else None."""
    if m.group is None:
        return None
    n = next((x.n for x in side if x.section == m.section and x.group == m.group), None)
    if not n:
        return None
    return replace(m, value=0.0, n=n)


def ratio_of(a: float | None, b: float | None) -> float | None:
    """B/A; inf where A is 0 and B is not, None where either is absent, or negative (no
    ratio of a signed figure means more or less), or both are 0."""
    if a is None or b is None or a < 0 or b < 0:
        return None
    if a == 0:
        return None if b == 0 else math.inf
    return b / a


def judgement(a: Metric | None, b: Metric | None) -> tuple[str | None, str | None]:
    """A row's verdict, or why it gets none: ``(verdict, None)`` for a judged row,
    ``(None, why)`` for one shown unjudged. A figure is judged only where a verdict means
    something, the first reason that applies keeping it unjudged:

    - ``workload``: a total, or a figure that moves with the mix of steps (its ``role``);
    - ``pooled over step kinds``: taken over several kinds' steps or gaps together, it
      moves with their mix (the token cadence, every step's cadence, the ``all`` gaps);
    - ``no better direction``: neither more nor less is an improvement (busy fractions);
    - ``a signed figure (no ratio)``: it may be negative (the straggler's excess), and a
      ratio of two such values is no measure of more or less;
    - ``a negative value (no ratio)``: either side's value is below 0 (a fitted
      intercept may be), so B/A is no measure of more or less either;
    - ``a maximum``: it grows with its population's size whatever else happens;
    - ``no figure``: neither side has it;
    - ``n < N for a pQ`` (``an empty population`` for a mean): either side's population is
      smaller than the percentile needs (:func:`~traceview.analysis.base.stats.samples_for`:
      p50 2, p90 10, p99 100), so the figure moves with n alone;
    - ``fits with other terms``: two fitted coefficients whose fits hold other terms (a
      per-token cost with and without a T² term), which mean different things.

    The verdicts: ``new`` and ``gone`` where only one side has the figure; else ``same``
    within ±5%, and ``better`` or ``worse`` by the figure's direction (from 0 to more is
    a ratio of ∞, from more to 0 one of 0). Two fitted figures (``spread``: their 95%
    intervals' half-widths) are also ``same`` where they differ by no more than their
    combined half-widths."""
    m = a or b
    assert m is not None
    av = None if a is None else a.value
    bv = None if b is None else b.value
    if m.role == "workload":
        return None, "workload"
    if m.pooled:
        return None, "pooled over step kinds"
    if m.better is None:
        return None, "no better direction"
    if m.signed:
        return None, "a signed figure (no ratio)"
    if m.quantile is not None and m.quantile >= 1:
        return None, "a maximum"
    if av is None and bv is None:
        return None, "no figure"
    if m.n is not None or m.quantile is not None:
        q = m.quantile
        need = m.need or (1 if q is None else samples_for(q))
        fewest = min((x.n or 0) if x is not None else 0 for x in (a, b))
        if fewest < need:
            if m.need is not None:
                return None, f"n < {need} for {m.name}"
            return None, "an empty population" if q is None else f"n < {need} for a p{q * 100:g}"
    if av is None:
        return "new", None
    if bv is None:
        return "gone", None
    ta, tb = (None if x is None else x.terms for x in (a, b))
    if ta != tb:
        return None, f"fits with other terms (A: {ta}; B: {tb})"
    if av < 0 or bv < 0:  # a fitted intercept may fall below 0: B/A says nothing there
        return None, "a negative value (no ratio)"
    ratio = ratio_of(av, bv)
    if ratio is None or abs(ratio - 1) <= SAME:  # None: both 0
        return "same", None
    sa, sb = (None if x is None else x.spread for x in (a, b))
    if sa is not None and sb is not None and abs(bv - av) <= math.hypot(sa, sb):
        return "same", None  # two fits whose difference their own uncertainty covers
    worse = ratio > 1 if m.better == "lower" else ratio < 1
    return ("worse" if worse else "better"), None


def run_metrics(run: RunSummary) -> list[Metric]:
    """The figures a diff of two runs compares: the skew and the straggler's excess
    (headline), per rank its cadence (every step's, and per step kind), compute, collective
    wait, gaps and busy fraction (rates), and the ranks and aligned steps (workload)."""
    doc = run.to_dict()
    h, load = "headline", "workload"
    skew, s = doc["skew"], doc["straggler"]
    aligned = doc["alignment"]["steps"]
    out = [
        Metric(
            h, "compute skew p50", skew["p50_ns"], "lower", "ns", skew["n"], h, "skew.p50_ns", 0.5
        ),
        Metric(
            h, "compute skew p99", skew["p99_ns"], "lower", "ns", skew["n"], h, "skew.p99_ns", 0.99
        ),
        Metric(
            h,
            "straggler excess p50",
            None if s is None else s["excess_p50_ns"],
            "lower",
            "ns",
            aligned,
            h,
            "straggler.excess_p50_ns",
            0.5,
            signed=True,
        ),
        Metric("run", "ranks", len(doc["ranks"]), None, "count", role=load),
        Metric(
            "run",
            "aligned steps",
            aligned,
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
            quantile=1.0,
        ),
    ]
    for r in doc["ranks"]:
        rank = f"rank {r['rank']}"
        at = f"ranks.{r['rank']}"
        intervals = max(r["steps"] - 1, 0)
        decode, mixed = r["decode_cadence_n"], r["mixed_cadence_n"]
        for key, label, unit, better, n, pooled in (
            ("cadence_p50_ns", "cadence p50", "ns", "lower", intervals, True),
            ("cadence_p99_ns", "cadence p99", "ns", "lower", intervals, True),
            ("decode_cadence_p50_ns", "decode cadence p50", "ns", "lower", decode, False),
            ("decode_cadence_p99_ns", "decode cadence p99", "ns", "lower", decode, False),
            ("mixed_cadence_p50_ns", "mixed cadence p50", "ns", "lower", mixed, False),
            ("mixed_cadence_p99_ns", "mixed cadence p99", "ns", "lower", mixed, False),
            ("compute_p50_ns", "compute p50", "ns", "lower", aligned, False),
            ("collective_wait_p50_ns", "collective wait p50", "ns", "lower", aligned, False),
            ("decode_gap_p99_ns", "decode gap p99", "ns", "lower", r["decode_gaps_n"], False),
        ):
            value = r[key]  # type: ignore[literal-required]
            out.append(
                Metric(
                    rank,
                    label,
                    value,
                    better,
                    unit,
                    n,
                    field=f"{at}.{key}",
                    quantile=_quantile(key.rsplit("_", 2)[1]),  # ..._p99_ns: p99
                    pooled=pooled,
                )
            )
        out.append(
            Metric(rank, "busy", r["busy"], None, "fraction", field=f"{at}.busy", pooled=True)
        )
        out.append(Metric(rank, "steps", r["steps"], None, "count", role=load, field=f"{at}.steps"))
    return out
