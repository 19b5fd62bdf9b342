"""Nsight Systems SQLite exports (``nsys export --type sqlite``): :mod:`.reader` reads one
into a :class:`~traceview.model.Trace`, :mod:`.names` says what its numbers and name ids
stand for, and :mod:`.sqlite_file` opens the file as SQLite committed it, never writing it.
"""

from __future__ import annotations

from traceview.loader.nsys.reader import (
    SQLITE_MAGIC,
    is_export_file,
    is_sqlite,
    load_nsys,
    pending,
    report_problem,
)

__all__ = [
    "SQLITE_MAGIC",
    "is_export_file",
    "is_sqlite",
    "load_nsys",
    "pending",
    "report_problem",
]
