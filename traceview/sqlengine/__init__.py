"""PerfettoSQL on traces: an embedded engine (SQLite with Perfetto's tables, offline) and
Perfetto's own trace processor when its binary is configured.

``run_sql(trace_or_path, query)`` returns a polars DataFrame: the rows of the query's last
statement. Query files shipped with traceview are listed by :func:`builtin_queries`.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from traceview.errors import QueryError
from traceview.loader.nsys import is_export_file
from traceview.model import Trace
from traceview.sqlengine.statements import ENV_TP_BIN, Statement, check_timeout, split_statements

DEFAULT_TIMEOUT_S = 60.0

_PERFETTO_ONLY = [
    (re.compile(r"^\s*INCLUDE\s+PERFETTO\s+MODULE\b", re.I), "INCLUDE PERFETTO MODULE"),
    (
        re.compile(r"^\s*CREATE\s+(OR\s+REPLACE\s+)?PERFETTO\s+FUNCTION\b", re.I),
        "CREATE PERFETTO FUNCTION",
    ),
    (
        re.compile(r"^\s*CREATE\s+(OR\s+REPLACE\s+)?PERFETTO\s+MACRO\b", re.I),
        "CREATE PERFETTO MACRO",
    ),
    (
        re.compile(r"^\s*CREATE\s+(OR\s+REPLACE\s+)?PERFETTO\s+INDEX\b", re.I),
        "CREATE PERFETTO INDEX",
    ),
    (re.compile(r"\bSPAN_(OUTER_|LEFT_)?JOIN\s*\(", re.I), "SPAN_JOIN"),
]
_PERFETTO_TABLE = re.compile(
    r"^(\s*)CREATE\s+(?:OR\s+REPLACE\s+)?PERFETTO\s+(TABLE|VIEW)\s+(\w+)(\s*\([^)]*\))?\s+AS\b",
    re.I,
)
READ_ONLY_PRAGMAS = {
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "function_list",
    "foreign_key_list",
}
_USES_ARGS_TABLE = re.compile(r"\b(FROM|JOIN)\s+args\b", re.I)
_ARG_KEYS = re.compile(r"'(args\.[^']*)'")


def translate(statement: Statement, where: str) -> str:
    """A PerfettoSQL statement as SQLite: PERFETTO TABLE/VIEW become TEMP TABLE/VIEW; the
    other Perfetto-only statements are refused with a clear message."""
    text = _strip_comments(statement.text)
    for pattern, what in _PERFETTO_ONLY:
        if pattern.search(text):
            raise QueryError(
                f"{where}:{statement.line}: {what} is Perfetto-only and cannot run on the "
                "embedded engine; use --engine perfetto with a trace processor binary "
                f"({ENV_TP_BIN} or --tp-bin)"
            )
    m = _PERFETTO_TABLE.search(text)
    if m:
        kind = m.group(2).upper()
        return (
            text[: m.start()] + f"{m.group(1)}CREATE TEMP {kind} {m.group(3)} AS" + text[m.end() :]
        )
    return text


def _strip_comments(text: str) -> str:
    return re.sub(r"--[^\n]*", "", text)


# --- query files ---------------------------------------------------------------------------


def builtin_queries() -> dict[str, Path]:
    """The query files shipped with traceview: name (file stem) -> path."""
    folder = resources.files("traceview") / "queries"
    found: dict[str, Path] = {}
    try:
        entries = list(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        entries = []
    if not entries:  # running from a source checkout: the top-level queries/ folder
        repo = Path(__file__).resolve().parents[2] / "queries"
        entries = list(repo.glob("*.sql")) if repo.is_dir() else []
    for entry in entries:
        if entry.name.endswith(".sql"):
            found[entry.name.removesuffix(".sql")] = Path(str(entry))
    return dict(sorted(found.items()))


def query_header(path: Path) -> str:
    """The leading comment of a query file, without the ``--`` markers."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("--"):
            break
        lines.append(line[2:].strip())
    return "\n".join(lines).strip()


