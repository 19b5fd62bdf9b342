"""Shared CLI helpers: loading with a progress bar, and printing warnings."""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import click
from rich.text import Text

from traceview._io import check_output, url_output_name, writer_rule
from traceview.cli._console import stderr
from traceview.cli._progress import count_bar, progress_bar
from traceview.errors import TraceviewError, UsageError
from traceview.render.safe import line as one_line

if TYPE_CHECKING:  # the CLI imports the loader and the analysis lazily: --help stays fast
    from traceview.analysis.analyze import AnalysisConfig
    from traceview.analysis.documents.run import RunSummary
    from traceview.analysis.documents.summary import Summary
    from traceview.model import Trace

R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., object])

trace_argument = click.argument("trace", type=click.Path(dir_okay=True, path_type=str))
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead.")


@dataclass(frozen=True, slots=True)
class _Staged:
    """An output bound for a URL: the folder this command created for it (the only thing
    it removes afterwards) and the file written in it."""

    url: str
    folder: Path
    path: Path


_STAGED: list[_Staged] = []  # this command's outputs written here first, for URLs
_DEFERRED: list[str] = []  # what say() will print once the staged outputs are uploaded


def say(text: str) -> None:
    """One line on stderr, its trace text neutralised for the terminal. A line that names
    an output bound for a URL names the URL, and is printed once it is uploaded."""
    for staged in _STAGED:
        if str(staged.path) in text:
            _DEFERRED.append(text.replace(str(staged.path), staged.url))
            return
    stderr.print(Text(one_line(text)))


def publish_outputs(ok: bool) -> None:
    """After a command: upload the outputs it wrote for URLs (when it succeeded), then
    remove the staging folders it created, each by the name recorded when it was made
    (never a folder derived from a path); a command that failed uploads nothing.

    Raises:
        TraceFormatError: an upload the store refused (one line naming the URL).
    """
    import shutil

    try:
        for staged in _STAGED:
            if ok and staged.path.is_file():
                from traceview.loader import remote  # an output for a URL: the loader's store

                remote.upload(str(staged.path), staged.url)
        if ok:
            for said in _DEFERRED:
                stderr.print(Text(one_line(said)))
    finally:
        for staged in _STAGED:
            shutil.rmtree(staged.folder, ignore_errors=True)
        _STAGED.clear()
        _DEFERRED.clear()


def warn(text: str) -> None:
    """``Warning: <text>`` on stderr, its trace text neutralised for the terminal."""
    stderr.print(Text.assemble(("Warning:", "yellow"), " ", one_line(text)))


_WARNED: set[tuple[str, str]] = set()  # (file, warning) said by the command running now


def warn_once(source: str, text: str, label: str = "") -> None:
    """``Warning: [label]<source>: <text>``, once per command for each file and warning
    (a file loaded twice, or summarized for two roles, warns once)."""
    if (source, text) in _WARNED:
        return
    _WARNED.add((source, text))
    warn(f"{label}{source}: {text}")


def show_deprecations() -> None:
    """For one command (inside its ``warnings.catch_warnings()``): traceview's own
    DeprecationWarnings (a check bound that names a renamed key) as ``Warning: <text>``
    lines, each once; Python hides them from a command's user otherwise."""
    shown = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if not issubclass(category, DeprecationWarning):
            shown(message, category, filename, lineno, file, line)
        elif ("", str(message)) not in _WARNED:
            _WARNED.add(("", str(message)))
            warn(str(message))

    warnings.filterwarnings("always", category=DeprecationWarning, module=r"traceview(\.|$)")
    warnings.showwarning = show


