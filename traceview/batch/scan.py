"""``traceview scan``: many runs' traces into one Parquet dataset (the engines: this
process, a process pool, or Ray; the rows are :mod:`.rows`' and the files :mod:`.dataset`'s).

The dataset is a folder or an object-store prefix (``-o s3://bucket/ds``, :mod:`.store`);
the traces are files, folders, globs, or objects and folders at URLs.

Layout (one Parquet file per trace in each table, named by the trace's content hash)::

    DATASET/traces/<trace_id>.parquet    one row: path, hash, size, mtime, rank, engine, ...
    DATASET/steps/<trace_id>.parquet     the steps table + trace_id, rank
    DATASET/families/<trace_id>.parquet  kernel time per family + trace_id, rank
    DATASET/gaps/<trace_id>.parquet      the decode gaps + trace_id, rank
    DATASET/errors/<key>.parquet         a file or object that could not be analysed: its
                                         trace_id, path, error (one per path: the key is
                                         its path's hash)
    DATASET/aliases/<key>.parquet        a copy of a trace already there: its path, size and
                                         mtime or version, so the next scan skips it unread

Read it with polars or DuckDB, the tables other than ``traces`` and ``errors`` through
their committed traces (:func:`.dataset.committed`, a semi-join on ``traces/``). Every
file of a table has the same columns.

- **Incremental**: a trace whose content hash is already in ``traces/`` is skipped; a file
  whose path, size and mtime match a scanned row, or an object whose URL, size and version
  (version id or strong ETag) do, is skipped without reading it again. An object is read
  once: its content hash is taken as the loader reads it.
- **Interruptible**: every file is written whole (renamed into place on disk; one PUT in
  an object store), a trace's ``traces/`` row last: a killed scan leaves whole files only,
  and a trace without its ``traces/`` row is simply scanned again (its uncommitted rows
  are removed first). Worker processes exit when the scan's process dies.
- **Concurrent scans** into one dataset are safe: each sweeps only its own or dead
  writers' temporary files (:mod:`.dataset`).
- A trace that fails becomes a row in ``errors/`` (each failing path its own) and the scan
  goes on. The user's traces are only ever read.
- A copy of a trace in the dataset (by content) is written once: every other path that
  holds it is recorded in ``aliases/``, even where two tasks analysed copies at once.
- The loader's warnings (a truncated trace) come back with each trace's status, for the
  command to print: a worker prints nothing itself.
- ``engine="ray"`` runs the analysis on a Ray cluster (``RAY_ADDRESS`` or ``address``,
  else a local one) without a shared disk: workers read objects by URL themselves, the
  driver ships the bytes of local files, and writes the rows the workers return
  (:mod:`.scan_ray`); the rows are the same as the local engine's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import polars as pl

from traceview.batch.dataset import (
    foreign,
    known,
    prepare,
    remove_orphans,
    sweep_tmp,
    table_file,
)
from traceview.batch.discover import discover_tree
from traceview.batch.pool import map_tasks
from traceview.batch.scan_task import (
    ScanOptions,
    ScanProgress,
    ScanStatus,
    Source,
    as_copy,
    counted,
    repaired_meanwhile,
    scan_trace,
)
from traceview.batch.store import Store, open_store
from traceview.errors import TraceviewError
from traceview.loader import nsys, remote


@dataclass
class ScanReport:
    """What a scan did: traces scanned (each written once), copies (files or objects read
    whose content is a trace in the dataset under another path, now recorded in
    ``aliases/``), skipped (already in the dataset), failed."""

    scanned: list[str]
    skipped: list[str]
    failed: list[tuple[str, str]]
    seconds: float
    # files that are no trace (a JSON sidecar, a SQLite database that is not an export),
    # each with why: the loader's own words, as summarize gives them
    not_traces: list[tuple[str, str]] = field(default_factory=list)
    orphans_removed: int = 0  # uncommitted rows an interrupted scan had left
    bytes_read: int = 0  # the traces' bytes read (not those skipped unread)
    copies: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)  # scanned, from their complete events
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (path, the loader's line)
    foreign: list[str] = field(default_factory=list)  # .parquet files no scan wrote (left)

    @property
    def all_failed(self) -> bool:
        """Whether traces failed and none was scanned, skipped or a copy (exit 2)."""
        return bool(self.failed) and not (self.scanned or self.skipped or self.copies)


def written_once(store: Store, statuses: list[ScanStatus]) -> list[ScanStatus]:
    """The statuses, where two tasks analysed copies of one trace at once and both wrote
    it: the one whose path the ``traces/`` row names stays ``scanned``, every other is
    recorded as its alias (a ``copy``)."""
    by_trace: dict[str, int] = {}
    for s in statuses:
        if s["status"] == "scanned":
            by_trace[s["trace_id"]] = by_trace.get(s["trace_id"], 0) + 1
    twice = {tid for tid, n in by_trace.items() if n > 1}
    if not twice:
        return statuses
    written = {tid: _written_path(store, tid) for tid in twice}
    out = []
    for s in statuses:
        if s["status"] == "scanned" and s["trace_id"] in twice:
            row_path = s["key"][0] if s["key"] is not None else s["path"]
            if row_path != written[s["trace_id"]]:
                s = as_copy(store, s)
        out.append(s)
    return out


def _written_path(store: Store, trace_id: str) -> str | None:
    """The path (or URL) the trace's ``traces/`` row names."""
    try:
        row = store.read_parquet([table_file("traces", trace_id)], ["path"])
    except (OSError, pl.exceptions.PolarsError):
        return None
    return str(row["path"][0]) if row.height else None


