"""``traceview report``: one self-contained HTML page to attach to a pull request.

Everything is inline: CSS (light and dark, by ``prefers-color-scheme``), the charts as SVG,
and the summary documents as JSON in ``<script type="application/json">`` elements for
machines. Nothing is fetched from the network and no script runs.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from traceview.capture.itl import OnTrace

from traceview.analysis.base.capture_document import ItlDocument
from traceview.analysis.documents.compare import Diff
from traceview.analysis.documents.summary import Summary, warmup_line
from traceview.analysis.timing.gaps import SMALL_N
from traceview.render.charts import heartbeat_data, heartbeat_figure
from traceview.render.format import (
    BREAKDOWN_CAPTION,
    BREAKDOWN_COLUMNS,
    COST_COLUMNS,
    EFFICIENCY_COLUMNS,
    PHASE_COLUMNS,
    UNCHANGED,
    breakdown_rows,
    cost_caption,
    cost_terms,
    diff_rows,
    efficiency_caption,
    efficiency_rows,
    fmt_ns,
    fmt_pct,
    fmt_ratio,
    fmt_value,
    gap_title,
    phase_rows,
    quantile_cells,
    weights_line,
)
from traceview.render.gaps_chart import gaps_data, gaps_figure
from traceview.render.safe import html_text as esc
from traceview.render.safe import json_for_html

CSS = """
:root { --bg: #ffffff; --fg: #1d1f21; --muted: #5f6368; --line: #dadce0; --head: #f1f3f4;
        --worse: #c5221f; --better: #188038; --warn-bg: #fef7e0; --warn-fg: #7a5b00; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #1e1f22; --fg: #e8eaed; --muted: #a0a4a8; --line: #3c4043; --head: #2a2b2f;
          --worse: #f28b82; --better: #81c995; --warn-bg: #3b3222; --warn-fg: #fdd663; }
  .chart svg { filter: invert(0.88) hue-rotate(180deg); }
}
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1180px; padding: 24px 20px 60px; background: var(--bg);
       color: var(--fg); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.muted { color: var(--muted); }
table { border-collapse: collapse; margin: 6px 0 10px; min-width: 50%; }
th, td { padding: 4px 10px; border-bottom: 1px solid var(--line); text-align: left;
         white-space: nowrap; }
