"""``traceview cost``: what an engine step costs, from several traces' steps pooled."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click
import orjson

from traceview.cli._options import (
    analysis_options,
    force_option,
    output_file,
    run_options,
    say,
    warn_once,
)
from traceview.cli._progress import count_bar
from traceview.cli.heartbeat import style_option

if TYPE_CHECKING:
    from traceview.analysis.analyze import AnalysisConfig


@click.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(dir_okay=True, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the traceview.cost/1 document.")
@click.option(
    "-o",
    "--output",
    type=click.Path(),
    help="Also draw the chart: .png, .svg or .pdf (an existing one needs --force).",
)
@click.option("--title", help="Chart title (default: the traces' file names).")
@style_option
@force_option
@analysis_options
@run_options
def cost(
    traces: tuple[str, ...],
    as_json: bool,
    output: str | None,
    title: str | None,
    style: str,
    force: bool,
    jobs: int | None,
    strict: bool,
    analysis: AnalysisConfig,
) -> None:
    """Fit what an engine step costs from its annotations' counts, over the steps of every
    TRACE pooled (files, folders or globs): decode steps as fixed + per sequence × N,
    steps with prompt work as fixed + per sequence × N + per prompt token × T (and T²
    where the data supports it), each with its 95% interval. A sweep of fixed-batch
    captures gives the per-sequence cost no single one can. With --model, the decode fit's
    fixed term is set against the weights one step reads at the device's peak bandwidth."""
    from traceview.batch.cost import step_cost
    from traceview.batch.run import RunOptions
    from traceview.render.charts import FORMATS, save_figure
    from traceview.render.table import render_cost

    target = None
    if output is not None:
        target = output_file(output, traces, force=force, suffixes=FORMATS)
    options = RunOptions(config=analysis, jobs=jobs or os.cpu_count() or 1, strict=strict)
    close: Callable[[], None] = lambda: None  # noqa: E731
    progress = None
    if sys.stderr.isatty():
        progress, close = count_bar("traces")
    try:
        result = step_cost(list(traces), options, progress=progress)
    finally:
        close()
    for line in result.document["warnings"]:
        path, _, said = line.partition(": ")
        warn_once(path, said)
    if target is not None:
        from traceview.plot import cost as cost_chart

        save_figure(cost_chart(result, title=title, style=style), target, overwrite=force)
        say(f"wrote {target}")
    if as_json:
        click.echo(orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        render_cost(result.to_dict())
