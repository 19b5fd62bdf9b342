"""``traceview scan``: many runs' traces into one Parquet dataset.

Layout (one Parquet file per trace in each table, named by the trace's content hash)::

    DATASET/traces/<trace_id>.parquet    one row: path, hash, size, mtime, rank, engine, ...
    DATASET/steps/<trace_id>.parquet     the steps table + trace_id, rank
    DATASET/families/<trace_id>.parquet  kernel time per family + trace_id, rank
    DATASET/gaps/<trace_id>.parquet      the decode gaps + trace_id, rank
    DATASET/errors/<trace_id>.parquet    a trace that could not be analysed: path, error

Read it with ``pl.scan_parquet("DATASET/steps/**/*.parquet")`` or DuckDB's
``read_parquet('DATASET/steps/*.parquet')``. Every file of a table has the same columns.

- **Incremental**: a trace whose content hash is already in ``traces/`` is skipped; a file
  whose path, size and mtime match a scanned row is skipped without reading it again.
- **Interruptible**: a trace's files are written to ``DATASET/.tmp/`` and renamed into
  place, its ``traces/`` row last: a killed scan leaves whole files only, and a trace
  without its ``traces/`` row is simply scanned again.
- A trace that fails becomes a row in ``errors/`` and the scan goes on. The user's traces
  are only ever read.
- ``engine="ray"`` runs the same per-trace task on a Ray cluster (``RAY_ADDRESS`` or
  ``address``, else a local one); the rows are the same as the local engine's.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import polars as pl

from traceview.analysis.families import Rules, load_rules
from traceview.analysis.figures import trace_figures
from traceview.analysis.run import discover, rank_of, step_work
from traceview.analysis.stats import median_ns
from traceview.analysis.step_candidates import StepOptions
from traceview.analysis.steps import find_steps
from traceview.analysis.summary import build
from traceview.errors import MissingDependencyError, TraceviewError
from traceview.load import LoadOptions, load

TABLES = ("traces", "steps", "families", "gaps", "errors")
_HASH_CHUNK = 8 << 20


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """How to analyse each trace (as :func:`traceview.summarize`) and where to write."""

    preset: str = "default"
    rules_file: str | None = None
    steps: StepOptions = StepOptions()


@dataclass
class ScanReport:
    """What a scan did: traces scanned, skipped (already in the dataset), failed."""

    scanned: list[str]
    skipped: list[str]
    failed: list[tuple[str, str]]
    seconds: float


def content_hash(path: str | os.PathLike[str]) -> str:
    """The trace's identity in the dataset: BLAKE2b (128 bits) of its bytes, as hex."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _write(dataset: Path, table: str, trace_id: str, df: pl.DataFrame) -> None:
    """Write one table's file for one trace: to .tmp/, then renamed into place."""
    tmp = dataset / ".tmp" / f"{table}.{trace_id}.{uuid.uuid4().hex}.parquet"
    df.write_parquet(tmp)
    os.replace(tmp, dataset / table / f"{trace_id}.parquet")


def _engine_of(annotations: list[str]) -> str | None:
    """Which engine wrote the step annotations, where they say."""
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


