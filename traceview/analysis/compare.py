"""Before and after: ``diff`` two summaries, ``check`` a summary against bounds.

A scheduling fix shows in the tail and the cadence, not in throughput; a change can return
correct answers while doing many times the work. So the diff compares cadence and gap
percentiles per phase and population, busy fractions, kernel time per family, kernel
launches and prompt work per step, and the kernels that appeared, vanished or changed most;
and ``check`` can bound any figure of the summary document, regressions against a baseline,
and the growth of prompt work from chunk to chunk (the signature of a chunked prefill that
re-feeds the prompt from token 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import polars as pl

from traceview.analysis import display
from traceview.analysis.document import (
    DIFF_SCHEMA,
    QUANTILES,
    CheckRow,
    DiffDocument,
    DiffRow,
    KernelChange,
    Unit,
)
from traceview.analysis.run import RunSummary
from traceview.analysis.stats import mean
from traceview.analysis.summary import Summary
from traceview.errors import CheckError
from traceview.units import DURATION_HINT, NS_PER, read_quantity

SAME = 0.05  # a ratio within ±5% is "same"


@dataclass(frozen=True)
class Metric:
    """One figure a diff compares: its identity (section, name), value, which way is
    better, unit, and the size of the population it was computed over (None when it is
    not a statistic of a population)."""

    section: str
    name: str
    value: float | None
    better: str | None  # "lower", "higher" or None (no direction)
    unit: str  # ns | count | fraction | ratio
    n: int | None = None


def metrics(summary: Summary) -> list[Metric]:
    """The figures a diff compares, from one summary."""
    doc, t = summary.to_dict(), summary.steps
    out = [Metric("steps", "steps", doc["steps"]["count"], None, "count")]
    for q in QUANTILES:
        out.append(Metric("cadence", f"all {q[:-3]}", doc["steps"]["cadence"][q], "lower", "ns"))
    for kind in ("decode", "mixed"):
        steps_of = t.filter(pl.col("kind") == kind)
        out.append(Metric("steps", f"{kind} steps", steps_of.height, None, "count"))
        cad = doc["steps"]["cadence_by_kind"][kind]
        for q in QUANTILES:
            out.append(Metric("cadence", f"{kind} {q[:-3]}", cad[q], "lower", "ns", cad["n"]))
        if steps_of.height:
            out.append(
                Metric(
                    "work",
                    f"kernels per {kind} step",
                    mean(steps_of["kernels"]),
                    "lower",
                    "count",
                )
            )
            if kind == "mixed":
                out.append(
                    Metric(
                        "work",
                        "prefill ns per mixed step",
                        mean(steps_of["prefill_ns"]),
                        "lower",
                        "ns",
                    )
                )
                out.append(
                    Metric(
                        "work",
                        "prefill kernels per mixed step",
                        mean(steps_of["prefill_kernels"]),
                        "lower",
                        "count",
                    )
                )
    out.append(Metric("work", "prefill ns total", float(t["prefill_ns"].sum()), "lower", "ns"))
    # the engine's own token counts (null where its annotations do not state them): for one
    # workload, more prompt tokens processed means prompt work repeated
    w = doc["work"]
    out.append(Metric("work", "prompt tokens total", w["prompt_tokens"], "lower", "count"))
    out.append(Metric("work", "decode tokens total", w["decode_tokens"], None, "count"))
    for g in doc["decode_gaps"]:
        pop = g["population"]
        out.append(Metric("decode gaps", f"{pop} n", g["n"], None, "count"))
        for q in QUANTILES:
            out.append(Metric("decode gaps", f"{pop} {q[:-3]}", g[q], "lower", "ns"))
    busy = doc["busy"]
    out.append(Metric("busy", "fraction", busy["fraction"], None, "fraction"))
    out.append(Metric("busy", "in_gaps", busy["in_gaps"], None, "fraction"))
    out.append(Metric("busy", "in_widest_gaps", busy["in_widest_gaps"], None, "fraction"))
    for f in doc["families"]:
        out.append(Metric("families", f"{f['family']} time", f["total_ns"], "lower", "ns"))
        out.append(Metric("families", f"{f['family']} kernels", f["count"], None, "count"))
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


def _verdict(a: float | None, b: float | None, ratio: float | None, better: str | None) -> str:
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
        rows: DataFrame ``section``, ``metric``, ``a``, ``b`` (Float64), ``ratio`` (B/A),
            ``verdict`` (same, better, worse, changed, new, gone, n/a), ``unit``, ``better``
            (lower, higher or none: which way is an improvement); biggest
            changes first.
        kernels: DataFrame ``name``, ``a_ns``, ``b_ns`` (Int64, kernel time), ``ratio``,
            ``change`` (appeared, vanished, changed); biggest changes first.
    """

    a: str
    b: str
    rows: pl.DataFrame
    kernels: pl.DataFrame
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> DiffDocument:
        """The ``traceview.diff/1`` document (non-finite ratios as null)."""
        return {
            "schema": DIFF_SCHEMA,
            "a": self.a,
            "b": self.b,
            "rows": cast(list[DiffRow], _jsonable(self.rows.to_dicts())),
            "kernels": cast(list[KernelChange], _jsonable(self.kernels.to_dicts())),
        }

    def to_markdown(self, limit: int = 40) -> str:
        """The diff as a markdown table for a pull request (drawn by
        :mod:`traceview.render.markup`, through :mod:`traceview.analysis.display`)."""
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
    """The figures a diff of two runs compares: skew, the straggler's excess, and per rank
    its cadence, busy fraction, compute and collective wait."""
    doc = run.to_dict()
    out = [Metric("run", "ranks", len(doc["ranks"]), None, "count")]
    out.append(Metric("run", "aligned steps", doc["alignment"]["steps"], None, "count"))
    for q in ("p50_ns", "p99_ns", "max_ns"):
        out.append(Metric("skew", f"compute skew {q[:-3]}", doc["skew"][q], "lower", "ns"))
    s = doc["straggler"]
    out.append(
        Metric(
            "skew", "straggler excess p50", None if s is None else s["excess_p50_ns"], "lower", "ns"
        )
    )
    for r in doc["ranks"]:
        rank = f"rank {r['rank']}"
        out.append(Metric(rank, "cadence p50", r["cadence_p50_ns"], "lower", "ns"))
        out.append(Metric(rank, "cadence p99", r["cadence_p99_ns"], "lower", "ns"))
        out.append(Metric(rank, "compute p50", r["compute_p50_ns"], "lower", "ns"))
        out.append(Metric(rank, "collective wait p50", r["collective_wait_p50_ns"], "lower", "ns"))
        out.append(Metric(rank, "decode gap p99", r["decode_gap_p99_ns"], "lower", "ns"))
        out.append(Metric(rank, "busy", r["busy"], None, "fraction"))
    return out


