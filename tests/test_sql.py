"""PerfettoSQL: query files against figures computed independently from the raw events."""

from __future__ import annotations

import functools
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import (
    GENERATED,
    ROOT,
    SCENARIO_NAMES,
    SHARED_TRACES,
    real_traces,
    trace_params,
    truth,
)
from planned import planned_query_rows

import traceview as tv
from fixtures.truth import union_length
from traceview.cli import cli
from traceview.loader import LoadOptions
from traceview.sqlengine import builtin_queries, run_sql, split_statements
from traceview.sqlengine.families_query import families_sql

QUERIES = sorted(builtin_queries())
TRACES = [GENERATED / f"{n}.json.gz" for n in SCENARIO_NAMES] + real_traces()


# every fixture and shared trace in CI; three fixtures and the small shared traces by default
SQL_SAMPLE = {"hybrid_chunked.json.gz", "dense_sglang.json.gz", "hybrid_vllm_old.json.gz"}


@pytest.fixture(scope="module", params=trace_params(TRACES, fixture_sample=SQL_SAMPLE))
def loaded(request: pytest.FixtureRequest) -> tv.Trace:
    return tv.load(request.param, options=LoadOptions(raw_args=True))


def test_shipped_queries() -> None:
    assert set(QUERIES) >= {
        "kernel_families",
        "top_kernels",
        "stream_busy",
        "decode_gaps",
        "step_kernels",
        "launch_latency",
        "memcpy_summary",
    }
    for name, path in builtin_queries().items():
        header = path.read_text().splitlines()
        assert header[0].startswith("-- ") and any("Columns:" in h for h in header), name
        assert any("Example:" in h for h in header), name


def test_families_query_is_generated_from_the_preset() -> None:
    assert (ROOT / "queries" / "kernel_families.sql").read_text() == families_sql()


@functools.cache
def _fixture(name: str) -> tv.Trace:
    return tv.load(GENERATED / f"{name}.json.gz", options=LoadOptions(raw_args=True))


@functools.cache
def _planned_rows(name: str) -> dict[str, list[dict[str, Any]]]:
    return planned_query_rows(name)


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=[] if f"{n}.json.gz" in SQL_SAMPLE else [pytest.mark.slow])
        for n in SCENARIO_NAMES
    ],
)
def test_every_query_returns_the_planted_rows(name: str, query: str) -> None:
    """Each shipped query's rows on a generated fixture, every column, against what its
    plan says (tests/planned.py): families, kernels, copies, streams, decode gaps, kernels
    per step annotation and launch latency."""
    want = _planned_rows(name)[query]
    got = run_sql(_fixture(name), query).to_dicts()
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for key, value in w.items():
            if isinstance(value, float):
                assert g[key] == pytest.approx(value, rel=1e-9), key
            else:
                assert g[key] == value, key


@pytest.mark.parametrize("query", QUERIES)
def test_every_query_runs_on_the_shared_traces(loaded: tv.Trace, query: str) -> None:
    """On traces with no plan: each query runs, and those every trace with device
    activity answers (families, top kernels, stream busy) have rows."""
    df = run_sql(loaded, query)
    if query in ("kernel_families", "top_kernels", "stream_busy"):
        assert df.height > 0


def test_kernel_families_equal_the_classifier(loaded: tv.Trace) -> None:
    """The query is the preset's name rules; the classifier by name alone gives the same rows
    (summarize's record_shapes rule for softmax and its MoE-by-position rule are out of
    SQL's reach, and documented)."""
    from traceview.analysis.classify.families import classify, family_table, load_rules

    sql = run_sql(loaded, "kernel_families")
    fam = family_table(classify(loaded.kernels, load_rules(), by_position=False))
    assert sorted(sql.select("family", "kernels", "total_ns").rows()) == sorted(
        fam.select("family", "count", "total_ns").rows()
    )


