"""The console the tables print to on standard output."""

from __future__ import annotations

from rich.console import Console


class Stdout(Console):
    """A rich console whose closed pipe (``| head``) reaches the CLI as BrokenPipeError.

    rich's own answer is ``SystemExit(1)``: exit code 1 means a check failed here, so the
    CLI ends quietly with 141 instead, as a shell reports SIGPIPE."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError
