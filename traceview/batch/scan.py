"""``traceview scan``: many runs' traces into one Parquet dataset (the engines: this
process, a process pool, or Ray; the rows are :mod:`.rows`' and the files :mod:`.dataset`'s).

Layout (one Parquet file per trace in each table, named by the trace's content hash)::

    DATASET/traces/<trace_id>.parquet    one row: path, hash, size, mtime, rank, engine, ...
    DATASET/steps/<trace_id>.parquet     the steps table + trace_id, rank
    DATASET/families/<trace_id>.parquet  kernel time per family + trace_id, rank
    DATASET/gaps/<trace_id>.parquet      the decode gaps + trace_id, rank
    DATASET/errors/<trace_id>.parquet    a trace that could not be analysed: path, error

Read it with polars or DuckDB, the tables other than ``traces`` and ``errors`` through
their committed traces (:func:`.dataset.committed`, a semi-join on ``traces/``). Every
file of a table has the same columns.

- **Incremental**: a trace whose content hash is already in ``traces/`` is skipped; a file
  whose path, size and mtime match a scanned row is skipped without reading it again.
- **Interruptible**: a trace's files are written to ``DATASET/.tmp/`` and renamed into
  place, its ``traces/`` row last: a killed scan leaves whole files only, and a trace
  without its ``traces/`` row is simply scanned again (its uncommitted rows are removed
  first). Worker processes exit when the scan's process dies.
- **Concurrent scans** into one dataset are safe: each sweeps only its own or dead
  writers' temporary files (:mod:`.dataset`).
- A trace that fails becomes a row in ``errors/`` and the scan goes on. The user's traces
  are only ever read.
- ``engine="ray"`` runs the analysis on a Ray cluster (``RAY_ADDRESS`` or ``address``,
  else a local one) without a shared disk: the driver ships each new trace's bytes and
  writes the rows the workers return (:func:`_ray_tasks`); the rows are the same as the
  local engine's.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Literal, TypedDict

import polars as pl

from traceview.analysis.families import load_rules
from traceview.analysis.run import rank_from_name, rank_of
from traceview.analysis.step_candidates import StepOptions
from traceview.analysis.steps import find_steps
from traceview.analysis.summary import build
from traceview.batch.dataset import (
    content_hash,
    drop_error,
    has_trace,
    known,
    lock,
    prepare,
    remove_orphans,
    sweep_tmp,
    table_file,
    write_table,
)
from traceview.batch.discover import discover_tree, run_name
from traceview.batch.pool import map_tasks
from traceview.batch.rows import FileStat, table_rows, trace_row
from traceview.errors import MissingDependencyError, NotATraceError, TraceviewError
from traceview.load import LoadOptions, load

CONNECT_TIMEOUT_S = 30.0  # --connect-timeout: how long a Ray cluster may take to answer


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
    not_traces: list[str] = field(default_factory=list)  # JSON files that are no trace
    orphans_removed: int = 0  # uncommitted rows an interrupted scan had left


class ScanStatus(TypedDict):
    """What one task did with one trace."""

    path: str
    trace_id: str
    status: Literal["scanned", "skipped", "failed", "not_a_trace"]
    error: str | None


def _commit(out: Path, trace_id: str, tables: dict[str, pl.DataFrame], row: pl.DataFrame) -> None:
    """Write a trace's rows, its ``traces/`` row last (the commit); then make sure its other
    files are still there (a concurrent scan's orphan sweep may have raced the commit) and
    write them again where not."""
    for table, df in tables.items():
        write_table(out, table, trace_id, df)
    write_table(out, "traces", trace_id, row)
    for table, df in tables.items():
        if not table_file(out, table, trace_id).exists():
            write_table(out, table, trace_id, df)


def scan_trace(
    path: str, dataset: str, options: ScanOptions, root: str | None = None
) -> ScanStatus:
    """Scan one trace into the dataset (the work of one task); ``root``: the folder its run
    is named from (:func:`.discover.run_name`; default its own folder)."""
    out = Path(dataset)
    p = Path(path)
    root_dir = Path(root) if root is not None else p.parent
    stat, trace_id, marker = _claim(out, p)
    if marker is None:
        return {"path": path, "trace_id": trace_id, "status": "skipped", "error": None}
    try:
        return _write(out, analyse(p, p, trace_id, stat, options, root_dir))
    finally:
        marker.unlink(missing_ok=True)


def _claim(out: Path, p: Path) -> tuple[os.stat_result, str, Path | None]:
    """The file's stat (read before its bytes are hashed: the row's size and mtime describe
    the hashed content), its trace id, and the lock taken on it for this scan; no lock
    where the dataset holds the trace already."""
    stat = p.stat()
    trace_id = content_hash(p)
    if has_trace(out, trace_id):
        return stat, trace_id, None
    return stat, trace_id, lock(out, trace_id)


class Analysis(TypedDict):
    """One trace's rows, made where the trace is read and written where the dataset is:
    ``tables`` (steps, families, gaps) and ``row`` (its ``traces/`` row) when scanned,
    ``errors`` (its ``errors/`` row) when it failed."""

    status: ScanStatus
    tables: dict[str, pl.DataFrame] | None
    row: pl.DataFrame | None
    errors: pl.DataFrame | None


def analyse(
    read_from: Path, p: Path, trace_id: str, stat: FileStat, options: ScanOptions, root: Path
) -> Analysis:
    """Load the trace at ``read_from`` (``p`` itself, or a copy of its bytes on a worker
    that cannot see ``p``) and make its rows, named after ``p`` (absolute where they are
    made away from it)."""
    path = str(p)

    def said(exc: Exception) -> str:  # the user's path, not a worker's copy of it
        return str(exc).replace(str(read_from), path)

    def status(kind: Literal["scanned", "not_a_trace"], error: str | None) -> ScanStatus:
        return {"path": path, "trace_id": trace_id, "status": kind, "error": error}

    try:
        try:
            trace = load(read_from, options=LoadOptions(cache=False))  # once: no cache entry
        except NotATraceError as exc:  # a sidecar (*.truth.json, a config): not a failure
            return {
                "status": status("not_a_trace", said(exc)),
                "tables": None,
                "row": None,
                "errors": None,
            }
        if trace.kernels.height == 0:
            raise TraceviewError(f"{path}: no device activity (a CPU-only trace)")
        rules = load_rules(options.preset, options.rules_file)
        result = find_steps(trace, rules, options.steps)
        summary = build(rules, result)
    except TraceviewError as exc:
        return failed(p, root, trace_id, said(exc))
    rank, rank_source = rank_of(trace, path)
    run = run_name(p, root, rank is not None)
    steps, families, gaps, work = table_rows(trace_id, run, rank, rules, summary, result)
    row = trace_row(trace_id, p, run, stat, trace, summary, work, rank, rank_source)
    tables = {"steps": steps, "families": families, "gaps": gaps}
    return {"status": status("scanned", None), "tables": tables, "row": row, "errors": None}


def failed(p: Path, root: Path, trace_id: str, error: str) -> Analysis:
    """A trace that could not be analysed: its ``errors/`` row (no rank was read: its run
    is named as the file's name alone says)."""
    run = run_name(p, root, rank_from_name(p.name) is not None)
    err = pl.DataFrame(
        {"trace_id": [trace_id], "path": [str(p.resolve())], "run": [run], "error": [error]}
    )
    status: ScanStatus = {"path": str(p), "trace_id": trace_id, "status": "failed", "error": error}
    return {"status": status, "tables": None, "row": None, "errors": err}


def _write(out: Path, a: Analysis) -> ScanStatus:
    """Commit one analysis into the dataset (under the trace's lock, held by the caller)."""
    trace_id = a["status"]["trace_id"]
    if a["errors"] is not None:
        write_table(out, "errors", trace_id, a["errors"])
    if a["tables"] is not None and a["row"] is not None:
        _commit(out, trace_id, a["tables"], a["row"])
        drop_error(out, trace_id)
    return a["status"]


def scan(
    paths: Sequence[str],
    dataset: str | os.PathLike[str],
    options: ScanOptions | None = None,
    *,
    jobs: int = 1,
    engine: str = "local",
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    force: bool = False,
    pattern: str | None = None,
    connect_timeout: float = CONNECT_TIMEOUT_S,
) -> ScanReport:
    """Scan traces (directories and their subfolders, globs, files) into a Parquet dataset
    (see the module doc); ``pattern`` keeps the files whose path relative to their root,
    or whose name, matches it (``--glob``).

    Raises:
        RunError: no trace files among ``paths``.
        TraceviewError: an unknown engine, a dataset path that is a file, or a folder that
            holds other things and is not a dataset (unless ``force``).
        MissingDependencyError: ``engine="ray"`` without Ray installed.
    """
    options = options or ScanOptions()
    started = time.monotonic()
    out = Path(dataset)
    files = discover_tree(paths, pattern)
    if engine == "ray":  # before the dataset is touched: a cluster that is not there
        where = address or os.environ.get("RAY_ADDRESS")
        if where:
            _reachable(where, connect_timeout)
    prepare(out, force=force)
    sweep_tmp(out)
    orphans = remove_orphans(out)
    seen = known(out)
    todo: list[tuple[str, str]] = []
    skipped = []
    for f, root in files:
        st = f.stat()
        if (str(f.resolve()), st.st_size, st.st_mtime_ns) in seen:
            skipped.append(str(f))
        else:
            todo.append((str(f), str(root)))
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
        orphans_removed=len(orphans),
        not_traces=[s["path"] for s in statuses if s["status"] == "not_a_trace"],
    )