def test_stream_busy_equals_the_interval_union(loaded: tv.Trace) -> None:
    sql = run_sql(loaded, "stream_busy")
    expect = {}
    for (pid, tid), g in loaded.kernels.group_by(["pid", "tid"]):
        ts = g["ts_ns"].to_list()
        ends = (g["ts_ns"] + g["dur_ns"]).to_list()
        expect[(pid, tid)] = (
            g.height,
            union_length(list(zip(ts, ends, strict=True)), min(ts), max(ends)),
        )
    got = {
        (d, s): (n, busy)
        for d, s, n, busy in sql.select("device", "stream", "kernels", "busy_ns").iter_rows()
    }
    assert got == expect


def row_count_at_least(sql: pl.DataFrame, t: dict) -> bool:
    g = next(x for x in t["decode_gaps"] if x["population"] == "all")
    return bool(sql.row(0, named=True)["n"] > g["n"])


def test_decode_gaps_query_equals_the_summary(scenario: str) -> None:
    trace = tv.load(GENERATED / f"{scenario}.json.gz")
    sql = run_sql(trace, "decode_gaps")
    t = truth(scenario)
    if "L" not in t["layers"]:
        assert sql.height == 0  # no recurrent decode kernels: the query's population is empty
        return
    prefill = any(p["kind"] == "prefill" for p in t["phases"])
    g = next(x for x in t["decode_gaps"] if x["population"] == "all")
    same_n = sql.row(0, named=True)["n"] == g["n"]
    if t["capture"]["kernels"] or (prefill and not same_n) or t["warmup"]["steps"]:
        # the query takes every marker kernel; the summary leaves out start-up, prefill-only
        # steps and the steps that hold warm-up, which it knows and the query does not (a
        # prefill-only step that runs no decode kernel leaves the two populations equal)
        assert row_count_at_least(sql, t)
        return
    row = sql.row(0, named=True)
    assert row["n"] == g["n"] and row["overlaps"] == g["overlaps"]
    assert row["max_ns"] == g["max_ns"]
    for key in ("p50_ns", "p90_ns", "p99_ns"):
        assert round(row[key]) == g[key]


def test_step_kernels_equal_the_planted_steps(scenario: str) -> None:
    t = truth(scenario)
    sql = run_sql(tv.load(GENERATED / f"{scenario}.json.gz"), "step_kernels")
    if t["annotations"] == "none":
        assert sql.height == 0
        return
    assert sql["step"].to_list() == [s["annotation"] for s in t["steps"]]
    assert sql["kernels"].to_list() == [s["kernels"] for s in t["steps"]]


def test_launch_latency_equals_a_correlation_join(scenario: str) -> None:
    trace = tv.load(GENERATED / f"{scenario}.json.gz")
    sql = run_sql(trace, "launch_latency")
    launches = trace.events.filter(pl.col("event_kind") == "runtime").select(
        "correlation", pl.col("ts_ns").alias("launch_ts")
    )
    lat = (
        trace.kernels.join(launches, on="correlation")
        .select((pl.col("ts_ns") - pl.col("launch_ts")).alias("v"))["v"]
        .to_numpy()
    )
    if lat.size == 0:
        assert sql.height == 0
        return
    row = sql.row(0, named=True)
    assert row["kernels"] == lat.size
    assert row["p50_ns"] == pytest.approx(np.percentile(lat, 50), abs=1e-6)
    assert row["p99_ns"] == pytest.approx(np.percentile(lat, 99), abs=1e-6)
    assert row["max_ns"] == lat.max()


@pytest.mark.slow
def test_memcpy_summary_reads_bytes_from_args() -> None:
    path = next((p for p in real_traces() if p.name == "b200-vllm-eager.json.gz"), None)
    if path is None:
        pytest.skip("../shared/traces is not present")
    import gzip

    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
    sql = run_sql(path, "memcpy_summary")
    assert sql["count"].sum() == len(copies)
    assert sql["bytes"].sum() == sum(e["args"]["bytes"] for e in copies)


