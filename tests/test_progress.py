"""The progress bars print their labels as written on a terminal: the console reads no
markup, so a bar must not carry a markup tag (it printed as ``[progress.description]``)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rich.console import Console

import traceview.cli._progress as progress


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    buf = io.StringIO()
    console = Console(
        file=buf, force_terminal=True, highlight=False, soft_wrap=True, markup=False, width=100
    )
    monkeypatch.setattr(progress, "stderr", console)
    yield buf


def _bytes(update: Callable[..., None]) -> None:
    update(1, 4, 100, 400)


def _count(update: Callable[..., None]) -> None:
    update(1, 4)


@pytest.mark.parametrize(
    ("make", "drive", "label"),
    [
        (lambda: progress.count_bar("traces"), _count, "traces"),
        (lambda: progress.bytes_bar("traces [x]"), _bytes, "traces [x]"),
    ],
)
def test_a_bar_shows_its_label_and_no_markup_tag(
    terminal: io.StringIO, make: Callable[[], Any], drive: Callable[..., None], label: str
) -> None:
    update, close = make()
    drive(update)
    close()
    out = terminal.getvalue()
    assert label in out and "[progress." not in out


def test_the_loading_bar_shows_its_label(
    terminal: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter([0.0, 5.0, 6.0])  # the bar appears once loading passes one second
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    update, close = progress.progress_bar()
    update(10, 100)
    close()
    out = terminal.getvalue()
    assert "loading" in out and "[progress." not in out
