"""One name, one meaning: every figure the scan dataset's ``traces/`` rows, the run document's
rank rows and the summary share by name is the same population and the same value in each,
on hybrid_chunked (a decode/mixed/decode trace) and on the real 8-rank run. The summary's
side is computed here from its own tables, by each name's definition (docs/datasets.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import traceview as tv
from tests.conftest import GENERATED, SHARED_TRACES
from traceview.analysis.documents.summary import Summary
from traceview.batch.scan import scan

DLRM = SHARED_TRACES / "param" / "dlrm_8rank"


def _pop(s: Summary, population: str) -> dict[str, int | None]:
    g = next(g for g in s.document["decode_gaps"] if g["population"] == population)
    gaps = s.decode_gaps
    if population != "all":
        gaps = gaps.filter(pl.col("population") == population)
    assert g["n"] == gaps.height  # the row is the population it names
    return dict(g)


def _inside(s: Summary, kind: str) -> np.ndarray:
    """Intervals of steps of ``kind`` whose previous step is in the same phase."""
    t = s.steps
    keep = [
        i for i in range(1, t.height) if t["kind"][i] == kind and t["phase"][i] == t["phase"][i - 1]
    ]
    return t["interval_ns"].gather(keep).to_numpy()


def _q(values: np.ndarray, q: float) -> int | None:
    return int(np.rint(np.percentile(values, q))) if values.size else None


def _ci(s: Summary, term: str, end: str) -> float | None:
    ci = s.document["cost"]["decode"][f"{term}_ci95"]  # type: ignore[literal-required]
    return None if ci is None else ci[end]


# name -> its value, from the summary's own tables and document, by definition
DEFINITIONS: dict[str, Callable[[Summary], object]] = {
    "steps": lambda s: s.steps.height,
    "cadence_p50_ns": lambda s: _q(s.steps["interval_ns"].drop_nulls().to_numpy(), 50),
    "cadence_p99_ns": lambda s: _q(s.steps["interval_ns"].drop_nulls().to_numpy(), 99),
    "decode_cadence_n": lambda s: _inside(s, "decode").size,
    "decode_cadence_p50_ns": lambda s: _q(_inside(s, "decode"), 50),
    "decode_cadence_p99_ns": lambda s: _q(_inside(s, "decode"), 99),
    "mixed_cadence_n": lambda s: _inside(s, "mixed").size,
    "mixed_cadence_p50_ns": lambda s: _q(_inside(s, "mixed"), 50),
    "mixed_cadence_p99_ns": lambda s: _q(_inside(s, "mixed"), 99),
    "decode_gaps_n": lambda s: _pop(s, "decode")["n"],
    "decode_gap_p50_ns": lambda s: _pop(s, "decode")["p50_ns"],
    "decode_gap_p99_ns": lambda s: _pop(s, "decode")["p99_ns"],
    "busy": lambda s: s.document["busy"]["fraction"],
    "cost_decode_n": lambda s: s.document["cost"]["decode"]["n"],
    "cost_decode_fixed_ns": lambda s: s.document["cost"]["decode"]["fixed_ns"],
    "cost_decode_per_sequence_ns": lambda s: s.document["cost"]["decode"]["per_sequence_ns"],
    "cost_decode_r2": lambda s: s.document["cost"]["decode"]["r2"],
    "cost_decode_fixed_low_ns": lambda s: _ci(s, "fixed", "low_ns"),
    "cost_decode_fixed_high_ns": lambda s: _ci(s, "fixed", "high_ns"),
    "cost_decode_per_sequence_low_ns": lambda s: _ci(s, "per_sequence", "low_ns"),
    "cost_decode_per_sequence_high_ns": lambda s: _ci(s, "per_sequence", "high_ns"),
    "cost_decode_idle_left_out": lambda s: s.document["cost"]["decode"]["idle_left_out"],
    "cost_decode_reason": lambda s: s.document["cost"]["decode"]["reason"],
    "kernels": lambda s: s.document["trace"]["kernels"],
    "span_ns": lambda s: s.document["trace"]["span_ns"],
    "prompt_tokens": lambda s: s.document["work"]["prompt_tokens"],
    "decode_tokens": lambda s: s.document["work"]["decode_tokens"],
    "gpu": lambda s: s.document["trace"]["gpu"],
    "format": lambda s: s.document["trace"]["format"],
    "step_method": lambda s: s.document["steps"]["method"],
    "collective_ns": lambda s: (
        int(s.steps["ns_communication"].sum()) if "ns_communication" in s.steps.columns else 0
    ),
}
# columns of traces/ that are about the file or the dataset, not a figure of the trace
NOT_FIGURES = {"trace_id", "path", "run", "size", "mtime_ns", "version", "scanned_at_ns"}
NOT_FIGURES |= {"engine", "model"}
# names the run document and the scan share that need the rank's per-step work
RUN_ONLY = {"rank", "rank_source", "compute_p50_ns"}
# names of the file's state the loader reports (trace.meta.truncated_at), checked below
LOADED = {"truncated", "truncated_at_byte"}


@pytest.mark.slow  # about 2-3 s; CI runs it (the default run stays under 2 minutes)
@pytest.mark.parametrize(
    "inputs",
    [
        pytest.param([GENERATED / "hybrid_chunked.json.gz"], id="hybrid_chunked"),
        # a decode fit of its own (hybrid_chunked's decode runs one batch size: null)
        pytest.param([GENERATED / "cost_wandering.json.gz"], id="cost_wandering"),
        pytest.param(
            sorted(DLRM.glob("*.json.gz")),
            id="dlrm_8rank",
            marks=pytest.mark.skipif(not DLRM.is_dir(), reason="../shared/traces not present"),
        ),
    ],
)
def test_shared_names_mean_the_same_in_summary_run_and_scan(
    inputs: list[Path], tmp_path: Path
) -> None:
    scan([str(p) for p in inputs], tmp_path / "ds")
    rows = pl.read_parquet(tmp_path / "ds" / "traces" / "*.parquet")
    assert rows.height == len(inputs)
    run = tv.summarize_run([str(p) for p in inputs]).to_dict()
    unknown = set(rows.columns) - set(DEFINITIONS) - NOT_FIGURES - RUN_ONLY - LOADED
    assert not unknown, f"traces/ columns with no definition here: {unknown}"
    checked = 0
    for row in rows.iter_rows(named=True):
        path = Path(row["path"])
        trace = tv.load(path)
        summary = tv.summarize(trace)
        rank = next(r for r in run["ranks"] if Path(r["path"]).resolve() == path)
        for name, definition in DEFINITIONS.items():
            expected = definition(summary)
            assert row[name] == expected, f"{path.name}: traces/{name}"
            if name in rank:
                assert rank[name] == expected, f"{path.name}: run ranks[].{name}"
                checked += 1
        assert row["compute_p50_ns"] == rank["compute_p50_ns"]
        cut = trace.meta.truncated_at
        assert (row["truncated"], row["truncated_at_byte"]) == (cut is not None, cut)
        assert (rank["truncated"], rank["truncated_at_byte"]) == (cut is not None, cut)
        if rank["rank_source"] == "order":  # the run numbers ranks no trace states
            assert row["rank"] is None and row["rank_source"] is None
        else:
            assert (row["rank"], row["rank_source"]) == (rank["rank"], rank["rank_source"])
        by_kind = summary.document["steps"]["cadence_by_kind"]
        for kind in ("decode", "mixed"):
            assert by_kind[kind]["p50_ns"] == row[f"{kind}_cadence_p50_ns"]
            assert rank["cadence_by_kind"][kind]["p50_ns"] == row[f"{kind}_cadence_p50_ns"]
    assert checked >= 17 * len(inputs)


def test_the_decode_gaps_table_has_one_name() -> None:
    """``decode_gaps`` is the table (``tv.decode_gaps``, ``Analysis.decode_gaps``,
    ``Summary.decode_gaps``); ``gaps`` draws the chart (``Analysis.gaps()``,
    ``tv.plot.gaps``). ``Summary.gaps`` still gives the table for one release, and warns."""
    a = tv.analyze(str(GENERATED / "hybrid_chunked.json.gz"))
    table = a.summary.decode_gaps
    assert table.height > 0 and a.decode_gaps is table
    assert tv.decode_gaps(a.trace).equals(table)
    with pytest.warns(DeprecationWarning, match="Summary.gaps is deprecated.*Summary.decode_gaps"):
        assert a.summary.gaps is table
