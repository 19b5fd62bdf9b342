"""Runs of rank traces: find the files, analyse each in a process pool, assemble the run.

Each worker loads and summarizes one trace and returns its summary and a small per-step
table, never the frames, so memory stays near one trace per worker. The cross-rank
computation is :func:`traceview.analysis.run.assemble`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from traceview.analysis.devices import DeviceSpec
from traceview.analysis.families import load_rules
from traceview.analysis.model_config import ModelSpec
from traceview.analysis.run import RankResult, RunSummary, assemble, rank_of, step_work
from traceview.analysis.step_candidates import StepOptions
from traceview.analysis.steps import find_steps
from traceview.analysis.summary import build
from traceview.batch.discover import discover
from traceview.batch.pool import map_tasks
from traceview.errors import RunError, TraceviewError
from traceview.load import LoadOptions, load


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How to analyse each rank of a run (the options of :func:`traceview.summarize`),
    and how many worker processes to use (``jobs``; 1 analyses in this process)."""

    preset: str = "default"
    rules_file: str | None = None
    steps: StepOptions = field(default_factory=StepOptions)
    jobs: int = 1
    strict: bool = False  # a truncated trace fails (and so, with summarize_run's strict, the run)
    model: ModelSpec | None = None  # each rank's FLOPs, bytes, MFU and MBU (--model)
    gpu: DeviceSpec | None = None  # the device's peaks (--gpu), else matched per rank


def analyse_rank(path: str, options: RunOptions) -> RankResult:
    """Load and summarize one trace of a run (the work of one pool task)."""
    try:
        trace = load(path, options=LoadOptions(strict=options.strict))
        if trace.kernels.height == 0:
            return RankResult(path, skipped="no device activity (a CPU-only trace)")
        rules = load_rules(options.preset, options.rules_file)
        result = find_steps(trace, rules, options.steps)
        summary = build(rules, result, options.model, options.gpu)
    except TraceviewError as exc:
        return RankResult(path, error=str(exc))
    rank, source = rank_of(trace, path)
    return RankResult(
        path,
        rank=rank,
        rank_source=source,
        summary=summary,
        per_step=step_work(result),
    )


def summarize_run(
    paths: Sequence[str],
    options: RunOptions | None = None,
    *,
    strict: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> RunSummary:
    """Analyse a run of rank traces as one (see the module docstring).

    Args:
        paths: directories, globs or files.
        options: :class:`RunOptions` (analysis options and ``jobs``).
        strict: a trace that fails to load is an error instead of a warning.
        progress: ``progress(traces_done, traces_total)``.

    Raises:
        RunError: no trace files, nothing analysable, two files for one rank, or (with
            ``strict``) a trace that fails.
    """
    options = options or RunOptions()
    if strict:
        options = replace(options, strict=True)
    files = discover(paths)
    results = map_tasks(partial(analyse_rank, options=options), files, options.jobs, progress)
    failed = [r for r in results if r.error]
    if failed and strict:
        raise RunError(failed[0].error or failed[0].path)
    return assemble(paths, results)
