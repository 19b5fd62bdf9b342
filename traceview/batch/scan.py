"""``traceview scan``: many runs' traces into one Parquet dataset (the engines: this
process, a process pool, or Ray; the rows are :mod:`.rows`' and the files :mod:`.dataset`'s).

Layout (one Parquet file per trace in each table, named by the trace's content hash)::

    DATASET/traces/<trace_id>.parquet    one row: path, hash, size, mtime, rank, engine, ...
    DATASET/steps/<trace_id>.parquet     the steps table + trace_id, rank
    DATASET/families/<trace_id>.parquet  kernel time per family + trace_id, rank
    DATASET/gaps/<trace_id>.parquet      the decode gaps + trace_id, rank
    DATASET/errors/<trace_id>.parquet    a trace that could not be analysed: path, error

Read it with ``pl.scan_parquet("DATASET/steps/**/*.parquet")`` or DuckDB's
``read_parquet('DATASET/steps/*.parquet')``. Every file of a table has the same columns.

- **Incremental**: a trace whose content hash is already in ``traces/`` is skipped; a file
  whose path, size and mtime match a scanned row is skipped without reading it again.
- **Interruptible**: a trace's files are written to ``DATASET/.tmp/`` and renamed into
  place, its ``traces/`` row last: a killed scan leaves whole files only, and a trace
  without its ``traces/`` row is simply scanned again.
- A trace that fails becomes a row in ``errors/`` and the scan goes on. The user's traces
  are only ever read.
- ``engine="ray"`` runs the same per-trace task on a Ray cluster (``RAY_ADDRESS`` or
  ``address``, else a local one); the rows are the same as the local engine's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal, TypedDict

import polars as pl

from traceview.analysis.families import load_rules
from traceview.analysis.run import rank_of
from traceview.analysis.step_candidates import StepOptions
from traceview.analysis.steps import find_steps
from traceview.analysis.summary import build
from traceview.batch.dataset import (
    content_hash,
    drop_error,
    has_trace,
    known,
    prepare,
    sweep_tmp,
    write_table,
)
from traceview.batch.discover import discover
from traceview.batch.pool import map_tasks
from traceview.batch.rows import table_rows, trace_row
from traceview.errors import MissingDependencyError, TraceviewError
from traceview.load import LoadOptions, load


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """How to analyse each trace (as :func:`traceview.summarize`) and where to write."""

    preset: str = "default"
    rules_file: str | None = None
    steps: StepOptions = StepOptions()


@dataclass
class ScanReport:
    """What a scan did: traces scanned, skipped (already in the dataset), failed."""

    scanned: list[str]
    skipped: list[str]
    failed: list[tuple[str, str]]
    seconds: float


class ScanStatus(TypedDict):
    """What one task did with one trace."""

    path: str
    trace_id: str
    status: Literal["scanned", "skipped", "failed"]
    error: str | None


def scan_trace(path: str, dataset: str, options: ScanOptions) -> ScanStatus:
    """Scan one trace into the dataset (the work of one task)."""
    out = Path(dataset)
    p = Path(path)
    stat = p.stat()  # before the hash: the row's size and mtime describe the hashed bytes
    trace_id = content_hash(p)
    if has_trace(out, trace_id):
        return {"path": path, "trace_id": trace_id, "status": "skipped", "error": None}
    try:
        trace = load(p, options=LoadOptions(cache=False))  # read once: no cache entry
        if trace.kernels.height == 0:
            raise TraceviewError(f"{path}: no device activity (a CPU-only trace)")
        rules = load_rules(options.preset, options.rules_file)
        result = find_steps(trace, rules, options.steps)
        summary = build(rules, result)
    except TraceviewError as exc:
        err = pl.DataFrame(
            {"trace_id": [trace_id], "path": [str(p.resolve())], "error": [str(exc)]}
        )
        write_table(out, "errors", trace_id, err)
        return {"path": path, "trace_id": trace_id, "status": "failed", "error": str(exc)}
    rank, rank_source = rank_of(trace, path)
    steps, families, gaps, work = table_rows(trace_id, rank, rules, summary, result)
    write_table(out, "steps", trace_id, steps)
    write_table(out, "families", trace_id, families)
    write_table(out, "gaps", trace_id, gaps)
    row = trace_row(trace_id, p, stat, trace, summary, work, rank, rank_source)
    write_table(out, "traces", trace_id, row)  # last: it commits the trace
    drop_error(out, trace_id)
    return {"path": path, "trace_id": trace_id, "status": "scanned", "error": None}


def scan(
    paths: Sequence[str],
    dataset: str | os.PathLike[str],
    options: ScanOptions | None = None,
    *,
    jobs: int = 1,
    engine: str = "local",
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ScanReport:
    """Scan traces (directories, globs, files) into a Parquet dataset (see the module doc).

    Raises:
        RunError: no trace files among ``paths``.
        TraceviewError: an unknown engine, or a dataset path that is a file.
        MissingDependencyError: ``engine="ray"`` without Ray installed.
    """
    options = options or ScanOptions()
    started = time.monotonic()
    out = Path(dataset)
    prepare(out)
    files = discover(paths)
    seen = known(out)
    todo, skipped = [], []
    for f in files:
        st = f.stat()
        if (str(f.resolve()), st.st_size, st.st_mtime_ns) in seen:
            skipped.append(str(f))
        else:
            todo.append(str(f))
    if engine == "local":
        statuses = _run_local(todo, str(out), options, jobs, progress)
    elif engine == "ray":
        statuses = _run_ray(todo, str(out), options, address, progress)
    else:
        raise TraceviewError(f"unknown scan engine {engine!r} (local or ray)")
    sweep_tmp(out)
    return ScanReport(
        scanned=[s["path"] for s in statuses if s["status"] == "scanned"],
        skipped=skipped + [s["path"] for s in statuses if s["status"] == "skipped"],
        failed=[(s["path"], s["error"] or "") for s in statuses if s["status"] == "failed"],
        seconds=time.monotonic() - started,
    )


def _run_local(
    todo: list[str],
    dataset: str,
    options: ScanOptions,
    jobs: int,
    progress: Callable[[int, int], None] | None,
) -> list[ScanStatus]:
    return map_tasks(partial(scan_trace, dataset=dataset, options=options), todo, jobs, progress)


def _run_ray(
    todo: list[str],
    dataset: str,
    options: ScanOptions,
    address: str | None,
    progress: Callable[[int, int], None] | None,
) -> list[ScanStatus]:
    try:
        import ray
    except ImportError:
        raise MissingDependencyError(
            "traceview scan --engine ray needs Ray: pip install 'traceview[ray]'"
        ) from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS") or None,
            include_dashboard=False,
            log_to_driver=False,
        )
    try:
        task = ray.remote(scan_trace)
        pending = [task.remote(path, dataset, options) for path in todo]
        statuses = []
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            statuses.extend(ray.get(done))
            if progress:
                progress(len(statuses), len(todo))
        return statuses
    finally:
        if started_here:
            ray.shutdown()
