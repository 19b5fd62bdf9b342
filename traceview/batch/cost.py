"""``traceview cost``: each trace analysed (in a process pool with ``jobs``), its steps with
their counts and times kept, and all of them pooled into one step-cost fit
(:func:`traceview.analysis.documents.cost.pool_cost`). A worker returns the small table of
steps, never the frames, so memory stays near one trace per worker."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial

from traceview import environ
from traceview.analysis.analyze import Analysis
from traceview.analysis.documents.cost import CostedTrace, StepCost, pool_cost
from traceview.batch.dataset import content_hash
from traceview.batch.discover import discover
from traceview.batch.pool import map_tasks
from traceview.batch.run import RunOptions
from traceview.errors import CaptureOnlyError, RunError, TraceviewError
from traceview.loader import LoadOptions, load
from traceview.redact import shown


def costed_trace(path: str, options: RunOptions) -> CostedTrace:
    """One trace's steps for a pooled fit (the work of one pool task). A trace that cannot
    be read gives its error, and one that holds only CUDA-graph capture / warm-up gives no
    steps, each said beside its name (a worker returns text, never an exception)."""
    name = shown(path)
    trace = None
    try:
        trace = load(path, options=LoadOptions(strict=options.strict))
        analysis = Analysis(trace, options.config)
        summary = analysis.serving()
    except CaptureOnlyError:
        return CostedTrace(name, skipped="CUDA-graph capture / warm-up only (no serving steps)")
    except TraceviewError as exc:
        error = str(exc).removeprefix(f"{name}: ")
        if trace is not None and trace.meta.warnings:  # what the loader saw explains it
            error += f" ({'; '.join(trace.meta.warnings)})"
        return CostedTrace(name, error=error)
    # what bears on the steps: the loader's warnings and the step finder's
    said = [*trace.meta.warnings, *analysis.step_result.warnings]
    return CostedTrace.of(name, summary, said)


def in_command_order(paths: Sequence[str]) -> list[str]:
    """The trace files each path names (:func:`~traceview.batch.discover.discover`), in
    the order the paths are given (a folder's or a glob's files sorted among themselves),
    each once."""
    out: dict[str, None] = {}
    for path in paths:
        out.update(dict.fromkeys(discover([path])))
    return list(out)


def step_cost(
    paths: Sequence[str] | str,
    options: RunOptions | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> StepCost:
    """Every trace's steps pooled into one step-cost fit: a batch sweep of fixed-batch
    captures gives the per-sequence cost no single one can (docs/metrics.md, "What a step
    costs").

    Args:
        paths: trace files, folders or globs.
        options: :class:`~traceview.RunOptions` (the analysis' config, whose ``model``
            sets the fixed term against the weight bytes; ``jobs``; ``strict``).
        progress: ``progress(traces_done, traces_total)``.

    Raises:
        RunError: no trace files, a trace that cannot be read (named, with its error), or
            no trace with serving steps (one of CUDA-graph capture alone is left out, and
            said in the document's warnings). A file with the same content as an earlier
            one (a copy under another name) is left out, and said, so that no step counts
            twice. The traces keep the order the paths are given in.
    """
    if isinstance(paths, str | os.PathLike):
        paths = [str(paths)]
    options = options or RunOptions()
    environ.check_cache()
    files = in_command_order(paths)
    first: dict[str, str] = {}
    copies: dict[str, str] = {}  # a file whose content an earlier one holds: that one
    for f in files:
        digest = content_hash(f)
        if digest in first:
            copies[f] = first[digest]
        else:
            first[digest] = f
    read = [f for f in files if f not in copies]
    done = iter(map_tasks(partial(costed_trace, options=options), read, options.jobs, progress))
    traces = [
        CostedTrace(shown(f), skipped=f"the same content as {shown(copies[f])}")
        if f in copies
        else next(done)
        for f in files
    ]
    failed = next((t for t in traces if t.error is not None), None)
    if failed is not None:
        raise RunError(f"{failed.path}: {failed.error}")
    if all(t.skipped for t in traces):
        raise RunError(f"{shown(files[0])}: {traces[0].skipped}: no steps to fit")
    return pool_cost(traces, options.config.model_spec)
