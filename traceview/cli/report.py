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
from traceview.errors import TraceviewError

if TYPE_CHECKING:
    from traceview.analysis.analyze import AnalysisConfig
    from traceview.analysis.base.capture_document import ItlDocument
    from traceview.capture.itl import OnTrace


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
    shared scales. A capture folder (traceview capture server's output) shows both views
    on one page: its trace's heartbeat with the injection window and the victims'
    inter-token gaps on it, and what the clients saw (ITL, TTFT, the engine's /metrics)."""
    from traceview.analysis.documents.compare import diff
    from traceview.render.base import atomic_write
    from traceview.render.report import report_html

    if len(traces) > 2:
        raise click.UsageError("report takes one trace, or two to compare")
    path = output_file(output, traces, force=force, suffixes=(".html", ".htm"))
    summaries = []
    clients: list[ItlDocument | None] = []
    probes: list[OnTrace | None] = []
    for given in traces:
        trace, client, probe = _capture(given)
        summaries.append(summarize_trace(trace, analysis, strict=strict))
        clients.append(client)
        probes.append(probe)
    page = report_html(
        summaries,
        diff(*summaries) if len(summaries) == 2 else None,
        clients=clients,
        probes=probes,
    )

    def write(target: Path) -> None:
        target.write_text(page, encoding="utf-8")

    say(f"wrote {atomic_write(path, write, overwrite=force)}")


def _capture(given: str) -> tuple[str, ItlDocument | None, OnTrace | None]:
    """A trace as given, or a capture folder's trace with its client view. The trace is
    read only from inside the capture folder."""
    folder = Path(given)
    if not (folder.is_dir() and (folder / "probe.jsonl").is_file()):
        return given, None, None
    import warnings

    from traceview.capture.itl import itl, on_trace, read
    from traceview.loader import load

    run = read(folder).run
    if run is None or not run.traces:
        why = (
            "a capture with no trace (unprofiled)"
            if run is not None and not run.profiled
            else "a profiled capture whose trace was not collected"
            + (f" ({run.notes[0]})" if run is not None and run.notes else "")
        )
        raise TraceviewError(f"{given}: {why}: `traceview itl {given}` shows what its clients saw")
    trace = folder / run.traces[0]
    if not trace.resolve().is_relative_to(folder.resolve()) or not trace.is_file():
        raise TraceviewError(
            f"{given}: its trace {run.traces[0]!r} is not a file inside the capture folder"
        )
    with warnings.catch_warnings():  # the summary says the loader's warnings once
        warnings.simplefilter("ignore")
        probe = on_trace(folder, load(str(trace), options=None))
    for note in probe.notes:
        say(f"{given}: {note}")
    return str(trace), itl(folder), probe
