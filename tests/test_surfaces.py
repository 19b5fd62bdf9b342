"""One figure, one value, on every surface (issue 33).

Each trace's figures are read through every surface that shows them — the analysis object,
the module-level shortcuts, ``summarize --json``, ``steps --format csv``, the run
document's rank row, the scan dataset's ``traces/`` row and ``diff``'s rows — and must
agree with the summary document (floats within 1e-9 relative: the same computation, but
never compared byte for byte). The names the run and the dataset use are stated here, each
with the summary field it must equal (docs/datasets.md gives the same table), so a name
that drifts to another population fails.
"""

from __future__ import annotations

import io
import json
import math
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import GENERATED, ROOT

import traceview as tv
from traceview.analysis.documents.checks import lookup
from traceview.cli import cli

SHARED = ROOT.parent / "shared" / "traces"

# the figure names a run's rank rows and a dataset's traces/ rows use, and the summary
# field each equals (docs/datasets.md)
FIGURE_FIELDS = {
    "steps": "steps.count",
    "cadence_p50_ns": "steps.cadence.p50_ns",
    "cadence_p99_ns": "steps.cadence.p99_ns",
    "decode_cadence_n": "steps.cadence_by_kind.decode.n",
    "decode_cadence_p50_ns": "steps.cadence_by_kind.decode.p50_ns",
    "decode_cadence_p99_ns": "steps.cadence_by_kind.decode.p99_ns",
    "mixed_cadence_n": "steps.cadence_by_kind.mixed.n",
    "mixed_cadence_p50_ns": "steps.cadence_by_kind.mixed.p50_ns",
    "mixed_cadence_p99_ns": "steps.cadence_by_kind.mixed.p99_ns",
    "decode_gaps_n": "decode_gaps.decode.n",
    "decode_gap_p50_ns": "decode_gaps.decode.p50_ns",
    "decode_gap_p99_ns": "decode_gaps.decode.p99_ns",
    "busy": "busy.fraction",
    "cost_decode_n": "cost.decode.n",
    "cost_decode_fixed_ns": "cost.decode.fixed_ns",
    "cost_decode_per_sequence_ns": "cost.decode.per_sequence_ns",
    "cost_decode_r2": "cost.decode.r2",
}


FIXTURES = sorted(GENERATED.glob("*.json.gz"))
SHARED_TRACES = sorted(SHARED.glob("*/*.json.gz")) if SHARED.is_dir() else []


