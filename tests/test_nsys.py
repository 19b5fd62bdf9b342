"""Nsight Systems SQLite exports load into the same model: every summary figure equals the
plan's, and the same plan written as Kineto JSON summarizes the same, figure for figure."""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import GENERATED
from test_analysis import check_against_truth

import traceview as tv
from fixtures import nsys
from fixtures.engine import RECORD_COLUMNS, build
from fixtures.truth import truth as plan_truth
from traceview.cli import cli
from traceview.loader import nsys as loader

NSYS = GENERATED / "nsys"
SINGLE = [nsys.VLLM, nsys.BURSTS]


def _truth(name: str) -> dict[str, Any]:
    return json.loads((NSYS / f"{name}.truth.json").read_text())


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Two summaries equal figure for figure, the trace's path, format and event count
    aside (an export counts table rows, a Kineto trace its events and flows)."""
    ta, tb_ = a.pop("trace"), b.pop("trace")
    for key in ("path", "format", "events", "devices"):
        ta.pop(key), tb_.pop(key)
    assert ta == tb_
    assert a == b


@pytest.mark.parametrize("sc", SINGLE, ids=lambda s: s.name)
def test_summary_equals_planted_truth(sc) -> None:  # type: ignore[no-untyped-def]
    t = _truth(sc.name)
    trace = tv.load(NSYS / f"{sc.name}.sqlite")
    assert trace.meta.format == "nsys" and trace.meta.events == t["events"]
    summary = tv.summarize(trace)
    doc = summary.to_dict()
    check_against_truth(doc, t)
    assert doc["steps"]["method"] == ("annotations" if sc.annotations != "none" else "bursts")
    if sc.annotations != "none":  # the NVTX step ranges are the engine's record
        assert doc["steps"]["disagreements"] == 0
        assert summary.steps["annotation"].to_list() == [s["annotation"] for s in t["steps"]]
    for col in ("kind", "kind_source", *RECORD_COLUMNS):
        assert summary.steps[col].to_list() == [s[col] for s in t["steps"]], col
    kinds = {s["planned_kind"] for s in t["steps"]}
    assert kinds == {"decode", "prefill", "mixed"}
    # the device's peaks are matched from TARGET_INFO_GPU, as from Kineto's deviceProperties
    assert doc["efficiency"]["gpu"]["name"] == "NVIDIA H200 SXM"


@pytest.mark.parametrize("sc", SINGLE, ids=lambda s: s.name)
def test_same_plan_as_kineto_summarizes_identically(tmp_path: Path, sc) -> None:  # type: ignore[no-untyped-def]
    tb, _ = build(sc)
    kineto = tv.load(tb.write(tmp_path / "t.json.gz"))
    export = tv.load(NSYS / f"{sc.name}.sqlite")
    _same(tv.summarize(kineto).to_dict(), tv.summarize(export).to_dict())
    assert tv.steps(kineto).equals(tv.steps(export))
    assert kineto.kernels.drop("external_id").equals(export.kernels.drop("external_id"))
    assert kineto.meta.device_properties[0].items() <= export.meta.device_properties[0].items()


def test_two_gpus_in_two_processes(tmp_path: Path) -> None:
    """Each device's summary is its process's plan, and the same as that process's own
    Kineto trace; correlation ids repeat across the processes, so the trace's correlation
    key carries the pid and a kernel joins only its own process's launch."""
    trace = tv.load(NSYS / "nsys_two_gpus.sqlite")
    assert trace.devices == [0, 1]
    pids = dict(zip((0, 1), nsys.RANK_PIDS, strict=True))
    for sc in nsys.RANKS:
        t = _truth(sc.name)
        doc = tv.summarize(trace, tv.AnalysisConfig(device=sc.device)).to_dict()
        check_against_truth(doc, t)
        assert doc["steps"]["method"] == "annotations" and doc["steps"]["disagreements"] == 0
        tb, _ = build(sc)
        own = tv.summarize(tv.load(tb.write(tmp_path / f"{sc.device}.json.gz"))).to_dict()
        _same(own, doc)
        k = trace.kernels.filter(pl.col("device") == sc.device)
        assert (k["correlation"] // 2**32).unique().to_list() == [pids[sc.device]]
    raw = trace.kernels["correlation"] % 2**32
    assert (
        raw.filter(trace.kernels["device"] == 0)
        .is_in(raw.filter(trace.kernels["device"] == 1).implode())
        .any()
    )  # the ids do repeat
    launches = trace.events.filter(pl.col("event_kind").is_in(["runtime", "driver"]))
    assert set(launches["pid"].unique().to_list()) == set(nsys.RANK_PIDS)
    assert ((launches["correlation"] // 2**32) == launches["pid"].cast(pl.Int64)).all()


def test_tables_map_as_documented() -> None:
    trace = tv.load(NSYS / "nsys_vllm.sqlite")
    names = set(trace.kernels["name"].cast(str).to_list())
    # demangledName through StringIds, never shortName
    assert any(n.startswith("void vllm::rms_norm_kernel<") for n in names)
    assert "rms_norm_kernel" not in names
    assert {"Memcpy HtoD (Pinned -> Device)", "Memcpy DtoH (Device -> Pinned)"} <= names
    assert "Memset (Device)" in names
    calls = trace.events.filter(pl.col("event_kind").is_in(["runtime", "driver"]))
    by = dict(calls.group_by("name").agg(pl.col("event_kind").first()).iter_rows())
    assert by == {
        "cudaLaunchKernel": "runtime",
        "cudaGraphLaunch": "runtime",
        "cudaMemcpyAsync": "runtime",
        "cudaMemsetAsync": "runtime",
        "cudaStreamSynchronize": "runtime",
        "cuLaunchKernel": "driver",
    }
    # a graph launch shares its correlation with the kernels it replays
    graphs = calls.filter(pl.col("name") == "cudaGraphLaunch")["correlation"]
    replayed = trace.kernels.filter(pl.col("correlation").is_in(graphs.implode()))
    decode_steps = [s for s in _truth("nsys_vllm")["steps"] if s["planned_kind"] == "decode"]
    assert graphs.len() == len(decode_steps)
    assert replayed.height == sum(s["kernels"] - 3 for s in decode_steps)  # copies are eager
    # pid/tid unpacked from globalTid (whose high bits hold hardware ids)
    assert calls.select("pid", "tid").unique().rows() == [(31_337, 31_337)]
    ranges = trace.events.filter(pl.col("event_kind") == "user_annotation")
    assert ranges.height == len(_truth("nsys_vllm")["steps"])  # NVTX text or textId
    assert ranges["name"].cast(str).str.starts_with("execute_context_").all()
    assert trace.metadata.filter(pl.col("name") == "thread_name")["value"].to_list() == ["python3"]


def _export(path: Path, tables: dict[str, tuple[str, list[tuple[Any, ...]]]]) -> Path:
    con = sqlite3.connect(path)
    for name, (columns, rows) in tables.items():
        con.execute(f"CREATE TABLE {name} ({columns})")
        if rows:
            marks = ", ".join("?" * len(rows[0]))
            con.executemany(f"INSERT INTO {name} VALUES ({marks})", rows)
    con.commit()
    con.close()
    return path


KERNEL = "start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, "
KERNEL += "correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, shortName INTEGER"
NVTX = "start INTEGER, end INTEGER, eventType INTEGER, text TEXT, textId INTEGER, "
NVTX += "globalTid INTEGER"
STRINGS = ("id INTEGER PRIMARY KEY, value TEXT", [(1, "gemm_kernel_full"), (2, "gemm"), (3, "m")])


def test_nvtx_marks_open_ranges_and_raw_args(tmp_path: Path) -> None:
    g = (3 << 48) | (777 << 24) | 779
    path = _export(
        tmp_path / "r.sqlite",
        {
            "StringIds": STRINGS,
            "CUPTI_ACTIVITY_KIND_KERNEL": (KERNEL, [(100, 350, 0, 7, 5, g & ~0xFFFFFF, 1, 2)]),
            "NVTX_EVENTS": (
                NVTX,
                [
                    (50, 400, 59, "step", None, g),
                    (60, None, 34, None, 3, g),
                    (70, None, 60, "open", None, g),
                ],
            ),
        },
    )
    with pytest.warns(tv.TraceviewWarning, match="NVTX range without an end"):
        trace = tv.load(path)
    assert trace.kernels.select("ts_ns", "dur_ns", "name", "stream", "correlation").rows() == [
        (100, 250, "gemm_kernel_full", 7, 5)
    ]
    assert trace.events.select("ts_ns", "dur_ns", "name", "event_kind", "pid", "tid").rows() == [
        (50, 350, "step", "user_annotation", 777, 779),
        (60, 0, "m", "instant", 777, 779),
    ]
    assert trace.meta.skipped_events == 1 and trace.meta.events == 4
    with pytest.warns(tv.TraceviewWarning, match="NVTX range without an end"):
        raw = tv.load(path, options=tv.LoadOptions(raw_args=True, cache=False))
    args = json.loads(raw.kernels["args_json"][0])
    assert args["device"] == 0 and args["correlation"] == 5 and args["grid"] == [None] * 3


def test_an_nvtx_range_that_ends_before_it_starts_is_said_so(tmp_path: Path) -> None:
    """A range whose end precedes its start is skipped and counted as such, apart from one
    with no end (a probe found both called "without an end")."""
    g = (1 << 48) | (777 << 24) | 779
    path = _export(
        tmp_path / "r.sqlite",
        {
            "StringIds": STRINGS,
            "CUPTI_ACTIVITY_KIND_KERNEL": (KERNEL, [(100, 350, 0, 7, 5, g & ~0xFFFFFF, 1, 2)]),
            "NVTX_EVENTS": (
                NVTX,
                [(50, 400, 59, "step", None, g), (90, 80, 59, "back", None, g)]
                + [(70, None, 60, "open", None, g)],
            ),
        },
    )
    with pytest.warns(tv.TraceviewWarning) as said:
        trace = tv.load(path, options=tv.LoadOptions(cache=False))
    lines = sorted(str(w.message).split(": ", 1)[1] for w in said)
    assert lines == [
        "1 event skipped: NVTX range that ends before it starts",
        "1 event skipped: NVTX range without an end",
    ]
    assert trace.events["name"].to_list() == ["step"]


def test_processes_that_share_a_device_id_are_said(tmp_path: Path) -> None:
    a, b = (1 << 48) | (11 << 24), (1 << 48) | (12 << 24)
    rows = [(100, 200, 0, 7, 1, a, 1, 2), (150, 260, 0, 7, 1, b, 1, 2)]
    path = _export(
        tmp_path / "s.sqlite",
        {"StringIds": STRINGS, "CUPTI_ACTIVITY_KIND_KERNEL": (KERNEL, rows)},
    )
    with pytest.warns(tv.TraceviewWarning, match="processes 11, 12 all report CUDA device 0"):
        trace = tv.load(path)
    assert trace.kernels["correlation"].to_list() == [11 * 2**32 + 1, 12 * 2**32 + 1]


def test_raw_args_carry_grid_block_and_graph_ids() -> None:
    trace = tv.load(NSYS / "nsys_vllm.sqlite", options=tv.LoadOptions(raw_args=True))
    k = trace.kernels.filter(pl.col("event_kind") == "kernel")
    args = [json.loads(a) for a in k["args_json"].to_list()]
    assert {tuple(a["grid"]) for a in args} == {(132, 1, 1)}
    assert {a["registers per thread"] for a in args} == {128}
    assert {a["shared memory"] for a in args} == {32_768}
    graphs = {a["graph id"] for a in args} - {None}
    assert len(graphs) == sum(
        1 for s in _truth("nsys_vllm")["steps"] if s["planned_kind"] == "decode"
    )
    rows = tv.run_sql(
        trace,
        "SELECT EXTRACT_ARG(arg_set_id, 'args.registers per thread') AS r "
        "FROM slice WHERE category = 'kernel' LIMIT 1",
    )
    assert rows["r"].to_list() == [128]


def test_the_export_is_only_read(tmp_path: Path) -> None:
    path = tmp_path / "report.sqlite"
    path.write_bytes((NSYS / "nsys_vllm.sqlite").read_bytes())
    os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    before, stat = path.read_bytes(), path.stat()
    tv.summarize(tv.load(path, options=tv.LoadOptions(cache=False)))
    result = CliRunner().invoke(cli, ["sql", "kernel_families", str(path)])
    assert result.exit_code == 0, result.output
    after = path.stat()
    assert path.read_bytes() == before and after.st_mtime_ns == stat.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.sqlite"]  # no -journal


def test_sql_tables_work_on_an_export() -> None:
    t = _truth("nsys_vllm")
    result = CliRunner().invoke(
        cli, ["sql", "kernel_families", str(NSYS / "nsys_vllm.sqlite"), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    rows = {r["family"]: r for r in json.loads(result.stdout)}
    assert {f: (r["kernels"], r["total_ns"]) for f, r in rows.items()} == {
        f: (v["count"], v["total_ns"]) for f, v in t["families"].items()
    }


def _bad(path: Path) -> str:
    result = CliRunner().invoke(cli, ["summarize", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    return result.stderr


def test_bad_exports_are_one_line(tmp_path: Path) -> None:
    nothing = _export(
        tmp_path / "cpu.sqlite",
        {"StringIds": STRINGS, "NVTX_EVENTS": (NVTX, [(1, 2, 59, "x", None, 1 << 24)])},
    )
    assert _bad(nothing) == (
        f"Error: {nothing}: no kernels or device activity: the export has no CUDA activity "
        "tables (record with nsys profile --trace=cuda,nvtx)\n"
    )
    empty = _export(
        tmp_path / "empty.sqlite",
        {
            "StringIds": STRINGS,
            "CUPTI_ACTIVITY_KIND_KERNEL": (KERNEL, []),
            "CUPTI_ACTIVITY_KIND_MEMCPY": ("start INTEGER, end INTEGER", []),
            "CUPTI_ACTIVITY_KIND_MEMSET": ("start INTEGER, end INTEGER", []),
        },
    )
    assert _bad(empty) == (
        f"Error: {empty}: no kernels or device activity: its CUDA activity tables are empty\n"
    )
    data = (NSYS / "nsys_vllm.sqlite").read_bytes()
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(data[: len(data) // 2])
    assert _bad(cut) == (
        f"Error: {cut}: a cut SQLite file: {len(data) // 2:,} of the {len(data):,} bytes its "
        "header states\n"
    )
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(data[:4096] + bytes(range(256)) * ((len(data) - 4096) // 256))
    assert _bad(corrupt).startswith(f"Error: {corrupt}: a corrupt SQLite database (")
    other = _export(tmp_path / "app.sqlite", {"users": ("id INTEGER, name TEXT", [(1, "a")])})
    assert _bad(other) == (
        f"Error: {other}: a SQLite database, but not an Nsight Systems export (no StringIds "
        "and CUPTI tables)\n"
    )
    report = tmp_path / "profile.nsys-rep"
    report.write_bytes(b"\x00\x01binary report")
    assert _bad(report) == (
        f"Error: {report}: an Nsight Systems report, which traceview cannot read; export it "
        "to SQLite first: nsys export --type sqlite -o profile.sqlite profile.nsys-rep\n"
    )


def test_kernel_rows_without_times_are_an_error(tmp_path: Path) -> None:
    path = _export(
        tmp_path / "k.sqlite",
        {
            "StringIds": STRINGS,
            "CUPTI_ACTIVITY_KIND_KERNEL": (KERNEL, [(100, 50, 0, 7, 1, 0, 1, 2)]),
        },
    )
    assert "1 kernel row in CUPTI_ACTIVITY_KIND_KERNEL without a valid start and end" in _bad(path)


def test_fixtures_are_small_and_deterministic(tmp_path: Path) -> None:
    for path in NSYS.glob("*.sqlite"):
        assert path.stat().st_size < 300_000, path
    tb, steps = build(nsys.VLLM)
    a, rows = nsys.to_nsys([nsys.Process(tb, 1)], tmp_path / "a.sqlite")
    b, _ = nsys.to_nsys([nsys.Process(tb, 1)], tmp_path / "b.sqlite")
    assert a.read_bytes() == b.read_bytes()  # the same library writes the same bytes
    assert nsys.table_contents(NSYS / "nsys_vllm.sqlite") == nsys.table_contents(
        nsys.to_nsys([nsys.Process(tb, nsys.PIDS["nsys_vllm"])], tmp_path / "c.sqlite")[0]
    )
    assert plan_truth(nsys.VLLM, steps, "nsys_vllm.sqlite", rows) == _truth("nsys_vllm")


def test_detected_by_content_not_name(tmp_path: Path) -> None:
    odd = tmp_path / "trace.json.gz"  # an export, whatever its name says
    odd.write_bytes((NSYS / "nsys_vllm_bursts.sqlite").read_bytes())
    assert tv.load(odd, options=tv.LoadOptions(cache=False)).meta.format == "nsys"
    assert loader.is_sqlite(odd.read_bytes()[:16])


@pytest.mark.slow  # starts an S3 server (moto), ~5 s
def test_an_export_at_a_url_is_copied_then_read(tmp_path: Path) -> None:
    from s3server import filesystem, s3_server

    with s3_server() as endpoint:
        fs = filesystem(endpoint)
        fs.mkdir("traces")
        fs.put(str(NSYS / "nsys_vllm.sqlite"), "traces/report.sqlite")
        url = "s3://traces/report.sqlite"
        r = CliRunner().invoke(cli, ["summarize", url, "--json"])
    assert r.exit_code == 0, r.stderr
    remote = json.loads(r.stdout)
    local = tv.summarize(tv.load(NSYS / "nsys_vllm.sqlite")).to_dict()
    assert remote["trace"].pop("path") == url
    local["trace"].pop("path")
    assert remote == json.loads(json.dumps(local))
    assert not list(Path(tempfile.gettempdir()).glob("traceview-*.sqlite"))  # removed


def test_annotate_refuses_an_export_and_sql_auto_stays_embedded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = NSYS / "nsys_vllm_bursts.sqlite"
    r = CliRunner().invoke(cli, ["annotate", str(path), "-o", str(tmp_path / "a.json")])
    assert r.exit_code == 2
    assert r.stderr == (
        f"Error: {path}: annotate writes JSON traces; this is an Nsight Systems export\n"
    )
    # a configured trace_processor cannot read an export: auto runs it embedded
    monkeypatch.setenv("TRACEVIEW_TRACE_PROCESSOR", str(tmp_path / "no-such-binary"))
    r = CliRunner().invoke(cli, ["sql", "-e", "SELECT count(*) AS n FROM slice", str(path)])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split()[-1] == str(tv.load(path).kernels.height + tv.load(path).events.height)


def test_a_scan_finds_exports(tmp_path: Path) -> None:
    from traceview.batch.discover import discover

    (tmp_path / "report.sqlite").write_bytes((NSYS / "nsys_vllm.sqlite").read_bytes())
    assert discover([str(tmp_path)]) == [str(tmp_path / "report.sqlite")]


@pytest.mark.parametrize(
    "update",
    [
        "update CUPTI_ACTIVITY_KIND_KERNEL set start = 'abc' where rowid = 3",
        pytest.param(
            "update CUPTI_ACTIVITY_KIND_KERNEL set deviceId = 'gpu' where rowid = 3",
            marks=pytest.mark.slow,  # the same path as the first: CI runs it
        ),
    ],
    ids=["text-start", "text-device"],
)
def test_a_malformed_export_is_one_line_and_a_scan_row(tmp_path: Path, update: str) -> None:
    """A hostile probe's finding: a text value in a number column of the export was a
    polars ComputeError traceback, and stopped a scan of its folder."""
    import shutil
    import sqlite3

    folder = tmp_path / "runs"
    folder.mkdir()
    export = folder / "x.sqlite"
    shutil.copy(GENERATED / "nsys" / "nsys_vllm.sqlite", export)
    with sqlite3.connect(export) as db:
        db.execute(update)
    done = CliRunner().invoke(cli, ["summarize", str(export)])
    assert done.exit_code == 2 and len(done.stderr.splitlines()) == 1, done.output
    assert done.stderr.startswith(f"Error: {export}: not a readable Nsight Systems export: ")
    shutil.copy(GENERATED / "dense_sglang.json.gz", folder)
    scanned = CliRunner().invoke(cli, ["scan", str(folder), "-o", str(tmp_path / "ds")])
    assert scanned.exit_code == 0 and "scanned 1" in scanned.stderr and "failed 1" in scanned.stderr


def test_a_kernel_without_a_device_is_refused_and_one_without_a_name_is_said(
    tmp_path: Path,
) -> None:
    """A hostile probe's finding: a NULL deviceId put kernels on device 0 (or dropped them
    on a two-GPU export), and a NULL name id named them '' (family other), both silently."""
    import shutil

    for column, rows in (("deviceId", 3), ("demangledName", 3)):
        export = tmp_path / f"{column}.sqlite"
        shutil.copy(GENERATED / "nsys" / "nsys_vllm.sqlite", export)
        with sqlite3.connect(export) as db:
            db.execute(
                f"update CUPTI_ACTIVITY_KIND_KERNEL set {column} = NULL where rowid <= {rows}"
            )
        done = CliRunner().invoke(cli, ["info", str(export)])
        if column == "deviceId":
            assert done.exit_code == 2, done.output
            assert done.stderr == (
                f"Error: {export}: 3 kernel rows in CUPTI_ACTIVITY_KIND_KERNEL without a "
                "deviceId; cannot place them on a device\n"
            )
        else:
            assert done.exit_code == 0, done.output
            assert (
                "3 kernels in CUPTI_ACTIVITY_KIND_KERNEL without a name in StringIds" in done.stderr
            )
            assert tv.load(export).kernels.filter(pl.col("name") == "").height == 3
