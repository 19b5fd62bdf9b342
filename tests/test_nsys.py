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
from traceview import model as nsys_model
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
    column = update.split(" set ")[1].split(" =")[0]
    assert done.stderr.startswith(f"Error: {export}: CUPTI_ACTIVITY_KIND_KERNEL.{column} holds ")
    assert "text where an integer (a time or an id) belongs" in done.stderr
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


def test_strings_that_are_not_utf8_are_read_with_replacement_and_counted(tmp_path: Path) -> None:
    """A hostile probe's finding: one kernel name or NVTX text that is not UTF-8 (NVTX's
    ASCII API takes any bytes) made the whole export "a corrupt SQLite database". Planted:
    one kernel name gets a 0xff byte, and a range is added whose text holds a 0xfe byte;
    each reads with U+FFFD in its place, the two are counted in one warning, and every
    step is still found."""
    import shutil

    export = tmp_path / "bytes.sqlite"
    shutil.copy(NSYS / "nsys_vllm.sqlite", export)
    with sqlite3.connect(export) as db:
        name_id, name = db.execute(
            "SELECT id, value FROM StringIds WHERE value LIKE '%argmax%'"
        ).fetchone()
        db.execute(
            "UPDATE StringIds SET value = CAST(? AS TEXT) WHERE id = ?",
            (name.encode() + b"\xff", name_id),
        )
        db.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) SELECT start, "
            "end, eventType, CAST(? AS TEXT), globalTid FROM NVTX_EVENTS LIMIT 1",
            (b"\xfeforward",),
        )
    with pytest.warns(tv.TraceviewWarning) as said:
        trace = tv.load(export, options=tv.LoadOptions(cache=False))
    assert [str(w.message) for w in said] == [
        f"{export}: 2 text values (names, NVTX texts) not UTF-8: read with U+FFFD for each "
        "invalid byte sequence"
    ]
    original = tv.load(NSYS / "nsys_vllm.sqlite")
    names = trace.kernels["name"].cast(str)
    assert (names == name + "\ufffd").sum() == (original.kernels["name"].cast(str) == name).sum()
    assert trace.events.filter(pl.col("name") == "\ufffdforward").height == 1
    assert tv.summarize(trace).to_dict()["steps"]["count"] == len(_truth("nsys_vllm")["steps"])


def test_a_blob_in_string_ids_is_read_and_an_id_that_is_no_integer_is_one_line(
    tmp_path: Path,
) -> None:
    """A hostile probe's finding: a BLOB value or a text id in StringIds was a traceback.
    A BLOB's bytes are the name's (read as UTF-8, a bad sequence as U+FFFD and counted);
    an id that is no integer can be matched to nothing, and is one line."""
    g = (1 << 48) | (777 << 24) | 779
    kernels = [(100, 350, 0, 7, 5, g & ~0xFFFFFF, 1, 2), (400, 500, 0, 7, 6, g & ~0xFFFFFF, 3, 2)]
    blobs = _export(
        tmp_path / "blob.sqlite",
        {
            "StringIds": ("id INTEGER PRIMARY KEY, value", [(1, b"gemm_blob"), (2, "s")]),
            "CUPTI_ACTIVITY_KIND_KERNEL": (KERNEL, kernels),
        },
    )
    with sqlite3.connect(blobs) as db:
        db.execute("INSERT INTO StringIds VALUES (3, X'6e636370ff')")
    with pytest.warns(tv.TraceviewWarning, match="1 text value .* not UTF-8"):
        trace = tv.load(blobs, options=tv.LoadOptions(cache=False))
    assert trace.kernels["name"].cast(str).to_list() == ["gemm_blob", "nccp\ufffd"]
    # the probe of issue 49: the count reached stderr only, never summarize --json
    done = CliRunner().invoke(cli, ["--no-cache", "summarize", "--json", str(blobs)])
    assert done.exit_code == 0, done.output
    assert any("not UTF-8" in w for w in json.loads(done.stdout)["warnings"])
    text_id = _export(
        tmp_path / "text_id.sqlite",
        {
            "StringIds": ("id, value", [(1, "gemm_kernel_full"), ("abc", "x")]),
            "CUPTI_ACTIVITY_KIND_KERNEL": (KERNEL, kernels[:1]),
        },
    )
    assert _bad(text_id) == (
        f"Error: {text_id}: StringIds holds an id that is not an integer ('abc'): no name can "
        "be matched to it; not a readable Nsight Systems export\n"
    )


