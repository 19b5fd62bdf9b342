"""``traceview heartbeat`` and ``traceview gaps``: charts saved as PNG, SVG or PDF."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from traceview.cli._options import (
    analysis_options,
    force_option,
    is_run,
    output_file,
    parse_duration,
    run_options,
    say,
    strict_option,
    summarize_run_paths,
    summarize_trace,
)
from traceview.errors import TraceviewError
from traceview.redact import shown

if TYPE_CHECKING:
    from traceview.analysis.analyze import AnalysisConfig

style_option = click.option(
    "--style",
    type=click.Choice(["light", "dark"]),
    default="light",
    show_default=True,
    help="Chart colours for light or dark pages.",
)
output_option = click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(),
    help="Chart file: .png, .svg or .pdf (an existing one needs --force).",
)


def parse_window(text: str | None) -> tuple[float, float] | None:
    """``100ms:2s`` -> (100.0, 2000.0) in ms from the first kernel; each bound needs a unit
    (0 needs none)."""
    if text is None:
        return None
    parts = text.split(":")
    if len(parts) != 2:
        raise TraceviewError(f"--window: expected T0:T1 (e.g. 100ms:2.5s), got {text!r}")
    bounds = []
    for part in parts:
        ns = parse_duration(part.strip(), "--window")
        assert ns is not None
        bounds.append(ns / 1e6)
    if bounds[1] <= bounds[0]:
        raise TraceviewError(f"--window: the end must come after the start ({text!r})")
    return bounds[0], bounds[1]


@click.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(dir_okay=True, path_type=str))
@output_option
@click.option(
    "--window", help="Time range to show, from the first kernel: T0:T1 (e.g. 0:2s, 150ms:900ms)."
)
@click.option("--title", help="Chart title (default: the file name).")
@click.option(
    "--breakdown",
    is_flag=True,
    help="Add a panel under each heartbeat: per step, a stacked bar of where its time went "
    "(busy against idle: host late, launch, after a sync, dependency, unlinked).",
)
@click.option(
    "--efficiency",
    is_flag=True,
    help="Add a panel of each step's MBU and MFU (needs --model).",
)
@click.option(
    "--probe",
    type=click.Path(),
    help="A capture (its folder or probe.jsonl): shade its injection window on the trace's clock.",
)
@click.option(
    "--itl",
    is_flag=True,
    help="With --probe: draw the victims' inter-token gaps on the interval axis too.",
)
@style_option
@force_option
@analysis_options
@run_options
def heartbeat(
    traces: tuple[str, ...],
    output: str,
    force: bool,
    window: str | None,
    title: str | None,
    breakdown: bool,
    efficiency: bool,
    probe: str | None,
    itl: bool,
    style: str,
    jobs: int | None,
    strict: bool,
    analysis: AnalysisConfig,
) -> None:
    """Chart the engine's heartbeat: one tick per step at its true time and the
    step-to-step interval over time, mixed and prefill phases shaded, each phase's median
    cadence labelled with its n. A trace of fewer than 2 steps has no cadence: its chart is
    the step's timeline by family, and the command says so. Give two traces (before,
    after) to stack them on the same scales. A directory, a glob or more than two traces
    are a run of rank traces: one line per rank (the median and min–max band past 8 ranks),
    the straggler named. With --probe (one trace), a capture's injection window is
    hatched on the trace's clock, and with --itl its victims' inter-token gaps are drawn
    beside the cadence.
    """
    from traceview.render.charts import FORMATS, heartbeat_data, heartbeat_figure, save_figure
    from traceview.render.run_chart import run_heartbeat_data, run_heartbeat_figure

    span = parse_window(window)
    if efficiency and analysis.model is None:
        raise TraceviewError("--efficiency needs --model (the model's config.json)")
    if itl and probe is None:
        raise TraceviewError("--itl draws a capture's gaps: give the capture with --probe")
    if probe is not None and (len(traces) != 1 or is_run(traces)):
        raise TraceviewError("--probe lays a capture on one trace: give one trace")
    target = output_file(output, traces, force=force, suffixes=FORMATS)
    if len(traces) > 2 or (len(traces) == 1 and is_run(traces)):
        if breakdown or efficiency or span is not None:
            raise TraceviewError(
                "--breakdown, --efficiency and --window chart one or two traces; for a run, "
                "chart one rank's trace (each rank's breakdown is in `summarize RUN --json`)"
            )
        run = summarize_run_paths(traces, analysis, jobs=jobs, strict=strict)
        ranks = run_heartbeat_data(run, title=title or "")
        figure = run_heartbeat_figure(ranks, style=style)
        say(f"wrote {save_figure(figure, target, overwrite=force)}")
        return
    datas = []
    for path in traces:
        summary = summarize_trace(path, analysis, strict=strict)
        file_name = Path(shown(path)).name  # a URL's without its credentials
        name = title if title and len(traces) == 1 else file_name
        if title and len(traces) > 1:
            name = f"{title} — {file_name}"
        on_trace = None
        if probe is not None:
            import warnings

            from traceview.capture.itl import on_trace as lay
            from traceview.loader import load

            with warnings.catch_warnings():  # the summary above said them once
                warnings.simplefilter("ignore")
                on_trace = lay(probe, load(path))
            for note in on_trace.notes:
                say(f"{probe}: {note}")
        data = heartbeat_data(
            summary,
            title=name,
            window_ms=span,
            window_label=f"--window {window!r}",
            probe=on_trace,
            itl=itl,
        )
        if data.timeline is not None:
            say(
                f"{path}: {len(data.kinds)} step(s), no cadence to draw: the chart shows the "
                "step's timeline by family instead"
            )
        datas.append(data)
    figure = heartbeat_figure(datas, style=style, breakdown=breakdown, efficiency=efficiency)
    saved = save_figure(figure, target, overwrite=force)
    say(f"wrote {saved}")


@click.command()
@click.argument("trace", type=click.Path(dir_okay=True, path_type=str))
@output_option
@click.option("--title", help="Chart title.")
@style_option
@force_option
@strict_option
@analysis_options
def gaps(
    trace: str,
    output: str,
    title: str | None,
    style: str,
    force: bool,
    strict: bool,
    analysis: AnalysisConfig,
) -> None:
    """Chart the decode-gap distribution per population (CDF on a log time axis, p50/p90/p99
    marked, n in the legend)."""
    from traceview.render.charts import FORMATS, save_figure
    from traceview.render.format import gap_title
    from traceview.render.gaps_chart import gaps_data, gaps_figure

    target = output_file(output, [trace], force=force, suffixes=FORMATS)
    summary = summarize_trace(trace, analysis=analysis, strict=strict)
    if summary.decode_gaps.height == 0:
        title_says = gap_title(summary.document)
        reason = (
            title_says.removeprefix("decode gaps: ")
            if title_says.startswith("decode gaps: no")
            else "fewer than two decode-marker kernels inside decode steps"
        )
        raise TraceviewError(f"{trace}: no decode gaps to chart ({reason})")
    fig = gaps_figure(
        gaps_data(summary, summary.decode_gaps),
        title=title or f"{gap_title(summary.document)} — {Path(shown(trace)).name}",
        style=style,
    )
    say(f"wrote {save_figure(fig, target, overwrite=force)}")
