"""``traceview summarize`` and ``traceview steps``."""

from __future__ import annotations

import sys

import click

from traceview.analysis.families import load_rules
from traceview.analysis.summary import summarize as build_summary
from traceview.cli._options import (
    analysis_options,
    json_option,
    load_trace,
    output_options,
    parse_duration,
    stderr,
    trace_argument,
)
from traceview.render.base import guess_format, write_output
from traceview.render.table import render_summary


@click.command()
@trace_argument
@json_option
@analysis_options
def summarize(
    trace: str,
    as_json: bool,
    preset: str,
    rules: str | None,
    steps_method: str,
    layers: int | None,
    step_gap: str | None,
    device: int | None,
) -> None:
    """One screen on TRACE: families, steps and cadence by phase, decode gaps, GPU busy.

    --json prints the traceview.summary/1 document instead.
    """
    ruleset = load_rules(preset, rules)
    summary = build_summary(
        load_trace(trace),
        ruleset,
        steps=steps_method,
        layers=layers,
        step_gap_ns=parse_duration(step_gap, "--step-gap"),
        device=device,
    )
    for line in summary.warnings:
        stderr.print(f"[yellow]Warning:[/] {line}")
    if as_json:
        click.echo(summary.to_json())
    else:
        render_summary(summary.to_dict())


@click.command()
@trace_argument
@output_options
@analysis_options
def steps(
    trace: str,
    fmt: str | None,
    output: str | None,
    force: bool,
    preset: str,
    rules: str | None,
    steps_method: str,
    layers: int | None,
    step_gap: str | None,
    device: int | None,
) -> None:
    """Export TRACE's engine steps, one row per step (table, csv, json or parquet)."""
    ruleset = load_rules(preset, rules)
    summary = build_summary(
        load_trace(trace),
        ruleset,
        steps=steps_method,
        layers=layers,
        step_gap_ns=parse_duration(step_gap, "--step-gap"),
        device=device,
    )
    for line in summary.warnings:
        stderr.print(f"[yellow]Warning:[/] {line}")
    write_output(
        summary.steps, guess_format(output, fmt), output, force=force, stdout=sys.stdout.buffer
    )
