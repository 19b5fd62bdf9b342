"""Before and after: ``diff`` two summaries, ``check`` a summary against bounds.

A scheduling fix shows in the tail and the cadence, not in throughput; a change can return
correct answers while doing many times the work. So the diff opens with the headline (the
cadence a decoding request experiences, the decode-gap tail, prefill growth) and judges a
figure only where a verdict means something (:func:`judgement`): a rate (per step, per
token, per step of one kind, cadence, gaps), within one step kind, with a better
direction, on a population big enough for its percentile. Every other row is shown with
the reason it is not judged (``why``): totals and the figures that move with the mix of
steps (workload), figures pooled over step kinds, figures with no better direction,
percentiles on too few samples, maxima. A bigger workload, another mix, or a p99 that
moved because its n fell is not a regression. ``check``
(:mod:`traceview.analysis.documents.checks`) bounds every row the diff judges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import polars as pl

from traceview.analysis.base.document import (
    DIFF_SCHEMA,
    KINDS,
    QUANTILES,
    DiffDocument,
    DiffRow,
    KernelChange,
)
from traceview.analysis.base.stats import mean, samples_for
from traceview.analysis.documents import display
from traceview.analysis.documents.run import RunSummary
from traceview.analysis.documents.summary import Summary, refuse_capture_only
from traceview.errors import CheckError

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


def _quantile(key: str) -> float:
    """``p90_ns`` (or ``p90``) -> 0.9; ``max_ns`` -> 1."""
    return 1.0 if key.startswith("max") else int(key[1:].split("_")[0]) / 100


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
            pooled=True,  # the widest of every population's gaps
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


def _label_with_n(name: str, n_a: int | None, n_b: int | None) -> str:
    """A metric's row label with its population size: ``(n=N)``, or ``(n A → B)`` where the
    two populations differ (a statistic's n is a field of its Metric, never parsed)."""
    ns = [n for n in (n_a, n_b) if n is not None]
    if not ns:
        return name
    if n_a is not None and n_b is not None and n_a != n_b:
        return f"{name} (n {n_a} → {n_b})"
    return f"{name} (n={ns[0]})"


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
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
      moves with their mix (the decoding cadence, every step's cadence, the ``all`` gaps);
    - ``no better direction``: neither more nor less is an improvement (busy fractions);
    - ``a maximum``: it grows with its population's size whatever else happens;
    - ``no figure``: neither side has it;
    - ``n < N for a pQ`` (``an empty population`` for a mean): either side's population is
      smaller than the percentile needs (:func:`~traceview.analysis.base.stats.samples_for`:
      p50 2, p90 10, p99 100), so the figure moves with n alone.

    The verdicts: ``new`` and ``gone`` where only one side has the figure; else ``same``
    within ±5%, and ``better`` or ``worse`` by the figure's direction (from 0 to more is
    a ratio of ∞, from more to 0 one of 0)."""
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
    if m.quantile is not None and m.quantile >= 1:
        return None, "a maximum"
    if av is None and bv is None:
        return None, "no figure"
    if m.n is not None or m.quantile is not None:
        q = m.quantile
        need = 1 if q is None else samples_for(q)
        fewest = min((x.n or 0) if x is not None else 0 for x in (a, b))
        if fewest < need:
            return None, "an empty population" if q is None else f"n < {need} for a p{q * 100:g}"
    if av is None:
        return "new", None
    if bv is None:
        return "gone", None
    ratio = _ratio(av, bv)
    if ratio is None or abs(ratio - 1) <= SAME:  # None: both 0
        return "same", None
    worse = ratio > 1 if m.better == "lower" else ratio < 1
    return ("worse" if worse else "better"), None


@dataclass
class Diff:
    """Two summaries side by side.

    Attributes:
        a, b: the paths compared (A is the baseline; ratios are B/A).
        rows: DataFrame ``section``, ``metric``, ``field`` (the document's path of the
            figure, as ``check`` reads it; null where the figure is derived, e.g. a mean
            per step), ``a``, ``b`` (Float64), ``ratio`` (B/A),
            ``verdict`` (same, better, worse, new, gone; null for a row not judged),
            ``why`` (why a row is not judged, :func:`judgement`; null for a judged one),
            ``unit``, ``better`` (lower, higher or none: which way is an improvement),
            ``role`` (headline, rate, workload): the headline first, then the rates,
            biggest changes first, then the workload.
        kernels: DataFrame ``name``, ``a_ns``, ``b_ns`` (Int64, kernel time), ``ratio``,
            ``change`` (appeared, vanished, changed); biggest changes first.
        workload: the change in the work done, in one line ("B did 1.22× the steps …").
        notes: what else a reader should know (the straggler of each run, ranks on which
            the two readings of the straggler disagree).
    """

    a: str
    b: str
    rows: pl.DataFrame
    kernels: pl.DataFrame
    workload: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def judged(self) -> pl.DataFrame:
        """The rows the diff judges (a verdict, no ``why``): the one list ``check
        --max-regression`` bounds."""
        return self.rows.filter(pl.col("verdict").is_not_null())

    @property
    def unchanged(self) -> bool:
        """Nothing moved beyond noise: every judged figure the same (±5%), every other
        figure on both sides or neither and within ±5%, no kernel appeared, vanished or
        changed."""
        moved = self.judged.filter(pl.col("verdict") != "same").height
        shown = self.rows.filter(pl.col("verdict").is_null())
        shown_moved = shown.filter(
            (pl.col("a").is_null() != pl.col("b").is_null())
            | ((pl.col("ratio") - 1).abs() > SAME).fill_null(False)
        ).height
        kernels = self.kernels.filter(pl.col("change") != "same").height
        return moved == 0 and shown_moved == 0 and kernels == 0

    def to_dict(self) -> DiffDocument:
        """The ``traceview.diff/1`` document (non-finite ratios as null)."""
        return {
            "schema": DIFF_SCHEMA,
            "a": self.a,
            "b": self.b,
            "unchanged": self.unchanged,
            "workload": self.workload,
            "notes": list(self.notes),
            "rows": cast(list[DiffRow], _jsonable(self.rows.to_dicts())),
            "kernels": cast(list[KernelChange], _jsonable(self.kernels.to_dicts())),
        }

    def to_markdown(self, limit: int = 40) -> str:
        """The diff as a markdown table for a pull request (drawn by
        :mod:`traceview.render.markup`, through :mod:`traceview.analysis.documents.display`)."""
        return display.diff_markdown(self, limit)


def _jsonable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
        for r in rows
    ]


def _order(ratio: float | None, verdict: str) -> float:
    if verdict in ("new", "gone"):
        return math.inf
    if ratio is None or ratio <= 0:
        return -1.0
    return abs(math.log(ratio)) if math.isfinite(ratio) else math.inf


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


def _straggler_note(label: str, run: RunSummary) -> str:
    s = run.to_dict()["straggler"]
    if s is None:
        return f"{label}: no straggler (fewer than two ranks with aligned steps, or they tie)"
    return (
        f"{label}: the straggler is rank {s['rank']} "
        f"(slowest in {s['steps_slowest']} aligned step(s))"
    )


def diff(a: Summary | RunSummary, b: Summary | RunSummary) -> Diff:
    """Compare two summaries, or two runs (A the baseline, B the change); see :class:`Diff`.

    Raises:
        CheckError: a trace against a run, or anything but a Summary or a RunSummary
            (``tv.analyze(path).summary`` gives a trace's).
        CaptureOnlyError: a trace that holds only CUDA-graph capture (no steps to compare).
    """
    for x in (a, b):
        if not isinstance(x, Summary | RunSummary):
            raise CheckError(
                f"diff compares Summaries or RunSummaries, not {type(x).__name__} "
                "(tv.analyze(path).summary)"
            )
    if isinstance(a, RunSummary) != isinstance(b, RunSummary):
        raise CheckError("diff compares a trace with a trace, or a run with a run")
    for x in (a, b):
        refuse_capture_only(x)
    if isinstance(a, RunSummary) and isinstance(b, RunSummary):
        d = _diff(run_metrics(a), run_metrics(b), _run_kernels(a), _run_kernels(b), a, b)
        d.notes += [_straggler_note("A", a), _straggler_note("B", b)]
        return d
    assert isinstance(a, Summary) and isinstance(b, Summary)
    return _diff(metrics(a), metrics(b), a.kernel_table, b.kernel_table, a, b)


def _run_kernels(run: RunSummary) -> pl.DataFrame:
    """Kernel time per name, summed over the run's ranks."""
    tables = [r.summary.kernel_table for r in run.ranks if r.summary is not None]
    return pl.concat(tables).group_by("name").agg(pl.col("total_ns").sum())


def _label(x: Summary | RunSummary) -> str:
    if isinstance(x, RunSummary):
        paths = [r["path"] for r in x.to_dict()["ranks"]]
        return f"{len(paths)} ranks: {paths[0]} …" if len(paths) > 1 else paths[0]
    return str(x.to_dict()["trace"]["path"])


def _diff(
    metrics_a: list[Metric],
    metrics_b: list[Metric],
    kernels_a: pl.DataFrame,
    kernels_b: pl.DataFrame,
    a: Summary | RunSummary,
    b: Summary | RunSummary,
) -> Diff:
    ma = {(m.section, m.name): m for m in metrics_a}
    mb = {(m.section, m.name): m for m in metrics_b}
    rows: list[dict[str, object]] = []
    for key in list(dict.fromkeys([*ma, *mb])):
        x, y = ma.get(key), mb.get(key)
        m = x or y
        assert m is not None
        av = None if x is None else x.value
        bv = None if y is None else y.value
        name = _label_with_n(m.name, None if x is None else x.n, None if y is None else y.n)
        ratio = _ratio(av, bv)
        verdict, why = judgement(x, y)
        rows.append(
            {
                "role": m.role,
                "section": key[0],
                "metric": name,
                "field": m.field,
                "a": None if av is None else float(av),
                "b": None if bv is None else float(bv),
                "ratio": ratio,
                "verdict": verdict,
                "why": why,
                "unit": m.unit,
                "better": m.better or "none",
                "_order": _order(ratio, verdict or "changed"),
                "_group": _GROUP[m.role],
                "_seen": len(rows),
            }
        )
    table = pl.DataFrame(
        rows,
        schema={
            "role": pl.String,
            "section": pl.String,
            "metric": pl.String,
            "field": pl.String,
            "a": pl.Float64,
            "b": pl.Float64,
            "ratio": pl.Float64,
            "verdict": pl.String,
            "why": pl.String,
            "unit": pl.String,
            "better": pl.String,
            "_order": pl.Float64,
            "_group": pl.Int64,
            "_seen": pl.Int64,
        },
    )
    # the headline in its own order; then the rates and the workload, biggest change first
    table = (
        table.with_columns(
            pl.when(pl.col("role") == "headline")
            .then(-pl.col("_seen").cast(pl.Float64))
            .otherwise(pl.col("_order"))
            .alias("_order")
        )
        .sort(["_group", "_order"], descending=[False, True], maintain_order=True)
        .drop("_order", "_group", "_seen")
        .select(
            "section",
            "metric",
            "field",
            "a",
            "b",
            "ratio",
            "verdict",
            "why",
            "unit",
            "better",
            "role",
        )
    )
    ka = kernels_a.select("name", pl.col("total_ns").alias("a_ns"))
    kb = kernels_b.select("name", pl.col("total_ns").alias("b_ns"))
    k = ka.join(kb, on="name", how="full", coalesce=True).with_columns(
        pl.col("a_ns").fill_null(0), pl.col("b_ns").fill_null(0)
    )
    k = k.with_columns(
        pl.when(pl.col("a_ns") > 0).then(pl.col("b_ns") / pl.col("a_ns")).alias("ratio"),
        pl.when(pl.col("a_ns") == 0)
        .then(pl.lit("appeared"))
        .when(pl.col("b_ns") == 0)
        .then(pl.lit("vanished"))
        .when(((pl.col("b_ns") / pl.col("a_ns")) - 1).abs() <= SAME)
        .then(pl.lit("same"))
        .otherwise(pl.lit("changed"))
        .alias("change"),
        (pl.col("b_ns") - pl.col("a_ns")).abs().alias("_delta"),
    )
    k = k.sort("_delta", descending=True).drop("_delta")
    return Diff(a=_label(a), b=_label(b), rows=table, kernels=k, workload=_workload_line(table))


_GROUP = {"headline": 0, "rate": 1, "workload": 2}
# the workload rows the one-line statement names, in its order (a run's per-rank steps
# follow, named by their ranks)
_WORK_WORDS = {
    "ranks": "the ranks",
    "aligned steps": "the aligned steps",
    "steps": "the steps",
    "prompt tokens total": "the prompt tokens",
    "decode tokens total": "the decode tokens",
}


def _workload_line(rows: pl.DataFrame) -> str:
    """The change in work done, in one line: "B did 1.22× the steps and 1.28× the prompt
    tokens" (the totals both sides state; a run's steps per rank, named by their ranks:
    "0.95× the steps on rank 0 and 1.00× on ranks 1 and 2"), or that the work was the same
    (±5%)."""
    said: list[tuple[float, str]] = []
    ranks: dict[str, list[str]] = {}  # a ratio as written -> the ranks that did it
    for r in rows.filter(pl.col("role") == "workload").iter_rows(named=True):
        words = _WORK_WORDS.get(r["metric"])
        if words is None or r["a"] is None or r["b"] is None or not r["a"]:
            continue
        if r["section"].startswith("rank "):
            if r["metric"] == "steps":
                ranks.setdefault(f"{r['ratio']:.2f}", []).append(r["section"].removeprefix("rank "))
                said.append((r["ratio"], "rank"))
            continue
        said.append((r["ratio"], words))
    if not said:
        return ""
    order = list(_WORK_WORDS.values())
    totals = sorted((x for x in said if x[1] != "rank"), key=lambda x: order.index(x[1]))
    by_rank = [
        f"{'the steps ' if i == 0 else ''}on rank{'s' if len(who) > 1 else ''} {_and(who)}"
        for i, who in enumerate(ranks.values())
    ]
    if all(abs(ratio - 1) <= SAME for ratio, _ in said):
        named = [w.removeprefix("the ") for _, w in totals]
        if ranks:
            named.append("each rank's steps")
        return f"B did the same work as A ({', '.join(named)} within ±5%)"
    parts = [f"{ratio:.2f}× {words}" for ratio, words in totals]
    parts += [f"{ratio}× {words}" for ratio, words in zip(ranks, by_rank, strict=True)]
    return "B did " + _and(parts)


def _and(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