def diff(a: Summary | RunSummary, b: Summary | RunSummary) -> Diff:
    """Compare two summaries, or two runs (A the baseline, B the change); see :class:`Diff`."""
    if isinstance(a, RunSummary) != isinstance(b, RunSummary):
        raise CheckError("diff compares a trace with a trace, or a run with a run")
    if isinstance(a, RunSummary) and isinstance(b, RunSummary):
        return _diff(run_metrics(a), run_metrics(b), _run_kernels(a), _run_kernels(b), a, b)
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
    rows = []
    for key in list(dict.fromkeys([*ma, *mb])):
        x, y = ma.get(key), mb.get(key)
        m = x or y
        assert m is not None
        av = None if x is None else x.value
        bv = None if y is None else y.value
        name = _label_with_n(m.name, None if x is None else x.n, None if y is None else y.n)
        ratio = _ratio(av, bv)
        verdict = _verdict(av, bv, ratio, m.better)
        rows.append(
            {
                "section": key[0],
                "metric": name,
                "a": None if av is None else float(av),
                "b": None if bv is None else float(bv),
                "ratio": ratio,
                "verdict": verdict,
                "unit": m.unit,
                "better": m.better or "none",
                "_order": _order(ratio, verdict),
            }
        )
    table = pl.DataFrame(
        rows,
        schema={
            "section": pl.String,
            "metric": pl.String,
            "a": pl.Float64,
            "b": pl.Float64,
            "ratio": pl.Float64,
            "verdict": pl.String,
            "unit": pl.String,
            "better": pl.String,
            "_order": pl.Float64,
        },
    )
    table = table.sort("_order", descending=True, maintain_order=True).drop("_order")
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
    return Diff(a=_label(a), b=_label(b), rows=table, kernels=k)


# --- check ---------------------------------------------------------------------------------

_ID_FIELDS = ("population", "kind", "family", "rank")


