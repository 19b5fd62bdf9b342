"""traceview scan: the dataset equals the summaries, is readable by polars and DuckDB, is
incremental and interruptible, keeps failures as rows, and Ray writes the same rows."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import GENERATED, ROOT, SCENARIO_NAMES, cut_in_half, truth

import traceview as tv
from fixtures.ranks import RankRun, build
from traceview.batch.dataset import content_hash
from traceview.batch.scan import scan
from traceview.batch.scan_task import ScanOptions, Source, analyse, commit_analysis, scan_trace
from traceview.batch.store import open_store
from traceview.cli import cli

FIXTURES = ["hybrid_chunked", "dense_sglang", "hybrid_vllm_old"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tensor-parallel runs (the second with a slower straggler), three single traces,
    and one corrupt file."""
    root = tmp_path_factory.mktemp("runs")
    build(RankRun(ranks=2, slow_rank=1, slow_factor=1.2, steps=12), root / "tp2_a")
    build(RankRun(ranks=2, slow_rank=0, slow_factor=1.6, steps=12, seed=5), root / "tp2_b")
    single = root / "single"
    single.mkdir()
    for name in FIXTURES:
        shutil.copy(GENERATED / f"{name}.json.gz", single / f"{name}.json.gz")
    (single / "broken.json").write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": ')
    return root


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def _table(dataset: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(dataset / name / "*.parquet")


@pytest.mark.slow
def test_the_dataset_holds_each_traces_summary(runs: Path, tmp_path: Path) -> None:
    before = _digests(runs)
    ds = tmp_path / "ds"
    result = CliRunner().invoke(cli, ["scan", str(runs / "*"), "-o", str(ds), "-j", "2"])
    assert result.exit_code == 0, result.stderr
    assert "scanned 7, skipped 0" in result.stderr and "failed 1" in result.stderr
    assert "broken.json" in result.stderr
    assert _digests(runs) == before  # the user's traces are only read
    traces = _table(ds, "traces")
    assert traces.height == 7 and traces["trace_id"].n_unique() == 7
    errors = _table(ds, "errors")
    assert errors["path"].to_list() == [str((runs / "single" / "broken.json").resolve())]
    assert errors["trace_id"].to_list() == [content_hash(runs / "single" / "broken.json")]
    steps = pl.scan_parquet(str(ds / "steps" / "**" / "*.parquet")).collect()
    for path in (runs / "single").glob("*.json.gz"):
        summary = tv.summarize(tv.load(path))
        tid = content_hash(path)
        row = traces.filter(pl.col("trace_id") == tid).row(0, named=True)
        doc = summary.to_dict()
        assert row["steps"] == doc["steps"]["count"]
        assert row["cadence_p99_ns"] == doc["steps"]["cadence"]["p99_ns"]
        assert row["busy"] == doc["busy"]["fraction"]
        assert row["prompt_tokens"] == doc["work"]["prompt_tokens"]
        mine = steps.filter(pl.col("trace_id") == tid)
        assert mine["anchor_ns"].to_list() == summary.steps["anchor_ns"].to_list()
        assert mine["kind"].to_list() == summary.steps["kind"].to_list()
        gaps = _table(ds, "gaps").filter(pl.col("trace_id") == tid)
        assert gaps["gap_ns"].to_list() == summary.decode_gaps["gap_ns"].to_list()
    ranks = traces.filter(pl.col("run").str.contains("tp2_")).sort("run", "rank")
    assert ranks["rank"].to_list() == [0, 1, 0, 1]
    assert set(traces["engine"].drop_nulls().to_list()) == {"vllm", "sglang"}


@pytest.mark.slow
def test_polars_and_duckdb_read_the_same(runs: Path, tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    ds = tmp_path / "ds"
    scan([str(runs / "*")], ds, ScanOptions(jobs=1))
    by_polars = (
        pl.scan_parquet(str(ds / "traces" / "*.parquet"))
        .group_by("run")
        .agg(pl.col("cadence_p99_ns").max())
        .sort("run")
        .collect()
    )
    by_duckdb = duckdb.sql(
        f"SELECT run, max(cadence_p99_ns) AS cadence_p99_ns "
        f"FROM read_parquet('{ds}/traces/*.parquet') GROUP BY run ORDER BY run"
    ).fetchall()
    assert by_polars.rows() == by_duckdb
    n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{ds}/steps/*.parquet')").fetchall()
    assert n[0][0] == pl.read_parquet(ds / "steps" / "*.parquet").height


@pytest.mark.slow
def test_a_second_scan_skips_what_is_there(runs: Path, tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    first = scan([str(runs / "*")], ds, ScanOptions(jobs=1))

    def stamps_of() -> dict[Path, int]:  # errors/ too: a failure tried again says the same
        return {p: p.stat().st_mtime_ns for p in ds.rglob("*.parquet")}

    stamps = stamps_of()
    again = scan([str(runs / "*")], ds, ScanOptions(jobs=1))
    assert again.scanned == [] and len(again.skipped) == len(first.scanned)
    assert again.failed == first.failed  # a failed trace is tried again
    assert stamps_of() == stamps
    # the same content under another name is the same trace
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(runs / "single" / "dense_sglang.json.gz", copy / "renamed.json.gz")
    once = scan([str(copy)], ds)
    assert once.copies == [str(copy / "renamed.json.gz")] and once.skipped == []
    # and recorded as an alias of that trace: the next scan skips it without reading it
    aliases = pl.read_parquet(ds / "aliases" / "*.parquet")
    assert aliases["path"].to_list() == [str((copy / "renamed.json.gz").resolve())]
    assert aliases["trace_id"].to_list() == [content_hash(copy / "renamed.json.gz")]
    third = scan([str(copy)], ds)
    assert third.skipped == [str(copy / "renamed.json.gz")] and third.bytes_read == 0


@pytest.mark.slow  # about 2-3 s; CI runs it (the default run stays under 2 minutes)
def test_a_killed_scan_resumes_to_the_same_dataset(runs: Path, tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    scan([str(runs / "*")], clean, ScanOptions(jobs=1))
    ds = tmp_path / "killed"
    cmd = [sys.executable, "-m", "traceview", "scan", str(runs / "*"), "-o", str(ds), "-j", "1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list((ds / "traces").glob("*.parquet")):
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # whatever it left: whole files only (each one reads)
    for f in ds.rglob("*.parquet"):
        if ".tmp" not in f.parts:
            pl.read_parquet(f)
    scan([str(runs / "*")], ds, ScanOptions(jobs=1))
    assert not list((ds / ".tmp").iterdir())
    _assert_same_dataset(clean, ds)


def _assert_same_dataset(a: Path, b: Path) -> None:
    """Every table of two datasets holds the same rows (scan times aside)."""
    for table in ("traces", "steps", "families", "gaps", "errors"):
        rows_a = _table(a, table).drop("scanned_at_ns", strict=False).sort("trace_id")
        rows_b = _table(b, table).drop("scanned_at_ns", strict=False).sort("trace_id")
        assert rows_a.equals(rows_b), table


@pytest.mark.slow
@pytest.mark.usefixtures("ray_alone")  # one Ray cluster on this machine at a time
def test_ray_writes_the_same_rows(runs: Path, tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    local, remote = tmp_path / "local", tmp_path / "ray"
    scan([str(runs / "*")], local, ScanOptions(jobs=2))
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        report = scan([str(runs / "*")], remote, ScanOptions(engine="ray"))
    finally:
        ray.shutdown()
    assert len(report.scanned) == 7 and len(report.failed) == 1
    _assert_same_dataset(local, remote)


@pytest.mark.slow
def test_the_datasets_doc_examples_run(runs: Path, tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    ds = tmp_path / "DATASET"
    scan([str(runs / "*")], ds, ScanOptions(jobs=1))
    text = (ROOT / "docs" / "datasets.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 3
    namespace: dict = {"pl": pl, "duckdb": duckdb}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for block in blocks:
            exec(compile(block, "docs/datasets.md", "exec"), namespace)
    finally:
        os.chdir(cwd)
    slowest = namespace["slowest"]
    by_run = {r["run"]: r["rank"] for r in slowest.to_dicts()}
    assert by_run["tp2_a"] == 1  # runs are named relative to the scanned root
    assert by_run["tp2_b"] == 0


@pytest.mark.slow
def test_the_datasets_doc_defines_every_column_of_every_table(runs: Path, tmp_path: Path) -> None:
    """docs/datasets.md has a table per dataset table; each of its rows names columns in its
    first cell. Every column the scan writes is named there (``ns_<family>`` stands for the
    family columns)."""
    ds = tmp_path / "ds"
    scan([str(runs / "*")], ds, ScanOptions(jobs=1))
    text = (ROOT / "docs" / "datasets.md").read_text()
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(runs / "single" / "dense_sglang.json.gz", copy / "again.json.gz")
    scan([str(copy)], ds)  # a copy: an aliases/ row
    for table in ("traces", "steps", "families", "gaps", "errors", "aliases"):
        section = text.split(f"### `{table}/`")[1].split("###")[0]
        documented = set(re.findall(r"`([a-z0-9_<>]+)`", section))
        columns = set(_table(ds, table).columns)
        columns = {"ns_<family>" if c.startswith("ns_") else c for c in columns}
        assert columns <= documented, f"{table}/: undocumented {sorted(columns - documented)}"


@pytest.mark.slow
def test_sidecar_files_are_left_out_not_failed(tmp_path: Path) -> None:
    """A fixture folder holds *.truth.json beside each trace, and charts and pages beside
    them: scan leaves those out instead of counting failures (issue 21)."""
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copy(GENERATED / "dense_sglang.json.gz", folder / "dense_sglang.json.gz")
    shutil.copy(GENERATED / "dense_sglang.truth.json", folder / "dense_sglang.truth.json")
    (folder / "chart.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (folder / "report.html").write_text("<html></html>")
    for paths in ([str(folder)], [str(folder / "*")]):
        report = scan(paths, tmp_path / f"ds{len(paths[0])}")
        assert len(report.scanned) == 1 and report.failed == []
        assert [Path(p).name for p, _ in report.not_traces] == ["dense_sglang.truth.json"]
    result = CliRunner().invoke(cli, ["scan", str(folder / "*"), "-o", str(tmp_path / "c")])
    assert result.exit_code == 0 and "1 not traces (left out)" in result.stderr


def _tree(root: Path) -> Path:
    """The issue's tree: lone traces beside a folder of rank traces, a nested lone trace,
    sidecars, and a hidden folder."""
    inner = root / "in"
    inner.mkdir(parents=True)
    for name in ("hybrid_chunked", "dense_sglang"):
        shutil.copy(GENERATED / f"{name}.json.gz", inner / f"{name}.json.gz")
    shutil.copy(GENERATED / "hybrid_chunked.truth.json", inner / "hybrid_chunked.truth.json")
    (inner / "notes.txt").write_text("not a trace\n")
    build(RankRun(ranks=2, slow_rank=1, steps=6), inner / "dlrm")
    (inner / "dlrm" / "heartbeat.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    deep = inner / "y" / "z"
    deep.mkdir(parents=True)
    shutil.copy(GENERATED / "hybrid_monolithic.json.gz", deep / "hybrid_monolithic.json.gz")
    hidden = inner / ".cache"
    hidden.mkdir()
    shutil.copy(GENERATED / "dense_sglang.json.gz", hidden / "copy.json.gz")
    return root


@pytest.mark.slow
def test_scan_recurses_and_names_runs_by_the_tree(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root")
    ds = tmp_path / "ds"
    r = CliRunner().invoke(cli, ["scan", str(root), "-o", str(ds), "-j", "2"])
    assert r.exit_code == 0, r.stderr
    traces = _table(ds, "traces")
    runs = traces.group_by("run").len().sort("run")
    assert runs.rows() == [
        ("in/dense_sglang.json.gz", 1),
        ("in/dlrm", 2),
        ("in/hybrid_chunked.json.gz", 1),
        ("in/y/z/hybrid_monolithic.json.gz", 1),
    ]
    assert "not traces (left out)" in r.stderr  # the truth sidecar is JSON, no trace
    for table in ("steps", "families", "gaps"):
        by_run = _table(ds, table).join(traces.select("trace_id", "run"), on="trace_id")
        assert (by_run["run"] == by_run["run_right"]).all(), table
    # the folder itself as the root: its ranks are named by the folder
    ds2 = tmp_path / "ds2"
    assert scan([str(root / "in" / "dlrm")], ds2).scanned
    assert _table(ds2, "traces")["run"].unique().to_list() == ["dlrm"]
    # --glob narrows the search
    ds3 = tmp_path / "ds3"
    r = CliRunner().invoke(cli, ["scan", str(root), "-o", str(ds3), "--glob", "*monolithic*"])
    assert r.exit_code == 0, r.stderr
    assert _table(ds3, "traces")["run"].to_list() == ["in/y/z/hybrid_monolithic.json.gz"]
    r = CliRunner().invoke(cli, ["scan", str(root), "-o", str(tmp_path / "d4"), "--glob", "*.nope"])
    assert r.exit_code == 2 and "no trace files matching '*.nope'" in r.stderr


def test_a_dataset_of_another_format_is_refused(runs: Path, tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    scan([str(runs / "single" / "hybrid_chunked.json.gz")], ds)
    assert (ds / "FORMAT").read_text().strip() == "6"
    (ds / "FORMAT").write_text("2\n")  # as the datasets before the version column were written
    r = CliRunner().invoke(cli, ["scan", str(runs / "single"), "-o", str(ds)])
    assert r.exit_code == 2 and "a dataset of format 2" in r.stderr
    assert "Traceback" not in r.stderr
    (ds / "FORMAT").unlink()  # as the datasets before the run column were written
    r = CliRunner().invoke(cli, ["scan", str(runs / "single"), "-o", str(ds)])
    assert r.exit_code == 2 and "no FORMAT file" in r.stderr
    assert "written before traceview recorded its dataset format" in r.stderr


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_a_folder_of_the_users_own_tables_is_not_called_a_dataset(
    runs: Path, tmp_path: Path, force: list[str]
) -> None:
    """A folder holding only traces/, steps/ and errors/ of the user's own (no FORMAT
    file) was called 'a dataset of format 1, written by another traceview': it is said to
    have no FORMAT file, what that means and what to do, and is left as it was."""
    ds = tmp_path / "mine"
    for table in ("traces", "steps", "errors"):
        (ds / table).mkdir(parents=True)
        (ds / table / "data.csv").write_text("a,b\n1,2\n")
    r = CliRunner().invoke(cli, ["scan", str(runs / "single"), "-o", str(ds), *force])
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith(f"Error: {ds}: ")
    assert "no FORMAT file: not a traceview dataset" in line and "format 1" not in line
    assert "scan into a new folder" in line and "--force does not write into it" in line
    assert sorted(p.relative_to(ds).as_posix() for p in ds.rglob("*")) == [
        "errors", "errors/data.csv", "steps", "steps/data.csv", "traces", "traces/data.csv"
    ]  # fmt: skip


def test_a_scan_in_which_every_trace_failed_exits_2(runs: Path, tmp_path: Path) -> None:
    """Every trace found failed and none scanned: exit 2 with one line (the failures are
    in errors/); one skipped or scanned beside the failures: exit 0."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "a.json").write_text("this is not JSON")
    (broken / "b.json.gz").write_bytes(b"\x1f\x8b truncated")
    ds = tmp_path / "ds"
    r = CliRunner().invoke(cli, ["scan", str(broken), "-o", str(ds), "-j", "1"])
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"Error: {ds}: every trace failed (2, in errors/), none scanned"
    )
    assert _table(ds, "errors").height == 2
    good = runs / "single" / "dense_sglang.json.gz"
    r = CliRunner().invoke(cli, ["scan", str(broken), str(good), "-o", str(ds), "-j", "1"])
    assert r.exit_code == 0 and "scanned 1," in r.stderr and "failed 2 " in r.stderr
    r = CliRunner().invoke(cli, ["scan", str(broken), str(good), "-o", str(ds), "-j", "1"])
    assert r.exit_code == 0 and "skipped 1 " in r.stderr and "failed 2 " in r.stderr


@pytest.mark.slow
def test_a_ray_address_where_nothing_listens_fails_within_the_timeout(
    runs: Path, tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    address = f"127.0.0.1:{port}"
    started = time.monotonic()
    args = ["scan", str(runs / "single"), "-o", str(tmp_path / "ds"), "--engine", "ray"]
    r = CliRunner().invoke(cli, [*args, "--address", address, "--connect-timeout", "5"])
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and f"Ray cluster {address}: nothing answers" in r.stderr
    assert time.monotonic() - started < 30
    assert not (tmp_path / "ds").exists()  # checked before the dataset is touched


@pytest.mark.slow
def test_a_ray_worker_needs_only_the_traces_bytes(runs: Path, tmp_path: Path) -> None:
    """The Ray task sees a trace's bytes, never its path nor the dataset: analysed under a
    path that exists nowhere here, it gives the rows the local scan writes."""
    from traceview.batch.scan_ray import analyse_shipped
    from traceview.batch.scan_task import ScanOptions, Source

    source = runs / "single" / "hybrid_chunked.json.gz"
    elsewhere = "/nowhere/on/this/worker/single/hybrid_chunked.json.gz"
    stat = source.stat()
    tid = content_hash(source)
    a = analyse_shipped(
        source.read_bytes(),
        Source(elsewhere, "/nowhere/on/this/worker", stat.st_size, stat.st_mtime_ns),
        tid,
        ScanOptions(),
    )
    assert a["status"]["status"] == "scanned" and a["row"] is not None and a["tables"]
    local = tmp_path / "ds"
    scan([str(source)], local)
    steps = a["tables"]["steps"]
    assert steps.drop("run").equals(_table(local, "steps").drop("run"))
    assert a["row"]["path"].to_list() == [elsewhere]
    assert a["row"]["run"].to_list() == ["single/hybrid_chunked.json.gz"]


@pytest.mark.slow
@pytest.mark.usefixtures("ray_alone")  # one Ray cluster on this machine at a time
def test_ray_start_head_cluster_writes_the_same_rows(runs: Path, tmp_path: Path) -> None:
    """A cluster as users run one: `ray start --head` on 127.0.0.1 in a subprocess, the
    scan joining it."""
    pytest.importorskip("ray")
    ray_cli = Path(sys.executable).with_name("ray")
    if not ray_cli.exists():
        pytest.skip("the ray command is not installed beside this Python")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    start = [str(ray_cli), "start", "--head", "--node-ip-address", "127.0.0.1"]
    start += [f"--port={port}", "--num-cpus=2", "--include-dashboard=false"]
    subprocess.run(start, env=env, check=True, capture_output=True, timeout=120)
    try:
        local, remote = tmp_path / "local", tmp_path / "ray"
        scan([str(runs / "*")], local, ScanOptions(jobs=2))
        # joined as users do, by RAY_ADDRESS=auto: the head's own record of its address
        # (and of its auth token, where Ray sets one) is found on this machine
        args = ["scan", str(runs / "*"), "-o", str(remote), "--engine", "ray"]
        r = CliRunner().invoke(cli, [*args, "--address", "auto"])
        assert r.exit_code == 0, r.stderr
        assert "scanned 7" in r.stderr and "failed 1" in r.stderr
        _assert_same_dataset(local, remote)
    finally:
        subprocess.run([str(ray_cli), "stop", "--force"], env=env, capture_output=True, timeout=120)


def test_a_symlinked_trace_is_named_where_it_is_linked(tmp_path: Path) -> None:
    elsewhere = tmp_path / "store" / "hybrid_chunked.json.gz"
    elsewhere.parent.mkdir()
    shutil.copy(GENERATED / "hybrid_chunked.json.gz", elsewhere)
    root = tmp_path / "runs"
    (root / "a").mkdir(parents=True)
    (root / "a" / "linked.json.gz").symlink_to(elsewhere)
    ds = tmp_path / "ds"
    assert scan([str(root)], ds).scanned
    assert _table(ds, "traces")["run"].to_list() == ["a/linked.json.gz"]


def test_a_truncated_trace_is_said_once_and_marked_in_its_row(tmp_path: Path) -> None:
    """Issue 32: a truncated trace was scanned as whole, silently ("scanned 1 … failed
    0"). Its warning is said once, escaped; the final line counts it; its traces/ row
    carries the planted cut (FORMAT 4)."""
    traces = tmp_path / "traces"
    traces.mkdir()
    cut = cut_in_half(traces / "half-\x1b[31m.json.gz")
    cut_gz = cut_in_half(traces / "half_gzip.json.gz", gzip_bytes=True)
    shutil.copy(GENERATED / "dense_sglang.json.gz", traces / "whole.json.gz")
    ds = tmp_path / "ds"
    r = CliRunner().invoke(cli, ["scan", str(traces), "-o", str(ds), "-j", "1"])
    assert r.exit_code == 0, r.stderr
    assert "scanned 3 (2 truncated), skipped 0" in r.stderr and "failed 0" in r.stderr
    assert "\x1b" not in r.stderr and "half-\\x1b[31m.json.gz: truncated" in r.stderr
    assert r.stderr.count(f"truncated inside an event after byte {cut:,} ") == 1
    assert r.stderr.count(f"after byte {cut_gz:,} (its gzip stream ends early)") == 1
    rows = _table(ds, "traces").select("path", "truncated", "truncated_at_byte").rows()
    assert {(Path(p).name, t, at) for p, t, at in rows} == {
        ("half-\x1b[31m.json.gz", True, cut),
        ("half_gzip.json.gz", True, cut_gz),
        ("whole.json.gz", False, None),
    }
    assert (ds / "FORMAT").read_text().strip() == "6"


@pytest.mark.slow
def test_a_truncated_trace_read_by_a_pool_worker_is_said_once(tmp_path: Path) -> None:
    """The same through the process pool (-j 2): the worker prints nothing, the command
    says it once."""
    traces = tmp_path / "traces"
    traces.mkdir()
    cut = cut_in_half(traces / "half.json.gz")
    shutil.copy(GENERATED / "dense_sglang.json.gz", traces / "whole.json.gz")
    cmd = [sys.executable, "-m", "traceview", "scan", str(traces), "-o", str(tmp_path / "ds")]
    r = subprocess.run([*cmd, "-j", "2"], cwd=ROOT, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(f"truncated inside an event after byte {cut:,} ".encode()) == 1
    assert b"TraceviewWarning" not in r.stderr and b"scanned 2 (1 truncated)" in r.stderr


def test_each_failing_path_has_its_errors_row(tmp_path: Path) -> None:
    """Issue 32: two identical garbage files shared one errors/ row (it was named by the
    content hash), and so did two empty files. Each failing path has its own; a second
    scan, failing the same way, writes nothing."""
    traces = tmp_path / "traces"
    traces.mkdir()
    for name in ("garbage_a.json", "garbage_b.json"):
        (traces / name).write_text("this is not JSON")
    for name in ("empty_a.json", "empty_b.json"):
        (traces / name).write_bytes(b"")
    ds = tmp_path / "ds"
    report = scan([str(traces)], ds)
    assert len(report.failed) == 4
    errors = _table(ds, "errors")
    planted = {str((traces / n).resolve()) for n in os.listdir(traces)}
    assert sorted(errors["path"].to_list()) == sorted(planted)
    assert (
        errors.filter(pl.col("path").str.contains("empty_"))["error"]
        .str.contains("empty file")
        .all()
    )
    stamps = {p: p.stat().st_mtime_ns for p in ds.rglob("*.parquet")}
    assert len(scan([str(traces)], ds).failed) == 4
    assert {p: p.stat().st_mtime_ns for p in ds.rglob("*.parquet")} == stamps
    # a failing path that holds a trace now loses its row: scanned, or a copy of one
    shutil.copy(GENERATED / "dense_sglang.json.gz", traces / "garbage_a.json")
    shutil.copy(GENERATED / "dense_sglang.json.gz", traces / "garbage_b.json")
    report = scan([str(traces)], ds)
    assert (len(report.scanned), len(report.copies), len(report.failed)) == (1, 1, 2)
    left = _table(ds, "errors")["path"].to_list()
    assert sorted(left) == sorted(p for p in planted if "empty_" in p)


@pytest.mark.parametrize("jobs", ["1", pytest.param("2", marks=pytest.mark.slow, id="2")])
def test_copies_are_one_trace_and_the_rest_aliases(tmp_path: Path, jobs: str) -> None:
    """Issue 32: 2000 copies said "scanned 2" (two workers analysed copies at once and both
    wrote the trace, one path lost) and counted the others as already there. Every copy is
    the one trace or an alias, and the line says so."""
    copies = tmp_path / "copies"
    copies.mkdir()
    for i in range(50):
        shutil.copy(GENERATED / "dense_sglang.json.gz", copies / f"c{i:02}.json.gz")
    ds = tmp_path / "ds"
    r = CliRunner().invoke(cli, ["scan", str(copies), "-o", str(ds), "-j", jobs])
    assert r.exit_code == 0, r.stderr
    assert "scanned 1, 49 copies of traces in the dataset recorded as aliases, skipped 0" in (
        r.stderr
    )
    traces, aliases = _table(ds, "traces"), _table(ds, "aliases")
    assert traces.height == 1 and aliases.height == 49
    every = {str(p.resolve()) for p in copies.iterdir()}
    assert set(traces["path"]) | set(aliases["path"]) == every
    assert not set(traces["path"]) & set(aliases["path"])
    again = scan([str(copies)], ds)
    assert len(again.skipped) == 50 and again.bytes_read == 0 and not again.copies


def test_two_tasks_analysing_copies_at_once_write_the_trace_once(tmp_path: Path) -> None:
    """The race behind "scanned 2", made deterministic: both copies are analysed before
    either is committed; the second commit finds the trace there and records an alias."""
    for name in ("a.json.gz", "b.json.gz"):
        shutil.copy(GENERATED / "dense_sglang.json.gz", tmp_path / name)
    ds = tmp_path / "ds"
    scan([str(tmp_path / "a.json.gz")], ds)  # makes the dataset
    shutil.rmtree(ds / "traces")
    (ds / "traces").mkdir()
    store = open_store(ds)
    stats = {n: (tmp_path / n).stat() for n in ("a.json.gz", "b.json.gz")}
    sources = [
        Source(str(tmp_path / n), str(tmp_path), st.st_size, st.st_mtime_ns)
        for n, st in stats.items()
    ]
    tid = content_hash(tmp_path / "a.json.gz")
    done = [analyse(s.path, s, tid, ScanOptions()) for s in sources]
    statuses = [commit_analysis(store, a)["status"] for a in done]
    assert statuses == ["scanned", "copy"]
    assert _table(ds, "traces")["path"].to_list() == [str(tmp_path / "a.json.gz")]
    assert _table(ds, "aliases")["path"].to_list() == [str(tmp_path / "b.json.gz")]


def test_a_trace_committed_by_a_concurrent_scan_is_no_alias_of_itself(tmp_path: Path) -> None:
    """Issue 32: two concurrent scans wrote aliases/ rows whose alias was the trace's own
    file. Deterministically: a scan that listed the file before the other scan committed
    it finds it there, and records nothing."""
    shutil.copy(GENERATED / "dense_sglang.json.gz", tmp_path / "t.json.gz")
    ds = tmp_path / "ds"
    scan([str(tmp_path / "t.json.gz")], ds)  # the other scan, done first
    st = (tmp_path / "t.json.gz").stat()
    listed = Source(str(tmp_path / "t.json.gz"), str(tmp_path), st.st_size, st.st_mtime_ns)
    status = scan_trace(listed, str(ds), ScanOptions())
    assert status["status"] == "skipped"
    assert not list((ds / "aliases").glob("*.parquet"))


@pytest.mark.slow
def test_two_concurrent_scans_of_one_folder_write_no_self_alias(tmp_path: Path) -> None:
    """Two scans of one folder into one dataset at once (two processes): no aliases/ row
    names a trace's own file, size and mtime, and every trace is there once."""
    traces = tmp_path / "traces"
    traces.mkdir()
    for name in SCENARIO_NAMES:
        shutil.copy(GENERATED / f"{name}.json.gz", traces / f"{name}.json.gz")
    ds = tmp_path / "ds"
    cmd = [sys.executable, "-m", "traceview", "scan", str(traces), "-o", str(ds), "-j", "1"]
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    rows = _table(ds, "traces")
    assert sorted(rows["path"]) == sorted(str(p.resolve()) for p in traces.iterdir())
    own = set(rows.select("path", "size", "mtime_ns").rows())
    if list((ds / "aliases").glob("*.parquet")):
        aliases = _table(ds, "aliases").select("path", "size", "mtime_ns").rows()
        assert not own & set(aliases)


@pytest.mark.slow
def test_scan_with_a_model_gives_each_steps_mfu_and_mbu(tmp_path: Path) -> None:
    """Issue 33: scan takes --model and --gpu (it refused them): each step's row gains its
    tokens, FLOPs, bytes, MFU and MBU, the same figures `steps --model` gives; without a
    model the columns are there, null, so every file of the table has the same columns."""
    trace = GENERATED / "hybrid_chunked.json.gz"
    model = ROOT / "fixtures" / "configs" / "engine-hybrid-moe.json"
    args = ["scan", str(trace), "-o", str(tmp_path / "ds"), "-j", "1"]
    result = CliRunner().invoke(cli, [*args, "--model", str(model), "--gpu", "H100"])
    assert result.exit_code == 0, result.output
    rows = pl.read_parquet(tmp_path / "ds" / "steps" / "*.parquet").sort("index")
    config = tv.AnalysisConfig(model=str(model), gpu="H100")
    want = tv.analyze(trace, config).steps
    assert rows["mfu"].null_count() < rows.height  # the planted steps have work
    for column in ("tokens", "flops", "attention_counted"):
        assert rows[column].to_list() == want[column].to_list(), column
    for column in ("bytes", "mfu", "mbu"):
        for got, exp in zip(rows[column].to_list(), want[column].to_list(), strict=True):
            assert (got is None and exp is None) or got == pytest.approx(exp, rel=1e-12)
    plain = CliRunner().invoke(cli, ["scan", str(trace), "-o", str(tmp_path / "plain")])
    assert plain.exit_code == 0, plain.output
    bare = pl.read_parquet(tmp_path / "plain" / "steps" / "*.parquet")
    assert bare.columns == rows.columns
    assert bare["mfu"].null_count() == bare.height


def test_a_dataset_is_scanned_one_way(tmp_path: Path) -> None:
    """A reviewer's finding: a rescan with --model skipped the trace (by its content) and
    kept its rows without MFU, silently. The dataset records how its traces were analysed
    (CONFIG) and refuses a scan that analyses them otherwise; the same options scan on."""
    trace = str(GENERATED / "dense_sglang.json.gz")
    ds = tmp_path / "ds"
    first = CliRunner().invoke(cli, ["scan", trace, "-o", str(ds), "-j", "1"])
    assert first.exit_code == 0, first.output
    before = sorted((p.name, p.stat().st_mtime_ns) for p in ds.rglob("*") if p.is_file())
    model = str(ROOT / "fixtures" / "configs" / "engine-dense.json")
    for other in (["--model", model], ["--steps", "bursts"], ["--layers", "3"]):
        r = CliRunner().invoke(cli, ["scan", trace, "-o", str(ds), *other])
        assert r.exit_code == 2, (other, r.output)
        assert r.stderr.startswith(f"Error: {ds}: its traces were analysed otherwise (")
        assert r.stderr.count("\n") == 1
        assert "None" not in r.stderr  # a setting left to its default says "default"
    after = sorted((p.name, p.stat().st_mtime_ns) for p in ds.rglob("*") if p.is_file())
    assert after == before  # nothing written
    again = CliRunner().invoke(cli, ["scan", trace, "-o", str(ds)])
    assert again.exit_code == 0 and "skipped 1" in again.stderr


def test_the_documented_reader_reads_a_clean_dataset(tmp_path: Path) -> None:
    """A hostile probe's finding: ``committed(ds, "errors")`` (and ``"aliases"``) raised
    "expanded paths were empty" on a dataset whose scan had no failure, the usual case."""
    from traceview.batch.dataset import committed

    ds = tmp_path / "ds"
    done = CliRunner().invoke(cli, ["scan", str(GENERATED / "dense_sglang.json.gz"), "-o", str(ds)])
    assert done.exit_code == 0, done.output
    assert committed(ds, "errors").collect().columns == ["trace_id", "path", "run", "error"]
    assert committed(ds, "errors").collect().height == 0
    assert committed(ds, "aliases").collect().height == 0
    assert committed(ds, "steps").collect().height == len(truth("dense_sglang")["steps"])


def test_a_committed_trace_without_a_file_is_said_by_the_reader_and_written_by_a_scan(
    tmp_path: Path,
) -> None:
    """A committed trace whose steps/ file is gone (moved out by hand, as the readers tell
    of an unreadable file) was skipped by every later scan, and the readers silently read
    the dataset without its steps. Now the reader says which trace lacks the file, and the
    next scan analyses that trace again and writes it whole, the same rows as before; a
    copy of the trace, recorded as its alias, is no reason to skip it either."""
    from traceview.batch.dataset import committed

    trace = GENERATED / "dense_sglang.json.gz"
    copy = tmp_path / "copy.json.gz"
    shutil.copy(trace, copy)
    ds = tmp_path / "ds"
    first = scan([str(trace), str(copy)], ds, ScanOptions(jobs=1))
    assert len(first.scanned) == 1 and len(first.copies) == 1
    before = {t: committed(ds, t).collect().sort(pl.all()) for t in ("steps", "families", "gaps")}
    tid = content_hash(trace)
    moved = ds / "steps" / f"{tid}.parquet"
    moved.rename(tmp_path / "moved-out.parquet")

    with pytest.raises(tv.TraceviewError, match=f"committed trace {tid} has no steps/ file") as e:
        committed(ds, "steps")
    assert f"or move traces/{tid}.parquet out of the dataset" in str(e.value)
    assert committed(ds, "families").collect().sort(pl.all()).equals(before["families"])

    again = scan([str(trace), str(copy)], ds, ScanOptions(jobs=1))
    assert len(again.scanned) == 1 and moved.exists()
    assert again.failed == [] and len(again.copies) == 1  # the copy, whatever came first
    for table, rows in before.items():
        assert committed(ds, table).collect().sort(pl.all()).equals(rows), table
    third = scan([str(trace), str(copy)], ds, ScanOptions(jobs=1))
    assert third.scanned == [] and len(third.skipped) == 2 and third.bytes_read == 0
    # a review's finding: the copy alone, whose rows would name another run, repaired the
    # trace under its own path and run (the trace moved to another run in every query)
    rows = pl.read_parquet(ds / "traces" / f"{tid}.parquet")
    own = rows["path"][0]
    other = next(p for p in (str(trace.resolve()), str(copy.resolve())) if p != own)
    (ds / "gaps" / f"{tid}.parquet").rename(tmp_path / "moved-gaps.parquet")
    by_copy = scan([other], ds, ScanOptions(jobs=1))
    assert by_copy.scanned == [] and len(by_copy.failed) == 1
    assert "only a scan of that path writes them again" in by_copy.failed[0][1]
    assert pl.read_parquet(ds / "traces" / f"{tid}.parquet").equals(rows)
    assert committed(ds, "steps").collect().sort(pl.all()).equals(before["steps"])
    assert not (ds / "gaps" / f"{tid}.parquet").exists()
    by_own = scan([own], ds, ScanOptions(jobs=1))
    assert len(by_own.scanned) == 1 and committed(ds, "gaps").collect().sort(pl.all()).equals(
        before["gaps"]
    )
    assert pl.read_parquet(ds / "traces" / f"{tid}.parquet")["path"].equals(rows["path"])


@pytest.mark.slow  # a shared trace scanned: about 3 s
def test_a_newer_sglang_trace_is_named_sglang() -> None:
    """A hostile probe's finding: newer SGLang wraps its step[…] in an execute_… range,
    which names the steps (as vLLM's does), and the dataset said engine 'vllm'."""
    from conftest import SHARED_TRACES

    path = SHARED_TRACES / "tracelens" / "rocm-mi-sglang-qwen3-8b-decode.json.gz"
    if not path.exists():
        pytest.skip("the shared traces are not here")
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        done = CliRunner().invoke(cli, ["scan", str(path), "-o", folder + "/ds"])
        assert done.exit_code == 0, done.output
        rows = pl.read_parquet(folder + "/ds/traces/*.parquet")
    assert rows["engine"].to_list() == ["sglang"]


def test_a_file_left_out_is_named_as_summarize_names_it(tmp_path: Path) -> None:
    """A hostile probe's finding: scan called a SQLite database that is not an Nsight export
    "valid JSON, but not a trace", while summarize named it right. Both now give the
    loader's own words, for it and for a JSON file that is no trace."""
    import sqlite3

    folder = tmp_path / "runs"
    folder.mkdir()
    with sqlite3.connect(folder / "app.sqlite") as db:
        db.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    (folder / "config.json").write_text('{"model": "x"}')
    r = CliRunner().invoke(cli, ["scan", str(folder), "-o", str(tmp_path / "ds"), "-j", "1"])
    assert r.exit_code == 0, r.stderr
    for name in ("app.sqlite", "config.json"):
        path = folder / name
        said = CliRunner().invoke(cli, ["summarize", str(path)])
        assert said.exit_code == 2
        why = said.stderr.removeprefix(f"Error: {path}: ")
        assert f"Warning: {path}: left out: {why}" in r.stderr, r.stderr
    assert "not an Nsight Systems export" in r.stderr and "valid JSON" not in r.stderr