th { background: var(--head); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.name { white-space: normal; word-break: break-all; max-width: 520px; }
.worse { color: var(--worse); font-weight: 600; } .better { color: var(--better); }
.why { color: var(--muted); }
.warn { background: var(--warn-bg); color: var(--warn-fg); padding: 8px 14px;
        border-radius: 6px; }
.chart svg { width: 100%; height: auto; display: block; }
.facts td:first-child { color: var(--muted); padding-right: 18px; }
"""


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and doctype


class Html(str):
    """Markup this module wrote itself; every other cell is text and is escaped."""


def _cell(c: str) -> str:
    return c if isinstance(c, Html) else esc(c)


def _table(head: list[str], rows: list[list[str]], numeric: set[int], cls: str = "") -> str:
    th = "".join(
        f'<th class="num">{esc(h)}</th>' if i in numeric else f"<th>{esc(h)}</th>"
        for i, h in enumerate(head)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{_cell(c)}</td>' if i in numeric else f"<td>{_cell(c)}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    thead = f"<thead><tr>{th}</tr></thead>" if any(head) else ""
    return f'<table class="{cls}">{thead}<tbody>{body}</tbody></table>'


def _summary_section(summary: Summary, label: str) -> str:
    d = summary.to_dict()
    t, s, b = d["trace"], d["steps"], d["busy"]
    cpu = t["activity"] == "cpu_op"  # a CPU capture: processes and threads stand in
    facts = [
        ["trace", str(t["path"])],
        ["GPU", f"{t['gpu'] or '—'} (device {t['device']})"]
        if not cpu
        else ["device", f"none: a CPU capture (process {t['device']})"],
        [
            "activity",
            f"{t['kernels']:,} {'CPU ranges on threads' if cpu else 'kernels'}, "
            f"span {fmt_ns(t['span_ns'])}",
        ],
        ["steps", f"{s['count']:,} by {s['method']}: {s['detail']}"],
        *([["warm-up", said]] if (said := warmup_line(d["warmup"])) else []),
        [
            "CPU busy" if cpu else "GPU busy",
            f"{fmt_pct(b['fraction'])} of the window; {fmt_pct(b['in_gaps'])} inside "
            f"decode gaps; {fmt_pct(b['in_widest_gaps'])} inside the widest",
        ],
    ]
    w = d["work"]
    if w.get("prompt_tokens") is not None:
        facts.append(
            [
                "tokens",
                f"{w['prompt_tokens']:,} prompt, {w['decode_tokens'] or 0:,} "
                "decode (the engine's annotations)",
            ]
        )
    out = [f"<h2>{esc(label)}</h2>", _table(["", ""], facts, set(), "facts")]
    phases = [cells for _, cells in phase_rows(s)]
    out.append("<h3>Steps and cadence by phase</h3>")
    out.append(_table(list(PHASE_COLUMNS), phases, {2, 3, 4, 5, 6}, "phases"))
    breakdown = breakdown_rows(d)
    if breakdown:
        out.append("<h3>Where the step time went (share of each phase's span)</h3>")
        shares = set(range(2, len(BREAKDOWN_COLUMNS) - 1))
        out.append(_table(list(BREAKDOWN_COLUMNS), breakdown, shares, "breakdown"))
        out.append(f'<p class="muted">{esc(BREAKDOWN_CAPTION)}</p>')
    efficiency = efficiency_rows(d)
    if efficiency:  # with --model
        out.append("<h3>Efficiency by phase</h3>")
        numeric = set(range(1, len(EFFICIENCY_COLUMNS)))
        out.append(_table(list(EFFICIENCY_COLUMNS), efficiency, numeric, "efficiency"))
        out.append(f'<p class="muted">{esc(efficiency_caption(d))}</p>')
    for fit, title in ((d["cost"]["decode"], "decode step"), (d["cost"]["prompt"], "prompt step")):
        terms = cost_terms(fit)
        if terms:  # a fit the counts support (docs/metrics.md, "What a step costs")
            out.append(f"<h3>What a {title} costs</h3>")
            out.append(_table(list(COST_COLUMNS), terms, {1, 2}, "cost"))
            out.append(f'<p class="muted">{esc(cost_caption(fit))}</p>')
    weights = d["cost"]["weights"]
    if weights is not None and weights["fixed_bytes_per_s"] is not None:
        out.append(f'<p class="muted">{esc(weights_line(weights))}</p>')
    gaps = [
        [
            g["population"],
            f"{g['n']:,}",
            f"{g['overlaps']:,}",
            *quantile_cells(g),
        ]
        for g in d["decode_gaps"]
    ]
    out.append(f"<h3>{esc(gap_title(d))}</h3>")
    out.append(
        _table(
            ["population", "n", "overlaps", "p50", "p90", "p99", "max"],
            gaps,
            {1, 2, 3, 4, 5, 6},
            "gaps",
        )
    )
    fams = [
        [
            f["family"],
            f"{f['count']:,}",
            fmt_ns(f["total_ns"]),
            fmt_ns(f["mean_ns"]),
            fmt_pct(f["share"]),
        ]
        for f in d["families"]
    ]
    out.append("<h3>Layer families</h3>")
    out.append(
        _table(["family", "kernels", "time", "mean", "share"], fams, {1, 2, 3, 4}, "families")
    )
    if summary.decode_gaps.height:
        data = gaps_data(summary, summary.decode_gaps)
        fig = gaps_figure(data, title=f"{gap_title(d)} — {label}")
        out.append(f'<div class="chart gaps-chart">{_svg(fig)}</div>')
    warnings = list(summary.warnings)
    if warnings:
        items = "".join(f"<li>{esc(x)}</li>" for x in warnings)
        out.append(f'<div class="warn"><b>Read with care</b><ul>{items}</ul></div>')
    return "\n".join(out)


def _diff_section(d: Diff, limit: int = 40) -> str:
    head = "<h2>What changed (B against A)</h2>"
    if d.unchanged:
        return head + f"<p>{esc(UNCHANGED)}</p>"
    lines = [x for x in (d.workload, *d.notes) if x]
    if lines:
        head += "<ul>" + "".join(f"<li>{esc(x)}</li>" for x in lines) + "</ul>"
    rows = []
    for r in diff_rows(d, limit):
        verdict = r["verdict"] or ""
        cls = verdict if verdict in ("worse", "better") else "" if verdict else "why"
        rows.append(
            [
                r["section"],
                r["metric"],
                fmt_value(r["a"], r["unit"]),
                fmt_value(r["b"], r["unit"]),
                fmt_ratio(r["ratio"]),
                Html(f'<span class="{cls}">{esc(verdict or r["why"] or "")}</span>'),
            ]
        )
    return head + _table(["section", "metric", "A", "B", "B/A", "verdict"], rows, {2, 3, 4}, "diff")


def _json_script(doc: Mapping[str, object], element_id: str) -> str:
    return f'<script type="application/json" id="{element_id}">{json_for_html(doc)}</script>'


def _client_section(doc: ItlDocument, label: str, probe: OnTrace | None = None) -> str:
    """A capture's client view (``traceview itl``): ITL and TTFT per population with their
    n, the engine's counters over the workload, the re-prefill check and what it cannot
    see, and the notes on the capture and on its window on the trace."""
    out = [f"<h2>What the clients saw — {esc(label)}</h2>"]
    rows = []
    for title, s in (("ITL, all tokens", doc["all"]), ("ITL, injection window", doc["injection"])):
        rows.append([title, f"{s['n']:,}", "", *(fmt_ns(s[q]) for q in _QS)])
    for pop, t in (("victims", doc["ttft"]["victims"]), ("injected", doc["ttft"]["injected"])):
        rows.append(
            [f"TTFT, {pop}", f"{t['n']:,}", f"{t['prompt_tokens']:,}", *(fmt_ns(t[q]) for q in _QS)]
        )
    head = ["population", "n", "prompt tokens (sum)", "p50", "p90", "p99", "max"]
    out.append(_table(head, rows, {1, 2, 3, 4, 5, 6}))
    m, check = doc["metrics"], doc["prefill_check"]
    notes = [*([] if m is None else m["notes"]), *doc["notes"]]
    if m is not None and "delta" in m:
        d = m["delta"]
        verdict = "—" if check is None or check["verdict"] is None else check["verdict"]
        caveats = [] if check is None else check["caveats"]
        sent = "—" if check is None else f"{check['sent_prompt_tokens']:,}"
        out.append(
            _table(
                ["/metrics (after − before)", "value"],
                [
                    ["prompt tokens counted", fmt_value(d["prompt_tokens"], "count")],
                    ["prompt tokens sent", sent],
                    ["re-prefill check", verdict + ("*" if caveats else "")],
                    ["generation tokens", fmt_value(d["generation_tokens"], "count")],
                    ["preemptions", fmt_value(d["preemptions"], "count")],
                    ["running (largest seen)", fmt_value(m.get("running_max"), "count")],
                    ["waiting (largest seen)", fmt_value(m.get("waiting_max"), "count")],
                ],
                {1},
            )
        )
        notes += [f"* {c}" for c in caveats]
    if probe is not None:
        bound = (
            "unchecked: nothing bounds its error"
            if probe.uncertainty_ns is None
            else f"± {fmt_ns(probe.uncertainty_ns)}"
        )
        notes.append(f"the injection window on the trace's clock: by the {probe.method} ({bound})")
        notes += list(probe.notes)
    out += [f'<p class="muted">{esc(str(n))}</p>' for n in notes]
    return "\n".join(out)


_QS: tuple[Literal["p50_ns", "p90_ns", "p99_ns", "max_ns"], ...] = (
    "p50_ns",
    "p90_ns",
    "p99_ns",
    "max_ns",
)


def report_html(
    summaries: list[Summary],
    diff: Diff | None = None,
    *,
    clients: list[ItlDocument | None] | None = None,
    probes: list[OnTrace | None] | None = None,
) -> str:
    """The page for one summary, or two (A then B) with their diff. For a capture,
    ``clients`` holds its ``traceview.itl/1`` document and ``probes`` its client view on
    the trace's clock: the heartbeat hatches the injection window and draws the victims'
    gaps beside the cadence, and a section shows what the clients saw."""
    labels = [Path(str(s.to_dict()["trace"]["path"])).name for s in summaries]
    if len(summaries) == 2:
        labels = [f"A — {labels[0]}", f"B — {labels[1]}"]
    title = "traceview report — " + " vs ".join(labels)
    clients = clients or [None] * len(summaries)
    probes = probes or [None] * len(summaries)
    datas = [
        heartbeat_data(s, title=lab, probe=p, itl=p is not None)
        for s, lab, p in zip(summaries, labels, probes, strict=True)
    ]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="color-scheme" content="light dark">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        '<p class="muted">Step cadence (the engine\'s heartbeat), decode gaps with their '
        f"population sizes, GPU busy and layer families. A p99 over fewer than {SMALL_N} "
        "samples is close to the maximum.</p>",
        "<h2>Heartbeat</h2>",
        f'<div class="chart heartbeat-chart">{_svg(heartbeat_figure(datas, breakdown=True))}</div>',
    ]
    if diff is not None:
        parts.append(_diff_section(diff))
    for c, lab, p in zip(clients, labels, probes, strict=True):
        if c is not None:
            parts.append(_client_section(c, lab, p))
    for s, lab in zip(summaries, labels, strict=True):
        parts.append(_summary_section(s, lab))
    for i, s in enumerate(summaries):
        parts.append(_json_script(s.to_dict(), f"traceview-summary-{i}"))
    for i, c in enumerate(clients):
        if c is not None:
            parts.append(_json_script(c, f"traceview-itl-{i}"))
    if diff is not None:
        parts.append(_json_script(diff.to_dict(), "traceview-diff"))
    parts.append("</body></html>")
    return "\n".join(parts)
