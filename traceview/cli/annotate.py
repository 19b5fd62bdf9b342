"""``traceview annotate``: the trace with traceview's findings as extra tracks."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import click

from traceview._io import check_output
from traceview.cli._options import (
    analysis_options,
    force_option,
    is_run,
    load_trace,
    local_files,
    output_file,
    run_options,
    say,
    warn,
)
from traceview.errors import TraceviewError

if TYPE_CHECKING:
    from traceview.analysis.analyze import AnalysisConfig

SUFFIXES = (".json", ".json.gz")


def _json_name(name: str) -> str:
    """A rank's file name in the -o folder: the name as is for a JSON trace."""
    return name if name.endswith(SUFFIXES) else name + ".json.gz"


def _base_name(source: str) -> str:
    """A rank's file name: a URL's last path segment (not its query, which may hold a
    presigned URL's signature)."""
    from traceview.loader.remote import is_url

    return posixpath.basename(urlsplit(source).path if is_url(source) else source)


@click.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=str),
    help="The annotated trace (.json or .json.gz); for a run, a folder (one file per rank).",
)
@force_option
@analysis_options
@run_options
def annotate(
    traces: tuple[str, ...],
    output: str,
    force: bool,
    jobs: int | None,
    strict: bool,
    analysis: AnalysisConfig,
) -> None:
    """Write a copy of the trace with traceview's findings as extra tracks for Perfetto UI
    (or another Chrome-JSON trace viewer): a "traceview" process with a slice per engine
    step (its kind, interval, tokens), per phase and per widest decode gap, and counters of
    the step interval and busy fraction. The original events are kept byte for byte. For a
    run (a directory, a glob or several traces), each rank is annotated into the -o folder.
    A trace annotated before gets its overlay replaced, not a second one."""
    from traceview.analysis.analyze import Analysis
    from traceview.batch.discover import discover
    from traceview.loader.remote import is_url
    from traceview.render.overlay import annotate as write_annotated

    if is_run(traces):
        if is_url(output):
            raise TraceviewError(
                f"{output}: a run is annotated into a local folder (-o URL takes one trace)"
            )
        folder = Path(output)
        if folder.exists() and not folder.is_dir():
            raise TraceviewError(f"{folder}: not a folder (a run is annotated into a folder)")
        sources = discover(list(traces))
        pairs = [(p, folder / _json_name(_base_name(p))) for p in sources]
        created = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True)
        try:
            for _, target in pairs:  # every target checked before any is written
                check_output(target, inputs=local_files(sources), force=force, suffixes=SUFFIXES)
        except TraceviewError:
            if created:
                folder.rmdir()
            raise
    else:
        pairs = [(traces[0], output_file(output, traces, force=force, suffixes=SUFFIXES))]
    for source, target in pairs:
        trace = load_trace(source, strict=strict)
        if trace.kernels.height == 0 and len(pairs) > 1:
            warn(f"{source}: skipped: no device activity")
            continue
        summary = Analysis(trace, analysis).serving()
        say(f"wrote {write_annotated(source, target, trace, summary, overwrite=force)}")