def sources(paths: Sequence[str], pattern: str | None) -> list[Source]:
    """The traces ``paths`` name (:func:`.discover.discover_tree`), each with its size and
    mtime or version."""
    objects: dict[str, remote.RemoteObject] = {}
    found = discover_tree(paths, pattern, objects=objects)
    out = []
    for f, root in found:
        if remote.is_url(f):
            obj = objects[f]
            out.append(Source(f, root, obj.size, obj.mtime_ns, obj.version))
        else:
            size, mtime = _stamp(f)
            out.append(Source(os.path.abspath(f), os.path.abspath(root), size, mtime))
    return out


def _stamp(path: str) -> tuple[int, int]:
    """A file's size and mtime, as the skip key reads them: an Nsight export's write-ahead
    log or hot journal beside it holds part of its state, so its size is added and the
    later mtime kept (a commit to the log changes the trace, not the file)."""
    st = os.stat(path)
    size, mtime = st.st_size, st.st_mtime_ns
    for side in nsys.pending(path):
        side_st = os.stat(side)
        size, mtime = size + side_st.st_size, max(mtime, side_st.st_mtime_ns)
    return size, mtime


def scan(
    paths: Sequence[str] | str,
    dataset: str | os.PathLike[str],
    options: ScanOptions | None = None,
    *,
    progress: ScanProgress | None = None,
    force: bool = False,
    pattern: str | None = None,
) -> ScanReport:
    """Scan traces (directories and their subfolders, globs, files, URLs) into a Parquet
    dataset, a folder or a URL (see the module doc); ``pattern`` keeps the files whose
    path relative to their root, or whose name, matches it (``--glob``).

    Raises:
        RunError: no trace files among ``paths``.
        TraceviewError: an unknown engine, a dataset path that is a file, or a folder that
            holds other things and is not a dataset (unless ``force``); a dataset whose
            ``traces/`` or ``aliases/`` file cannot be read (named; nothing is removed); a
            store that cannot be reached.
        MissingDependencyError: ``engine="ray"`` without Ray installed, or a URL without
            the ``traceview[cloud]`` extra.
    """
    if isinstance(paths, str | os.PathLike):
        paths = [str(paths)]  # one path, not its characters
    options = options or ScanOptions()
    engine, address = options.engine, options.address
    started = time.monotonic()
    if engine not in ("local", "ray"):
        raise TraceviewError(f"unknown scan engine {engine!r} (local or ray)")
    found = sources(paths, pattern)
    if engine == "ray":  # before the dataset is touched: a cluster that is not there
        from traceview.batch.scan_ray import reachable

        where = address or os.environ.get("RAY_ADDRESS")
        if where:
            reachable(where, options.connect_timeout)
    store = open_store(dataset)
    prepare(store, force=force, config=options.config.describe())
    seen = known(store)  # first: a dataset with an unreadable file is left untouched
    sweep_tmp(store)
    orphans = remove_orphans(store)
    todo: list[Source] = []
    skipped: list[str] = []
    for source in found:
        key = source.seen_key
        if key is not None and key in seen:
            skipped.append(source.path)
        else:
            todo.append(source)
    if engine == "local":
        statuses = _run_local(todo, store.where, options, progress)
    else:
        from traceview.batch.scan_ray import run_ray

        statuses = run_ray(todo, store, options, address, progress)
    statuses = repaired_meanwhile(store, written_once(store, statuses))
    sweep_tmp(store)
    by_path = {s.path: s.size for s in todo}
    scanned = [s for s in statuses if s["status"] == "scanned"]
    return ScanReport(
        scanned=[s["path"] for s in scanned],
        skipped=skipped + [s["path"] for s in statuses if s["status"] == "skipped"],
        failed=[(s["path"], s["error"] or "") for s in statuses if s["status"] == "failed"],
        seconds=time.monotonic() - started,
        orphans_removed=len(orphans),
        not_traces=[
            (s["path"], s["error"] or "") for s in statuses if s["status"] == "not_a_trace"
        ],
        bytes_read=sum(by_path.get(s["path"], 0) for s in statuses),
        copies=[s["path"] for s in statuses if s["status"] == "copy"],
        truncated=[s["path"] for s in scanned if s["truncated"]],
        warnings=[(s["path"], line) for s in scanned for line in s["warnings"]],
        foreign=foreign(store),
    )


def _run_local(
    todo: list[Source],
    dataset: str,
    options: ScanOptions,
    progress: ScanProgress | None,
) -> list[ScanStatus]:
    task = partial(scan_trace, dataset=dataset, options=options)
    return map_tasks(task, todo, options.jobs, finished=counted(todo, progress))
