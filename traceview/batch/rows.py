"""A scanned trace's rows: its ``traces/`` row and its steps, families and gaps tables
(each column defined in docs/datasets.md)."""

from __future__ import annotations

import re
import time
from typing import Any, Protocol

import polars as pl

from traceview.analysis.base.stats import median_ns
from traceview.analysis.classify.families import Rules
from traceview.analysis.documents.figures import trace_figures
from traceview.analysis.documents.run import step_work
from traceview.analysis.documents.summary import Summary
from traceview.analysis.steps.find import StepResult
from traceview.analysis.work.efficiency import STEP_WORK_COLUMNS
from traceview.model import Trace


def _engine_of(annotations: list[str]) -> str | None:
    """Which engine wrote the step annotations, where they say (SGLang's ``step[…]``
    decides: its newer builds wrap it in an ``execute_…`` range, as vLLM names a step)."""
    if any(a.startswith("step[") for a in annotations):
        return "sglang"
    if any(a.startswith("execute_") for a in annotations):
        return "vllm"
    if any(a.startswith("ProfilerStep#") for a in annotations):
        return "torch.profiler"
    return None


def _family_columns(rules: Rules) -> list[str]:
    """Every family the rules can name (and other): the steps tables' fixed ns_ columns."""
    names = {r.family for r in rules.rules} | {"other"}
    return [f"ns_{n}" for n in sorted(names)]


_MODEL_KEYS = re.compile(r"model", re.IGNORECASE)


def _model_of(extra: dict[str, Any]) -> str | None:
    """A model name, where the trace's top-level keys state one (few do)."""
    for key, value in extra.items():
        if _MODEL_KEYS.search(key) and isinstance(value, str):
            return value
    return None


class Scanned(Protocol):
    """What a ``traces/`` row says of the trace's file or object (:class:`.scan.Source`)."""

    @property
    def row_path(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def mtime_ns(self) -> int | None: ...

    @property
    def version(self) -> str | None: ...


def trace_row(
    trace_id: str,
    source: Scanned,
    run: str,
    trace: Trace,
    summary: Summary,
    work: pl.DataFrame,
    rank: int | None,
    rank_source: str,
) -> pl.DataFrame:
    """The trace's one ``traces/`` row (``source``: the file's size and mtime, read before
    its bytes were hashed into ``trace_id``, so they describe that content, or the object's
    size and version; ``work``: :func:`step_work`'s per-step table)."""
    doc = summary.to_dict()
    figures = trace_figures(doc)
    annotations = summary.steps["annotation"].drop_nulls().unique().to_list()
    # newer SGLang wraps its step[…] in an execute_… range that the steps are named by (as
    # vLLM's detailed one is): the inner one, anywhere in the trace, says which engine
    names = trace.events.filter(pl.col("event_kind") == "user_annotation")["name"].cast(pl.String)
    annotations += names.filter(names.str.starts_with("step[")).head(1).to_list()
    row: dict[str, Any] = {
        "trace_id": trace_id,
        "path": source.row_path,
        "run": run,
        "size": source.size,
        "mtime_ns": source.mtime_ns,
        "version": source.version,
        "rank": rank,
        "rank_source": rank_source or None,
        "engine": _engine_of(annotations),
        "model": _model_of(trace.meta.extra),
        "gpu": doc["trace"]["gpu"],
        "format": doc["trace"]["format"],
        # a truncated trace: its complete events only, its text cut at this byte
        "truncated": trace.meta.truncated_at is not None,
        "truncated_at_byte": trace.meta.truncated_at,
        "kernels": doc["trace"]["kernels"],
        "span_ns": doc["trace"]["span_ns"],
        "step_method": doc["steps"]["method"],
        **figures,
        "compute_p50_ns": median_ns(work["compute_ns"]),
        "collective_ns": int(work["collective_ns"].sum()),
        "prompt_tokens": doc["work"]["prompt_tokens"],
        "decode_tokens": doc["work"]["decode_tokens"],
        "scanned_at_ns": time.time_ns(),
    }
    strings: tuple[str, ...] = ("trace_id", "path", "run", "version", "rank_source", "engine")
    strings += ("model", "gpu", "format", "cost_decode_reason")
    floats: tuple[str, ...] = ("busy", "cost_decode_fixed_ns", "cost_decode_per_sequence_ns")
    floats += ("cost_decode_r2", "cost_decode_fixed_low_ns", "cost_decode_fixed_high_ns")
    floats += ("cost_decode_per_sequence_low_ns", "cost_decode_per_sequence_high_ns")
    types: dict[str, pl.DataType] = {k: pl.Float64() for k in floats}
    types["truncated"] = pl.Boolean()
    types.update({k: pl.String() for k in (*strings, "step_method")})
    schema = {k: types.get(k, pl.Int64()) for k in row}
    return pl.DataFrame([row], schema=schema)


def table_rows(
    trace_id: str, run: str, rank: int | None, rules: Rules, summary: Summary, result: StepResult
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The trace's ``steps/``, ``families/`` and ``gaps/`` frames, and its per-step work."""
    ids = [
        pl.lit(trace_id).alias("trace_id"),
        pl.lit(run, dtype=pl.String).alias("run"),
        pl.lit(rank, dtype=pl.Int64).alias("rank"),
    ]
    work = step_work(result).select("compute_ns", "collective_ns", "serving")
    steps = pl.concat([summary.steps, work.drop("serving")], how="horizontal")
    fixed = _family_columns(rules)
    steps = steps.with_columns(
        [pl.lit(0, dtype=pl.Int64).alias(c) for c in fixed if c not in steps.columns]
        # every file has the same columns: the model's per-step work is null without one
        + [pl.lit(None, dtype=t).alias(c) for c, t in STEP_WORK_COLUMNS.items() if c not in steps]
    ).select(
        *ids,
        *[c for c in steps.columns if not c.startswith("ns_") and c not in STEP_WORK_COLUMNS],
        *STEP_WORK_COLUMNS,
        *fixed,
    )
    families = summary.families.select(*ids, pl.all())
    gaps = summary.decode_gaps.select(*ids, pl.all())
    # the traces/ row's per-step figures leave the warm-up steps out, as the summary does
    return steps, families, gaps, work.filter(pl.col("serving")).drop("serving")
