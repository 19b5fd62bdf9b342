"""``check``: bound any figure of a summary (or run) document, regressions against a
baseline (every row a diff judges, and only those: never a total, a pooled figure or a
percentile on too few samples), and the growth of prompt work from chunk to chunk (the
signature of a chunked prefill that re-feeds the prompt from token 0).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from traceview._io import read_toml
from traceview.analysis.base.document import CheckRow, RunDocument, SummaryDocument, Unit
from traceview.analysis.documents.compare import Diff, diff
from traceview.analysis.documents.fields import figure_path
from traceview.analysis.documents.run import RunSummary
from traceview.analysis.documents.summary import Summary, refuse_capture_only
from traceview.errors import CheckError
from traceview.units import DURATION_HINT, NS_PER, read_quantity, written_as

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
    if not math.isfinite(number):
        raise CheckError(f"{what}: {text!r} is not a finite number")
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


def bound_unit(text: object, unit: Unit) -> str:
    """The unit a bound (read by :func:`parse_value`) is written in, the one its figure is
    shown in: ``5ms`` -> ``ms``, ``90%`` -> ``%``; a plain number's is ``""``, but a bare 0
    on a duration's is ``ns``."""
    quantity = read_quantity(text) if isinstance(text, str) else None
    given = quantity[1] if quantity else ""
    return "ns" if not given and unit == "ns" else given


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
            for k in range(1, len(parts) - i + 1):  # a key may hold dots (a family's name)
                key = ".".join(parts[i : i + k])
                if key in node:
                    walk(node[key], i + k, f"{trail}.{key}" if trail else key)
                    return
            # a section whose entries are named by kind or family may skip its list's
            # name: efficiency.decode.mbu_p50 is efficiency.phases.decode.mbu_p50
            for key, child in node.items():
                if isinstance(child, list) and any(
                    isinstance(x, dict) and any(str(x.get(f)) == parts[i] for f in _ID_FIELDS)
                    for x in child
                ):
                    walk(child, i, f"{trail}.{key}" if trail else key)
                    return
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


_FRACTION_KEYS = {
    "fraction",
    "share",
    "busy",
    "busy_fraction",
    "in_gaps",
    "in_widest_gaps",
    "mfu",
    "mbu",
    "mfu_p50",
    "mfu_p90",
    "mbu_p50",
    "mbu_p90",
    "r2",
    "fraction_of_peak",
}


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


# the document's maps whose values are nanoseconds, keyed by a name of the data (an idle
# cause, a family): their keys do not follow the ``*_ns`` rule
_NS_MAPS = re.compile(r"(^|\.)(idle_ns|busy_by_family)\.")


def figure_unit(figure: str) -> Unit:
    """The unit of a figure by its path as the schema names it: a value of an ns map
    (``time_breakdown.decode.idle_ns.host_late``, ``….busy_by_family.gemm``) is ns,
    else :func:`unit_of` its last name."""
    if _NS_MAPS.search(figure):
        return "ns"
    return unit_of(figure.rsplit(".", 1)[-1])


@dataclass
class Bounds:
    """Bounds for :func:`check`. ``maximum``/``minimum`` map summary paths to limits
    (numbers, or text with units); the rest are optional."""

    maximum: dict[str, object] = field(default_factory=dict)
    minimum: dict[str, object] = field(default_factory=dict)
    baseline: Summary | RunSummary | None = None
    max_regression: float | None = None  # fraction: 0.1 = B may be 10% worse than A
    prefill_growth: float | None = None  # largest first-to-last growth of prompt work


def prefill_growth_bound(value: object, key: str = "prefill_growth") -> float:
    """A prefill growth bound: a finite ratio of at least 1. Growth is the last chunk's
    prompt work over the first's, 1 for a flat prefill: a bound below 1 would fail every
    healthy prefill, and 0, a negative number or nan is no bound a user means.

    Raises:
        CheckError: anything else, naming ``key``.
    """
    growth = parse_value(value, key, "ratio")
    if growth < 1:
        raise CheckError(
            f"{key}: {value!r} is below 1; the bound is the growth a prefill may reach "
            "from its first chunk to its last (1 is flat, e.g. 1.5)"
        )
    return growth


