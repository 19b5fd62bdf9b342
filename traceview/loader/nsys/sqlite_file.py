"""An SQLite file (an Nsight Systems export) read as SQLite committed it, and never
written: its header checked against its length, a write-ahead log or hot journal beside it
applied on a temporary copy, text that is not UTF-8 read with U+FFFD, and a real number
refused where a time or an id belongs."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from traceview.errors import TraceFormatError, shown_value
from traceview.loader.frames import TS_LIMIT_US

SQLITE_MAGIC = b"SQLite format 3\x00"
Row = tuple[Any, ...]  # a row as sqlite3 gives it: its values of whatever SQLite type


def is_sqlite(head: bytes) -> bool:
    """The file starts with SQLite's header string."""
    return head.startswith(SQLITE_MAGIC)


def is_export_file(path: str) -> bool:
    """A local file that starts with SQLite's header (what ``sql --engine auto`` keeps off
    Perfetto's trace processor, which cannot read it)."""
    try:
        with open(path, "rb") as f:
            return is_sqlite(f.read(len(SQLITE_MAGIC)))
    except OSError:
        return False


def check_length(path: str, name: str) -> None:
    """A file shorter than its header's page count says is cut (a copy or download that
    stopped): every later query would fail somewhere, or silently miss rows."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(100)
    if len(head) < 100:
        raise TraceFormatError(name, f"a cut SQLite file ({size:,} bytes, not even a header)")
    page = int.from_bytes(head[16:18], "big")
    page = 65_536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    counter_valid = head[24:28] == head[92:96]
    if counter_valid and pages and size < page * pages:
        raise TraceFormatError(
            name, f"a cut SQLite file: {size:,} of the {page * pages:,} bytes its header states"
        )


class Text:
    """SQLite's TEXT values as ``str`` where one is not UTF-8 (NVTX's ASCII API and a
    kernel's name take any bytes): each invalid byte sequence read as U+FFFD, and the
    value counted."""

    def __init__(self) -> None:
        self.replaced = 0

    def __call__(self, raw: bytes) -> str:
        try:
            return raw.decode()
        except UnicodeDecodeError:
            self.replaced += 1
            return raw.decode(errors="replace")


SIDE_FILES = ("-wal", "-journal")  # SQLite's write-ahead log, its rollback journal
WAL_MODE = 2  # the header's read and write versions in WAL mode (bytes 18, 19)


def pending(path: str) -> list[str]:
    """The files beside an export that hold part of its committed state: a write-ahead
    log (``-wal``, where the header says WAL mode) or a rollback journal (``-journal``,
    a writer that stopped mid-transaction), each not empty. The file alone is then not the
    database SQLite would read (a cache key or an immutable open of it is stale)."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return []
    if len(head) < 20 or not is_sqlite(head):
        return []
    wal = head[18] == WAL_MODE and head[19] == WAL_MODE
    out = []
    for suffix in SIDE_FILES:
        side = path + suffix
        if (suffix == "-journal" or wal) and os.path.isfile(side) and os.path.getsize(side):
            out.append(side)
    return out


def connect(path: str, *, copy: bool = False) -> sqlite3.Connection:
    """A read-only connection that never writes, locks or creates anything beside the file;
    ``copy``: the file is traceview's own copy (with its log or journal), opened so that
    SQLite may apply them."""
    uri = Path(path).resolve().as_uri() + ("" if copy else "?mode=ro&immutable=1")
    con = sqlite3.connect(uri, uri=True, check_same_thread=False)
    con.execute("PRAGMA query_only = 1")
    return con