class _WarnOnce(logging.Handler):
    """traceview's own log records (``traceview.loader``: helper processes that stopped) as
    the command's warnings: ``Warning: <file>: <text>``, escaped, once."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            source = getattr(record, "trace_source", None)
            said = getattr(record, "trace_said", None)
            if isinstance(source, str) and isinstance(said, str):
                warn_once(source, said)
            else:
                warn(record.getMessage())
        except Exception:  # never let a warning hide the error being raised
            self.handleError(record)


@contextlib.contextmanager
def log_as_warnings() -> Iterator[None]:
    """For one command: traceview's log records at WARNING and above are its warnings
    (not Python's bare stderr lines)."""
    logger = logging.getLogger("traceview")
    handler = _WarnOnce(logging.WARNING)
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def forget_warnings() -> None:
    """A new command starts: every warning may be said again (``cli._Group``)."""
    _WARNED.clear()


def load_trace(path: str, *, strict: bool = False, raw_args: bool = False) -> Trace:
    """Load a trace for a command: progress bar on a terminal, warnings summarised;
    ``strict``: a truncated trace is an error; ``raw_args``: every event's args kept (for
    SQL)."""
    from traceview.loader import LoadOptions, load

    options = LoadOptions(strict=strict, raw_args=raw_args)
    if sys.stderr.isatty():
        update, close = progress_bar()
        try:
            trace = load(path, options=replace(options, progress=update))
        finally:
            close()
    else:
        trace = load(path, options=options)
    for line in trace.meta.warnings:
        warn_once(path, line)
    return trace


force_option = click.option("--force", is_flag=True, help="Overwrite an existing output.")


def local_files(paths: list[str]) -> list[Path]:
    """The files among ``paths`` (a URL is never a local output's input)."""
    from traceview.loader.remote import is_url

    return [Path(p) for p in paths if not is_url(p)]


def input_files(paths: tuple[str, ...] | list[str]) -> list[Path]:
    """Every local file the command reads, as :func:`traceview.batch.discover.discover`
    finds them; a path that names nothing adds none here (the command reports it when it
    reads), nor does a URL."""
    from traceview.batch.discover import discover
    from traceview.errors import RunError
    from traceview.loader.remote import is_url

    found: list[Path] = []
    for text in paths:
        if is_url(text):
            continue
        with contextlib.suppress(RunError):
            found += local_files(discover([text]))
    return found


def output_file(
    output: str,
    inputs: tuple[str, ...] | list[str],
    *,
    force: bool,
    suffixes: tuple[str, ...] | None = None,
) -> Path:
    """The writer rule (:func:`traceview._io.check_output`) for ``-o``, against every file
    ``inputs`` names; checked before any work is done. An output at a URL gets the same
    rule, and a local path to write it to; it is uploaded when the command succeeds
    (:func:`publish_outputs`)."""
    from traceview.loader import remote

    if remote.is_url(output):
        return _staged(output, inputs, force=force, suffixes=suffixes)
    return check_output(output, inputs=input_files(inputs), force=force, suffixes=suffixes)


def _staged(
    url: str,
    inputs: tuple[str, ...] | list[str],
    *,
    force: bool,
    suffixes: tuple[str, ...] | None,
) -> Path:
    """The writer rule (``_io.writer_rule``) for an output at a URL, asked of its store,
    and the local path to write it to.

    Raises:
        TraceviewError: one line naming the output and what is wrong (or the store that
            cannot be reached).
    """
    import tempfile

    from traceview.loader import remote

    name = url_output_name(url)  # a plain name: never empty, ".", ".."
    writer_rule(
        url,
        name,
        folder=False,
        an_input=url in set(inputs),
        exists=lambda: remote.exists(url),
        force=force,
        suffixes=suffixes,
    )
    remote.check_bucket(url)
    folder = Path(tempfile.mkdtemp(prefix="traceview-out-"))
    path = folder / name
    _STAGED.append(_Staged(url, folder, path))
    return path


def output_options(func: F) -> F:
    """``--format``, ``-o/--output`` and ``--force`` (S output_options)."""
    func = force_option(func)
    func = click.option(
        "-o",
        "--output",
        type=click.Path(),
        help="Write to this file (format from its suffix).",
    )(func)
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["table", "csv", "json", "parquet"]),
        help="Output format (default: from -o's suffix, else table).",
    )(func)


_ANALYSIS_FIELDS = (
    "preset",
    "rules",
    "steps_method",
    "layers",
    "step_gap",
    "device",
    "gpu",
    "model",
    "keep_warmup",
)


# AnalysisConfig's field -> the option that sets it, to name a field's error as typed
_FIELD_OPTIONS = {
    "layers": "--layers",
    "step_gap_ns": "--step-gap",
    "device": "--device",
    "preset": "--preset",
    "rules": "--rules",
    "model": "--model",
    "gpu": "--gpu",
}


def analysis_config(
    *,
    preset: str,
    rules: str | None,
    steps_method: str,
    layers: int | None,
    step_gap: str | None,
    device: int | None,
    gpu: str | None,
    model: str | None,
    keep_warmup: bool = False,
) -> AnalysisConfig:
    """The one :class:`~traceview.AnalysisConfig` of a command, from its analysis options
    as given on the command line (``--step-gap`` read as a duration; ``--model`` and
    ``--gpu`` read here, so a bad one fails before any trace is loaded)."""
    from traceview.analysis.analyze import AnalysisConfig

    step_gap_ns = parse_duration(step_gap, "--step-gap")
    try:
        return AnalysisConfig(
            method=steps_method,
            layers=layers,
            step_gap_ns=step_gap_ns,
            device=device,
            preset=preset,
            rules=rules,
            model=model,
            gpu=gpu,
            keep_warmup=keep_warmup,
        )
    except UsageError as exc:
        # the config names its field ("device: -1 is not …"); the user typed an option
        field, sep, problem = str(exc).partition(": ")
        option = _FIELD_OPTIONS.get(field)
        if not sep or option is None:
            raise
        raise UsageError(f"{option}: {problem}") from exc