def _side_file_export(folder: Path, mode: str) -> tuple[Path, int]:
    """``report.sqlite`` and its ``-wal`` or ``-journal``, as a writer leaves them, and the
    kernels of the state SQLite commits. ``wal``: the kernel rows after the 100th deleted
    and committed to the write-ahead log, not yet checkpointed into the file. ``journal``:
    the same deletion in a transaction that never committed, its pages already spilled
    into the file (a writer that stopped): the hot journal rolls it back."""
    import shutil

    work = folder / "work.sqlite"
    shutil.copy(NSYS / "nsys_vllm.sqlite", work)
    con = sqlite3.connect(work, isolation_level=None)
    total = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    if mode == "wal":
        con.execute("PRAGMA journal_mode = WAL")
        con.execute("PRAGMA wal_autocheckpoint = 0")
    else:
        con.execute("PRAGMA cache_size = 1")  # dirty pages spill into the file
        con.execute("BEGIN")
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid > 100")
    side = "-wal" if mode == "wal" else "-journal"
    export = folder / "report.sqlite"
    shutil.copy(work, export)  # while the writer holds them
    shutil.copy(f"{work}{side}", f"{export}{side}")
    if mode == "journal":
        con.execute("ROLLBACK")
    con.close()
    work.unlink()
    return export, 100 if mode == "wal" else total


