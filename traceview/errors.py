"""The traceview exception hierarchy; the only place exit codes are defined.

Exit codes: 0 ok, 1 a ``check`` assertion failed, 2 bad input or usage, 3 a missing
optional dependency. ``cli.main`` turns any :class:`TraceviewError` into one line
``Error: <message>`` on stderr and exits with its ``exit_code``.
"""

from __future__ import annotations

from typing import Any

from traceview.redact import scrub, shown

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_MISSING_DEPENDENCY = 3
EXIT_BROKEN_PIPE = 141  # the reader of stdout stopped early: a shell's 128 + SIGPIPE


class TraceviewError(Exception):
    """Base class of every error traceview raises on purpose. Its message names every URL
    without its credentials (:func:`traceview.redact.scrub`): it is shown, and stored in a
    scan's ``errors/`` and a run's document."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, *args: object) -> None:
        super().__init__(*(scrub(a) if isinstance(a, str) else a for a in args))


class TraceFormatError(TraceviewError):
    """The input is not a readable trace: bad JSON, truncated gzip, malformed event.

    Attributes:
        path: the file that was being read (a URL as :func:`traceview.redact.shown` names
            it: without its credentials).
        index: position of the offending event in ``traceEvents`` (None when not known).
        event: a short description of the offending event (None when not known).
    """

    def __init__(
        self,
        path: str,
        problem: str,
        *,
        index: int | None = None,
        event: str | None = None,
    ) -> None:
        # a driver's words may quote a credential of the URL apart from the URL itself
        self.problem = problem = scrub(problem, path)
        self.path = path = shown(path)
        self.index = index
        self.event = event
        where = path
        if index is not None:
            where += f": event #{index}"
            if event:
                where += f" ({event})"
        super().__init__(f"{where}: {problem}")


class NotATraceError(TraceFormatError):
    """The file is valid JSON but not a trace: an object without ``traceEvents``, a bare
    number, a sidecar such as a ``*.truth.json``. A scan leaves it out instead of failing
    (unreadable text is a :class:`TraceFormatError`, and fails)."""


class UnsupportedTraceError(TraceviewError):
    """The trace is well-formed but holds nothing traceview can analyse."""


class CaptureOnlyError(UnsupportedTraceError):
    """The trace holds only CUDA-graph capture / warm-up regions (engine start-up): there
    is nothing served to analyse. Not a failure: the command says so in one line and exits
    0."""

    exit_code = EXIT_OK


class QueryError(TraceviewError):
    """A SQL query failed or is not allowed."""


class CaptureError(TraceviewError):
    """Capturing a trace from a live engine failed."""


class RulesError(TraceviewError):
    """A rules file or preset is unreadable or malformed."""


class CheckError(TraceviewError):
    """A check rule is malformed (bad key, bad value): bad input."""


class CheckFailed(TraceviewError):
    """A ``check`` bound did not hold."""

    exit_code = EXIT_CHECK_FAILED


class RunError(TraceviewError):
    """A run of rank traces that cannot be analysed: nothing loadable, or two files for one
    rank."""


class UsageError(TraceviewError):
    """A function of the API was called in a way it cannot serve."""


class MissingDependencyError(TraceviewError):
    """An optional dependency is not installed."""

    exit_code = EXIT_MISSING_DEPENDENCY


class TraceviewWarning(UserWarning):
    """A recoverable anomaly in the input (skipped events, duplicates, ...)."""


def describe_event(ph: Any, name: Any) -> str:
    """Short ``ph='X', name='…'`` description of an event for error messages."""
    text = str(name) if name is not None else ""
    if len(text) > 60:
        text = text[:57] + "..."
    return f"ph={ph!r}, name={text!r}"


def shown_value(value: object) -> str:
    """A value read from a trace as an error message shows it: Python's repr (quoted, its
    control characters escaped), cut at 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class EfficiencyInputError(TraceviewError):
    """A GPU spec (``--gpu``) or a model config (``--model``) is unreadable, unknown or
    lacks a field MFU and MBU need."""
