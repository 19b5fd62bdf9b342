"""``traceview report``: one self-contained HTML page for one trace, or two."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from traceview.cli._options import (
    analysis_options,
    force_option,
    output_file,
    say,
    strict_option,
    summarize_trace,
)

if TYPE_CHECKING:
    from traceview.analysis.analyze import AnalysisConfig


@click.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("-o", "--output", required=True, type=click.Path(), help="The .html page.")
@strict_option
@force_option
@analysis_options
def report(
    traces: tuple[str, ...], output: str, strict: bool, force: bool, analysis: AnalysisConfig
) -> None:
    """Write one self-contained HTML page (inline SVG charts and CSS, no network) to attach
    to a pull request: the summary, the heartbeat and gap charts, the warnings and the
    summary JSON. Give two traces (before, after) for their diff and both heartbeats on
    shared scales."""
    from traceview.analysis.documents.compare import diff
    from traceview.render.base import atomic_write
    from traceview.render.report import report_html

    if len(traces) > 2:
        raise click.UsageError("report takes one trace, or two to compare")
    path = output_file(output, traces, force=force, suffixes=(".html", ".htm"))
    summaries = [summarize_trace(p, analysis, strict=strict) for p in traces]
    page = report_html(summaries, diff(*summaries) if len(summaries) == 2 else None)

    def write(target: Path) -> None:
        target.write_text(page, encoding="utf-8")

    say(f"wrote {atomic_write(path, write, overwrite=force)}")