@pytest.mark.parametrize("mode", ["wal", "journal"])
def test_an_export_with_a_log_or_journal_reads_its_committed_state(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile probe's finding: an export left in WAL mode was opened immutable, so the
    write-ahead log was ignored and stale rows read (687 kernels where 100 are committed);
    a hot journal's rolled-back rows were read the same way. Planted: the committed count.
    The user's files are only read: the same bytes and times, nothing created beside
    them; the cache stores no entry keyed by the file alone."""
    export, committed = _side_file_export(tmp_path, mode)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    from traceview.loader import cache

    stored: list[object] = []
    monkeypatch.setattr(cache, "put", lambda *a: stored.append(a))
    options = tv.LoadOptions(cache=True, cache_min_bytes=0)
    trace = tv.load(export, options=options)
    assert trace.kernels.filter(pl.col("event_kind") == "kernel").height == committed
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    assert after == before
    assert loader.pending(str(export)) == [f"{export}-{mode}"]
    assert not list(Path(tempfile.gettempdir()).glob("traceview-export-*"))  # removed
    assert stored == []


def _replay_summary_equals_truth(doc: dict[str, Any], t: dict[str, Any]) -> None:
    """A graph-level export's summary against :func:`fixtures.nsys.graph_truth`."""
    assert doc["trace"]["kernels"] == t["kernels"]
    assert (doc["trace"]["start_ns"], doc["trace"]["span_ns"]) == (t["start_ns"], t["span_ns"])
    assert doc["steps"]["count"] == t["step_count"]
    assert doc["steps"]["cadence"] == t["cadence"]
    assert doc["busy"]["fraction"] == pytest.approx(t["busy"]["fraction"], rel=1e-6)
    got = {f["family"]: {"count": f["count"], "total_ns": f["total_ns"]} for f in doc["families"]}
    assert got == t["families"]
    gaps = {g["population"]: g for g in doc["decode_gaps"]}
    for pop, want in t["decode_gaps"].items():
        assert {k: gaps[pop][k] for k in want} == want, pop
    assert nsys_model.replays_not_itemised(t["replays"]) in doc["warnings"]


def test_a_graph_level_export_reads_its_replays_as_device_activity() -> None:
    """A hostile probe's finding: ``nsys --cuda-graph-trace=graph`` (nsys's default) writes
    each replay as one CUPTI_ACTIVITY_KIND_GRAPH_TRACE row and no row of its kernels; that
    table was ignored, so three eager steps then 27 replays read as one step over a tenth
    of the busy time, with no warning. Planted (fixtures.nsys.graph_truth): each replay is
    device activity, family cuda_graph, and its step's marker: 30 steps, their starts,
    anchors and kinds, cadence, busy, every family, and the decode gaps (none across a
    replay); one warning says the replays' kernels are not itemised."""
    t = _truth("nsys_graph_replays")
    trace = tv.load(NSYS / "nsys_graph_replays.sqlite")
    assert trace.meta.events == t["events"]
    summary = tv.summarize(trace)
    doc = summary.to_dict()
    _replay_summary_equals_truth(doc, t)
    assert doc["steps"]["marker"] == "full_attention, CUDA-graph replays"
    table = summary.steps.select("index", "start_ns", "anchor_ns", "end_ns", "kind", "kernels")
    assert table.to_dicts() == [
        {k: s[k] for k in ("index", "start_ns", "anchor_ns", "end_ns", "kind", "kernels")}
        for s in t["steps"]
    ]
    replays = trace.kernels.filter(pl.col("cat") == "cuda_graph")
    assert replays["name"].cast(str).unique().to_list() == ["CUDA graph replay (graph 1, exec 1)"]
    assert replays["event_kind"].cast(str).unique().to_list() == ["kernel"]
    launches = trace.events.filter(pl.col("name") == "cudaGraphLaunch")["correlation"]
    assert sorted(replays["correlation"].to_list()) == sorted(launches.to_list())
    said = CliRunner().invoke(cli, ["summarize", str(NSYS / "nsys_graph_replays.sqlite")])
    assert said.exit_code == 0, said.output
    line = nsys_model.replays_not_itemised(t["replays"])
    assert said.stderr.count(line) == 1  # the loader's and the summary's, said once


@pytest.mark.parametrize(
    ("layers", "annotations"),
    [("LLLFLLLF", "vllm-cpu"), ("FFFF", "none")],
    ids=["two-attention-layers-nvtx", "dense-bursts"],
)
def test_graph_level_steps_on_other_models(tmp_path: Path, layers: str, annotations: str) -> None:
    """The same reading on other models: two full-attention layers a step with vLLM's NVTX
    step ranges (each replay is linked to its range through its launch's correlation), and
    a dense model's four from the bursts alone. Planted: fixtures.nsys.graph_truth."""
    from dataclasses import replace

    sc = replace(nsys.GRAPHS, name="other", layers=layers, annotations=annotations)
    tb, steps = build(sc)
    path, rows = nsys.to_nsys(
        [nsys.Process(tb, 7)],
        tmp_path / "other.sqlite",
        nvtx=annotations != "none",
        graph_trace=True,
    )
    t = nsys.graph_truth(sc, steps, path.name, rows)
    summary = tv.summarize(tv.load(path, options=tv.LoadOptions(cache=False)))
    _replay_summary_equals_truth(summary.to_dict(), t)
    keys = ("index", "start_ns", "anchor_ns", "end_ns", "kind", "kernels")
    assert summary.steps.select(keys).to_dicts() == [{k: s[k] for k in keys} for s in t["steps"]]


def test_an_export_of_replays_only_loads(tmp_path: Path) -> None:
    """Every step replayed (decode only, no eager copies): the export's CUPTI tables hold
    no row but the replays', and it was refused ("its CUDA activity tables are empty").
    Each replay is its step."""
    from dataclasses import replace

    from fixtures.engine import CATEGORY, Engine

    sc = replace(nsys.GRAPHS, name="replays_only", chunks=0, decode_before=0, decode_after=12)
    planned = Engine(sc).plan()
    for s in planned:
        s.kernels = [k for k in s.kernels if k.key not in CATEGORY]
    tb, steps = build(sc, planned)
    path, rows = nsys.to_nsys(
        [nsys.Process(tb, 7)], tmp_path / "replays.sqlite", nvtx=False, graph_trace=True
    )
    with sqlite3.connect(path) as db:
        for table in ("KERNEL", "MEMCPY", "MEMSET"):
            count = f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_{table}"
            assert db.execute(count).fetchone() == (0,)
    t = nsys.graph_truth(sc, steps, path.name, rows)
    doc = tv.summarize(tv.load(path, options=tv.LoadOptions(cache=False))).to_dict()
    _replay_summary_equals_truth(doc, t)
    assert doc["steps"]["count"] == 12


@pytest.mark.parametrize(
    ("table", "column", "shown"),
    [
        ("CUPTI_ACTIVITY_KIND_KERNEL", "deviceId", "0.5"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId", "1005.5"),
        ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "correlationId", "2.5"),
    ],
    ids=["kernel-device", "launch-correlation", "replay-correlation"],
)
def test_a_real_number_where_an_integer_belongs_is_one_line(
    tmp_path: Path, table: str, column: str, shown: str
) -> None:
    """A hostile probe's finding: a real number in a column of times or ids (deviceId 0.5,
    a correlation id 1005.5) was cut to an integer as the frame was built, silently: the
    kernel ran on device 0, or joined another launch. It is one line."""
    import shutil

    export = tmp_path / "reals.sqlite"
    shutil.copy(NSYS / "nsys_graph_replays.sqlite", export)
    with sqlite3.connect(export) as db:
        rowid = db.execute(f"SELECT min(rowid) FROM {table} WHERE {column} IS NOT NULL").fetchone()
        db.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (float(shown), rowid[0]))
    assert _bad(export) == (
        f"Error: {export}: {table}.{column} holds {shown}, a real number where an integer (a "
        "time or an id) belongs; not a readable Nsight Systems export\n"
    )