KINETO = {
    "traceEvents": [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 4242,
            "tid": 4242,
            "ts": 1700000000100.0,
            "dur": 900.5,
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 4242,
            "tid": 4242,
            "ts": 1700000000110.250,
            "dur": 50.125,
            "args": {"External id": 3},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 4242,
            "tid": 4242,
            "ts": 1700000000120.0,
            "dur": 10.0,
            "args": {"correlation": 9},
        },
        {
            "ph": "s",
            "id": 9,
            "pid": 4242,
            "tid": 4242,
            "ts": 1700000000121.0,
            "cat": "ac2g",
            "name": "ac2g",
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ampere_sgemm_64x64_nn",
            "pid": 0,
            "tid": 7,
            "ts": 1700000000135.5,
            "dur": 40.25,
            "args": {
                "correlation": 9,
                "stream": 7,
                "device": 0,
                "grid": [64, 2, 1],
                "est. achieved occupancy %": 50,
                "ratio": 0.5,
            },
        },
        {
            "ph": "f",
            "id": 9,
            "pid": 0,
            "tid": 7,
            "ts": 1700000000135.5,
            "cat": "ac2g",
            "name": "ac2g",
            "bp": "e",
        },
        {
            "ph": "C",
            "name": "Memory",
            "pid": 4242,
            "ts": 1700000000150.0,
            "args": {"Total Allocated": 1024},
        },
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
    ]
}


