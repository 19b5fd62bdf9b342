"""Before and after: ``diff`` two summaries, ``check`` a summary against bounds.

A scheduling fix shows in the tail and the cadence, not in throughput; a change can return
correct answers while doing many times the work. So the diff opens with the headline (the
cadence a decoding request experiences, the decode-gap tail, prefill growth), judges only
rates (per step, per token, per step of one kind, cadence, gaps, fractions), and shows the
totals, and the figures that move with the mix of steps, as workload, never judged: a
bigger workload, or another mix, is not a regression. ``check`` is
:mod:`traceview.analysis.documents.checks`.
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
from traceview.analysis.base.stats import mean
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


def _verdict(
    a: float | None, b: float | None, ratio: float | None, better: str | None, role: Role
) -> str | None:
    if role == "workload":
        return None  # a total grows with the work done: shown, never judged
    if a is None and b is None:
        return "n/a"
    if a is None or (a == 0 and b):
        return "new"
    if b is None or (b == 0 and a):
        return "gone"
    if ratio is None or abs(ratio - 1) <= SAME:
        return "same"
    if better is None:
        return "changed"
    worse = ratio > 1 if better == "lower" else ratio < 1
    return "worse" if worse else "better"


@dataclass
class Diff:
    """Two summaries side by side.

    Attributes:
        a, b: the paths compared (A is the baseline; ratios are B/A).
        rows: DataFrame ``section``, ``metric``, ``field`` (the document's path of the
            figure, as ``check`` reads it; null where the figure is derived, e.g. a mean
            per step), ``a``, ``b`` (Float64), ``ratio`` (B/A),
            ``verdict`` (same, better, worse, changed, new, gone, n/a; null for a workload
            row), ``unit``, ``better`` (lower, higher or none: which way is an
            improvement), ``role`` (headline, rate, workload): the headline first, then
            the rates, biggest changes first, then the workload.
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
    def unchanged(self) -> bool:
        """Nothing moved beyond noise: every judged figure the same (±5%), the workload
        the same, no kernel appeared, vanished or changed."""
        judged = self.rows.filter(pl.col("verdict").is_not_null())
        moved = judged.filter(~pl.col("verdict").is_in(["same", "n/a"])).height
        work = self.rows.filter(pl.col("role") == "workload", pl.col("ratio").is_not_null())
        work_moved = work.filter((pl.col("ratio") - 1).abs() > SAME).height
        kernels = self.kernels.filter(pl.col("change") != "same").height
        return moved == 0 and work_moved == 0 and kernels == 0

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
        verdict = _verdict(av, bv, ratio, m.better, m.role)
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
            "section", "metric", "field", "a", "b", "ratio", "verdict", "unit", "better", "role"
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
# the workload rows the one-line statement names, in its order
_WORK_WORDS = {
    "steps": "the steps",
    "aligned steps": "the aligned steps",
    "prompt tokens total": "the prompt tokens",
    "decode tokens total": "the decode tokens",
}


def _workload_line(rows: pl.DataFrame) -> str:
    """The change in work done, in one line: "B did 1.22× the steps and 1.28× the prompt
    tokens" (the totals both sides state), or that the work was the same (±5%)."""
    said = []
    for r in rows.filter(pl.col("role") == "workload").iter_rows(named=True):
        words = _WORK_WORDS.get(r["metric"])
        if words is None or r["a"] is None or r["b"] is None or not r["a"]:
            continue
        said.append((r["ratio"], words))
    order = list(_WORK_WORDS.values())
    said.sort(key=lambda x: order.index(x[1]))
    if not said:
        return ""
    if all(abs(ratio - 1) <= SAME for ratio, _ in said):
        return (
            "B did the same work as A ("
            + ", ".join(w.removeprefix("the ") for _, w in said)
            + " within ±5%)"
        )
    parts = [f"{ratio:.2f}× {words}" for ratio, words in said]
    return "B did " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0])