def test_replays_also_itemised_by_kernel_rows_are_read_once(tmp_path: Path) -> None:
    """A hostile probe's finding: an export holding a replay both whole (GRAPH_TRACE) and
    node by node (kernel rows sharing its launch's correlation) counted its time twice
    (family cuda_graph beside the kernels' own) and filled the gaps between its kernels
    (busy 0.6468 -> 0.6643). Planted: the node-level fixture with every replay added
    whole; its summary equals the fixture's, with one warning."""
    import shutil

    export = tmp_path / "both.sqlite"
    shutil.copy(NSYS / "nsys_vllm.sqlite", export)
    columns = ", ".join(nsys.GRAPH_TRACE)
    with sqlite3.connect(export) as db:
        db.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE ({columns})")
        added = db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE SELECT min(start), max(end), "
            "deviceId, 1, NULL, streamId, correlationId, globalPid, 1, 1 FROM "
            "CUPTI_ACTIVITY_KIND_KERNEL WHERE graphId IS NOT NULL GROUP BY correlationId"
        ).rowcount
    assert added == sum(1 for s in _truth("nsys_vllm")["steps"] if s["planned_kind"] == "decode")
    with pytest.warns(tv.TraceviewWarning, match=f"{added} CUDA-graph replays in .* also"):
        both = tv.summarize(tv.load(export, options=tv.LoadOptions(cache=False))).to_dict()
    alone = tv.summarize(tv.load(NSYS / "nsys_vllm.sqlite")).to_dict()
    for doc in (both, alone):
        doc["trace"].pop("path"), doc["trace"].pop("events")
    said = both["warnings"].pop(0)  # the loader's line, first
    assert said.startswith(f"{added} CUDA-graph replays in CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
    assert both == alone


def test_replays_cupti_could_not_place_are_skipped_and_counted(tmp_path: Path) -> None:
    """CUPTI writes 0 for both times of a replay it could not time, and device INT_MAX for
    one whose first node ran on the host (CUpti_ActivityGraphTrace2): read as they are,
    one would be a replay at time 0 (a span of 5e15 ns), the other a device of its own.
    Each is skipped and counted, and its launch is said to have no device activity."""
    import shutil

    export = tmp_path / "unplaced.sqlite"
    shutil.copy(NSYS / "nsys_graph_replays.sqlite", export)
    with sqlite3.connect(export) as db:
        table = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
        db.execute(f"UPDATE {table} SET start = 0, end = 0 WHERE rowid = 3")
        db.execute(f"UPDATE {table} SET deviceId = 2147483647 WHERE rowid = 4")
    trace = tv.load(export, options=tv.LoadOptions(cache=False))
    t = _truth("nsys_graph_replays")
    assert trace.kernels.height == t["kernels"] - 2 and trace.devices == [0]
    assert trace.meta.skipped_events == 2
    assert sorted(trace.meta.warnings)[:2] == [
        "1 event skipped: CUDA-graph replay CUPTI could not time (start and end 0)",
        "1 event skipped: CUDA-graph replay that started on the host (no device)",
    ]
    doc = tv.summarize(trace).to_dict()
    assert doc["trace"]["start_ns"] == t["start_ns"]
    said = [w for w in doc["warnings"] if w.startswith("2 of 27 CUDA-graph launches")]
    # the probe of issue 49: this export's replays are read; it was told to record them
    # node by node. The skip counts reached stderr only: the document holds them too
    assert said == [
        "2 of 27 CUDA-graph launches inside the trace have no device activity (their "
        "replays were skipped, untimed or started on the host: see the events skipped): the "
        "steps, cadence and idle time around them are unreliable"
    ]
    assert set(trace.meta.warnings) <= set(doc["warnings"])


def test_hostile_values_in_the_device_and_name_tables(tmp_path: Path) -> None:
    """A hostile probe's findings: a BLOB GPU name reached the summary as Python bytes, and
    ``smCount = 'many'`` was passed on as the device's SM count; StringIds holding one id
    twice was a polars message. A property is kept only with its own type (a BLOB name read
    as its UTF-8 text); one id given the same text twice is one name; given two texts,
    one line."""
    import shutil

    export = tmp_path / "hostile.sqlite"
    shutil.copy(NSYS / "nsys_vllm.sqlite", export)
    with sqlite3.connect(export) as db:
        db.execute("UPDATE TARGET_INFO_GPU SET smCount = 'many', name = X'4832303020534d'")
        db.execute("ALTER TABLE StringIds RENAME TO Old")
        db.execute("CREATE TABLE StringIds (id, value)")
        db.execute("INSERT INTO StringIds SELECT id, value FROM Old")
        db.execute("INSERT INTO StringIds SELECT id, value FROM Old WHERE id = 3")
        db.execute("DROP TABLE Old")
    trace = tv.load(export, options=tv.LoadOptions(cache=False))
    props = trace.meta.device_properties[0]
    assert (trace.meta.gpu_name, props["name"], props["numSms"]) == ("H200 SM", "H200 SM", 132)
    original = tv.load(NSYS / "nsys_vllm.sqlite")
    assert trace.kernels.drop("external_id").equals(original.kernels.drop("external_id"))
    with sqlite3.connect(export) as db:
        db.execute("INSERT INTO StringIds VALUES (3, 'another name')")
    assert _bad(export) == (
        f"Error: {export}: StringIds gives the id 3 more than one text: the name of what "
        "refers to it cannot be told; not a readable Nsight Systems export\n"
    )


def test_a_scan_reads_an_export_again_after_a_commit_to_its_log(tmp_path: Path) -> None:
    """The probe of issue 49: scan, a commit to the export's write-ahead log, scan again:
    "skipped 1 (already in the dataset)", the dataset kept the stale kernels while
    summarize read the committed ones. The skip key (path, size, mtime) read the file
    alone; the log beside it holds part of the trace."""
    import shutil

    folder = tmp_path / "traces"
    folder.mkdir()
    export = folder / "report.sqlite"
    shutil.copy(NSYS / "nsys_vllm.sqlite", export)
    writer = sqlite3.connect(export, isolation_level=None)
    try:
        writer.execute("PRAGMA journal_mode = WAL")
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid > 200")
        first = tv.scan([str(folder)], tmp_path / "ds")
        assert first.scanned == [str(export)]
        writer.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid > 100")
        again = tv.scan([str(folder)], tmp_path / "ds")
        assert again.skipped == [], again
        kernels = tv.load(export, options=tv.LoadOptions(cache=False)).kernels
        rows = pl.read_parquet(tmp_path / "ds" / "traces" / "*.parquet")
        assert kernels.filter(pl.col("event_kind") == "kernel").height == 100
        assert kernels.height in rows["kernels"].to_list()  # the committed state, scanned
    finally:
        writer.close()


@pytest.mark.parametrize(
    "table, column, value, said",
    [
        (
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "start",
            "X'00ff'",
            "CUPTI_ACTIVITY_KIND_KERNEL.start holds b'\\x00\\xff', a BLOB",
        ),
        (
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            "correlationId",
            "X'01'",
            "CUPTI_ACTIVITY_KIND_RUNTIME.correlationId holds b'\\x01', a BLOB",
        ),
        (
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "demangledName",
            "'abc'",
            "CUPTI_ACTIVITY_KIND_KERNEL.demangledName holds 'abc', text",
        ),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "end", "9223372036854775807", "with an impossible time"),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "start", "-5", "with an impossible time (start -5 ns"),
    ],
    ids=["blob-start", "blob-correlation", "text-name-id", "end-int64-max", "negative-start"],
)
def test_a_bad_value_names_its_table_and_column(
    tmp_path: Path, table: str, column: str, value: str, said: str
) -> None:
    """The probe of issue 49: a BLOB or text in an integer column said "could not append
    value: b"\\x00\\xff" of type: binary … infer_schema_length", naming neither table nor
    column; a kernel ending at INT64_MAX read a 9,218,254,469 s span at 100% busy, and one
    starting at -5 ns was read, both silently. Each is one line naming where."""
    import shutil

    export = tmp_path / "x.sqlite"
    shutil.copy(NSYS / "nsys_vllm.sqlite", export)
    with sqlite3.connect(export) as db:
        db.execute(f"update {table} set {column} = {value} where rowid = 3")
    done = CliRunner().invoke(cli, ["--no-cache", "info", str(export)])
    assert done.exit_code == 2 and len(done.stderr.splitlines()) == 1, done.output
    assert said in done.stderr and "Traceback" not in done.stderr


