"""The ``summarize`` screen of a run of rank traces, on the terminal with rich (the tables
and escaping of :mod:`traceview.render.table`)."""

from __future__ import annotations

from rich.console import Console

from traceview.analysis.base.document import RunDocument
from traceview.render.format import fmt_ns, fmt_pct
from traceview.render.stdout import Stdout
from traceview.render.table import Table


def render_run(doc: RunDocument, console: Console | None = None) -> None:
    """The ``summarize`` screen of a run: one row per rank, then skew and the straggler."""
    out = console or Stdout(highlight=False)
    from rich import box

    ranks = Table(
        title=f"ranks ({len(doc['ranks'])})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
    )
    wide = out.width >= 140  # room for each rank's file name
    cols = ("rank", "steps", "cadence", "busy", "compute", "coll.", "coll. wait", "dep. idle")
    heads = (*cols, *(["verdict", "cad. p99", "gap p99", "trace"] if wide else []))
    rows = [
        (
            str(r["rank"]),
            f"{r['steps']:,}",
            fmt_ns(r["cadence_p50_ns"]),
            fmt_pct(r["busy"]),
            fmt_ns(r["compute_p50_ns"]),
            fmt_ns(r["collective_ns_per_step"]),
            fmt_ns(r["collective_wait_p50_ns"]),
            fmt_ns(r["idle_dependency_p50_ns"]),
            *(
                [
                    r["time_breakdown"]["verdict"] or "—",
                    fmt_ns(r["cadence_p99_ns"]),
                    fmt_ns(r["decode_gap_p99_ns"]),
                    r["path"].rsplit("/", 1)[-1],
                ]
                if wide
                else []
            ),
        )
        for r in doc["ranks"]
    ]
    for i, col in enumerate(heads):
        # never cut: each cell keeps its longest word whole, so a value and a header of two
        # words take two lines only where the screen is narrower than the table
        whole = max(len(w) for cell in (col, *(row[i] for row in rows)) for w in cell.split())
        ranks.add_column(
            col,
            justify="left" if col == "trace" else "right",
            no_wrap=col == "trace",
            min_width=None if col == "trace" else whole,
        )
    for row in rows:
        ranks.add_row(*row)
    ranks.caption = (
        "cadence: median step interval; compute: median busy time per step outside "
        "collectives; "
        "coll.: collective time per step; coll. wait: median collective time beyond the "
        "fastest rank's in the same step; dep. idle: median idle time per step with work "
        "queued (waiting on another stream or an event; docs/metrics.md)"
    )
    ranks.caption_justify = "left"
    out.print(ranks)
    facts = Table(show_header=False, box=None, title="across ranks", title_justify="left")
    facts.add_column(style="bold")
    facts.add_column()
    a, k, s = doc["alignment"], doc["skew"], doc["straggler"]
    facts.add_row("alignment", f"{a['steps']:,} steps matched by {a['method']}")
    facts.add_row(
        "compute skew",
        f"p50 {fmt_ns(k['p50_ns'])}, p99 {fmt_ns(k['p99_ns'])}, max {fmt_ns(k['max_ns'])} "
        f"(n={k['n']:,} steps; slowest rank's compute minus the fastest's)",
    )
    if s is None:
        facts.add_row("straggler", "— (one rank, no aligned steps, or the ranks tie in every step)")
    else:
        why = (
            "the others wait for it (least collective wait)"
            if s["by"] == "collective wait"
            else "slowest by compute (no collectives)"
        )
        facts.add_row(
            "straggler",
            f"rank {s['rank']}: {why}; slowest by compute in {s['steps_slowest']:,} of "
            f"{a['steps']:,} steps, {fmt_ns(s['excess_p50_ns'])} over the other ranks' median",
        )
        if not s["agrees"]:
            facts.add_row(
                "",
                f"but rank {s['slowest_compute_rank']} is slowest by compute in the most "
                "steps: the two readings disagree",
            )
    for item in doc["left_out"]:
        facts.add_row("left out", f"{item['path']}: {item['reason']}")
    out.print(facts)