def parse_value(text: object, key: str = "", unit: Unit | None = None) -> float:
    """``5ms`` -> 5e6 (ns); ``90%`` -> 0.9; plain numbers as they are. With the field's
    ``unit`` (:func:`unit_of`), units are never guessed: a duration needs a time unit (a
    bare number is an error, but 0), and a fraction, ratio or count takes none (a
    fraction may be a percentage).

    Raises:
        CheckError: anything else (a boolean, a table, text that is no quantity, a unit
            that does not fit the field).
    """
    what = key or "value"
    if isinstance(text, bool) or not isinstance(text, int | float | str):
        raise CheckError(f"{what}: {text!r} is not a number")
    quantity = (float(text), "") if isinstance(text, int | float) else read_quantity(text)
    if quantity is None:
        raise CheckError(f"{what}: cannot read {text!r} (e.g. 5ms, 250us, 90%, 0.9)")
    number, given = quantity
    if unit == "ns" and not given and number != 0:
        raise CheckError(f"{what}: {text!r} has no unit; {DURATION_HINT}")
    if (
        unit in ("fraction", "ratio", "count")
        and given
        and not (given == "%" and unit == "fraction")
    ):
        kind = {"fraction": "a fraction (0.9 or 90%)", "ratio": "a ratio", "count": "a count"}
        raise CheckError(f"{what}: {text!r} has a unit, but the field is {kind[unit]}")
    if unit == "ns" and given == "%":
        raise CheckError(f"{what}: {text!r} is a percentage; {DURATION_HINT}")
    if given == "%":
        return number / 100
    return number * NS_PER[given] if given else number


def lookup(doc: object, path: str) -> list[tuple[str, object]]:
    """Values at a dotted path of the summary document. In a list, the next part selects
    items by their ``population``/``kind``/``family`` (a family may contain dots) or by
    index; every matching item is returned, with the path that reached it."""
    parts = path.split(".")
    found: list[tuple[str, object]] = []

    def walk(node: object, i: int, trail: str) -> None:
        if i == len(parts):
            found.append((trail, node))
            return
        if isinstance(node, dict):
            if parts[i] in node:
                walk(node[parts[i]], i + 1, f"{trail}.{parts[i]}" if trail else parts[i])
            return
        if isinstance(node, list):
            by_rank = [x for x in node if isinstance(x, dict) and str(x.get("rank")) == parts[i]]
            if by_rank:  # a run's ranks are selected by rank, not by position
                walk(by_rank[0], i + 1, f"{trail}.{parts[i]}")
                return
            if parts[i].isdigit() and int(parts[i]) < len(node):
                walk(node[int(parts[i])], i + 1, f"{trail}.{parts[i]}")
                return
            for k in range(len(parts) - i, 0, -1):
                ident = ".".join(parts[i : i + k])
                items = [
                    x
                    for x in node
                    if isinstance(x, dict) and any(str(x.get(f)) == ident for f in _ID_FIELDS)
                ]
                if items:
                    for n, item in enumerate(items):
                        label = ident if len(items) == 1 else f"{ident}#{n}"
                        walk(item, i + k, f"{trail}.{label}")
                    return

    walk(doc, 0, "")
    return found


@dataclass
class CheckResult:
    """Every check with its outcome (:class:`CheckRow`: ``check``, ``value``, ``limit``,
    ``ok``, ``kind``)."""

    rows: list[CheckRow]

    @property
    def ok(self) -> bool:
        return all(r["ok"] for r in self.rows)

    @property
    def failed(self) -> list[CheckRow]:
        return [r for r in self.rows if not r["ok"]]


_FRACTION_KEYS = {"fraction", "share", "busy", "busy_fraction", "in_gaps", "in_widest_gaps"}


def unit_of(key: str) -> Unit:
    """The unit of a document field, by the naming rule every document follows: ``*_ns``
    is nanoseconds, the busy and share fields are fractions, ``growth`` a ratio, the rest
    counts (docs/metrics.md)."""
    if key.endswith("_ns"):
        return "ns"
    if key in _FRACTION_KEYS:
        return "fraction"
    if key == "growth":
        return "ratio"
    return "count"


@dataclass
class Bounds:
    """Bounds for :func:`check`. ``maximum``/``minimum`` map summary paths to limits
    (numbers, or text with units); the rest are optional."""

    maximum: dict[str, object] = field(default_factory=dict)
    minimum: dict[str, object] = field(default_factory=dict)
    baseline: Summary | RunSummary | None = None
    max_regression: float | None = None  # fraction: 0.1 = B may be 10% worse than A
    prefill_growth: float | None = None  # largest first-to-last growth of prompt work


