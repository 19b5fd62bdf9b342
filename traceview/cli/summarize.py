"""``traceview summarize`` and ``traceview steps``."""

from __future__ import annotations

import sys
from typing import Any

import click

from traceview.cli._options import (
    analysis_options,
    json_option,
    output_options,
    summarize_trace,
    trace_argument,
)
from traceview.render.base import guess_format, write_output
from traceview.render.table import render_summary


@click.command()
@trace_argument
@json_option
@analysis_options
def summarize(trace: str, as_json: bool, **analysis: Any) -> None:
    """One screen on TRACE: families, steps and cadence by phase, decode gaps, GPU busy.

    --json prints the traceview.summary/1 document instead.
    """
    summary = summarize_trace(trace, **analysis)
    if as_json:
        click.echo(summary.to_json())
    else:
        render_summary(summary.to_dict())


@click.command()
@trace_argument
@output_options
@analysis_options
def steps(trace: str, fmt: str | None, output: str | None, force: bool, **analysis: Any) -> None:
    """Export TRACE's engine steps, one row per step (table, csv, json or parquet)."""
    summary = summarize_trace(trace, **analysis)
    write_output(
        summary.steps, guess_format(output, fmt), output, force=force, stdout=sys.stdout.buffer
    )
