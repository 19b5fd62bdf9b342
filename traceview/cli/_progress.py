"""The progress bars the commands show on a terminal (on stderr, gone when done)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from traceview.cli._console import stderr


def _label(text: str) -> Any:
    """A bar's label column: its text as written (the console reads no markup, so a
    markup style tag would print), in the theme's description style."""
    from rich.progress import TextColumn

    return TextColumn(text, markup=False, style="progress.description")


def progress_bar() -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """A progress callback that shows a bar on a terminal once loading passes one second."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    started = time.monotonic()
    state: dict[str, Any] = {}

    def update(done: int, total: int) -> None:
        if "bar" not in state:
            if time.monotonic() - started < 1.0:
                return
            bar = Progress(
                _label("{task.description}"),
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


def bytes_bar(what: str) -> tuple[Callable[[int, int, int, int], None], Callable[[], None]]:
    """A progress bar over items and their bytes: items done of total, bytes per second
    and the time left (from the bytes), shown on a terminal."""
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    bar = Progress(
        _label("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[items]}"),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=stderr,
        transient=True,
    )
    bar.start()
    task = bar.add_task(what, total=None, items="")

    def update(done: int, total: int, bytes_done: int, bytes_total: int) -> None:
        bar.update(task, completed=bytes_done, total=bytes_total, items=f"{done}/{total}")

    return update, bar.stop


def count_bar(what: str) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """A progress bar over a count of items, shown on a terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    bar = Progress(
        _label("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=stderr,
        transient=True,
    )
    bar.start()
    task = bar.add_task(what, total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return update, bar.stop