def analysis_options(func: Callable[..., R]) -> Callable[..., R]:
    """Classification, step and efficiency options shared by the analysis commands: the
    command gets them as one ``analysis: AnalysisConfig`` argument."""

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> R:
        fields = {name: kwargs.pop(name) for name in _ANALYSIS_FIELDS}
        return func(*args, analysis=analysis_config(**fields), **kwargs)

    opts = [
        click.option(
            "--keep-warmup",
            is_flag=True,
            help="Keep the steps that hold warm-up (graph capture, Triton autotuning, "
            "compilation) in every figure; by default they are marked and left out.",
        ),
        click.option(
            "--model",
            type=click.Path(dir_okay=True),
            help="The model's Hugging Face config.json (a path): FLOPs, bytes, MFU and MBU "
            "per step.",
        ),
        click.option(
            "--gpu",
            type=str,
            help="The GPU's peaks: a built-in part (e.g. H100, 'NVIDIA H200 NVL') or a "
            "SPEC.toml (default: matched from the trace's deviceProperties).",
        ),
        click.option("--device", type=int, help="Device to analyse (default: most kernel time)."),
        click.option(
            "--step-gap",
            "step_gap",
            type=str,
            help="Cut steps at device-idle gaps at least this long (e.g. 50us).",
        ),
        click.option(
            "--layers",
            type=click.IntRange(min=1),
            help="Step-marker bursts per step (full-attention layers).",
        ),
        click.option(
            "--steps",
            "steps_method",
            type=click.Choice(["auto", "bursts", "annotations"]),
            default="auto",
            show_default=True,
            help="How to find engine steps.",
        ),
        click.option(
            "--rules",
            type=click.Path(dir_okay=False),
            help="TOML rules file, tried before the preset's rules.",
        ),
        click.option(
            "--preset", default="default", show_default=True, help="Built-in classification preset."
        ),
    ]
    wrapped: Callable[..., R] = command
    for opt in opts:
        wrapped = opt(wrapped)
    return wrapped


def parse_duration(text: str | None, what: str = "duration") -> int | None:
    """``50us`` -> 50000 (ns); ``0`` -> 0. A bare number other than 0 is an error: units
    are never guessed."""
    if text is None:
        return None
    from traceview.units import (
        DURATION_HINT,
        TIME_UNITS,
        duration_ns,
        read_quantity,
        too_long,
        unitless_number,
    )

    ns = duration_ns(text)
    if ns is None:
        if too_long(text):
            raise TraceviewError(f"{what}: {text!r} is too long (at most 292 years, 9.2e9s)")
        quantity = read_quantity(text)
        if quantity is not None and quantity[1] in TIME_UNITS and quantity[0] < 0:
            raise TraceviewError(f"{what}: {text!r} is negative; a duration is 0 or more")
        problem = "has no unit" if unitless_number(text) else "is not a duration"
        raise TraceviewError(f"{what}: {text!r} {problem}; {DURATION_HINT} (ns, us, ms or s)")
    return ns


def summarize_trace(
    path: str,
    analysis: AnalysisConfig,
    *,
    label: str = "",
    strict: bool = False,
    serving: bool = True,
) -> Summary:
    """Load and analyse a trace with the command's config, printing the loader's and the
    summary's warnings on stderr. Returns its summary. ``serving``: a trace of CUDA-graph
    capture alone is CaptureOnlyError's one line (the commands that draw or judge steps);
    else its 0-step summary (those that print a document or a table)."""
    from traceview.analysis.analyze import Analysis

    result = Analysis(load_trace(path, strict=strict), analysis)
    summary = result.serving() if serving else result.summary
    for line in summary.warnings:
        warn_once(path, line, label)
    return summary


def strict_option(func: F) -> F:
    """``--strict``, for commands that read one trace (a run's commands take
    :func:`run_options`)."""
    return click.option(
        "--strict", is_flag=True, help="A truncated trace is an error (default: a warning)."
    )(func)


def run_options(func: F) -> F:
    """``--jobs`` and ``--strict``, for commands that take a run of rank traces."""
    func = click.option(
        "--strict",
        is_flag=True,
        help="A truncated trace is an error, and so in a run is a trace that fails to load "
        "(default: warned, and left out of a run).",
    )(func)
    return click.option(
        "-j",
        "--jobs",
        type=click.IntRange(min=1),
        help="Worker processes for a run of traces (default: every core).",
    )(func)


def is_run(paths: tuple[str, ...] | list[str]) -> bool:
    """Several paths, a directory or a glob are a run; one file is a trace."""
    if len(paths) != 1:
        return True
    import os

    from traceview.loader import remote

    p = paths[0]
    if remote.is_url(p):
        return remote.is_glob(p) or remote.is_folder(p)
    return os.path.isdir(p) or (not os.path.exists(p) and any(c in p for c in "*?["))


def summarize_run_paths(
    paths: tuple[str, ...] | list[str],
    analysis: AnalysisConfig,
    *,
    jobs: int | None = None,
    strict: bool = False,
    label: str = "",
) -> RunSummary:
    """Summarize a run (directory, glob, files) with the shared analysis options: a progress
    bar over the traces on a terminal, warnings on stderr. Returns the RunSummary."""
    import os

    from traceview.batch.run import RunOptions, summarize_run

    options = RunOptions(config=analysis, jobs=jobs or os.cpu_count() or 1, strict=strict)
    close: Callable[[], None] = lambda: None  # noqa: E731
    progress = None
    if sys.stderr.isatty():
        progress, close = count_bar("traces")
    try:
        run = summarize_run(list(paths), options, progress=progress)
    finally:
        close()
    for line in run.warnings:
        warn_once(", ".join(paths), line, label)
    return run