def resolve_query(query: str) -> tuple[str, str]:
    """``(sql text, where)`` for a query file path, a built-in query name, or SQL text.

    A query file is a single word ending in ``.sql``; anything with whitespace is SQL text;
    any other single word must name a built-in query. A missing ``NAME.sql`` or
    ``queries/NAME.sql`` (the docs' form, run outside the repository) is the built-in
    query of that name; a missing file in any other folder is an error, never another query.

    Raises:
        QueryError: a missing query file, or a single word that names no built-in query.
    """
    if query.strip().endswith(".sql") and not re.search(r"\s", query.strip()):
        path = Path(query)
        if not path.exists():
            builtin = (
                builtin_queries().get(path.stem)
                if path.parent in (Path("."), Path("queries"))
                else None
            )
            if builtin is None:
                raise QueryError(
                    f"{query}: no such query file (built-in: {', '.join(builtin_queries())})"
                )
            path = builtin
        try:
            return path.read_text(encoding="utf-8"), str(query)
        except OSError as exc:
            raise QueryError(f"{query}: cannot read: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise QueryError(
                f"{query}: not a query file: not UTF-8 text (byte {exc.start:,})"
            ) from None
    builtin = builtin_queries().get(query)
    if builtin is not None:
        return builtin.read_text(), query
    if re.fullmatch(r"[\w.-]+", query.strip()):  # one word is a query's name, not SQL
        raise QueryError(
            f"{query}: no built-in query of that name (built-in: "
            f"{', '.join(builtin_queries())}; or give a .sql file, or SQL text)"
        )
    return query, "<sql>"


def needs_raw_args(sql: str) -> bool:
    """Whether the query reads args beyond the ones traceview keeps in its frames."""
    from traceview.sqlengine.embedded import KEPT_ARGS

    if _USES_ARGS_TABLE.search(_strip_comments(sql)):
        return True
    keys = set(_ARG_KEYS.findall(_strip_comments(sql)))
    return bool(keys - set(KEPT_ARGS))


# --- running -----------------------------------------------------------------------------------


class _Guard:
    """SQLite authorizer: read-only, contained. Temp tables/views (CREATE PERFETTO TABLE)
    are allowed; ATTACH, writes to the trace's tables, PRAGMAs and the rest are refused."""

    ALLOWED = {
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_FUNCTION,
        sqlite3.SQLITE_RECURSIVE,
        sqlite3.SQLITE_CREATE_TEMP_TABLE,
        sqlite3.SQLITE_CREATE_TEMP_VIEW,
        sqlite3.SQLITE_CREATE_TEMP_INDEX,
        sqlite3.SQLITE_DROP_TEMP_TABLE,
        sqlite3.SQLITE_DROP_TEMP_VIEW,
    }

    def __init__(self) -> None:
        self.denied: str | None = None

    def __call__(
        self, action: int, arg1: str | None, arg2: str | None, db: str | None, _trigger: str | None
    ) -> int:
        if action in self.ALLOWED:
            if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in (
                "load_extension",
                "writefile",
                "readfile",
                "edit",
            ):
                self.denied = f"function {arg2}()"
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if (
            action in (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE)
            and db == "temp"
        ):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in READ_ONLY_PRAGMAS:
            return sqlite3.SQLITE_OK  # schema introspection: these pragmas only read
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master" and db == "main":
            # asked while a table-valued pragma (pragma_table_info('slice')) reads the
            # schema; SQLite itself refuses a write to sqlite_master (writable_schema, a
            # PRAGMA this guard refuses, is off), and DDL is refused as its own action
            return sqlite3.SQLITE_OK
        names = {
            sqlite3.SQLITE_ATTACH: "ATTACH",
            sqlite3.SQLITE_DETACH: "DETACH",
            sqlite3.SQLITE_PRAGMA: "PRAGMA",
            sqlite3.SQLITE_INSERT: "INSERT",
            sqlite3.SQLITE_UPDATE: "UPDATE",
            sqlite3.SQLITE_DELETE: "DELETE",
            sqlite3.SQLITE_CREATE_TABLE: "CREATE TABLE",
            sqlite3.SQLITE_DROP_TABLE: "DROP TABLE",
            sqlite3.SQLITE_CREATE_VIEW: "CREATE VIEW",
            sqlite3.SQLITE_ALTER_TABLE: "ALTER TABLE",
            sqlite3.SQLITE_TRANSACTION: "transactions",
        }
        if action == sqlite3.SQLITE_INSERT and arg1 == "sqlite_master":
            names[action] = "CREATE TABLE/VIEW/INDEX"  # a new object in the trace's database
        if action == sqlite3.SQLITE_DELETE and arg1 == "sqlite_master":
            names[action] = "DROP TABLE/VIEW/INDEX"  # an object of the trace's database
        if self.denied is None:  # the first refusal names the statement best
            self.denied = names.get(action, f"this statement (SQLite action {action})")
        return sqlite3.SQLITE_DENY