def _scan_one(item: tuple[str, str], dataset: str, options: ScanOptions) -> ScanStatus:
    path, root = item
    return scan_trace(path, dataset, options, root)


def _run_local(
    todo: list[tuple[str, str]],
    dataset: str,
    options: ScanOptions,
    jobs: int,
    progress: Callable[[int, int], None] | None,
) -> list[ScanStatus]:
    return map_tasks(partial(_scan_one, dataset=dataset, options=options), todo, jobs, progress)


def _reachable(address: str, timeout: float) -> None:
    """A ``host:port`` cluster address must accept a connection within ``timeout``: Ray
    itself retries an address where nothing listens for minutes.

    Raises:
        TraceviewError: nothing answers there in time (one line naming the address).
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", "ray://…" and the like: Ray resolves them itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise TraceviewError(
            f"Ray cluster {address}: nothing answers there within {timeout:g} s "
            f"({exc.strerror or exc}); start one with `ray start --head`, or set RAY_ADDRESS"
        ) from None


def _run_ray(
    todo: list[tuple[str, str]],
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
        where = address or os.environ.get("RAY_ADDRESS") or None  # checked by scan()
        try:
            ray.init(address=where, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, TimeoutError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TraceviewError(
                f"Ray cluster {where or '(local)'}: cannot connect: {first}"
            ) from None
    try:
        return _ray_tasks(ray, todo, Path(dataset), options, progress)
    finally:
        if started_here:
            ray.shutdown()


@dataclass(frozen=True)
class _Stat:
    """A file's size and mtime, as read where the file is (a worker sees only its bytes)."""

    st_size: int
    st_mtime_ns: int