def same(a: object, b: object, where: str = "") -> None:
    """Nested equality, floats within 1e-9 relative (inf and nan as themselves)."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, int | float) and isinstance(b, int | float), where
        if math.isnan(a) or math.isnan(b):
            assert math.isnan(a) and math.isnan(b), where
        else:
            assert a == pytest.approx(b, rel=1e-9), where
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def at(doc: object, field: str) -> object:
    found = lookup(doc, field)
    assert len(found) == 1, field
    return found[0][1]


def frames_equal(a: pl.DataFrame, b: pl.DataFrame) -> None:
    from polars.testing import assert_frame_equal

    assert_frame_equal(a, b, check_exact=False, rel_tol=1e-9)


def capture_only_surfaces(path: Path, a: tv.Analysis) -> None:
    """A trace of CUDA-graph capture alone: its 0-step document is the same through the
    API, the shortcuts and ``summarize --json``; ``steps`` has no rows."""
    doc = a.summary.to_dict()
    assert doc["steps"]["count"] == 0 and a.steps.height == 0 and a.busy.height == 0
    same(tv.summarize(tv.load(path)).to_dict(), doc, "tv.summarize")
    out = CliRunner().invoke(cli, ["summarize", "--json", str(path)])
    assert out.exit_code == 0, out.output
    same(json.loads(out.stdout), doc, "summarize --json")


def every_surface(path: Path, tmp: Path) -> None:
    a = tv.analyze(path)
    doc = a.summary.to_dict()
    if doc["steps"]["method"] == "none":
        capture_only_surfaces(path, a)
        return
    # the shortcuts read the same analysis
    same(tv.summarize(tv.load(path)).to_dict(), doc, "tv.summarize")
    t = a.trace
    frames_equal(tv.steps(t), a.steps)
    frames_equal(tv.decode_gaps(t), a.decode_gaps)
    frames_equal(tv.families(t), a.families)
    frames_equal(tv.busy(t), a.busy)
    # the tables agree with the document (the steps table keeps the warm-up steps' rows)
    warm = doc["warmup"]
    assert a.steps.height == doc["steps"]["count"] + (0 if warm["kept"] else warm["steps"])
    fams = {r["family"]: (r["count"], r["total_ns"]) for r in doc["families"]}
    assert {r["family"]: (r["count"], r["total_ns"]) for r in a.families.to_dicts()} == fams
    kern = a.kernels.group_by("family").agg(pl.col("count").sum(), pl.col("total_ns").sum())
    assert {r["family"]: (r["count"], r["total_ns"]) for r in kern.to_dicts()} == fams
    busy = a.busy.row(0, named=True)
    same(busy["fraction"], doc["busy"]["fraction"], "busy.fraction")
    assert busy["busy_ns"] == doc["busy"]["busy_ns"]
    assert (busy["window_start_ns"], busy["window_end_ns"]) == (
        doc["busy"]["window_start_ns"],
        doc["busy"]["window_end_ns"],
    )
    gaps = at(doc, "decode_gaps.decode")
    assert isinstance(gaps, dict)
    assert gaps["n"] == a.decode_gaps.filter(pl.col("population") == "decode").height
    # the CLI's document and steps table
    runner = CliRunner()
    out = runner.invoke(cli, ["summarize", "--json", str(path)])
    assert out.exit_code == 0, out.output
    same(json.loads(out.stdout), doc, "summarize --json")
    out = runner.invoke(cli, ["steps", "--format", "csv", str(path)])
    assert out.exit_code == 0, out.output
    csv = pl.read_csv(io.StringIO(out.stdout), infer_schema_length=None)
    assert csv.columns == a.steps.columns
    for column in ("index", "start_ns", "anchor_ns", "end_ns", "kind", "busy_ns"):
        assert csv[column].to_list() == a.steps[column].to_list(), column
    # the run's rank row
    run = tv.summarize_run([str(path)], tv.RunOptions(jobs=1)).to_dict()
    (rank,) = run["ranks"]
    for name, field in FIGURE_FIELDS.items():
        same(rank[name], at(doc, field), f"rank row {name}")  # type: ignore[literal-required]
    # the dataset's traces/ row
    dataset = tmp / "ds"
    tv.scan([str(path)], dataset, tv.ScanOptions(jobs=1))
    rows = pl.read_parquet(dataset / "traces" / "*.parquet")
    assert rows.height == 1
    for name, field in FIGURE_FIELDS.items():
        same(rows[name][0], at(doc, field), f"traces/ row {name}")
    # diff's rows: A and B are the values at the field each names
    d = tv.diff(a.summary, a.summary)
    for r in d.rows.iter_rows(named=True):
        if r["field"] and not r["field"].endswith("(max)"):
            value = at(doc, r["field"])
            assert isinstance(value, int | float | None), r["field"]
            same(r["a"], None if value is None else float(value), r["field"])


# the default run reads two fixtures through every surface (chunked prefill, capture alone);
# CI's slow run reads every one of them
DEFAULT = ("hybrid_chunked", "sglang_capture_only")


@pytest.mark.parametrize(
    "path",
    [
        p if p.name.removesuffix(".json.gz") in DEFAULT else pytest.param(p, marks=pytest.mark.slow)
        for p in FIXTURES
    ],
    ids=lambda p: p.name.removesuffix(".json.gz"),
)
def test_every_surface_gives_the_summarys_figures(path: Path, tmp_path: Path) -> None:
    every_surface(path, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    "path", SHARED_TRACES, ids=lambda p: f"{p.parent.name}/{p.name.removesuffix('.json.gz')}"
)
def test_every_surface_on_the_shared_traces(path: Path, tmp_path: Path) -> None:
    every_surface(path, tmp_path)


def test_capture_then_serve_busy_and_families_leave_capture_out() -> None:
    """Issue 33: ``tv.busy`` gave 0.674 and ``tv.families`` counted 200 activation kernels
    on this trace (the capture kernels and another window), while the summary gave 0.813
    and 168. Both read the summary now; the planted truth is the summary's."""
    path = GENERATED / "vllm_capture_then_serve.json.gz"
    truth = json.loads(path.with_name("vllm_capture_then_serve.truth.json").read_text())
    t = tv.load(path)
    assert tv.busy(t)["fraction"][0] == pytest.approx(truth["busy"]["fraction"], rel=1e-9)
    fams = {r["family"]: r["count"] for r in tv.families(t).to_dicts()}
    assert fams["activation"] == truth["families"]["activation"]["count"] == 168
    assert truth["in_trace"]["families"]["activation"]["count"] == 200  # capture included


def test_the_steps_are_found_once_per_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every accessor of one analysis reads one step finding."""
    import traceview.analysis.analyze as analyze_module

    calls = []
    real = analyze_module.find_steps

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(analyze_module, "find_steps", counting)
    a = tv.analyze(GENERATED / "hybrid_chunked.json.gz")
    _ = (a.steps, a.families, a.kernels, a.busy, a.decode_gaps, a.idle, a.summary)
    start = int(a.busy["window_start_ns"][0])
    _ = (a.families_rollup, a.busy_between(start, start + 1))
    assert len(calls) == 1


def test_a_fixture_copy_keeps_its_figures(tmp_path: Path) -> None:
    """The dataset row names its trace by path: a copy elsewhere gives the same figures
    (the figures do not depend on where the file lies)."""
    src = GENERATED / "hybrid_chunked.json.gz"
    copy = tmp_path / "copy.json.gz"
    shutil.copy(src, copy)
    one, two = tv.analyze(src).summary.to_dict(), tv.analyze(copy).summary.to_dict()
    one["trace"]["path"] = two["trace"]["path"] = ""
    same(one, two)