def scan_trace(path: str, dataset: str, options: ScanOptions) -> dict[str, Any]:
    """Scan one trace into the dataset (the work of one task). Returns a status row:
    ``path``, ``trace_id``, ``status`` (scanned | skipped | failed), ``error``."""
    out = Path(dataset)
    p = Path(path)
    stat = p.stat()
    trace_id = content_hash(p)
    if (out / "traces" / f"{trace_id}.parquet").exists():
        return {"path": path, "trace_id": trace_id, "status": "skipped", "error": None}
    try:
        trace = load(p, options=LoadOptions(cache=False))  # read once: no cache entry
        if trace.kernels.height == 0:
            raise TraceviewError(f"{path}: no device activity (a CPU-only trace)")
        rules = load_rules(options.preset, options.rules_file)
        result = find_steps(trace, rules, options.steps)
        summary = build(rules, result)
    except TraceviewError as exc:
        err = pl.DataFrame(
            {"trace_id": [trace_id], "path": [str(p.resolve())], "error": [str(exc)]}
        )
        _write(out, "errors", trace_id, err)
        return {"path": path, "trace_id": trace_id, "status": "failed", "error": str(exc)}
    rank, rank_source = rank_of(trace, path)
    ids = [pl.lit(trace_id).alias("trace_id"), pl.lit(rank, dtype=pl.Int64).alias("rank")]
    work = step_work(result).select("compute_ns", "collective_ns")
    steps = pl.concat([summary.steps, work], how="horizontal")
    fixed = _family_columns(rules)
    steps = steps.with_columns(
        [pl.lit(0, dtype=pl.Int64).alias(c) for c in fixed if c not in steps.columns]
    ).select(*ids, *[c for c in steps.columns if not c.startswith("ns_")], *fixed)
    _write(out, "steps", trace_id, steps)
    _write(out, "families", trace_id, summary.families.select(*ids, pl.all()))
    _write(out, "gaps", trace_id, summary.gaps.select(*ids, pl.all()))
    doc = summary.to_dict()
    figures = trace_figures(doc)
    annotations = steps["annotation"].drop_nulls().unique().to_list()
    row = {
        "trace_id": trace_id,
        "path": str(p.resolve()),
        "run": str(p.resolve().parent),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "rank": rank,
        "rank_source": rank_source or None,
        "engine": _engine_of(annotations),
        "model": _model_of(trace.meta.extra),
        "gpu": doc["trace"]["gpu"],
        "format": doc["trace"]["format"],
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
    schema = {
        **dict.fromkeys(
            [
                "size",
                "mtime_ns",
                "rank",
                "kernels",
                "span_ns",
                *(k for k, v in figures.items() if k != "busy"),
                "compute_p50_ns",
                "collective_ns",
                "prompt_tokens",
                "decode_tokens",
                "scanned_at_ns",
            ],
            pl.Int64,
        ),
        **dict.fromkeys(
            [
                "trace_id",
                "path",
                "run",
                "rank_source",
                "engine",
                "model",
                "gpu",
                "format",
                "step_method",
            ],
            pl.String,
        ),
        "busy": pl.Float64,
    }
    _write(out, "traces", trace_id, pl.DataFrame([row], schema=schema).select(list(row)))
    stale_error = out / "errors" / f"{trace_id}.parquet"
    if stale_error.exists():  # it failed before and scans now
        stale_error.unlink()
    return {"path": path, "trace_id": trace_id, "status": "scanned", "error": None}


_MODEL_KEYS = re.compile(r"model", re.IGNORECASE)


def _model_of(extra: dict[str, Any]) -> str | None:
    """A model name, where the trace's top-level keys state one (few do)."""
    for key, value in extra.items():
        if _MODEL_KEYS.search(key) and isinstance(value, str):
            return value
    return None


def _known(dataset: Path) -> set[tuple[str, int, int]]:
    """(path, size, mtime_ns) of every trace already in the dataset."""
    files = list((dataset / "traces").glob("*.parquet"))
    if not files:
        return set()
    rows = pl.read_parquet(files, columns=["path", "size", "mtime_ns"])
    return {(p, int(s), int(m)) for p, s, m in rows.iter_rows()}


def scan(
    paths: Sequence[str],
    dataset: str | os.PathLike[str],
    options: ScanOptions | None = None,
    *,
    jobs: int = 1,
    engine: str = "local",
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ScanReport:
    """Scan traces (directories, globs, files) into a Parquet dataset (see the module doc).

    Raises:
        RunError: no trace files among ``paths``.
        TraceviewError: an unknown engine, or a dataset path that is a file.
        MissingDependencyError: ``engine="ray"`` without Ray installed.
    """
    options = options or ScanOptions()
    started = time.monotonic()
    out = Path(dataset)
    if out.exists() and not out.is_dir():
        raise TraceviewError(f"{out}: not a directory (a dataset is a folder)")
    for table in (*TABLES, ".tmp"):
        (out / table).mkdir(parents=True, exist_ok=True)
    files = discover(paths)
    known = _known(out)
    todo, skipped = [], []
    for f in files:
        st = f.stat()
        if (str(f.resolve()), st.st_size, st.st_mtime_ns) in known:
            skipped.append(str(f))
        else:
            todo.append(str(f))
    if engine == "local":
        statuses = _run_local(todo, str(out), options, jobs, progress)
    elif engine == "ray":
        statuses = _run_ray(todo, str(out), options, address, progress)
    else:
        raise TraceviewError(f"unknown scan engine {engine!r} (local or ray)")
    for leftover in (out / ".tmp").glob("*"):  # an interrupted earlier scan's pieces
        leftover.unlink(missing_ok=True)
    return ScanReport(
        scanned=[s["path"] for s in statuses if s["status"] == "scanned"],
        skipped=skipped + [s["path"] for s in statuses if s["status"] == "skipped"],
        failed=[(s["path"], s["error"]) for s in statuses if s["status"] == "failed"],
        seconds=time.monotonic() - started,
    )


def _run_local(
    todo: list[str],
    dataset: str,
    options: ScanOptions,
    jobs: int,
    progress: Callable[[int, int], None] | None,
) -> list[dict[str, Any]]:
    statuses = []
    if jobs <= 1 or len(todo) <= 1:
        for i, path in enumerate(todo):
            statuses.append(scan_trace(path, dataset, options))
            if progress:
                progress(i + 1, len(todo))
        return statuses
    with ProcessPoolExecutor(
        max_workers=min(jobs, len(todo)), mp_context=get_context("spawn")
    ) as pool:
        futures = [pool.submit(scan_trace, path, dataset, options) for path in todo]
        for i, fut in enumerate(as_completed(futures), start=1):
            statuses.append(fut.result())
            if progress:
                progress(i, len(todo))
    return statuses


def _run_ray(
    todo: list[str],
    dataset: str,
    options: ScanOptions,
    address: str | None,
    progress: Callable[[int, int], None] | None,
) -> list[dict[str, Any]]:
    try:
        import ray
    except ImportError:
        raise MissingDependencyError(
            "traceview scan --engine ray needs Ray: pip install 'traceview[ray]'"
        ) from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS") or None,
            include_dashboard=False,
            log_to_driver=False,
        )
    try:
        task = ray.remote(scan_trace)
        pending = [task.remote(path, dataset, options) for path in todo]
        statuses = []
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            statuses.extend(ray.get(done))
            if progress:
                progress(len(statuses), len(todo))
        return statuses
    finally:
        if started_here:
            ray.shutdown()
