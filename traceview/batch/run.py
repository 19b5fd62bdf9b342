"""Runs of rank traces: find the files, analyse each in a process pool, assemble the run.

Each worker loads and summarizes one trace and returns its summary and a small per-step
table, never the frames, so memory stays near one trace per worker. The cross-rank
computation is :func:`traceview.analysis.documents.run.assemble`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from traceview import environ
from traceview.analysis.analyze import Analysis, AnalysisConfig
from traceview.analysis.documents.run import (
    RankResult,
    RunSummary,
    assemble,
    rank_of,
    step_work,
)
from traceview.batch.discover import discover
from traceview.batch.pool import map_tasks
from traceview.errors import CaptureOnlyError, RunError, TraceviewError, UsageError
from traceview.loader import LoadOptions, load
from traceview.redact import shown


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How to analyse each rank of a run, and what is the run's own.

    Attributes:
        config: how each rank's trace is analysed (:class:`~traceview.AnalysisConfig`).
        jobs: worker processes (1 analyses in this process).
        strict: a trace that is truncated or fails to load fails the run (default: it is
            warned about, and a trace that fails is left out).
    """

    config: AnalysisConfig = field(default_factory=AnalysisConfig)
    jobs: int = 1
    strict: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.config, AnalysisConfig):
            raise UsageError(f"RunOptions.config: an AnalysisConfig, not {self.config!r}")
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise UsageError(f"RunOptions.jobs: {self.jobs!r} is not a count of processes >= 1")


def analyse_rank(path: str, options: RunOptions) -> RankResult:
    """Load and summarize one trace of a run (the work of one pool task); the result names
    a URL without its credentials (:func:`traceview.redact.shown`)."""
    name = shown(path)
    try:
        trace = load(path, options=LoadOptions(strict=options.strict))
        if trace.kernels.height == 0:
            return RankResult(name, skipped="no device activity (a CPU-only trace)")
        analysis = Analysis(trace, options.config)
        summary = analysis.serving()
    except CaptureOnlyError:  # engine start-up only: no rank's steps, as a frontend trace
        return RankResult(name, skipped="CUDA-graph capture / warm-up only (no serving steps)")
    except TraceviewError as exc:  # the reason, beside the path that names the trace
        return RankResult(name, error=str(exc).removeprefix(f"{name}: "))
    rank, source = rank_of(trace, path)
    return RankResult(
        name,
        rank=rank,
        rank_source=source,
        summary=summary,
        # every step, its ``serving`` column saying which are left out for warm-up: the
        # alignment pairs steps by their place in the trace, then compares those serving
        # on every rank
        per_step=step_work(analysis.step_result),
        load_warnings=list(trace.meta.warnings),
        truncated_at=trace.meta.truncated_at,
        world_size=trace.meta.world_size,
    )


def summarize_run(
    paths: Sequence[str] | str,
    options: RunOptions | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> RunSummary:
    """Analyse a run of rank traces as one (see the module docstring).

    Args:
        paths: directories, globs or files.
        options: :class:`RunOptions` (the analysis' config, ``jobs`` and ``strict``).
        progress: ``progress(traces_done, traces_total)``.

    Raises:
        RunError: no trace files, nothing analysable, two files for one rank, or (with
            ``strict``) a trace that fails.
    """
    if isinstance(paths, str | os.PathLike):
        paths = [str(paths)]  # one folder or glob, not its characters
    options = options or RunOptions()
    environ.check_cache()  # said once, not as each rank's failure
    files = discover(paths)
    results = map_tasks(partial(analyse_rank, options=options), files, options.jobs, progress)
    failed = [r for r in results if r.error]
    if failed and options.strict:
        raise RunError(f"{failed[0].path}: {failed[0].error}")
    return assemble(paths, results)