@pytest.fixture(scope="module")
def kineto(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("k") / "kineto.json"
    path.write_text(json.dumps(KINETO))
    return path


def test_perfetto_schema_for_a_kineto_trace(kineto: Path) -> None:
    rows = run_sql(
        kineto,
        """
        select s.ts, s.dur, s.name, s.category, s.depth, s.parent_id, t.tid, p.pid, t.name
          as thread
        from slice s join thread_track tt on s.track_id = tt.id
        join thread t using (utid) join process p using (upid) order by s.ts""",
    ).rows()
    assert rows == [
        (1700000000100000, 900500, "ProfilerStep#1", "user_annotation", 0, None, 4242, 4242, None),
        (1700000000110250, 50125, "aten::mm", "cpu_op", 1, 0, 4242, 4242, None),
        (1700000000120000, 10000, "cudaLaunchKernel", "cuda_runtime", 2, 1, 4242, 4242, None),
        (1700000000135500, 40250, "ampere_sgemm_64x64_nn", "kernel", 0, None, 7, 0, "stream 7"),
    ]
    # placeholders: upid 0 / utid 0 exist, and GPU device 0 is a second process with pid 0
    assert run_sql(kineto, "select count(*) as n from process where pid = 0").item() == 2
    assert run_sql(kineto, "select is_idle from thread where utid = 0").item() == 1
    flows = run_sql(
        kineto,
        "select so.name, si.name as k, si.ts - so.ts as lat from flow f "
        "join slice so on so.id = f.slice_out "
        "join slice si on si.id = f.slice_in",
    ).rows()
    assert flows == [("cudaLaunchKernel", "ampere_sgemm_64x64_nn", 15500)]
    args = run_sql(
        kineto,
        "select flat_key, key, int_value, real_value, value_type from args "
        "where key like 'args.grid%' or key = 'args.ratio' order by key",
    )
    assert args.rows() == [
        ("args.grid", "args.grid[0]", 64, None, "int"),
        ("args.grid", "args.grid[1]", 2, None, "int"),
        ("args.grid", "args.grid[2]", 1, None, "int"),
        ("args.ratio", "args.ratio", None, 0.5, "real"),
    ]
    extract = run_sql(
        kineto,
        "select extract_arg(arg_set_id, 'args.correlation') as c, "
        "extract_arg(arg_set_id, 'args.est. achieved occupancy %') as o,"
        " extract_arg(arg_set_id, 'args.grid[1]') as g "
        "from slice where category = 'kernel'",
    ).row(0)
    assert extract == (9, 50, 2)
    counter = run_sql(
        kineto,
        "select t.name, c.value, p.upid from counter c "
        "join process_counter_track t on c.track_id = t.id "
        "join process p using (upid)",
    ).row(0)
    assert counter[:2] == ("Memory Total Allocated", 1024.0)
    columns = run_sql(kineto, "pragma table_info(slice)")["name"].to_list()
    assert columns[:9] == [
        "id",
        "ts",
        "dur",
        "track_id",
        "category",
        "name",
        "depth",
        "parent_id",
        "arg_set_id",
    ]
    assert {"cat", "slice_id"} <= set(columns)


def test_perfetto_table_and_statements(kineto: Path) -> None:
    df = run_sql(
        kineto,
        "CREATE PERFETTO TABLE k AS SELECT name, dur FROM slice WHERE "
        "category = 'kernel'; select name, dur * 2 as d from k",
    )
    assert df.rows() == [("ampere_sgemm_64x64_nn", 80500)]
    parts = split_statements("select 1; -- a;\n\nselect ';'\n;\n-- only a comment\n")
    assert [p.line for p in parts] == [1, 3]
    assert parts[0].text == "select 1;" and "select ';'" in parts[1].text


ERRORS = [
    ("select nope from slice", r"<sql>:1: no such column: nope"),
    ("select 1;\n\nselect * from missing_table", r"<sql>:3: no such table: missing_table"),
    (
        "INCLUDE PERFETTO MODULE slices.with_context; select 1",
        r"INCLUDE PERFETTO MODULE is Perfetto-only .* --engine perfetto",
    ),
    ("CREATE PERFETTO FUNCTION f() RETURNS INT AS SELECT 1", r"CREATE PERFETTO FUNCTION is"),
    ("select * from span_join(a, b)", r"SPAN_JOIN is Perfetto-only"),
    ("delete from _slice", r"DELETE is not allowed: queries are read-only"),
    ("insert into process (upid) values (99)", r"INSERT is not allowed"),
    ("attach database ':memory:' as x", r"ATTACH is not allowed"),
    ("vacuum into 'copy.db'", r"is not allowed"),
    ("pragma writable_schema = 1", r"PRAGMA is not allowed"),
    ("select load_extension('x')", r"load_extension\(\) is not allowed"),
    ("create table t (x)", r"CREATE TABLE/VIEW/INDEX is not allowed"),
    ("create view v as select 1", r"CREATE TABLE/VIEW/INDEX is not allowed"),
    # it said "DELETE is not allowed" (SQLite deletes the object's schema row first)
    ("drop table _slice", r"DROP TABLE/VIEW/INDEX is not allowed"),
    ("drop view slice", r"DROP TABLE/VIEW/INDEX is not allowed"),
]


@pytest.mark.parametrize(("sql", "message"), ERRORS, ids=[e[1][:30] for e in ERRORS])
def test_sql_errors_are_one_line(
    kineto: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sql: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["sql", "-e", sql, str(kineto)])
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert re.search(message, result.stderr), result.stderr
    assert not (tmp_path / "copy.db").exists()


def test_sql_file_error_names_file_and_line(kineto: Path, tmp_path: Path) -> None:
    query = tmp_path / "q.sql"
    query.write_text("-- header\nselect 1;\n\nselect\n  bogus(1);\n")
    result = CliRunner().invoke(cli, ["sql", str(query), str(kineto)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: {query}:4: no such function: bogus"


def test_runaway_query_is_interrupted(kineto: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "sql",
            "--timeout",
            "0.3",
            "-e",
            "with recursive c(x) as (select 1 union all select x + 1 from c) "
            "select count(*) from c",
            str(kineto),
        ],
    )
    assert result.exit_code == 2
    assert "query interrupted after 0.3 s" in result.stderr


def test_sql_cli_formats_and_list(tmp_path: Path) -> None:
    path = str(GENERATED / "dense_sglang.json.gz")
    listing = CliRunner().invoke(cli, ["sql", "--list"])
    assert listing.exit_code == 0
    assert all(q in listing.stdout for q in QUERIES)
    out = tmp_path / "fam.parquet"
    result = CliRunner().invoke(cli, ["sql", "queries/kernel_families.sql", path, "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    fam = pl.read_parquet(out)
    t = truth("dense_sglang")
    assert dict(fam.select("family", "kernels").iter_rows()) == {
        k: v["count"] for k, v in t["families"].items()
    }
    csv = CliRunner().invoke(cli, ["sql", "top_kernels", path, "--format", "csv"])
    assert csv.exit_code == 0 and csv.stdout.startswith("name,kernels,total_ns")


def test_perfetto_engine_needs_a_configured_binary(
    kineto: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRACEVIEW_TRACE_PROCESSOR", raising=False)
    result = CliRunner().invoke(cli, ["sql", "--engine", "perfetto", "-e", "select 1", str(kineto)])
    assert result.exit_code == 2
    assert "needs Perfetto's trace_processor binary: set TRACEVIEW_TRACE_PROCESSOR" in result.stderr
    fake = tmp_path / "trace_processor"
    fake.write_text("not a binary")
    result = CliRunner().invoke(
        cli, ["sql", "--engine", "perfetto", "--tp-bin", str(fake), "-e", "select 1", str(kineto)]
    )
    assert result.exit_code == 2 and "not an executable trace_processor binary" in result.stderr
    # auto without a binary stays embedded
    auto = CliRunner().invoke(cli, ["sql", "-e", "select count(*) as n from slice", str(kineto)])
    assert auto.exit_code == 0 and "4" in auto.stdout
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)


@pytest.mark.skipif(
    not os.environ.get("TRACEVIEW_TRACE_PROCESSOR"),
    reason="no trace processor binary configured (TRACEVIEW_TRACE_PROCESSOR)",
)
@pytest.mark.parametrize("query", ["kernel_families", "stream_busy", "top_kernels"])
def test_both_engines_give_the_same_rows(query: str) -> None:
    path = GENERATED / "hybrid_chunked.json.gz"
    embedded = run_sql(tv.load(path), query, engine="embedded")
    perfetto = run_sql(path, query, engine="perfetto")
    assert embedded.rows() == perfetto.rows()


@pytest.mark.slow
def test_docs_sql_examples_run() -> None:
    text = (ROOT / "docs" / "sql.md").read_text()
    blocks = re.findall(r"```sql\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 4
    trace = tv.load(GENERATED / "hybrid_chunked.json.gz", options=LoadOptions(raw_args=True))
    for block in blocks:
        df = run_sql(trace, block)
        assert df.height > 0, block


# Perfetto's trace processor on these shared traces (issue 12): select count(*) from flow
PERFETTO_FLOWS = {
    "tracelens/b200-vllm-eager.json.gz": 929,
    "hta/a100_rank0_negqueue.json.gz": 6875,
}


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/traces is not present")
@pytest.mark.parametrize(
    ("name", "count"),
    [
        pytest.param(n, c, marks=pytest.mark.slow) if n.startswith("hta/") else (n, c)
        for n, c in sorted(PERFETTO_FLOWS.items())
    ],
)
def test_flow_counts_equal_perfettos_on_real_traces(name: str, count: int) -> None:
    path = SHARED_TRACES / name
    assert run_sql(path, "select count(*) from flow").item() == count
    # each flow links a launch on the CPU with device activity; the earlier of the two is
    # slice_out, as in Perfetto (a few kernels here start before their launch's record)
    cats = run_sql(
        path,
        "select so.category as a, si.category as b, so.ts <= si.ts as ordered from flow f "
        "join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in",
    )
    launch, device = {"cuda_runtime", "cuda_driver"}, {"kernel", "gpu_memcpy", "gpu_memset"}
    for a, b, ordered in cats.rows():
        assert {a, b} & launch and {a, b} & device and ordered


def _events(*evs: dict) -> bytes:
    return json.dumps({"traceEvents": list(evs)}).encode()


def test_flows_bind_in_time_order_whatever_the_file_order(tmp_path: Path) -> None:
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1}
    kern = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7}
    events = [
        # the f (bp e) of flow 5 comes first in the file, its s later: still one flow
        {
            "ph": "f",
            "bp": "e",
            "id": 5,
            "cat": "ac2g",
            "name": "ac2g",
            "pid": 0,
            "tid": 7,
            "ts": 20,
        },
        {**kern, "ts": 20, "dur": 3, "args": {"stream": 7}},
        {**launch, "ts": 10, "dur": 2},
        {"ph": "s", "id": 5, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 10},
        # an f without bp binds to the next slice that begins on its thread
        {**launch, "ts": 30, "dur": 2},
        {"ph": "s", "id": "0x10", "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 30},
        {"ph": "f", "id": "0x10", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 35},
        {**kern, "name": "k2", "ts": 38, "dur": 1, "args": {"stream": 7}},
        # same id, other category: another flow, which never started: dropped
        {
            "ph": "f",
            "bp": "e",
            "id": 5,
            "cat": "other",
            "name": "ac2g",
            "pid": 0,
            "tid": 7,
            "ts": 20,
        },
        # events without an id bind nothing
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 30.5},
        {"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 38},
        # an s with no enclosing slice: dropped
        {"ph": "s", "id": 9, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 50},
        {
            "ph": "f",
            "bp": "e",
            "id": 9,
            "cat": "ac2g",
            "name": "ac2g",
            "pid": 0,
            "tid": 7,
            "ts": 38,
        },
    ]
    path = tmp_path / "flows.json"
    path.write_bytes(_events(*events))
    rows = run_sql(
        path,
        "select so.ts as out_ts, si.name as kernel, f.trace_id from flow f "
        "join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in order by 1",
    ).rows()
    assert [(a, b) for a, b, _ in rows] == [(10_000, "k"), (30_000, "k2")]
    assert len({t for _, _, t in rows}) == 2


def test_improperly_nested_slices_spill_to_another_track_at_depth_0(tmp_path: Path) -> None:
    """PERFETTO_SCHEMA.md, trap 3: 30..35 and 32..37 us on one thread do not nest; the
    second moves to another track of the same thread, at depth 0."""
    op = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1}
    path = tmp_path / "spill.json"
    path.write_bytes(
        _events(
            {**op, "name": "a", "ts": 30, "dur": 5},
            {**op, "name": "b", "ts": 32, "dur": 5},
            {**op, "name": "c", "ts": 33, "dur": 1},
            {**op, "name": "z", "ts": 35, "dur": 0},
            {**op, "name": "d", "ts": 40, "dur": 1},
        )
    )
    rows = {
        name: (track, depth, utid)
        for name, track, depth, utid in run_sql(
            path,
            "select s.name, s.track_id, s.depth, tt.utid from slice s "
            "join thread_track tt on s.track_id = tt.id",
        ).rows()
    }
    assert rows["b"][0] != rows["a"][0] and rows["b"][1] == 0  # spilled, depth 0
    assert rows["b"][2] == rows["a"][2]  # the same thread
    assert rows["c"][:2] == (rows["a"][0], 1)  # nests in a on the thread's own track
    assert rows["z"][:2] == (rows["a"][0], 0)  # a ends at 35: z begins after it closed
    assert rows["d"][:2] == (rows["a"][0], 0)


def test_thread_tid_is_the_json_tid_and_the_stream_stays_in_args(tmp_path: Path) -> None:
    """ROCm traces can name the stream in args and the thread otherwise."""
    path = tmp_path / "rocm.json"
    path.write_bytes(
        _events(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 2,
                "tid": 2,
                "ts": 1,
                "dur": 1,
                "args": {"stream": 0, "device": 2},
            }
        )
    )
    row = run_sql(
        path,
        "select t.tid, extract_arg(s.arg_set_id, 'args.stream') as stream from slice s "
        "join thread_track tt on s.track_id = tt.id join thread t using (utid)",
    ).row(0)
    assert row == (2, 0)
    assert tv.load(path).kernels.select("tid", "stream").row(0) == (2, 0)


def test_an_unknown_builtin_query_lists_the_builtins() -> None:
    from click.testing import CliRunner

    from traceview.cli import cli
    from traceview.sqlengine import builtin_queries

    result = CliRunner().invoke(
        cli, ["sql", "nosuchquery", str(GENERATED / "dense_sglang.json.gz")]
    )
    assert result.exit_code == 2 and "no built-in query of that name" in result.stderr
    assert all(name in result.stderr for name in builtin_queries())


def test_a_missing_query_file_is_an_error_unless_the_docs_name_a_builtin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newcomer's finding: ``elsewhere/kernel_families.sql``, mistyped, ran the built-in
    query of that name. Only ``NAME.sql`` and the docs' ``queries/NAME.sql`` fall back."""
    monkeypatch.chdir(tmp_path)  # an empty folder: no queries/ here
    trace = str(GENERATED / "dense_sglang.json.gz")
    for missing in ("elsewhere/kernel_families.sql", str(tmp_path / "kernel_families.sql")):
        done = CliRunner().invoke(cli, ["sql", missing, trace])
        assert done.exit_code == 2, done.output
        assert done.stderr.startswith(f"Error: {missing}: no such query file (built-in: ")
    builtin = CliRunner().invoke(cli, ["sql", "kernel_families", trace, "--format", "csv"])
    for documented in ("queries/kernel_families.sql", "kernel_families.sql"):
        done = CliRunner().invoke(cli, ["sql", documented, trace, "--format", "csv"])
        assert done.exit_code == 0 and done.stdout == builtin.stdout


def test_a_query_written_to_a_file_says_so_and_strict_is_the_loaders(tmp_path: Path) -> None:
    trace = str(GENERATED / "dense_sglang.json.gz")
    out = tmp_path / "families.csv"
    done = CliRunner().invoke(cli, ["sql", "kernel_families", trace, "-o", str(out)])
    rows = pl.read_csv(out).height
    assert done.exit_code == 0 and done.stderr == f"wrote {out} ({rows:,} rows)\n"
    perfetto = CliRunner().invoke(
        cli, ["sql", "kernel_families", trace, "--engine", "perfetto", "--strict"]
    )
    assert perfetto.exit_code == 2 and "--strict is traceview's loader's" in perfetto.stderr


def test_execute_is_sql_text_and_table_valued_pragmas_read_the_schema() -> None:
    """A hostile probe's findings: ``-e kernel_families`` ran the built-in query (``-e``
    is SQL text), ``-e select`` said "no built-in query of that name", and
    ``pragma_table_info('slice')`` was refused as "UPDATE is not allowed"."""
    trace = str(GENERATED / "dense_sglang.json.gz")
    word = CliRunner().invoke(cli, ["sql", "-e", "kernel_families", trace])
    assert word.exit_code == 2 and word.stderr.startswith("Error: <sql>:1: near"), word.stderr
    bare = CliRunner().invoke(cli, ["sql", "-e", "select", trace])
    assert bare.exit_code == 2 and "built-in" not in bare.stderr, bare.stderr
    cols = CliRunner().invoke(
        cli, ["sql", "-e", "select name from pragma_table_info('slice')", trace, "--format", "csv"]
    )
    assert cols.exit_code == 0, cols.stderr
    assert {"ts", "dur", "name"} <= set(cols.stdout.split())
    write = CliRunner().invoke(cli, ["sql", "-e", "update sqlite_master set sql = ''", trace])
    assert write.exit_code == 2 and "may not be modified" in write.stderr


def test_a_blob_is_written_as_its_hex_text() -> None:
    """A hostile probe's finding: a BLOB column was a polars traceback in CSV and a Rust
    panic in JSON."""
    trace = str(GENERATED / "dense_sglang.json.gz")
    sql = "select x'00ff' as b, 1 as n"
    csv = CliRunner().invoke(cli, ["sql", "-e", sql, trace, "--format", "csv"])
    assert csv.exit_code == 0 and csv.stdout == "b,n\n00ff,1\n", csv.output
    js = CliRunner().invoke(cli, ["sql", "-e", sql, trace, "--format", "json"])
    assert js.exit_code == 0 and json.loads(js.stdout) == [{"b": "00ff", "n": 1}], js.output


@pytest.mark.parametrize("bound", [float("nan"), float("inf"), 0, -1])
def test_a_query_timeout_that_bounds_nothing_is_refused(bound: float) -> None:
    """A hostile probe's finding: ``--timeout nan`` (and the API's 0 or -1) let a runaway
    query run unbounded."""
    trace = tv.load(GENERATED / "dense_sglang.json.gz")
    with pytest.raises(tv.TraceviewError, match="not a finite number of seconds > 0"):
        run_sql(trace, "select 1", timeout_s=bound)
    if bound != bound:  # nan: click's range lets it through, the engine does not
        done = CliRunner().invoke(
            cli,
            ["sql", "-e", "select 1", str(GENERATED / "dense_sglang.json.gz"), "--timeout", "nan"],
        )
        assert done.exit_code == 2 and "not a finite number of seconds" in done.stderr