# the figures only a model gives: MFU, MBU, tokens and the model's own numbers (the device's
# peaks and the families' achieved rates are there without one)
_NEEDS_MODEL = re.compile(r"(^|\.)efficiency\.(phases|model)\.")


def _has_model(doc: SummaryDocument | RunDocument) -> bool:
    """Whether a summary (or every rank of a run) was analysed with a model."""
    docs: list[SummaryDocument] = list(doc["summaries"]) if "summaries" in doc else [doc]  # type: ignore[typeddict-item]
    return all(d["efficiency"]["model"] is not None for d in docs)


def _null_reason(doc: object, trail: str, value: object) -> str | None:
    """Why a figure is null, where its section says (a step-cost fit's ``reason``); None
    for a figure that has a value, or whose section gives no reason."""
    if value is not None:
        return None
    node = doc
    for key in trail.strip(".").split(".")[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    reason = node.get("reason") if isinstance(node, dict) else None
    return reason if isinstance(reason, str) else None


def check(summary: Summary | RunSummary, bounds: Bounds) -> CheckResult:
    """Evaluate ``bounds`` on a summary (or a run).

    A path that names a figure of the document's schema which this trace lacks (a phase
    kind it never ran, a family it has no kernel of) is checked as a figure that is null:
    one failed row without a value.

    Raises:
        CheckError: a path that is no figure of the summary's schema (:func:`figure_path`),
            an efficiency figure of a summary made without a model, an unreadable value,
            a prefill growth bound that is not a number ≥ 1, or a regression bound without
            a baseline.
        CaptureOnlyError: the trace holds only CUDA-graph capture (nothing to judge).
    """
    if not isinstance(bounds, Bounds):
        raise CheckError(f"bounds: a Bounds (tv.Bounds(maximum=...)), not {type(bounds).__name__}")
    if bounds.baseline is not None and not isinstance(bounds.baseline, Summary | RunSummary):
        raise CheckError(
            "Bounds.baseline: a summary (tv.summarize(...) or tv.summarize_run(...)), not "
            f"{type(bounds.baseline).__name__}"
        )
    if bounds.max_regression is not None and bounds.baseline is None:  # else never judged
        raise CheckError("max_regression needs a baseline (Bounds(baseline=...))")
    if bounds.baseline is not None and bounds.max_regression is None:
        raise CheckError("a baseline needs max_regression (e.g. Bounds(max_regression=0.1))")
    refuse_capture_only(summary)
    doc = summary.to_dict()
    growth_bound = (
        None if bounds.prefill_growth is None else prefill_growth_bound(bounds.prefill_growth)
    )
    rows: list[CheckRow] = []
    of_run = isinstance(summary, RunSummary)
    for bound, op in ((bounds.maximum, "max"), (bounds.minimum, "min")):
        for path, raw in bound.items():
            # a figure of the schema this trace lacks (a phase kind it never ran, a family
            # it has no kernel of) is one failed row without a value, as a figure that is
            # null; a path that is no figure of the schema is bad input, on every trace
            figure = figure_path(path, run=of_run, stacklevel=3)
            if _NEEDS_MODEL.search(figure) and not _has_model(doc):
                raise CheckError(
                    f"{path}: MFU and MBU need the model: give --model (its config.json; "
                    "the API: AnalysisConfig(model=...))"
                )
            kind = figure_unit(figure)
            limit = parse_value(raw, path, kind)
            unit = bound_unit(raw, kind)
            # the path as written, else as the schema names it (a list's name left out
            # can lead lookup into another list first: decode.span_ns is time_breakdown's)
            hits = lookup(doc, path) or lookup(doc, figure) or [(figure, None)]
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
                        "kind": kind,
                        "unit": unit,
                        "shown": None if value is None else written_as(value, unit, limit),
                        "why": _null_reason(doc, trail, value),
                    }
                )
    if growth_bound is not None:
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
            growth = math.inf if g["growth"] is None else g["growth"]  # None: unbounded
            rows.append(
                {
                    "check": f"prefill growth, {where}steps {g['first_step']}–{g['last_step']} "
                    f"<= {growth_bound:g}x",
                    "value": growth,
                    "limit": growth_bound,
                    "ok": growth <= growth_bound,
                    "kind": "ratio",
                    "unit": "",
                    "shown": written_as(growth, "", growth_bound),
                    "why": None,
                }
            )
    if bounds.baseline is not None and bounds.max_regression is not None:
        rows += regression_rows(diff(bounds.baseline, summary), bounds.max_regression)
    return CheckResult(rows)