def check(summary: Summary | RunSummary, bounds: Bounds) -> CheckResult:
    """Evaluate ``bounds`` on a summary (or a run).

    Raises:
        CheckError: a path that names nothing in the summary, or an unreadable value.
    """
    doc = summary.to_dict()
    rows: list[CheckRow] = []
    for bound, op in ((bounds.maximum, "max"), (bounds.minimum, "min")):
        for path, raw in bound.items():
            limit = parse_value(raw, path, unit_of(path.rsplit(".", 1)[-1]))
            hits = lookup(doc, path)
            if not hits:
                raise CheckError(
                    f"{path}: not a figure of the summary (see traceview summarize "
                    "--json for the paths)"
                )
            for trail, value in hits:
                if isinstance(value, dict | list):
                    raise CheckError(f"{path}: names a section, not a figure")
                if isinstance(value, bool) or not isinstance(value, int | float | None):
                    raise CheckError(f"{path}: {trail} is {value!r}, not a number")
                ok = value is not None and (value <= limit if op == "max" else value >= limit)
                rows.append(
                    {
                        "check": f"{trail} {'<=' if op == 'max' else '>='} {raw}",
                        "value": value,
                        "limit": limit,
                        "ok": bool(ok),
                        "kind": unit_of(trail.rsplit(".", 1)[-1]),
                    }
                )
    if bounds.prefill_growth is not None:
        if isinstance(summary, RunSummary):
            run = summary.document
            growths = [
                (f"rank {r['rank']}, ", g)
                for r, s in zip(run["ranks"], run["summaries"], strict=True)
                for g in s["work"]["prefill_growth"]
            ]
        else:
            growths = [("", g) for g in summary.document["work"]["prefill_growth"]]
        for where, g in growths:
            rows.append(
                {
                    "check": f"prefill growth, {where}steps {g['first_step']}–{g['last_step']} "
                    f"<= {bounds.prefill_growth:g}x",
                    "value": g["growth"],
                    "limit": bounds.prefill_growth,
                    "ok": g["growth"] <= bounds.prefill_growth,
                    "kind": "ratio",
                }
            )
    if bounds.baseline is not None and bounds.max_regression is not None:
        d = diff(bounds.baseline, summary)
        timing = d.rows.filter(
            pl.col("ratio").is_not_null() & (pl.col("better") == "lower") & (pl.col("a") > 0)
        )
        for r in timing.iter_rows(named=True):
            limit = 1 + bounds.max_regression
            rows.append(
                {
                    "check": f"{r['section']}: {r['metric']} <= baseline × {limit:.2f}",
                    "value": r["ratio"],
                    "limit": limit,
                    "ok": r["ratio"] <= limit,
                    "kind": "ratio",
                }
            )
    return CheckResult(rows)


@dataclass(frozen=True)
class ChecksFile:
    """A checks file's bounds: ``[max]`` and ``[min]`` (path = limit) and ``[options]``."""

    maximum: dict[str, object]
    minimum: dict[str, object]
    baseline: str | None = None
    max_regression: object = None  # a fraction or a percentage, read by parse_value
    prefill_growth: object = None


_OPTIONS = ("baseline", "max_regression", "prefill_growth")


def load_checks(path: str) -> ChecksFile:
    """A checks file (TOML): ``[max]``, ``[min]`` tables of path = limit, and ``[options]``
    (``baseline``, ``max_regression``, ``prefill_growth``).

    Raises:
        CheckError: an unreadable file, invalid TOML, an unknown table or option, or a
            table that is not one.
    """
    import tomllib

    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        raise CheckError(f"{path}: cannot read checks file: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CheckError(f"{path}: not valid TOML: {exc}") from None
    unknown = set(doc) - {"max", "min", "options"}
    if unknown:
        raise CheckError(
            f"{path}: unknown table(s) {', '.join(sorted(unknown))} (use [max], [min], [options])"
        )
    tables = {name: doc.get(name, {}) for name in ("max", "min", "options")}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise CheckError(f"{path}: [{name}] must be a table of key = value")
    options = tables["options"]
    unknown_options = set(options) - set(_OPTIONS)
    if unknown_options:
        raise CheckError(
            f"{path}: unknown option(s) {', '.join(sorted(unknown_options))} in [options] "
            f"(use {', '.join(_OPTIONS)})"
        )
    baseline = options.get("baseline")
    if baseline is not None and not isinstance(baseline, str):
        raise CheckError(f"{path}: [options] baseline must be a path, not {baseline!r}")
    return ChecksFile(
        maximum=tables["max"],
        minimum=tables["min"],
        baseline=baseline,
        max_regression=options.get("max_regression"),
        prefill_growth=options.get("prefill_growth"),
    )
