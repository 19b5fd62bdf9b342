"""Before and after: ``diff`` two summaries, ``check`` a summary against bounds.

A scheduling fix shows in the tail and the cadence, not in throughput; a change can return
correct answers while doing many times the work. So the diff opens with the headline (the
cadence a decoding request experiences, the decode-gap tail, prefill growth) and judges a
figure only where a verdict means something
(:func:`~traceview.analysis.documents.verdicts.judgement`): a rate (per step, per
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
    DiffDocument,
    DiffRow,
    KernelChange,
)
from traceview.analysis.documents import display
from traceview.analysis.documents.run import RunSummary
from traceview.analysis.documents.summary import Summary, refuse_capture_only, warmup_line
from traceview.analysis.documents.verdicts import (
    SAME,
    Metric,
    judgement,
    metrics,
    ratio_of,
    run_metrics,
    zero_where_absent,
)
from traceview.errors import CheckError


def _label_with_n(name: str, n_a: int | None, n_b: int | None) -> str:
    """A metric's row label with its population size: ``(n=N)``, or ``(n A → B)`` where the
    two populations differ (a statistic's n is a field of its Metric, never parsed)."""
    ns = [n for n in (n_a, n_b) if n is not None]
    if not ns:
        return name
    if n_a is not None and n_b is not None and n_a != n_b:
        return f"{name} (n {n_a} → {n_b})"
    return f"{name} (n={ns[0]})"


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
    d = _diff(metrics(a), metrics(b), a.kernel_table, b.kernel_table, a, b)
    notes = [_bytes_note(a, b), _warmup_note("A", a), _warmup_note("B", b)]
    d.notes += [n for n in notes if n]
    return d


def _warmup_note(side: str, x: Summary) -> str | None:
    """Where a side's steps hold warm-up that its figures leave out: how many, and what
    (every figure compared is over the other steps)."""
    w = x.to_dict()["warmup"]
    if w["kept"] or not w["steps"]:
        return None
    return f"{side}: {w['steps']} step(s) left out of every figure for warm-up ({warmup_line(w)})"


def _bytes_note(a: Summary, b: Summary) -> str | None:
    """Where both sides have a decode fit and a model: B's per-sequence cost against A's,
    beside B's weight bytes against A's (a decode bound by memory bandwidth scales with
    the bytes, not with the parameters)."""
    ca, cb = a.to_dict()["cost"], b.to_dict()["cost"]
    pa, pb = ca["decode"]["per_sequence_ns"], cb["decode"]["per_sequence_ns"]
    wa, wb = ca["weights"], cb["weights"]
    if pa is None or pb is None or pa <= 0 or wa is None or wb is None or not wa["weight_bytes"]:
        return None
    return (
        f"decode: B's per-sequence cost is {pb / pa:.2f}× A's; B's weights are "
        f"{wb['weight_bytes'] / wa['weight_bytes']:.2f}× A's bytes a step"
    )


def _run_kernels(run: RunSummary) -> pl.DataFrame:
    """Kernel time per name, summed over the run's ranks."""
    tables = [r.summary.kernel_table for r in run.ranks if r.summary is not None]
    return pl.concat(tables).group_by("name").agg(pl.col("total_ns").sum())


def _label(x: Summary | RunSummary) -> str:
    if isinstance(x, RunSummary):
        paths = [r["path"] for r in x.to_dict()["ranks"]]
        return f"{len(paths)} ranks: {paths[0]} …" if len(paths) > 1 else paths[0]
    return str(x.to_dict()["trace"]["path"])


def _absent_rank(section: str, in_a: set[str], in_b: set[str]) -> str | None:
    """Why a run diff's row of one rank is unjudged where that rank is in one run only."""
    if not section.startswith("rank ") or (section in in_a) == (section in in_b):
        return None
    return f"{section} is absent from {'B' if section in in_a else 'A'}"


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
    sections_a, sections_b = {m.section for m in metrics_a}, {m.section for m in metrics_b}
    rows: list[dict[str, object]] = []
    for key in list(dict.fromkeys([*ma, *mb])):
        x, y = ma.get(key), mb.get(key)
        if x is None and y is not None:
            x = zero_where_absent(y, metrics_a)
        elif y is None and x is not None:
            y = zero_where_absent(x, metrics_b)
        m = x or y
        assert m is not None
        av = None if x is None else x.value
        bv = None if y is None else y.value
        name = _label_with_n(m.name, None if x is None else x.n, None if y is None else y.n)
        ratio = ratio_of(av, bv)
        verdict, why = judgement(x, y)
        absent = _absent_rank(key[0], sections_a, sections_b)
        if absent is not None:  # not a population too small: a rank that is not there
            verdict, why = None, absent
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
