"""``traceview summarize`` and ``traceview steps``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click
import orjson

from traceview.cli._options import (
    analysis_options,
    is_run,
    json_option,
    output_file,
    output_options,
    run_options,
    say,
    summarize_run_paths,
    summarize_trace,
)

if TYPE_CHECKING:
    from traceview.analysis.analyze import AnalysisConfig

traces_argument = click.argument(
    "traces", nargs=-1, required=True, type=click.Path(dir_okay=True, path_type=str)
)


@click.command()
@traces_argument
@json_option
@analysis_options
@run_options
def summarize(
    traces: tuple[str, ...],
    as_json: bool,
    jobs: int | None,
    strict: bool,
    analysis: AnalysisConfig,
) -> None:
    """One screen on a trace: families, steps and cadence by phase, decode gaps, GPU busy.

    Several traces, a directory or a glob are a run of rank traces: one row per rank, the
    compute skew across ranks, the straggler and each rank's collective wait.
    --json prints the traceview.summary/1 (or traceview.run/1) document instead.
    """
    from traceview.render.run_table import render_run
    from traceview.render.table import render_summary

    if is_run(traces):
        run = summarize_run_paths(traces, analysis, jobs=jobs, strict=strict)
        if as_json:
            click.echo(orjson.dumps(run.to_dict(), option=orjson.OPT_INDENT_2).decode())
        else:
            render_run(run.to_dict())
        return
    # --json prints one document, a capture-only trace's too (0 steps, its capture section)
    summary = summarize_trace(traces[0], analysis, strict=strict, serving=not as_json)
    if as_json:
        click.echo(summary.to_json())
    else:
        render_summary(summary.to_dict())


@click.command()
@traces_argument
@output_options
@analysis_options
@run_options
def steps(
    traces: tuple[str, ...],
    fmt: str | None,
    output: str | None,
    force: bool,
    jobs: int | None,
    strict: bool,
    analysis: AnalysisConfig,
) -> None:
    """Export the engine steps, one row per step (table, csv, json or parquet). For a run of
    rank traces, every rank's steps with ``rank`` and ``path`` columns. On the screen, times
    are ms from the first step's start and the columns that fit are shown; -o FILE and the
    other formats keep every column, in ns."""
    from traceview.render.base import guess_format, write_output
    from traceview.render.table import steps_view

    if output is not None:  # the writer rule first: a folder is said to be one
        output = str(output_file(output, traces, force=force))
    chosen = guess_format(output, fmt)
    if is_run(traces):
        table = summarize_run_paths(traces, analysis, jobs=jobs, strict=strict).steps
    else:
        # a capture-only trace: no steps, and the table's columns all the same
        table = summarize_trace(traces[0], analysis, strict=strict, serving=False).steps
    if output is None and chosen == "table":
        table = steps_view(table)
    write_output(table, chosen, output, force=force, stdout=sys.stdout.buffer)
    if output is not None:
        say(f"wrote {output} ({table.height:,} step{'' if table.height == 1 else 's'})")
