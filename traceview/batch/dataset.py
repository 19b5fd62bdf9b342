"""The scan dataset's files: one Parquet file per trace in each table, written whole.

Layout (docs/datasets.md): ``DATASET/{traces,steps,families,gaps,errors}/<trace_id>.parquet``,
``trace_id`` being the BLAKE2b-128 of the trace's bytes. A file is written to
``DATASET/.tmp/`` and renamed into place, so a reader never sees half a file.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import polars as pl

from traceview.errors import TraceviewError
from traceview.load.cache import content_digest

TABLES = ("traces", "steps", "families", "gaps", "errors")


def content_hash(path: str | os.PathLike[str]) -> str:
    """The trace's identity in the dataset: BLAKE2b (128 bits) of its bytes, as hex (the
    loaded-trace cache's content key, :func:`traceview.load.cache.content_digest`)."""
    return content_digest(os.fspath(path))


def prepare(dataset: Path) -> None:
    """Make the dataset's folders (a dataset is a folder).

    Raises:
        TraceviewError: ``dataset`` is a file.
    """
    if dataset.exists() and not dataset.is_dir():
        raise TraceviewError(f"{dataset}: not a directory (a dataset is a folder)")
    for table in (*TABLES, ".tmp"):
        (dataset / table).mkdir(parents=True, exist_ok=True)


def has_trace(dataset: Path, trace_id: str) -> bool:
    """Whether the trace's ``traces/`` row (written last) is there: the trace is scanned."""
    return (dataset / "traces" / f"{trace_id}.parquet").exists()


def write_table(dataset: Path, table: str, trace_id: str, df: pl.DataFrame) -> None:
    """Write one table's file for one trace: to .tmp/, then renamed into place."""
    tmp = dataset / ".tmp" / f"{table}.{trace_id}.{uuid.uuid4().hex}.parquet"
    df.write_parquet(tmp)
    os.replace(tmp, dataset / table / f"{trace_id}.parquet")


def drop_error(dataset: Path, trace_id: str) -> None:
    """Remove the trace's ``errors/`` row: it failed before and scans now."""
    (dataset / "errors" / f"{trace_id}.parquet").unlink(missing_ok=True)


def known(dataset: Path) -> set[tuple[str, int, int]]:
    """(path, size, mtime_ns) of every trace already in the dataset."""
    files = list((dataset / "traces").glob("*.parquet"))
    if not files:
        return set()
    rows = pl.read_parquet(files, columns=["path", "size", "mtime_ns"])
    return {(p, int(s), int(m)) for p, s, m in rows.iter_rows()}


def sweep_tmp(dataset: Path) -> None:
    """Remove what an interrupted earlier scan left in ``.tmp/``."""
    for leftover in (dataset / ".tmp").glob("*"):
        leftover.unlink(missing_ok=True)