def regression_rows(d: Diff, max_regression: float) -> list[CheckRow]:
    """One check per row the diff judges (:attr:`Diff.judged`, the one list): B may be
    ``max_regression`` worse than A, by the figure's direction (a ratio up to ``1 +
    max_regression`` where lower is better, down to ``1 - max_regression`` where higher
    is). A figure only one side has (``new``, ``gone``) cannot be bounded: its row fails,
    saying which side lacks it. The rows the diff shows unjudged (a total, a pooled or
    direction-less figure, a maximum, a percentile on too few samples) are not checked."""
    out: list[CheckRow] = []
    for r in d.judged.iter_rows(named=True):
        lower = r["better"] == "lower"
        limit = 1 + max_regression if lower else 1 - max_regression
        where = f"{r['section']}: {r['metric']} {'<=' if lower else '>='} baseline × {limit:.2f}"
        if r["verdict"] in ("new", "gone"):
            out.append(
                {
                    "check": f"{where} ({'only B' if r['verdict'] == 'new' else 'only A'} "
                    "has the figure)",
                    "value": None,
                    "limit": limit,
                    "ok": False,
                    "kind": "ratio",
                    "unit": "",
                    "shown": None,
                    "why": None,
                }
            )
            continue
        ratio = r["ratio"] if r["ratio"] is not None else 1.0  # None: both 0, the same
        out.append(
            {
                "check": where,
                "value": ratio,
                "limit": limit,
                "ok": ratio <= limit if lower else ratio >= limit,
                "kind": "ratio",
                "unit": "",
                "shown": written_as(ratio, "", limit),
                "why": None,
            }
        )
    return out


@dataclass(frozen=True)
class ChecksFile:
    """A checks file's bounds: ``[max]`` and ``[min]`` (path = limit) and ``[options]``."""

    maximum: dict[str, object]
    minimum: dict[str, object]
    baseline: str | None = None
    max_regression: object = None  # a fraction or a percentage, read by parse_value
    prefill_growth: object = None


_OPTIONS = ("baseline", "max_regression", "prefill_growth")


def a_figure(path: str) -> Unit:
    """Refuse a path that is a figure neither of a summary nor of a run document, before any
    trace is read (whether it bounds a trace or a run is known when :func:`check` runs);
    else the figure's unit (:func:`figure_unit`).

    Raises:
        CheckError: the summary's reason (:func:`figure_path`).
    """
    try:
        return figure_unit(figure_path(path))
    except CheckError as exc:
        try:
            return figure_unit(figure_path(path, run=True))
        except CheckError:
            raise exc from None


def load_checks(path: str) -> ChecksFile:
    """A checks file (TOML): ``[max]``, ``[min]`` tables of path = limit, and ``[options]``
    (``baseline``, ``max_regression``, ``prefill_growth``).

    Raises:
        CheckError: an unreadable file, invalid TOML, an unknown table or option, or a
            table that is not one.
    """
    doc = read_toml(path, "checks file", CheckError)
    unknown = set(doc) - {"max", "min", "options"}
    if unknown:
        raise CheckError(
            f"{path}: unknown table(s) {', '.join(sorted(unknown))} (use [max], [min], [options])"
        )
    tables: dict[str, dict[str, object]] = {}
    for name in ("max", "min", "options"):
        table = doc.get(name, {})
        if not isinstance(table, dict):
            raise CheckError(f"{path}: [{name}] must be a table of key = value")
        tables[name] = table
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
    try:  # every path and limit read here, so a bad one names this file
        for name in ("max", "min"):
            for key, raw in tables[name].items():
                parse_value(raw, key, a_figure(key))
        if options.get("prefill_growth") is not None:
            prefill_growth_bound(options["prefill_growth"])
    except CheckError as exc:
        raise CheckError(f"{path}: {exc}") from None
    return ChecksFile(
        maximum=tables["max"],
        minimum=tables["min"],
        baseline=baseline,
        max_regression=options.get("max_regression"),
        prefill_growth=options.get("prefill_growth"),
    )