def run_sql(
    trace: Trace | str | os.PathLike[str],
    query: str,
    *,
    engine: str = "auto",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    tp_bin: str | None = None,
) -> pl.DataFrame:
    """Run PerfettoSQL on a trace; the rows of the last statement as a DataFrame.

    Args:
        trace: a loaded Trace, or a trace file (needed for ``engine="perfetto"``).
        query: SQL text, a ``.sql`` file, or a built-in query name (``kernel_families``).
        engine: ``embedded``, ``perfetto`` or ``auto`` (perfetto when a binary is
            configured through ``tp_bin`` or $TRACEVIEW_TRACE_PROCESSOR, else embedded).
        timeout_s: interrupt the query after this many seconds.
        tp_bin: path of Perfetto's trace_processor binary.

    Raises:
        QueryError: bad SQL (with file and line), a Perfetto-only statement on the
            embedded engine, a write attempt, a timeout, or no trace processor binary.
    """
    check_timeout(timeout_s)
    sql, where = resolve_query(query)
    binary = tp_bin or os.environ.get(ENV_TP_BIN)
    if engine not in ("auto", "embedded", "perfetto"):
        raise QueryError(f"unknown engine {engine!r} (auto, embedded or perfetto)")
    path = trace.meta.path if isinstance(trace, Trace) else os.fspath(trace)
    if engine == "auto" and binary and is_export_file(path):
        engine = "embedded"  # an Nsight Systems export: trace_processor cannot read it
    if engine == "perfetto" or (engine == "auto" and binary):
        from traceview.sqlengine.perfetto_engine import run_perfetto

        return run_perfetto(path, sql, where, binary=binary, timeout_s=timeout_s)
    if not isinstance(trace, Trace):
        from traceview.loader import LoadOptions, load

        trace = load(trace, options=LoadOptions(raw_args=needs_raw_args(sql)))
    return run_embedded(trace, sql, where, timeout_s=timeout_s)


def run_embedded(
    trace: Trace, sql: str, where: str = "<sql>", *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> pl.DataFrame:
    """Run ``sql`` on the embedded engine (see :func:`run_sql`)."""
    check_timeout(timeout_s)
    from traceview.sqlengine.embedded import Database

    kept = "args_json" in trace.kernels.columns or "args_json" in trace.events.columns
    if needs_raw_args(sql) and not kept:
        raise QueryError(
            f"{where}: the query reads event args that the loaded trace does not keep; load "
            "it with tv.load(path, options=tv.LoadOptions(raw_args=True)), or pass the path"
        )

    statements = split_statements(sql)
    if not statements:
        raise QueryError(f"{where}: no SQL statement")
    translated = [(s, translate(s, where)) for s in statements]
    db = Database(trace, with_args_table=bool(_USES_ARGS_TABLE.search(sql)))
    guard = _Guard()
    conn = db.conn
    conn.set_authorizer(guard)
    deadline = time.monotonic() + timeout_s
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    result: pl.DataFrame = pl.DataFrame()
    for statement, text in translated:
        guard.denied = None
        try:
            cursor = conn.execute(text)
            rows = cursor.fetchall()
        except sqlite3.Error as exc:
            raise QueryError(_sql_error(exc, statement, where, guard, timeout_s)) from None
        except (ValueError, OverflowError) as exc:
            raise QueryError(f"{where}:{statement.line}: {exc}") from None
        if cursor.description:
            columns = [d[0] for d in cursor.description]
            result = _frame(columns, rows)
    conn.close()
    return result


def _sql_error(
    exc: sqlite3.Error, statement: Statement, where: str, guard: _Guard, timeout_s: float
) -> str:
    message = str(exc)
    if "interrupted" in message:
        return (
            f"{where}:{statement.line}: query interrupted after {timeout_s:g} s "
            "(raise --timeout if it should run longer)"
        )
    if guard.denied or "not authorized" in message:
        what = guard.denied or "this statement"
        return (
            f"{where}:{statement.line}: {what} is not allowed: queries are read-only "
            "(CREATE PERFETTO TABLE/VIEW make temporary tables)"
        )
    return f"{where}:{statement.line}: {message}"


def _frame(columns: list[str], rows: list[tuple[Any, ...]]) -> pl.DataFrame:
    seen: dict[str, int] = {}
    unique = []
    for c in columns:  # polars needs distinct names; SQL allows repeats
        n = seen.get(c, 0)
        seen[c] = n + 1
        unique.append(c if n == 0 else f"{c}_{n}")
    if not rows:
        return pl.DataFrame(schema=dict.fromkeys(unique, pl.Null))
    data = list(zip(*rows, strict=True))
    return pl.DataFrame(
        {c: pl.Series(c, list(v), strict=False) for c, v in zip(unique, data, strict=True)}
    )


__all__ = ["builtin_queries", "query_header", "run_sql", "split_statements"]
