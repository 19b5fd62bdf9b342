"""Shared CLI helpers: loading with a progress bar, and printing warnings."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console

from traceview.load import LoadOptions, load
from traceview.model import Trace

trace_argument = click.argument("trace", type=click.Path(dir_okay=True, path_type=str))
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead.")

stderr = Console(stderr=True, highlight=False)


def _progress_bar() -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """A progress callback that shows a bar on a terminal once loading passes one second."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    started = time.monotonic()
    state: dict[str, Any] = {}

    def update(done: int, total: int) -> None:
        if "bar" not in state:
            if time.monotonic() - started < 1.0:
                return
            bar = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                DownloadColumn(),
                TimeRemainingColumn(),
                console=stderr,
                transient=True,
            )
            bar.start()
            state["bar"] = bar
            state["task"] = bar.add_task("loading", total=total)
        state["bar"].update(state["task"], completed=done)

    def close() -> None:
        if "bar" in state:
            state["bar"].stop()

    return update, close


def load_trace(path: str) -> Trace:
    """Load a trace for a command: progress bar on a terminal, warnings summarised."""
    if sys.stderr.isatty():
        update, close = _progress_bar()
        try:
            trace = load(path, options=LoadOptions(progress=update))
        finally:
            close()
    else:
        trace = load(path)
    for line in trace.meta.warnings:
        stderr.print(f"[yellow]Warning:[/] {path}: {line}")
    return trace
