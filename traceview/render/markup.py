"""Summaries and diffs as markup for where people paste them: an HTML table for notebooks
(``Summary._repr_html_``) and a markdown table for pull requests (``Diff.to_markdown``,
``diff --markdown``)."""

from __future__ import annotations

from traceview.analysis.base.document import SummaryDocument
from traceview.analysis.documents import display
from traceview.analysis.documents.compare import Diff
from traceview.analysis.documents.summary import warmup_line
from traceview.render.format import (
    UNCHANGED,
    cost_caption,
    cost_terms,
    diff_rows,
    fmt_ns,
    fmt_pct,
    fmt_ratio,
    fmt_value,
)
from traceview.render.safe import html_text as esc
from traceview.render.safe import markdown_code, markdown_text


def summary_html(d: SummaryDocument) -> str:
    """The summary's facts, families, phases and decode gaps as one HTML block."""
    t, s = d["trace"], d["steps"]
    rows = "".join(
        f"<tr><td>{esc(f['family'])}</td><td>{f['count']:,}</td>"
        f"<td>{fmt_ns(f['total_ns'])}</td><td>{fmt_pct(f['share'])}</td></tr>"
        for f in d["families"][:12]
    )
    phases = "".join(
        f"<tr><td>{esc(p['kind'])}</td><td>{p['steps']}</td><td>{fmt_ns(p['cadence_p50_ns'])}</td></tr>"
        for p in s["phases"]
    )
    gaps = "".join(
        f"<tr><td>{esc(g['population'])}</td><td>{g['n']}</td><td>"
        + "</td><td>".join(fmt_ns(v) for v in (g["p50_ns"], g["p90_ns"], g["p99_ns"]))
        + "</td></tr>"
        for g in d["decode_gaps"]
    )
    cost = "".join(
        f"<p>{esc(title)}: "
        + esc(", ".join(f"{term} {value} ({interval})" for term, value, interval in terms))
        + f"; {esc(cost_caption(fit))}</p>"
        for fit, title in (
            (d["cost"]["decode"], "decode step"),
            (d["cost"]["prompt"], "prompt step"),
        )
        for terms in [cost_terms(fit)]
        if terms
    )
    said = warmup_line(d["warmup"])
    warn = "".join(f"<li>{esc(w)}</li>" for w in ([f"warm-up: {said}"] if said else []))
    warn += "".join(f"<li>{esc(w)}</li>" for w in d["warnings"])
    return (
        f"<div><b>{esc(str(t['path']))}</b> — {t['kernels']:,} kernels, "
        f"{s['count']} steps ({s['method']}), GPU busy {fmt_pct(d['busy']['fraction'])}"
        f"<table><tr><th>family</th><th>kernels</th><th>time</th><th>share</th></tr>"
        f"{rows}</table><table><tr><th>phase</th><th>steps</th><th>cadence p50</th></tr>"
        f"{phases}</table><table><tr><th>decode gaps</th><th>n</th><th>p50</th>"
        f"<th>p90</th><th>p99</th></tr>{gaps}</table>"
        + cost
        + (f"<ul>{warn}</ul>" if warn else "")
        + "</div>"
    )


def _badge(verdict: str) -> str:
    return {"worse": "🔴 worse", "better": "🟢 better"}.get(verdict, verdict)


def diff_markdown(d: Diff, limit: int = 40) -> str:
    """The diff as markdown: the workload line, the headline and up to ``limit`` rates and
    workload rows (ratio = B/A), then 15 kernels; identical inputs in one line."""
    lines = [
        f"**traceview diff**: A = {markdown_code(d.a, cell=False)}, "
        f"B = {markdown_code(d.b, cell=False)} (ratio = B/A)",
        "",
    ]
    if d.unchanged:
        return "\n".join([*lines, markdown_text(UNCHANGED)]) + "\n"
    lines += [f"- {markdown_text(line)}" for line in (d.workload, *d.notes) if line]
    lines += [
        "",
        "| section | metric | A | B | B/A | verdict |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in diff_rows(d, limit):
        verdict = _badge(r["verdict"]) if r["verdict"] else f"({r['why'] or ''})"
        lines.append(
            f"| {markdown_text(r['section'])} | {markdown_text(r['metric'])} | "
            f"{fmt_value(r['a'], r['unit'])} | "
            f"{fmt_value(r['b'], r['unit'])} | {fmt_ratio(r['ratio'])} | "
            f"{markdown_text(verdict)} |"
        )
    if d.kernels.height:
        lines += ["", "| kernel | A | B | B/A | change |", "|---|---:|---:|---:|---|"]
        for k in d.kernels.head(15).iter_rows(named=True):
            name = k["name"] if len(k["name"]) <= 70 else k["name"][:67] + "..."
            lines.append(
                f"| {markdown_code(name)} | {fmt_value(k['a_ns'], 'ns')} | "
                f"{fmt_value(k['b_ns'], 'ns')} | "
                f"{fmt_ratio(k['ratio'])} | {markdown_text(k['change'])} |"
            )
    return "\n".join(lines) + "\n"


display.register(summary_html, diff_markdown)
