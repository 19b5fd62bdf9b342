"""Which steps serve: the one rule every figure of serving steps reads.

A step that holds engine warm-up (autotuning, compilation, CUDA-graph capture) is marked in
the steps table's nullable text column ``warmup`` (its cause; null for a serving step). A
steps table without that column has no marked warm-up: every row serves.
"""

from __future__ import annotations

import polars as pl

WARMUP = "warmup"  # the steps table's column: the step's warm-up cause, null when it serves


def serving_steps(table: pl.DataFrame) -> pl.DataFrame:
    """The rows of a steps table that serve: those whose ``warmup`` is null where the
    column exists, else every row (in the table's order, every column kept)."""
    if WARMUP not in table.columns:
        return table
    return table.filter(pl.col(WARMUP).is_null())