def test_string_ids_without_a_value_column_says_so(tmp_path: Path) -> None:
    """The probe of issue 49: it said "a corrupt SQLite database (no such column: value)"."""
    import shutil

    export = tmp_path / "noval.sqlite"
    shutil.copy(NSYS / "nsys_vllm.sqlite", export)
    with sqlite3.connect(export) as db:
        db.execute("ALTER TABLE StringIds RENAME COLUMN value TO text")
    done = CliRunner().invoke(cli, ["--no-cache", "info", str(export)])
    assert done.exit_code == 2, done.output
    assert done.stderr == (
        f"Error: {export}: StringIds has no value column: no name can be read; not a "
        "readable Nsight Systems export\n"
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"layers": "LFLF"},
        {"layers": "FFFF"},
        {"layers": "LLFLLF", "decode_before": 8, "chunks": 3, "decode_after": 10},
    ],
    ids=["two-attention-layers", "four", "eager-in-the-middle"],
)
def test_eager_steps_beside_whole_graph_replays_keep_their_steps(
    tmp_path: Path, fields: dict[str, Any]
) -> None:
    """The probe of issue 49: an export traced at graph level, its eager (mixed) steps
    holding two or more full-attention layers: a whole replay is one burst that holds a
    whole step, an eager step one burst a layer, so no period fits both. LFLF read 33 steps
    (truth 30), phases alternating mixed/decode. The eager stretches and the replays are
    searched apart. Planted: fixtures.nsys.graph_truth's steps, kinds and cadence."""
    from dataclasses import replace

    sc = replace(nsys.GRAPHS, name="g", **fields)
    tb, steps = build(sc)
    path, rows = nsys.to_nsys([nsys.Process(tb, 31337)], tmp_path / "g.sqlite", graph_trace=True)
    t = nsys.graph_truth(sc, steps, path.name, rows)
    doc = tv.summarize(tv.load(path, options=tv.LoadOptions(cache=False))).to_dict()
    assert doc["steps"]["count"] == t["step_count"]
    assert doc["steps"]["cadence"] == t["cadence"]
    runs: list[list[Any]] = []  # the planted kinds, run by run, as phases are
    for step in t["steps"]:
        if runs and runs[-1][0] == step["kind"]:
            runs[-1][1] += 1
        else:
            runs.append([step["kind"], 1])
    assert [[p["kind"], p["steps"]] for p in doc["steps"]["phases"]] == runs
