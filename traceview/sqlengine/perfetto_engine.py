"""Perfetto's own trace processor as the SQL engine, when its binary is configured.

The ``perfetto`` package would download a trace_processor binary on first use; traceview
never lets it: the binary must be named by ``--tp-bin`` or $TRACEVIEW_TRACE_PROCESSOR.
"""

from __future__ import annotations

import os

import polars as pl

from traceview.errors import QueryError
from traceview.sqlengine.statements import ENV_TP_BIN, check_timeout, split_statements

LOAD_TIMEOUT_S = 600  # large traces take minutes to import


def check_binary(binary: str | None) -> str:
    """The binary path, checked; a QueryError that says how to configure it otherwise."""
    if not binary:
        raise QueryError(
            "--engine perfetto needs Perfetto's trace_processor binary: set "
            f"{ENV_TP_BIN} or pass --tp-bin PATH (traceview does not download it)"
        )
    if not os.path.isfile(binary) or not os.access(binary, os.X_OK):
        raise QueryError(f"{binary}: not an executable trace_processor binary")
    return binary


def run_perfetto(
    path: str, sql: str, where: str, *, binary: str | None, timeout_s: float
) -> pl.DataFrame:
    """Run ``sql`` with trace_processor on ``path``; the last statement's rows."""
    check_timeout(timeout_s)
    exe = check_binary(binary)
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    config = TraceProcessorConfig(bin_path=exe, load_timeout=int(max(LOAD_TIMEOUT_S, timeout_s)))
    result = pl.DataFrame()
    try:
        with TraceProcessor(trace=path, config=config) as tp:
            for statement in split_statements(sql):
                try:
                    it = tp.query(statement.text)
                except Exception as exc:  # the package raises its own exception types
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else "failed"
                    raise QueryError(f"{where}:{statement.line}: {first}") from None
                result = it.as_polars_dataframe()
    except QueryError:
        raise
    except Exception as exc:
        raise QueryError(f"{path}: trace processor failed: {exc}") from None
    return result
