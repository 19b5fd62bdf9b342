"""Terminal rendering with rich (stdout).

Every text cell and title is shown literally (a :class:`Table` makes each a ``Text``, with
control characters and bidi overrides made visible by :func:`~traceview.render.safe.terminal`):
a kernel named ``[link=…]`` or holding an ESC sequence is printed as those characters, never
read as rich markup or sent to the terminal as a command.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from rich import box
from rich import table as rich_table
from rich.console import Console, RenderableType
from rich.text import Text

from traceview.analysis.base.document import (
    Cost,
    CostDocument,
    DecodeCost,
    InfoDocument,
    PromptCost,
    SummaryDocument,
)
from traceview.analysis.documents.checks import CheckResult
from traceview.analysis.documents.compare import Diff
from traceview.analysis.documents.summary import warmup_line
from traceview.render.format import (
    BREAKDOWN_CAPTION,
    BREAKDOWN_COLUMNS,
    COST_COLUMNS,
    EFFICIENCY_COLUMNS,
    PHASE_COLUMNS,
    UNCHANGED,
    breakdown_rows,
    cost_caption,
    cost_formula,
    cost_terms,
    diff_rows,
    efficiency_caption,
    efficiency_rows,
    fmt_count,
    fmt_ns,
    fmt_pct,
    fmt_ratio,
    fmt_value,
    gap_title,
    phase_rows,
    quantile_cells,
    weights_line,
    widest_line,
)
from traceview.render.safe import line
from traceview.render.stdout import Stdout


def _text(value: RenderableType) -> RenderableType:
    # a cell is one line: a line break in a name (a file's, a GPU's, a kernel's) would
    # read as the start of another row
    return Text(line(value)) if isinstance(value, str) else value


class Table(rich_table.Table):
    """A rich table whose string cells and title are data, never markup; a cell and a
    ``str`` title are one line each (:func:`~traceview.render.safe.line`). A title of more
    lines is given as ``Text``, built from parts already made safe."""

    def __init__(self, *headers: str, title: str | Text | None = None, **kwargs: Any) -> None:
        shown = Text(line(title)) if isinstance(title, str) else title
        super().__init__(*headers, title=shown or None, **kwargs)

    def add_row(self, *renderables: RenderableType | None, **kwargs: Any) -> None:
        super().add_row(*(_text(r) if r is not None else r for r in renderables), **kwargs)


def render_info(doc: InfoDocument, console: Console | None = None) -> None:
    """The ``info`` tables: what the trace holds."""
    out = console or Stdout(highlight=False)
    facts = Table(show_header=False, box=None, title="trace", title_justify="left")
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("path", str(doc["path"]))
    version = doc["schema_version"]
    facts.add_row(
        "format", doc["format"] + ("" if version is None else f" (schemaVersion {version})")
    )
    facts.add_row("GPU", str(doc["gpu"] or "—"))
    facts.add_row("events", f"{doc['events']:,} ({doc['skipped_events']:,} skipped)")
    kinds = ", ".join(f"{k} {v:,}" for k, v in doc["kernels_by_event_kind"].items())
    facts.add_row("device activity", f"{doc['kernels']:,}" + (f" ({kinds})" if kinds else ""))
    facts.add_row("span", fmt_ns(doc["span_ns"]))
    facts.add_row("flows / counters", f"{doc['flows']:,} / {doc['counters']:,}")
    out.print(facts)

    if doc["devices"]:
        dev = Table(title="devices", title_justify="left")
        for col in ("device", "kernels", "kernel time", "streams"):
            dev.add_column(col, justify="right" if col != "streams" else "left")
        for d in doc["devices"]:
            dev.add_row(
                str(d["device"]),
                f"{d['kernels']:,}",
                fmt_ns(d["kernel_time_ns"]),
                ", ".join(map(str, d["streams"])),
            )
        out.print(dev)

    cats = Table(title="events by category", title_justify="left")
    cats.add_column("frame")
    cats.add_column("category")
    cats.add_column("events", justify="right")
    for row in doc["categories"]:
        cats.add_row(row["frame"], row["cat"] or "—", f"{row['count']:,}")
    out.print(cats)


def _steps(n: int) -> str:
    return f"{n:,} step" if n == 1 else f"{n:,} steps"


def render_summary(doc: SummaryDocument, console: Console | None = None) -> None:
    """The ``summarize`` screen: facts, families, phases with cadence, gaps, busy."""
    out = console or Stdout(highlight=False)
    t, s, b = doc["trace"], doc["steps"], doc["busy"]
    facts = Table(show_header=False, box=None, title="trace", title_justify="left")
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("path", str(t["path"]))
    cpu = t["activity"] == "cpu_op"  # a CPU capture: processes and threads stand in
    if cpu:
        facts.add_row("device", f"none: a CPU capture (process {t['device']})")
        facts.add_row(
            "activity",
            f"{t['kernels']:,} CPU ranges on threads " + ", ".join(map(str, t["streams"])),
        )
    else:
        facts.add_row("GPU", f"{t['gpu'] or '—'} (device {t['device']} of {t['devices']})")
        facts.add_row(
            "activity",
            f"{t['kernels']:,} kernels on streams " + ", ".join(map(str, t["streams"])),
        )
    facts.add_row("span", fmt_ns(t["span_ns"]))
    facts.add_row("events", f"{t['events']:,} ({t['skipped_events']:,} skipped)")
    facts.add_row("steps", f"{s['count']:,} by {s['method']}: {s['detail']}")
    warm = warmup_line(doc["warmup"])
    if warm:
        facts.add_row("warm-up", warm)
    if doc["capture"]["regions"]:
        facts.add_row(
            "start-up",
            f"CUDA-graph capture / warm-up: {doc['capture']['regions']} region(s), "
            f"{doc['capture']['kernels']:,} kernels "
            + ("kept in" if doc["warmup"]["kept"] else "left out"),
        )
    if s["disagreements"]:
        facts.add_row("", f"annotations and bursts disagree on {s['disagreements']} step(s)")
    sources = s["kind_sources"]
    if sources:
        facts.add_row(
            "kinds from",
            ", ".join(f"{src} ({_steps(n)})" for src, n in sources.items()),
        )
    w = doc["work"]
    if w["prompt_tokens"] is not None or w["shape_tokens"] is not None:
        said = []
        if w["prompt_tokens"] is not None:
            said.append(
                f"{w['prompt_tokens']:,} prompt and {w['decode_tokens'] or 0:,} decode tokens "
                f"(the engine's annotations, {_steps(w['token_steps'])})"
            )
        if w["shape_tokens"] is not None:
            said.append(
                f"{w['shape_tokens']:,} query tokens from record_shapes "
                f"({_steps(w['shape_token_steps'])})"
            )
        facts.add_row("tokens", "; ".join(said))
    facts.add_row(
        "CPU busy" if cpu else "GPU busy",
        f"{fmt_pct(b['fraction'])} of the window; "
        f"{fmt_pct(b['in_gaps'])} inside decode gaps; "
        f"{fmt_pct(b['in_widest_gaps'])} inside the widest (≥ p99)",
    )
    out.print(facts)

    fam = Table(title=f"layer families ({doc['classification']})", title_justify="left")
    for col in ("family", "kernels", "time", "mean", "share"):
        fam.add_column(col, justify="left" if col == "family" else "right")
    for f in doc["families"]:
        fam.add_row(
            f["family"],
            f"{f['count']:,}",
            fmt_ns(f["total_ns"]),
            fmt_ns(f["mean_ns"]),
            fmt_pct(f["share"]),
        )
    out.print(fam)

    ph = Table(title="steps and cadence by phase (anchor-to-anchor interval)", title_justify="left")
    tokens = {p["first_step"]: p["prompt_tokens"] for p in w["phases"]}
    # per-phase prompt tokens, where the engine stated them and the screen has room
    show_tokens = any(v is not None for v in tokens.values()) and out.width >= 100
    for col in (*PHASE_COLUMNS, "prompt tokens") if show_tokens else PHASE_COLUMNS:
        ph.add_column(col, justify="left" if col in ("phase", "steps") else "right")
    for first, cells in phase_rows(s):
        prompt = w["prompt_tokens"] if first is None else tokens.get(first)
        ph.add_row(*cells, *([fmt_count(prompt)] if show_tokens else []), end_section=first is None)
    out.print(ph)
    render_time_breakdown(doc, out)
    render_efficiency(doc, out)
    render_step_cost(doc["cost"], out, fitted_only=True)

    gaps = Table(title=gap_title(doc), title_justify="left")
    for col in ("population", "n", "overlaps", "p50", "p90", "p99", "max"):
        gaps.add_column(col, justify="left" if col == "population" else "right")
    for g in doc["decode_gaps"]:
        gaps.add_row(g["population"], f"{g['n']:,}", f"{g['overlaps']:,}", *quantile_cells(g))
    out.print(gaps)
    every = doc["decode_gaps"][0]["filled"] if doc["decode_gaps"] else None
    if every is not None:
        out.print(Text(line(f"in the gaps (n={every['gaps']}): " + widest_line(every))))
    for g in doc["decode_gaps"]:
        if g["widest"] is not None:
            out.print(
                Text(
                    line(
                        f"widest {g['population']} gaps (≥ p99, n={g['widest']['gaps']}): "
                        + widest_line(g["widest"])
                    )
                )
            )


def render_time_breakdown(doc: SummaryDocument, out: Console) -> None:
    """The "where the step time went" table: per phase, busy and idle by cause, as shares
    of the phase's span, and the verdict (busy by family is in the document)."""
    rows = breakdown_rows(doc)
    if not rows:
        return
    table = Table(
        title="where the step time went (share of each phase's span)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for col in BREAKDOWN_COLUMNS:
        left = col in ("phase", "verdict")
        table.add_column(col, justify="left" if left else "right", no_wrap=True)
    for cells in rows:
        table.add_row(*cells)
    table.caption = BREAKDOWN_CAPTION
    table.caption_justify = "left"
    out.print(table)


def render_efficiency(doc: SummaryDocument, out: Console) -> None:
    """The "efficiency by phase" table (with ``--model``): MFU and MBU per kind of step."""
    rows = efficiency_rows(doc)
    if not rows:
        return
    table = Table(title="efficiency by phase", title_justify="left", box=box.SIMPLE_HEAD)
    for col in EFFICIENCY_COLUMNS:
        table.add_column(col, justify="left" if col == "kind" else "right", no_wrap=True)
    for cells in rows:
        table.add_row(*cells)
    table.caption = Text(line(efficiency_caption(doc)))
    table.caption_justify = "left"
    out.print(table)


def render_step_cost(cost: Cost | CostDocument, out: Console, *, fitted_only: bool = False) -> None:
    """The step-cost fits: each term with its 95% interval, the caption (n, R², the
    crossover or the T² term), and the weights line with ``--model``; ``fitted_only``:
    nothing for a fit that is null (the summary's screen), else its reason."""
    for key in ("decode", "prompt"):
        fit: DecodeCost | PromptCost = cost[key]
        title = cost_formula(fit)
        rows = cost_terms(fit)
        if not rows:
            if not fitted_only:
                out.print(Text(line(f"{title}: no fit: {fit['reason']}")))
            continue
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
        for col in COST_COLUMNS:
            table.add_column(col, justify="left" if col == "term" else "right", no_wrap=True)
        for cells in rows:
            table.add_row(*cells)
        table.caption = Text(line(cost_caption(fit)))
        table.caption_justify = "left"
        out.print(table)
        for note in fit["notes"]:
            out.print(Text(line(f"  note: {note}")))
    weights = cost["weights"]
    if weights is not None and (not fitted_only or weights["fixed_bytes_per_s"] is not None):
        out.print(Text(line(weights_line(weights))))


BATCH_ROWS = 30  # batch sizes shown on the screen (all of them are in --json)


def render_cost(doc: CostDocument, console: Console | None = None) -> None:
    """``traceview cost``: the traces pooled, the fits, and per decode batch size its
    steps' mean time, the fit's, and the tokens per second each gives."""
    out = console or Stdout(highlight=False)
    traces = Table(title=f"steps pooled from {len(doc['traces'])} trace(s)", title_justify="left")
    for col in ("trace", "steps", "decode", "batch", "prompt"):
        traces.add_column(col, justify="left" if col == "trace" else "right")
    for t in doc["traces"]:
        low, high = t["sequences_min"], t["sequences_max"]
        batch = "—" if low is None else str(low) if low == high else f"{low}–{high}"
        traces.add_row(
            t["path"], f"{t['steps']:,}", f"{t['decode_steps']:,}", batch, f"{t['prompt_steps']:,}"
        )
    out.print(traces)
    render_step_cost(doc, out)
    batches = doc["decode"]["batches"]
    if batches:
        table = Table(title="decode steps by batch size", title_justify="left")
        for col in ("N", "steps", "mean step", "fitted", "tokens/s", "fitted tokens/s"):
            table.add_column(col, justify="right")
        for b in batches[:BATCH_ROWS]:
            table.add_row(
                f"{b['sequences']:,}",
                f"{b['steps']:,}",
                fmt_ns(b["mean_ns"]),
                fmt_ns(b["fitted_ns"]),
                fmt_value(b["tokens_per_s"], "count"),
                fmt_value(b["fitted_tokens_per_s"], "count"),
            )
        if len(batches) > BATCH_ROWS:
            table.caption = f"{len(batches) - BATCH_ROWS} more batch sizes in --json"
        out.print(table)


def render_diff(d: Diff, limit: int = 40, console: Console | None = None) -> None:
    """The ``diff`` screen: the work each side did, in one line; the headline; then the
    rates, biggest changes first, and the workload (totals, never judged); then the
    kernels. A row not judged says why in its verdict's place. Identical inputs: one
    line."""

    out = console or Stdout(highlight=False)
    if d.unchanged:
        out.print(Text(UNCHANGED), soft_wrap=True)
        return
    for said in (d.workload, *d.notes):
        if said:
            out.print(Text(line(said)))
    table = Table(title=Text(f"A = {line(d.a)}\nB = {line(d.b)}"), title_justify="left")
    for col in ("section", "metric", "A", "B", "B/A", "verdict"):
        table.add_column(col, justify="right" if col in ("A", "B", "B/A") else "left")
    colors = {"worse": "red", "better": "green"}
    rows = diff_rows(d, limit)
    for i, r in enumerate(rows):
        verdict = r["verdict"]
        style = colors.get(verdict or "")
        last_of_role = i + 1 < len(rows) and rows[i + 1]["role"] != r["role"]
        table.add_row(
            r["section"],
            r["metric"],
            fmt_value(r["a"], r["unit"]),
            fmt_value(r["b"], r["unit"]),
            fmt_ratio(r["ratio"]),
            Text(verdict, style=style or "") if verdict else Text(r["why"] or "", "dim"),
            end_section=last_of_role,
            style="dim" if r["role"] == "workload" else None,
        )
    out.print(table)
    if d.kernels.height:
        kt = Table(title="kernels that changed most", title_justify="left")
        for col in ("kernel", "A", "B", "B/A", "change"):
            kt.add_column(
                col,
                justify="right" if col in ("A", "B", "B/A") else "left",
                overflow="ellipsis",
                max_width=70 if col == "kernel" else None,
            )
        for k in d.kernels.head(12).iter_rows(named=True):
            name = k["name"]  # 140 characters: a CK template name wrapped to 65 rows
            kt.add_row(
                name if len(name) <= 140 else name[:139] + "…",
                fmt_value(k["a_ns"], "ns"),
                fmt_value(k["b_ns"], "ns"),
                fmt_ratio(k["ratio"]),
                k["change"],
            )
        out.print(kt)


def render_check(result: CheckResult, console: Console | None = None) -> None:
    """The ``check`` table: every check, its value, and whether it held."""
    out = console or Stdout(highlight=False)
    table = Table(title="checks", title_justify="left")
    for col in ("check", "value", "result"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for r in result.rows:  # each value in its bound's unit, as the check reads
        result_cell = Text("ok", style="green") if r["ok"] else Text("FAILED", style="red")
        if r["why"] is not None:  # a null figure: why, as its section says
            result_cell.append(Text(line(f" ({r['why']})")))
        table.add_row(r["check"], r["shown"] or "—", result_cell)
    out.print(table)


# the steps table's columns a screen shows first, the rest after them as they fit
STEP_SCREEN = (
    "rank",
    "index",
    "start_ms",
    "interval_ms",
    "kind",
    "kind_source",
    "kernels",
    "busy_fraction",
    "prefill_ms",
    "context_tokens",
    "generation_tokens",
    "shape_tokens",
    "annotation",
)


def steps_view(table: pl.DataFrame) -> pl.DataFrame:
    """The steps table for a screen: every ``*_ns`` column as ms (3 decimals) from the
    first step's start (per rank in a run; a duration stays a duration), the most read
    columns first."""
    if table.height == 0:
        return table
    group = ["path"] if "path" in table.columns else []
    times = ("start_ns", "anchor_ns", "end_ns")
    zero = pl.col("start_ns").min().over(group) if group else pl.col("start_ns").min()
    ns = [c for c in table.columns if c.endswith("_ns") or c.startswith("ns_")]

    def ms_name(c: str) -> str:  # start_ns -> start_ms; ns_gemm -> gemm_ms
        return f"{c[3:]}_ms" if c.startswith("ns_") else c.removesuffix("_ns") + "_ms"

    shown = table.with_columns(
        ((pl.col(c) - zero) if c in times else pl.col(c)).truediv(1e6).round(3).alias(ms_name(c))
        for c in ns
    ).drop(ns)
    empty = {c for c in shown.columns if shown[c].null_count() == shown.height}
    first = [c for c in STEP_SCREEN if c in shown.columns]
    rest = [c for c in shown.columns if c not in first and c not in empty]
    return shown.select([*first, *rest])  # a column no step fills says nothing on a screen
