"""``traceview scan``: many runs' traces into one Parquet dataset."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from traceview.cli._options import analysis_options, say, warn, warn_once
from traceview.cli._progress import bytes_bar
from traceview.errors import TraceviewError
from traceview.redact import shown

if TYPE_CHECKING:
    from traceview.analysis.analyze import AnalysisConfig


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option(
    "-o",
    "--output",
    "dataset",
    required=True,
    type=click.Path(path_type=str),
    help="Dataset folder (created; a second scan adds to it).",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="local: a process pool on this machine; ray: Ray tasks (RAY_ADDRESS or --address).",
)
@click.option("--address", help="Ray cluster address (default: $RAY_ADDRESS, else a local one).")
@click.option(
    "--connect-timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds a Ray cluster's address may take to answer before the scan gives up.",
)
@click.option("--force", is_flag=True, help="Write a dataset into a folder that holds other files.")
@click.option(
    "--glob",
    "pattern",
    help="Only the trace files whose path under the scanned folder, or whose name, matches "
    "this pattern (e.g. '*rank*', 'runs-2026-*/*').",
)
@click.option(
    "-j", "--jobs", type=click.IntRange(min=1), help="Worker processes (default: every core)."
)
@analysis_options
def scan(
    paths: tuple[str, ...],
    dataset: str,
    engine: str,
    address: str | None,
    connect_timeout: float,
    force: bool,
    pattern: str | None,
    jobs: int | None,
    analysis: AnalysisConfig,
) -> None:
    """Scan traces (directories and all their subfolders, globs, files) into a Parquet
    dataset of traces, steps, families, gaps and errors, one file per trace in each table.
    A folder of rank traces is one run; every other trace is its own; runs are named by
    their path under the scanned folder (the run column of every table). Traces already in the
    dataset (by content) are skipped; a trace that fails becomes a row in errors/.
    Read it with polars or DuckDB, through the traces/ rows that commit each trace's other
    rows (docs/datasets.md). Workers exit if the scan is killed; concurrent scans into one
    dataset are safe."""
    from traceview.batch.scan import scan as run_scan
    from traceview.batch.scan_task import ScanOptions, ScanProgress

    options = ScanOptions(
        config=analysis,
        jobs=jobs or os.cpu_count() or 1,
        engine=engine,
        address=address,
        connect_timeout=connect_timeout,
    )
    progress: ScanProgress | None = None
    close: Callable[[], None] = lambda: None  # noqa: E731
    if sys.stderr.isatty():
        progress, close = bytes_bar("traces")
    try:
        report = run_scan(
            list(paths),
            dataset,
            options,
            progress=progress,
            force=force,
            pattern=pattern,
        )
    finally:
        close()
    for path, line in report.warnings:  # the loader's (a truncated trace): no worker says it
        warn_once(path, line)
    for path, error in report.failed:  # the error names the path as it may be shown
        warn(f"{path}: not scanned: {error.removeprefix(f'{shown(path)}: ')}")
    for path, why in report.not_traces:  # the loader's words, as summarize says them
        warn(f"{path}: left out: {why.removeprefix(f'{shown(path)}: ')}")
    for path in report.foreign:
        warn(
            f"{path}: not a file traceview writes: left alone, but a reader of its table "
            "(*.parquet) reads it too; move it out of the dataset"
        )
    if report.orphans_removed:
        warn(
            f"{dataset}: removed {report.orphans_removed} uncommitted file(s) an interrupted "
            "scan had left"
        )
    say(
        f"{dataset}: scanned {len(report.scanned)}"
        + (f" ({len(report.truncated)} truncated)" if report.truncated else "")
        + (
            f", {len(report.copies)} cop{'y' if len(report.copies) == 1 else 'ies'} of traces "
            "in the dataset recorded as aliases"
            if report.copies
            else ""
        )
        + f", skipped {len(report.skipped)} (already in the dataset), "
        f"failed {len(report.failed)} (in errors/)"
        + (f", {len(report.not_traces)} not traces (left out)" if report.not_traces else "")
        + f" in {report.seconds:.1f} s"
        + (
            f" ({report.bytes_read / 1e6 / report.seconds:.1f} MB/s)"
            if report.bytes_read and report.seconds > 0
            else ""
        )
    )
    if report.all_failed:  # the failures are in errors/: the run is written
        raise TraceviewError(
            f"{dataset}: every trace failed ({len(report.failed)}, in errors/), none scanned"
        )
