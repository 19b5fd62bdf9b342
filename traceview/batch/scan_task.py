"""One trace of a scan: how it is analysed (:class:`ScanOptions`), claimed, read once and
analysed (:func:`analyse`), and committed into the dataset (:func:`commit_analysis`), by the
local engine's workers (:func:`scan_trace`) and by the Ray driver (:mod:`.scan_ray`) alike.
The scan itself (finding the traces, skipping those already there, the engines) is
:mod:`.scan`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TypedDict

import polars as pl

from traceview.analysis.analyze import Analysis as TraceAnalysis
from traceview.analysis.analyze import AnalysisConfig
from traceview.analysis.documents.run import rank_from_name, rank_of
from traceview.batch.dataset import (
    content_hash,
    drop_error,
    error_key,
    has_its_files,
    has_trace,
    lock,
    note_alias,
    scanned,
    table_file,
    unlock,
    write_table,
)
from traceview.batch.discover import run_name
from traceview.batch.rows import table_rows, trace_row
from traceview.batch.store import Store, open_store
from traceview.errors import NotATraceError, TraceviewError, UsageError
from traceview.loader import LoadOptions, load, remote
from traceview.paths import stored
from traceview.redact import scrub, shown

CONNECT_TIMEOUT_S = 30.0  # --connect-timeout: how long a Ray cluster may take to answer


ScanProgress = Callable[[int, int, int, int], None]
"""``progress(traces_done, traces_total, bytes_done, bytes_total)``, after each trace."""


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """How a scan analyses each trace, and what is the scan's own.

    Attributes:
        config: how each trace is analysed (:class:`~traceview.AnalysisConfig`; with a
            model, each step's row gains its FLOPs, bytes, MFU and MBU).
        jobs: worker processes of the local engine (1: this process).
        engine: ``local`` (a process pool on this machine) or ``ray``.
        address: the Ray cluster's address (default: ``RAY_ADDRESS``, else a local one).
        connect_timeout: seconds a Ray address may take to answer.
    """

    config: AnalysisConfig = field(default_factory=AnalysisConfig)
    jobs: int = 1
    engine: str = "local"
    address: str | None = None
    connect_timeout: float = CONNECT_TIMEOUT_S

    def __post_init__(self) -> None:
        if not isinstance(self.config, AnalysisConfig):
            raise UsageError(f"ScanOptions.config: an AnalysisConfig, not {self.config!r}")
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise UsageError(f"ScanOptions.jobs: {self.jobs!r} is not a count of processes >= 1")
        if self.engine not in ("local", "ray"):
            raise UsageError(f"unknown scan engine {self.engine!r} (local or ray)")


@dataclass(frozen=True, slots=True)
class Source:
    """A trace to scan: the file (absolute, not resolved: named where it is linked) or the
    object's URL, the root its run is named from, and what says which version of it this
    is without reading it (a file's size and mtime; an object's size and version)."""

    path: str
    root: str
    size: int
    mtime_ns: int | None
    version: str | None = None

    @property
    def row_path(self) -> str:
        """The path its rows carry: the file resolved, or the URL without its credentials
        (:func:`traceview.redact.shown`: a dataset is shared; the object is read with the
        whole URL)."""
        if remote.is_url(self.path):
            return shown(self.path)
        return stored(str(Path(self.path).resolve()))

    @property
    def seen_key(self) -> AliasKey | None:
        """What :func:`.dataset.known` holds of a trace scanned before (its row's path, so
        an object's URL without its credentials); None for an object whose store gives no
        version (its size and time could match changed bytes: it is read every time, and
        skipped by its content hash)."""
        if remote.is_url(self.path):
            return (self.row_path, self.size, self.version) if self.version else None
        return self.row_path, self.size, self.mtime_ns


AliasKey = tuple[str, int, int | str | None]
"""What :func:`.dataset.known` holds of a file or object: path or URL, size, and mtime_ns
or version."""


class ScanStatus(TypedDict):
    """What one task did with one trace (``copy``: a copy of a trace in the dataset,
    recorded as its alias; ``skipped``: already there)."""

    path: str
    trace_id: str
    status: Literal["scanned", "copy", "skipped", "failed", "not_a_trace"]
    error: str | None
    warnings: list[str]  # the loader's, naming the user's path (trace.meta.warnings)
    truncated: bool
    key: AliasKey | None  # what it is recorded under, once scanned (Source.seen_key)


def status_of(
    path: str,
    trace_id: str,
    status: Literal["scanned", "copy", "skipped", "failed", "not_a_trace"],
    error: str | None = None,
    *,
    warnings: list[str] | None = None,
    truncated: bool = False,
    key: AliasKey | None = None,
) -> ScanStatus:
    """A :class:`ScanStatus`."""
    return {
        "path": path,
        "trace_id": trace_id,
        "status": status,
        "error": error,
        "warnings": warnings or [],
        "truncated": truncated,
        "key": key,
    }


class Analysis(TypedDict):
    """One trace's rows, made where the trace is read and written where the dataset is:
    ``tables`` (steps, families, gaps) and ``row`` (its ``traces/`` row) when scanned,
    ``errors`` (its ``errors/`` row) when it failed."""

    status: ScanStatus
    tables: dict[str, pl.DataFrame] | None
    row: pl.DataFrame | None
    errors: pl.DataFrame | None


def _commit(
    store: Store, trace_id: str, tables: dict[str, pl.DataFrame], row: pl.DataFrame
) -> None:
    """Write a trace's rows, its ``traces/`` row last (the commit); then make sure its other
    files are still there (a concurrent scan's orphan sweep may have raced the commit) and
    write them again where not."""
    for table, df in tables.items():
        write_table(store, table, trace_id, df)
    write_table(store, "traces", trace_id, row)
    for table, df in tables.items():
        if not store.exists(table_file(table, trace_id)):
            write_table(store, table, trace_id, df)


def scan_trace(source: Source, dataset: str, options: ScanOptions) -> ScanStatus:
    """Scan one trace into the dataset (the work of one task): a file is hashed, and
    analysed unless the dataset holds its content; an object is read once, its hash taken
    as it is read, and its rows written unless the dataset holds that content."""
    store = open_store(dataset)
    if remote.is_url(source.path):
        return settle(store, analyse(source.path, source, None, options))
    source, trace_id, marker = claim(store, source)
    if marker is None:
        return skipped_as(store, source, trace_id)
    try:
        return commit_analysis(store, analyse(source.path, source, trace_id, options))
    finally:
        unlock(store, marker)


def claim(store: Store, source: Source) -> tuple[Source, str, str | None]:
    """A local file's source restated (its stat read again just before its bytes are
    hashed: the row's size and mtime describe the hashed content), its trace id, and the
    lock taken on it for this scan; no lock where the dataset holds the trace already."""
    st = os.stat(source.path)
    source = Source(source.path, source.root, st.st_size, st.st_mtime_ns)
    trace_id = content_hash(source.path)
    if scanned(store, trace_id):
        return source, trace_id, None
    return source, trace_id, lock(store, trace_id)


def skipped_as(store: Store, source: Source, trace_id: str) -> ScanStatus:
    """A file whose content the dataset holds already (a copy, a touched file): skipped,
    and recorded as that trace's alias, so the next scan skips it unread."""
    return as_copy(store, status_of(source.path, trace_id, "copy", key=source.seen_key))


def settle(store: Store, a: Analysis) -> ScanStatus:
    """Commit an analysis whose trace id was known only after the read (an object's):
    skipped where the dataset holds that content already (and the object recorded as
    its alias, where it has a version), else written under its lock."""
    trace_id = a["status"]["trace_id"]
    if a["status"]["status"] in ("scanned", "not_a_trace") and scanned(store, trace_id):
        return as_copy(store, a["status"])
    marker = lock(store, trace_id)
    try:
        return commit_analysis(store, a)
    finally:
        unlock(store, marker)


class _Digest:
    """The content hash, taken from the bytes as the loader reads them."""

    def __init__(self) -> None:
        self.h = hashlib.blake2b(digest_size=16)
        self.seen = 0

    def update(self, data: bytes | memoryview, /) -> None:
        self.h.update(data)
        self.seen += len(data)


def content_identity(read_from: str, source: Source, digest: _Digest | None) -> str:
    """The trace id of what was read: the digest taken while loading where it saw every
    byte, else a read of its own (a load that stopped early), else, for an object that
    cannot be read at all, a stand-in made from its URL and version."""
    if digest is not None and digest.seen == source.size:
        return digest.h.hexdigest()
    try:
        return content_hash(read_from)
    except (TraceviewError, OSError):
        text = f"unreadable|{source.path}|{source.version}|{source.size}"
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def analyse(read_from: str, source: Source, trace_id: str | None, options: ScanOptions) -> Analysis:
    """Load the trace at ``read_from`` (the source itself, or a copy of its bytes on a
    worker that cannot see it) and make its rows, named after ``source``. ``trace_id``
    None: the content hash is taken as the trace is read."""
    path = source.path
    digest = _Digest() if trace_id is None else None
    if read_from == path and remote.is_url(path):
        try:  # the row describes the object as it is now, not as it was listed
            now = remote.stat(path)
            source = replace(source, size=now.size, mtime_ns=now.mtime_ns, version=now.version)
        except TraceviewError as exc:
            return failed(source, content_identity(read_from, source, None), str(exc))

    def said(exc: Exception | str) -> str:  # the user's path, not a worker's copy of it
        return str(exc).replace(read_from, path)

    def ident() -> str:
        return trace_id if trace_id is not None else content_identity(read_from, source, digest)

    try:
        try:
            # once: no cache entry
            trace = load(read_from, options=LoadOptions(cache=False, hasher=digest))
        except NotATraceError as exc:  # a sidecar (*.truth.json, a config): not a failure
            status = status_of(path, ident(), "not_a_trace", said(exc))
            return {"status": status, "tables": None, "row": None, "errors": None}
        analysis = TraceAnalysis(trace, options.config)
        summary = analysis.serving()
        rules, result = analysis.rules, analysis.step_result
    except TraceviewError as exc:
        return failed(source, ident(), said(exc))
    tid = ident()
    rank, rank_source = rank_of(trace, path)
    run = stored(run_name(path, source.root, rank is not None))
    steps, families, gaps, work = table_rows(tid, run, rank, rules, summary, result)
    row = trace_row(tid, source, run, trace, summary, work, rank, rank_source)
    tables = {"steps": steps, "families": families, "gaps": gaps}
    done = status_of(
        path,
        tid,
        "scanned",
        warnings=[said(line) for line in trace.meta.warnings],
        truncated=trace.meta.truncated_at is not None,
        key=source.seen_key,
    )
    return {"status": done, "tables": tables, "row": row, "errors": None}


def failed(source: Source, trace_id: str, error: str) -> Analysis:
    """A trace that could not be analysed: its ``errors/`` row (no rank was read: its run
    is named as the file's name alone says; ``error`` names a URL without its
    credentials)."""
    error = scrub(error)
    name = source.path.rstrip("/").rsplit("/", 1)[-1]
    run = stored(run_name(source.path, source.root, rank_from_name(name) is not None))
    err = pl.DataFrame(
        {"trace_id": [trace_id], "path": [source.row_path], "run": [run], "error": [stored(error)]}
    )
    status = status_of(source.path, trace_id, "failed", error)
    return {"status": status, "tables": None, "row": None, "errors": err}


def commit_analysis(store: Store, a: Analysis) -> ScanStatus:
    """Commit one analysis into the dataset (under the trace's lock, held by the caller):
    its ``errors/`` row (the failing path's own), or its rows; where another task or scan
    committed the same content meanwhile, the path is recorded as that trace's alias
    instead (the trace is written once)."""
    trace_id = a["status"]["trace_id"]
    if a["errors"] is not None:
        key = error_key(a["errors"]["path"][0])
        if not _said_before(store, key, a["errors"]):
            write_table(store, "errors", key, a["errors"])
    if a["tables"] is not None and a["row"] is not None:
        if not has_trace(store, trace_id):
            _commit(store, trace_id, a["tables"], a["row"])
        elif has_its_files(store, trace_id):  # committed meanwhile: a copy of it
            return as_copy(store, a["status"])
        else:  # committed, and a file of it gone: a repair, under the row that is there
            kept = _kept_row(store, trace_id)
            row = a["row"]
            if (row["run"][0], row["rank"][0]) != (kept["run"], kept["rank"]):
                return {
                    **a["status"],
                    "status": "failed",
                    "error": (
                        f"{REPAIR_ELSEWHERE} {trace_id}, whose rows lack a "
                        f"file; its rows name the run {kept['run']!r} (from "
                        f"{kept['path']}), so only a scan of that path writes them again, or "
                        f"move traces/{trace_id}.parquet out of the dataset to scan it anew"
                    ),
                    "warnings": [],
                }
            for table, df in a["tables"].items():
                if not store.exists(table_file(table, trace_id)):
                    write_table(store, table, trace_id, df)
            if row["path"][0] != kept["path"]:  # a copy of it wrote them: its alias
                return as_copy(store, a["status"])
        drop_error(store, a["row"]["path"][0])
    return a["status"]


# how a path whose content is a committed trace lacking a file, and which cannot repair
# it (its rows would name another run), is said (:func:`repaired_meanwhile` reads it)
REPAIR_ELSEWHERE = "its content is the dataset's trace"


def repaired_meanwhile(store: Store, statuses: list[ScanStatus]) -> list[ScanStatus]:
    """The statuses, where a path could not repair its trace but the trace's own path did
    in the same scan: that path is recorded as its alias (a ``copy``), not a failure."""
    out = []
    for s in statuses:
        if (
            s["status"] == "failed"
            and (s["error"] or "").startswith(REPAIR_ELSEWHERE)
            and scanned(store, s["trace_id"])
        ):
            s = as_copy(store, {**s, "status": "scanned", "error": None})
        out.append(s)
    return out


def _kept_row(store: Store, trace_id: str) -> dict[str, object]:
    """The committed trace's ``traces/`` row as the dataset holds it (``path``, ``run``,
    ``rank``)."""
    rows = store.read_parquet([table_file("traces", trace_id)], ["path", "run", "rank"])
    return rows.row(0, named=True)


def as_copy(store: Store, status: ScanStatus) -> ScanStatus:
    """An analysed file or object whose content the dataset holds already: recorded as
    that trace's alias (a ``copy``), or ``skipped`` where it cannot be (an object with no
    version) or is that trace's own file (a concurrent scan wrote it). A path that failed
    before and holds a trace now loses its ``errors/`` row."""
    key = status["key"]
    recorded = key is not None and note_alias(store, status["trace_id"], *key)
    if key is not None and recorded:
        drop_error(store, key[0])
    return {**status, "status": "copy" if recorded else "skipped", "warnings": []}


def _said_before(store: Store, key: str, errors: pl.DataFrame) -> bool:
    """Whether the dataset's ``errors/`` row of the path says this already (a failure
    tried again and failing the same way is not written again)."""
    rel = table_file("errors", key)
    if not store.exists(rel):
        return False
    try:
        return store.read_parquet([rel], errors.columns).equals(errors)
    except (OSError, pl.exceptions.PolarsError):
        return False


def counted(todo: Sequence[Source], progress: ScanProgress | None) -> Callable[[int], None]:
    """A per-trace callback (the index of a trace done) that reports traces and bytes."""
    total_bytes = sum(s.size for s in todo)
    done = [0, 0]

    def finished(index: int) -> None:
        done[0] += 1
        done[1] += todo[index].size
        if progress is not None:
            progress(done[0], len(todo), done[1], total_bytes)

    return finished
