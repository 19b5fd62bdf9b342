"""The scan dataset's files: one Parquet file per trace in each table, written whole.

Layout (docs/datasets.md): ``DATASET/{traces,steps,families,gaps}/<trace_id>.parquet``,
``trace_id`` being the BLAKE2b-128 of the trace's bytes; ``errors/<key>.parquet``, one per
failing path, and ``aliases/<key>.parquet``, one per copy. ``DATASET`` is a folder or an
object-store prefix (:mod:`.store`); either way a reader never sees half a file.

Safe under concurrent scans and kills:
- on disk, a temporary file's name carries its writer (pid and host), and a sweep removes
  only its own or those whose writer is dead (on this host; on another, only after a day);
- while a trace is being written, ``.tmp/lock.<trace_id>.<pid>.<host>`` says so;
- a trace's ``traces/`` row, written last, commits its rows in the other tables; readers
  read committed traces only (:func:`committed`), and the next scan removes the rows of a
  trace that has neither a ``traces/`` row nor a live writer (:func:`remove_orphans`);
- a sweep removes only files named as a scan names them (a 32-hex trace id or key, and
  ``.tmp/`` names of the forms above): any other file in a dataset's folders is left
  alone (:func:`foreign` lists those a reader would read).
  In an object store, which cannot rename, this is the whole of the commit: every file is
  written under its final name.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
import uuid
from pathlib import Path, PurePosixPath

import polars as pl

from traceview.batch.store import HOST, LocalStore, Store, open_store, to_frame
from traceview.errors import MissingDependencyError, TraceviewError
from traceview.loader import nsys, remote

TABLES = ("traces", "steps", "families", "gaps", "errors")
# the tables a trace's traces/ row commits (errors/ rows stand alone)
COMMITTED_BY_TRACES = ("steps", "families", "gaps")
ALIASES = "aliases"  # files and objects whose content is a trace already in traces/
_HOST = HOST
FOREIGN_AGE_S = 24 * 3600  # a file of a writer on another host is left this long

Dataset = Store | str | os.PathLike[str]

# The only names a scan gives its files: a sweep removes nothing else, ever (a file of the
# user's own in a dataset's folders is left alone).
_ID = r"[0-9a-f]{32}"  # a trace id (content_hash) or a key (error_key, an alias's)
_TABLE_FILE = re.compile(rf"{_ID}\.parquet")  # <table>/<id>.parquet
_LOCK = re.compile(rf"lock\.{_ID}\.([0-9]+)\.(.+)")  # .tmp/lock.<id>.<pid>.<host>
_TMP = re.compile(  # .tmp/<table>.<id>.<pid>.<uuid>.<host>.tmp (store.LocalStore.write)
    rf"(?:{'|'.join((*TABLES, ALIASES))})\.{_ID}\.([0-9]+)\.[0-9a-f]{{32}}\.(.+)\.tmp"
)


def _store(dataset: Dataset) -> Store:
    if isinstance(dataset, str | os.PathLike):
        return open_store(dataset)
    return dataset


def content_hash(path: str | os.PathLike[str]) -> str:
    """The trace's identity in the dataset: BLAKE2b (128 bits) of its bytes, as hex (for an
    object, :func:`traceview.loader.remote.digest`, the same digest). An Nsight export
    with a write-ahead log or hot journal beside it: the digest of the digests of the file
    and of each, as its content is theirs together."""
    name = os.fspath(path)
    if remote.is_url(name):
        return remote.digest(name)
    with open(name, "rb") as f:
        digest = remote.stream_digest(f)
    sides = nsys.pending(name)  # an export's log or journal holds part of its content
    for side in sides:
        with open(side, "rb") as f:
            digest += remote.stream_digest(f)
    return digest if not sides else hashlib.blake2b(digest.encode(), digest_size=16).hexdigest()


FORMAT = 6  # bump when a table's columns or a column's meaning change
FORMAT_FILE = "FORMAT"  # the dataset's format, written by the scan that made it
CONFIG_FILE = "CONFIG"  # how its traces were analysed (AnalysisConfig.describe), as JSON


def prepare(store: Store, *, force: bool = False, config: dict[str, object] | None = None) -> None:
    """Make the dataset's folders (a dataset is a folder, or a prefix) and its ``FORMAT``.

    Raises:
        TraceviewError: ``dataset`` is a file, a folder that holds other things and is
            not a dataset (unless ``force``), a dataset another format of traceview
            wrote (its files would not share one set of columns), or a folder with a
            ``traces/`` folder but no ``FORMAT`` file (not a dataset, or one written before
            formats were recorded; even with ``force``), or a dataset whose traces were
            analysed with another ``config`` (its rows would mix two analyses).
    """
    where = store.where
    if store.is_file():
        raise TraceviewError(f"{where}: not a directory (a dataset is a folder)")
    has_format = store.exists(FORMAT_FILE)
    has_traces = bool(store.names("traces"))
    if (
        not force
        and not has_traces
        and not has_format  # a dataset a concurrent scan is creating now
        and any(not n.startswith(f".{FORMAT_FILE}.") for n in store.children())
    ):
        raise TraceviewError(
            f"{where}: holds other files and is not a traceview dataset "
            "(use --force to write a dataset into it)"
        )
    if has_traces and not has_format:  # not ours, or written before formats were recorded
        raise TraceviewError(
            f"{where}: has a traces/ folder but no {FORMAT_FILE} file: not a traceview "
            "dataset, or one written before traceview recorded its dataset format "
            f"(this one writes format {FORMAT}: other columns); nothing was changed: scan "
            "into a new folder, or move traces/, steps/ and errors/ out of this one "
            "(--force does not write into it)"
        )
    if has_format:
        written = store.read(FORMAT_FILE).decode().strip()
        if written != str(FORMAT):
            raise TraceviewError(
                f"{where}: a dataset of format {written}, written by another traceview "
                f"(this one writes format {FORMAT}: other columns); scan into a new folder"
            )
    store.prepare()
    if not has_format:  # before traces/: a dataset with traces/ always has its FORMAT
        if isinstance(store, LocalStore):  # whole, even with a concurrent scan writing it
            staged = store.root / f".{FORMAT_FILE}.{os.getpid()}.{uuid.uuid4().hex}"
            staged.write_text(f"{FORMAT}\n")
            os.replace(staged, store.root / FORMAT_FILE)
        else:
            store.write(FORMAT_FILE, f"{FORMAT}\n".encode())
    if isinstance(store, LocalStore):
        for table in (*TABLES, ALIASES, ".tmp"):
            (store.root / table).mkdir(parents=True, exist_ok=True)
    if config is not None:
        _same_config(store, config)


def _setting(value: object) -> str:
    """One setting of an analysis as a message shows it (None: the default)."""
    return "default" if value is None else repr(value)


def _same_config(store: Store, config: dict[str, object]) -> None:
    """Record how the dataset's traces are analysed, or refuse a scan that analyses them
    another way: a trace already there is skipped by its content, so its rows would keep
    the old analysis beside the new one's."""
    import orjson

    text = orjson.dumps(config, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
    if not store.exists(CONFIG_FILE):
        store.write(CONFIG_FILE, text)
        return
    try:
        written = orjson.loads(store.read(CONFIG_FILE))
    except orjson.JSONDecodeError:
        raise TraceviewError(
            f"{store.where}: its {CONFIG_FILE} file is not traceview's; nothing was changed"
        ) from None
    if written != orjson.loads(text):
        changed = ", ".join(
            f"{k} {_setting(written.get(k))} -> {_setting(config.get(k))}"
            for k in sorted(set(written) | set(config))
            if written.get(k) != config.get(k)
        )
        raise TraceviewError(
            f"{store.where}: its traces were analysed otherwise ({changed}); a scan skips "
            "the traces already there, so their rows would mix two analyses: scan into a "
            "new folder"
        )


def has_trace(store: Store, trace_id: str) -> bool:
    """Whether the trace's ``traces/`` row (written last) is there: the trace is committed."""
    return store.exists(table_file(table="traces", trace_id=trace_id))


def scanned(store: Store, trace_id: str) -> bool:
    """Whether the trace is committed and each file its ``traces/`` row commits is there:
    a scan skips such a trace. One whose file is missing (moved out by hand, as the
    readers tell of an unreadable one) is analysed again and its missing files written."""
    return has_trace(store, trace_id) and has_its_files(store, trace_id)


def has_its_files(store: Store, trace_id: str) -> bool:
    """Whether each file a trace's ``traces/`` row commits is there."""
    return all(store.exists(table_file(table, trace_id)) for table in COMMITTED_BY_TRACES)


def incomplete(
    store: Store,
    tables: tuple[str, ...] = COMMITTED_BY_TRACES,
    committed: set[str] | None = None,
) -> dict[str, list[str]]:
    """Each committed trace that lacks a file of a table its ``traces/`` row commits, by
    table (of ``tables``); ``committed``: the trace ids ``traces/`` was listed with just
    before, else it is listed here. ``traces/`` is listed first: a trace committed after
    that listing wrote its other files before its row, so it is never taken for one that
    lacks them."""
    ids = committed if committed is not None else _committed_ids(store)
    missing = {}
    for table in tables:
        there = {n.removesuffix(".parquet") for n in _parquet(store, table)}
        if lacking := sorted(ids - there):
            missing[table] = lacking
    return missing


def table_file(table: str, trace_id: str) -> str:
    """Where one trace's rows of one table live, under the dataset."""
    return f"{table}/{trace_id}.parquet"


def write_table(store: Store, table: str, trace_id: str, df: pl.DataFrame) -> None:
    """Write one table's file for one trace, whole (:meth:`.store.Store.write`)."""
    store.write(table_file(table, trace_id), to_frame(df))


def lock(store: Store, trace_id: str) -> str:
    """Mark the trace as being written by this process (see :func:`remove_orphans`)."""
    rel = f".tmp/lock.{trace_id}.{os.getpid()}.{_HOST}"
    store.write(rel, b"")
    return rel


def unlock(store: Store, rel: str) -> None:
    """Remove a :func:`lock`."""
    store.delete(rel)


def _writer(name: str) -> tuple[int, str] | None:
    """(pid, host) of a .tmp/ file's writer, from its name; None for a name a scan does
    not give (never removed)."""
    found = _LOCK.fullmatch(name) or _TMP.fullmatch(name)
    return (int(found[1]), found[2]) if found else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _writer_gone(store: Store, rel: str, *, mine_too: bool) -> bool:
    """Whether nobody is writing ``rel`` any more: its writer is this process (when
    ``mine_too``) or dead, or is on another host and the file is older than a day."""
    writer = _writer(PurePosixPath(rel).name)
    if writer is None:
        return False
    pid, host = writer
    if host != _HOST:
        written = store.mtime(rel)
        return written is not None and time.time() - written > FOREIGN_AGE_S
    if pid == os.getpid():
        return mine_too
    return not _pid_alive(pid)


def error_key(path: str) -> str:
    """The name of a path's ``errors/`` file: each failing file or object has its own row
    (two identical files that fail are two rows), the latest failure of that path."""
    return hashlib.blake2b(f"error|{path}".encode(), digest_size=16).hexdigest()


def drop_error(store: Store, path: str) -> None:
    """Remove the ``errors/`` row of ``path`` (its row path): it failed before and scans now."""
    store.delete(table_file("errors", error_key(path)))


def note_alias(store: Store, trace_id: str, path: str, size: int, stamp: int | str | None) -> bool:
    """Record that the file or object at ``path`` (this size, and mtime or version
    ``stamp``) holds the trace ``trace_id``, already in the dataset under another name or
    time: the next scan skips it without reading it (:func:`known`). Returns whether
    ``path`` is an alias now: never where the trace's own ``traces/`` row says the same
    path, size and stamp (a concurrent scan wrote that trace from this very file; a
    touched file, its own path at a new mtime, is an alias)."""
    text = f"{path}|{size}|{stamp}"
    key = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    rel = f"{ALIASES}/{key}.parquet"
    if store.exists(rel):
        return True
    url = remote.is_url(path)
    if (path, size, stamp) in _own_keys(store, trace_id):
        return False
    row = pl.DataFrame(
        {
            "trace_id": [trace_id],
            "path": [path],
            "size": [size],
            "mtime_ns": [None if url else stamp],
            "version": [stamp if url else None],
        },
        schema={
            "trace_id": pl.String,
            "path": pl.String,
            "size": pl.Int64,
            "mtime_ns": pl.Int64,
            "version": pl.String,
        },
    )
    store.write(rel, to_frame(row))
    return True


def _own_keys(store: Store, trace_id: str) -> set[tuple[str, int, int | str | None]]:
    """(path, size, mtime_ns or version) of the trace's ``traces/`` row; none if absent."""
    rel = table_file("traces", trace_id)
    try:
        rows = store.read_parquet([rel], ["path", "size", "mtime_ns", "version"])
    except (OSError, pl.exceptions.PolarsError):
        return set()
    return {
        (p, int(s), v if remote.is_url(p) else m)
        for p, s, m, v in rows.select("path", "size", "mtime_ns", "version").iter_rows()
    }


def known(store: Store) -> set[tuple[str, int, int | str | None]]:
    """(path, size, mtime_ns) of every file already in the dataset, (URL, size, version)
    of every object: those of ``traces/``, and of ``aliases/``."""
    committed = _committed_ids(store)
    files = [table_file("traces", tid) for tid in sorted(committed)]
    files += [f"{ALIASES}/{n}" for n in _parquet(store, ALIASES)]
    if not files:
        return set()
    columns = ["trace_id", "path", "size", "mtime_ns", "version"]
    try:
        rows = store.read_parquet(files, columns)
    except (OSError, pl.exceptions.PolarsError):
        raise _unreadable(store, files, columns) from None
    # a trace that lacks a file is no reason to skip its paths: they are read again
    lacking = {tid for ids in incomplete(store, committed=committed).values() for tid in ids}
    return {
        (p, int(s), v if remote.is_url(p) else m)
        for tid, p, s, m, v in rows.select(columns).iter_rows()
        if tid not in lacking
    }


def _unreadable(store: Store, files: list[str], columns: list[str]) -> TraceviewError:
    """The error naming the first of ``files`` that cannot be read as a table's file."""
    for rel in files:
        try:
            store.read_parquet([rel], columns)
        except (OSError, pl.exceptions.PolarsError) as exc:
            problem = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return TraceviewError(
                f"{store.full(rel)}: not a readable traceview table file ({problem}); "
                "move it out of the dataset and scan again (nothing was removed)"
            )
    return TraceviewError(
        f"{store.where}: its traces/ and aliases/ files do not read as one table "
        "(written by another traceview?); scan into a new folder"
    )


def _committed_ids(store: Store) -> set[str]:
    """The trace ids ``traces/`` holds a row of (one listing)."""
    return {n.removesuffix(".parquet") for n in _parquet(store, "traces")}


def _parquet(store: Store, table: str) -> list[str]:
    """The table's files a scan wrote (named by a trace id or key): no other file."""
    return [n for n in store.names(table) if _TABLE_FILE.fullmatch(n)]


def foreign(dataset: Dataset) -> list[str]:
    """The ``.parquet`` files in the dataset's tables that no scan wrote (a name that is no
    trace id or key): left alone, but a reader globbing ``<table>/*.parquet`` reads them
    too. Their paths or URLs."""
    store = _store(dataset)
    return [
        store.full(f"{table}/{n}")
        for table in (*TABLES, ALIASES)
        for n in store.names(table)
        if n.endswith(".parquet") and not _TABLE_FILE.fullmatch(n)
    ]


def sweep_tmp(dataset: Dataset) -> list[PurePosixPath]:
    """Remove the ``.tmp/`` files of this process and of writers that are gone (an
    interrupted earlier scan); another live scan's files are left alone. Returns what
    was removed."""
    store = _store(dataset)
    removed = []
    for name in store.names(".tmp"):
        rel = f".tmp/{name}"
        if _writer_gone(store, rel, mine_too=True):
            store.delete(rel)
            removed.append(PurePosixPath(rel))
    return removed


def _being_written(store: Store, trace_id: str, tmp: list[str]) -> bool:
    return any(
        not _writer_gone(store, f".tmp/{n}", mine_too=False)
        for n in tmp
        if n.startswith(f"lock.{trace_id}.")
    )


def remove_orphans(dataset: Dataset) -> list[str]:
    """Remove the rows of traces that were never committed: a file in steps/, families/
    or gaps/ whose trace has no ``traces/`` row and no live writer (a scan killed between
    a trace's files and its row). Only files named as a scan names them (a trace id) are
    ever removed: any other is the user's, and left alone. Returns what was removed."""
    store = _store(dataset)
    committed_ids = _committed_ids(store)
    tmp = store.names(".tmp")
    removed = []
    for table in COMMITTED_BY_TRACES:
        for name in _parquet(store, table):
            tid = name.removesuffix(".parquet")
            if tid in committed_ids or _being_written(store, tid, tmp):
                continue
            if has_trace(store, tid):  # committed meanwhile
                continue
            store.delete(table_file(table, tid))
            removed.append(table_file(table, tid))
    return removed


def polars_options(url: str) -> dict[str, str] | None:
    """polars' ``storage_options`` for a dataset URL: the S3 endpoint of
    ``AWS_ENDPOINT_URL`` (plain HTTP allowed where it says ``http://``); None elsewhere
    (polars reads the store's standard settings itself)."""
    if not url.lower().startswith("s3://"):
        return None
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        return None
    options = {"aws_endpoint_url": endpoint}
    if endpoint.lower().startswith("http://"):
        options["aws_allow_http"] = "true"
    return options


# the tables a clean scan may leave without a file, as their rows are written
_EMPTY: dict[str, dict[str, pl.DataType]] = {
    "errors": {
        "trace_id": pl.String(),
        "path": pl.String(),
        "run": pl.String(),
        "error": pl.String(),
    },
    ALIASES: {
        "trace_id": pl.String(),
        "path": pl.String(),
        "size": pl.Int64(),
        "mtime_ns": pl.Int64(),
        "version": pl.String(),
    },
}


def _lacking(root: str, table: str) -> list[str]:
    """The committed traces without their ``table`` file, where the dataset can be listed
    here (a folder; a bucket with ``traceview[cloud]``); none elsewhere (an HTTP URL, or a
    bucket polars reads by itself: as it was read before this check)."""
    if table not in COMMITTED_BY_TRACES or root.lower().startswith(("http://", "https://")):
        return []
    try:
        return incomplete(open_store(root), (table,)).get(table, [])
    except MissingDependencyError:
        return []


def committed(dataset: str | os.PathLike[str], table: str) -> pl.LazyFrame:
    """One table's rows of committed traces only (those with a ``traces/`` row): what a
    reader should see while a scan runs or after one was killed. ``dataset`` is a folder
    or a URL (read by polars itself)."""
    root = os.fspath(dataset).rstrip("/")
    opts = polars_options(root) if remote.is_url(root) else None
    # a committed trace without its file of this table: its rows would be missing from
    # every figure read, so it is said, not read (an HTTP URL cannot be listed)
    if lacking := _lacking(root, table):
        more = f" and {len(lacking) - 1} more" if len(lacking) > 1 else ""
        raise TraceviewError(
            f"{root}: committed trace {lacking[0]}{more} has no {table}/ file (moved out or "
            "lost): scan its trace into this dataset again to write it, or move "
            f"traces/{lacking[0]}.parquet out of the dataset to read the rest without it"
        )
    if not remote.is_url(root) and not any(Path(root, table).glob("*.parquet")):
        # no file yet (a scan without a failure has no errors/): no rows, not an error
        return pl.LazyFrame(schema=_EMPTY.get(table, {}))
    rows = pl.scan_parquet(f"{root}/{table}/*.parquet", storage_options=opts)
    if table in ("traces", "errors"):
        return rows
    ids = pl.scan_parquet(f"{root}/traces/*.parquet", storage_options=opts).select("trace_id")
    return rows.join(ids, on="trace_id", how="semi")
