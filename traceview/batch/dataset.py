"""The scan dataset's files: one Parquet file per trace in each table, written whole.

Layout (docs/datasets.md): ``DATASET/{traces,steps,families,gaps,errors}/<trace_id>.parquet``,
``trace_id`` being the BLAKE2b-128 of the trace's bytes. A file is written to
``DATASET/.tmp/`` and renamed into place, so a reader never sees half a file.

Safe under concurrent scans and kills:
- a temporary file's name carries its writer (pid and host), and a sweep removes only its
  own or those whose writer is dead (on this host; on another, only after a day);
- while a trace is being written, ``.tmp/lock.<trace_id>.<pid>.<host>`` says so;
- a trace's ``traces/`` row, written last, commits its rows in the other tables; readers
  read committed traces only (:func:`committed`), and the next scan removes the rows of a
  trace that has neither a ``traces/`` row nor a live writer (:func:`remove_orphans`).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import polars as pl

from traceview.errors import TraceviewError
from traceview.load.cache import content_digest

TABLES = ("traces", "steps", "families", "gaps", "errors")
# the tables a trace's traces/ row commits (errors/ rows stand alone)
COMMITTED_BY_TRACES = ("steps", "families", "gaps")
_HOST = socket.gethostname().replace(os.sep, "_")
FOREIGN_AGE_S = 24 * 3600  # a file of a writer on another host is left this long


def content_hash(path: str | os.PathLike[str]) -> str:
    """The trace's identity in the dataset: BLAKE2b (128 bits) of its bytes, as hex (the
    loaded-trace cache's content key, :func:`traceview.load.cache.content_digest`)."""
    return content_digest(os.fspath(path))


FORMAT = 2  # bump when a table's columns or a column's meaning change
FORMAT_FILE = "FORMAT"  # the dataset's format, written by the scan that made it


def prepare(dataset: Path, *, force: bool = False) -> None:
    """Make the dataset's folders (a dataset is a folder) and its ``FORMAT`` file.

    Raises:
        TraceviewError: ``dataset`` is a file, a folder that holds other things and is
            not a dataset (unless ``force``), or a dataset another format of traceview
            wrote (its files would not share one set of columns).
    """
    if dataset.exists() and not dataset.is_dir():
        raise TraceviewError(f"{dataset}: not a directory (a dataset is a folder)")
    marker = dataset / FORMAT_FILE
    if (
        dataset.is_dir()
        and not force
        and not (dataset / "traces").is_dir()
        and not marker.is_file()  # a dataset a concurrent scan is creating now
        and any(not c.name.startswith(f".{FORMAT_FILE}.") for c in dataset.iterdir())
    ):
        raise TraceviewError(
            f"{dataset}: holds other files and is not a traceview dataset "
            "(use --force to write a dataset into it)"
        )
    if (dataset / "traces").is_dir():
        written = marker.read_text().strip() if marker.is_file() else "1"
        if written != str(FORMAT):
            raise TraceviewError(
                f"{dataset}: a dataset of format {written}, written by another traceview "
                f"(this one writes format {FORMAT}: other columns, and run names relative "
                "to the scanned root); scan into a new folder"
            )
    if not marker.is_file():  # before traces/: a dataset with traces/ always has its FORMAT
        dataset.mkdir(parents=True, exist_ok=True)
        staged = dataset / f".{FORMAT_FILE}.{os.getpid()}.{uuid.uuid4().hex}"
        staged.write_text(f"{FORMAT}\n")
        os.replace(staged, marker)  # whole, even with a concurrent scan writing it too
    for table in (*TABLES, ".tmp"):
        (dataset / table).mkdir(parents=True, exist_ok=True)


def has_trace(dataset: Path, trace_id: str) -> bool:
    """Whether the trace's ``traces/`` row (written last) is there: the trace is scanned."""
    return (dataset / "traces" / f"{trace_id}.parquet").exists()


def table_file(dataset: Path, table: str, trace_id: str) -> Path:
    """Where one trace's rows of one table live."""
    return dataset / table / f"{trace_id}.parquet"


def write_table(dataset: Path, table: str, trace_id: str, df: pl.DataFrame) -> None:
    """Write one table's file for one trace: to .tmp/ under a name that carries this
    process, then renamed into place."""
    tmp = dataset / ".tmp" / f"{table}.{trace_id}.{os.getpid()}.{uuid.uuid4().hex}.{_HOST}.tmp"
    df.write_parquet(tmp)
    os.replace(tmp, table_file(dataset, table, trace_id))


def lock(dataset: Path, trace_id: str) -> Path:
    """Mark the trace as being written by this process (see :func:`remove_orphans`)."""
    path = dataset / ".tmp" / f"lock.{trace_id}.{os.getpid()}.{_HOST}"
    path.touch()
    return path


def _writer(name: str) -> tuple[int, str] | None:
    """(pid, host) of a .tmp/ file's writer, from its name; None for a name not ours."""
    parts = name.split(".")
    try:
        if parts[0] == "lock" and len(parts) >= 4:
            return int(parts[2]), ".".join(parts[3:])
        if len(parts) >= 6 and parts[-1] == "tmp":
            return int(parts[2]), ".".join(parts[4:-1])
    except ValueError:
        return None
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _writer_gone(path: Path, *, mine_too: bool) -> bool:
    """Whether nobody is writing ``path`` any more: its writer is this process (when
    ``mine_too``) or dead, or is on another host and the file is older than a day."""
    writer = _writer(path.name)
    if writer is None:
        return False
    pid, host = writer
    if host != _HOST:
        try:
            return time.time() - path.stat().st_mtime > FOREIGN_AGE_S
        except FileNotFoundError:
            return False
    if pid == os.getpid():
        return mine_too
    return not _pid_alive(pid)


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


def sweep_tmp(dataset: Path) -> list[Path]:
    """Remove the ``.tmp/`` files of this process and of writers that are gone (an
    interrupted earlier scan); another live scan's files are left alone. Returns what
    was removed."""
    removed = []
    for leftover in (dataset / ".tmp").glob("*"):
        if _writer_gone(leftover, mine_too=True):
            leftover.unlink(missing_ok=True)
            removed.append(leftover)
    return removed


def _being_written(dataset: Path, trace_id: str) -> bool:
    return any(
        not _writer_gone(f, mine_too=False) for f in (dataset / ".tmp").glob(f"lock.{trace_id}.*")
    )


def remove_orphans(dataset: Path) -> list[Path]:
    """Remove the rows of traces that were never committed: a file in steps/, families/
    or gaps/ whose trace has no ``traces/`` row and no live writer (a scan killed between
    a trace's files and its row). Returns what was removed."""
    committed_ids = {f.stem for f in (dataset / "traces").glob("*.parquet")}
    removed = []
    for table in COMMITTED_BY_TRACES:
        for f in (dataset / table).glob("*.parquet"):
            tid = f.stem
            if tid in committed_ids or _being_written(dataset, tid):
                continue
            if table_file(dataset, "traces", tid).exists():  # committed meanwhile
                continue
            f.unlink(missing_ok=True)
            removed.append(f)
    return removed


def committed(dataset: str | os.PathLike[str], table: str) -> pl.LazyFrame:
    """One table's rows of committed traces only (those with a ``traces/`` row): what a
    reader should see while a scan runs or after one was killed."""
    root = Path(dataset)
    rows = pl.scan_parquet(root / table / "*.parquet")
    if table in ("traces", "errors"):
        return rows
    ids = pl.scan_parquet(root / "traces" / "*.parquet").select("trace_id")
    return rows.join(ids, on="trace_id", how="semi")
