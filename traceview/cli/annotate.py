"""``traceview annotate``: the trace with traceview's findings as extra tracks."""

from __future__ import annotations

from pathlib import Path

import click

from traceview.cli._options import (
    AnalysisOptions,
    analysis_options,
    is_run,
    load_trace,
    run_options,
    say,
    warn,
)
from traceview.errors import TraceviewError


@click.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=str),
    help="The annotated trace (.json or .json.gz); for a run, a folder (one file per rank).",
)
@analysis_options
@run_options
def annotate(
    traces: tuple[str, ...],
    output: str,
    jobs: int | None,
    strict: bool,
    analysis: AnalysisOptions,
) -> None:
    """Write a copy of the trace with traceview's findings as extra tracks for Perfetto UI
    (or another Chrome-JSON trace viewer): a "traceview" process with a slice per engine
    step (its kind, interval, tokens), per phase and per widest decode gap, and counters of
    the step interval and busy fraction. The original events are kept byte for byte. For a
    run (a directory, a glob or several traces), each rank is annotated into the -o folder."""
    from traceview.analysis.summary import summarize
    from traceview.batch.discover import discover
    from traceview.render.overlay import annotate as write_annotated

    rules = analysis.load_rules()
    if is_run(traces):
        folder = Path(output)
        folder.mkdir(parents=True, exist_ok=True)
        pairs = [(str(p), folder / p.name) for p in discover(list(traces))]
    else:
        pairs = [(traces[0], Path(output))]
    for source, target in pairs:
        if Path(source).resolve() == target.resolve():
            raise TraceviewError(f"{target}: would overwrite the trace it annotates")
        trace = load_trace(source, strict=strict)
        if trace.kernels.height == 0 and len(pairs) > 1:
            warn(f"{source}: skipped: no device activity")
            continue
        summary = summarize(trace, rules, options=analysis.step_options())
        say(f"wrote {write_annotated(source, target, trace, summary)}")