def _analyse_shipped(
    data: bytes, path: str, root: str, trace_id: str, stat: _Stat, options: ScanOptions
) -> Analysis:
    """A Ray task: analyse a trace from its bytes (shipped through Ray's object store, so
    the worker needs no view of the driver's disk) and return its rows."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="traceview-scan-") as tmp:
        copy = Path(tmp) / Path(path).name
        copy.write_bytes(data)
        return analyse(copy, Path(path), trace_id, stat, options, Path(root))


RAY_IN_FLIGHT_PER_CPU = 2  # traces shipped ahead of the workers: bounds the object store


def _ray_tasks(
    ray: ModuleType,
    todo: list[tuple[str, str]],
    out: Path,
    options: ScanOptions,
    progress: Callable[[int, int], None] | None,
) -> list[ScanStatus]:
    """The driver's loop: it hashes each trace, ships the bytes of those the dataset lacks,
    and writes the rows the workers return (neither the traces nor the dataset need to be
    on a disk the workers share). A worker that dies is retried once; a trace whose task
    fails twice becomes a row in ``errors/``."""
    task = ray.remote(max_retries=1)(_analyse_shipped)
    limit = max(2, int(ray.cluster_resources().get("CPU", 1)) * RAY_IN_FLIGHT_PER_CPU)
    queue = list(todo)
    pending: dict[object, tuple[Path, str, Path, Path]] = {}  # by the task's ObjectRef
    statuses: list[ScanStatus] = []

    def ship() -> None:
        while queue and len(pending) < limit:
            given, root = queue.pop(0)
            p = Path(os.path.abspath(given))  # absolute, not resolved: named where linked
            stat, trace_id, marker = _claim(out, p)
            if marker is None:
                statuses.append(
                    {"path": given, "trace_id": trace_id, "status": "skipped", "error": None}
                )
                continue
            ref = task.remote(
                ray.put(p.read_bytes()),
                str(p),
                os.path.abspath(root),
                trace_id,
                _Stat(stat.st_size, stat.st_mtime_ns),
                options,
            )
            pending[ref] = (p, trace_id, Path(os.path.abspath(root)), marker)

    ship()
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        p, trace_id, root, marker = pending.pop(done[0])
        try:
            statuses.append(_write(out, ray.get(done[0])))
        except Exception as exc:  # the task failed twice (a dying worker, an analysis bug)
            error = f"{p}: the Ray task failed twice: {str(exc).strip().splitlines()[-1]}"
            statuses.append(_write(out, failed(p, root, trace_id, error)))
        finally:
            marker.unlink(missing_ok=True)
        if progress:
            progress(len(statuses), len(todo))
        ship()
    return statuses
