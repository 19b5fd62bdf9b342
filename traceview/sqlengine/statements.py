"""What both engines share: a query's statements, each with the line it starts on, the
query's time bound, and the variable that names Perfetto's trace_processor binary."""

from __future__ import annotations

import math
import re
import sqlite3
from dataclasses import dataclass

from traceview.errors import QueryError

ENV_TP_BIN = "TRACEVIEW_TRACE_PROCESSOR"


@dataclass(frozen=True, slots=True)
class Statement:
    text: str
    line: int  # 1-based line of its first character in the query


def split_statements(query: str) -> list[Statement]:
    """Split on each ``;`` that ends a complete statement (outside strings and comments, as
    sqlite3.complete_statement decides), keeping the line each statement starts on."""
    statements: list[Statement] = []
    start = 0
    for m in re.finditer(";", query):
        chunk = query[start : m.end()]
        if sqlite3.complete_statement(chunk):
            _append(statements, chunk, query.count("\n", 0, start) + 1)
            start = m.end()
    if query[start:].strip():
        _append(statements, query[start:], query.count("\n", 0, start) + 1)
    return statements


def _append(statements: list[Statement], text: str, line: int) -> None:
    """Add ``text`` unless it is only comments; its line is that of its first code line."""
    code = re.sub(r"--[^\n]*|/\*.*?\*/", "", text, flags=re.S).strip().strip(";").strip()
    if not code:
        return
    for offset, raw in enumerate(text.splitlines()):
        stripped = raw.strip()
        if stripped and not stripped.startswith("--"):
            statements.append(Statement(text.strip(), line + offset))
            return


def check_timeout(timeout_s: object) -> None:
    """A query's time bound: a finite number of seconds > 0 (nan or inf would be none)."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise QueryError(f"timeout {timeout_s!r} is not a number of seconds")
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise QueryError(f"timeout {timeout_s!r} is not a finite number of seconds > 0")