@contextlib.contextmanager
def committed(path: str, name: str) -> Iterator[tuple[str, bool]]:
    """The file to read the export's committed state from, and whether it is a copy. An
    export with a write-ahead log or a hot journal beside it (:func:`pending`) is copied
    with them to a temporary folder, where SQLite applies them on open; the user's files
    are never opened for writing (an immutable open would read the stale main file: a
    log's deleted rows, say)."""
    sides = pending(path)
    if not sides:
        yield path, False
        return
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="traceview-export-")
    try:
        copy = os.path.join(folder, "export.sqlite")
        try:
            shutil.copyfile(path, copy)
            for side in sides:
                shutil.copyfile(side, copy + side[len(path) :])
        except OSError as exc:
            raise TraceFormatError(
                name,
                f"its committed state is partly in {os.path.basename(sides[0])}, and the "
                f"copy that reads it failed ({exc}); checkpoint it first: sqlite3 "
                f"{os.path.basename(path)} 'PRAGMA wal_checkpoint(TRUNCATE)'",
            ) from None
        yield copy, True
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Db:
    """The open export: each query's rows, its TEXT decoded by SQLite's own UTF-8 decoder;
    where a value is not UTF-8, the query is read again, and every later one, through
    :class:`Text` (``text.replaced`` counts those values)."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.text = Text()

    def fetch(self, sql: str) -> tuple[list[Row], list[str]]:
        """The rows of ``sql`` and their column names."""
        try:
            cur = self.con.execute(sql)
            rows = cur.fetchall()
        except sqlite3.OperationalError:  # a value not UTF-8 (else the same error again)
            if self.con.text_factory is self.text:
                raise
            self.con.text_factory = self.text
            cur = self.con.execute(sql)
            rows = cur.fetchall()
        return rows, [d[0] for d in cur.description or ()]

    def rows(self, sql: str) -> list[Row]:
        return self.fetch(sql)[0]

    def no_reals(self, table: str, columns: list[str], path: str) -> None:
        """Raise where a column read as integers (times, ids) holds anything else: a real
        number (the frame would cut it to an integer, silently), text or a BLOB (nsys writes
        integers). The error names the table and column. One scan of the table, stopping at
        the first."""
        if not columns:
            return
        quoted = [f'"{c}"' for c in columns]
        kinds = ", ".join(f"typeof({q})" for q in quoted)
        where = " OR ".join(f"typeof({q}) NOT IN ('integer', 'null')" for q in quoted)
        found = self.rows(
            f'SELECT {", ".join(quoted)}, {kinds} FROM "{table}" WHERE {where} LIMIT 1'
        )
        if found:
            values, types = found[0][: len(columns)], found[0][len(columns) :]
            column, value, kind = next(
                (c, v, t)
                for c, v, t in zip(columns, values, types, strict=True)
                if t not in ("integer", "null")
            )
            what = {"real": "a real number", "text": "text", "blob": "a BLOB"}.get(kind, kind)
            raise TraceFormatError(
                path,
                f"{table}.{column} holds {shown_value(value)}, {what} where an integer "
                "(a time or an id) belongs; not a readable Nsight Systems export",
            )


def refuse_impossible_times(f: pl.DataFrame, table: str, what: str, path: str) -> None:
    """Raise where a row of device activity (``start``, ``end``: ns) has a time no clock of
    Nsight's reads: before its zero (ns since boot, or since the session began), or an end
    or duration beyond what Int64 ns of a JSON trace may hold (``TS_LIMIT_US``): the JSON
    reader refuses such device activity too."""
    limit = int(TS_LIMIT_US * 1000)
    start, end = pl.col("start"), pl.col("end")
    impossible = f.filter((start < 0) | (end >= limit) | (end - start >= limit))
    if impossible.height:
        row = impossible.row(0, named=True)
        n = impossible.height
        raise TraceFormatError(
            path,
            f"{n:,} {what} row{'s' if n != 1 else ''} in {table} with an impossible time "
            f"(start {row['start']:,} ns, end {row['end']:,} ns: before the clock's zero or "
            f"beyond {limit:,} ns); cannot place them in time",
        )


def tables(db: Db) -> dict[str, set[str]]:
    out = {}
    for (name,) in db.rows("SELECT name FROM sqlite_master WHERE type = 'table'"):
        quoted = name.replace('"', '""')
        out[name] = {r[1] for r in db.rows(f'PRAGMA table_info("{quoted}")')}
    return out


def select(
    db: Db,
    table: str,
    have: set[str],
    columns: dict[str, pl.DataType],
    path: str,
    where: str = "",
) -> pl.DataFrame:
    """``columns`` of ``table`` (NULL for those the table lacks), in one query; a text
    column's values read as text whatever SQLite holds (a BLOB's bytes decoded as UTF-8),
    an integer column's never a real number (:meth:`Db.no_reals`)."""
    db.no_reals(table, [c for c, t in columns.items() if c in have and t == pl.Int64()], path)
    exprs = [
        ("NULL" if c not in have else f'CAST("{c}" AS TEXT)' if t == pl.String() else f'"{c}"')
        for c, t in columns.items()
    ]
    rows = db.rows(f'SELECT {", ".join(exprs)} FROM "{table}" {where}')
    return pl.DataFrame(rows, schema=columns, orient="row")


__all__ = [
    "SQLITE_MAGIC",
    "Db",
    "check_length",
    "committed",
    "connect",
    "is_export_file",
    "is_sqlite",
    "pending",
    "refuse_impossible_times",
    "select",
    "tables",
]
