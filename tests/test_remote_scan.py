"""Runs and scans where they live (issue 24): a folder of objects in a real S3 API (moto's
server on 127.0.0.1) summarizes as the same run as the local folder, and `scan s3://… -o
s3://…` writes the same rows as a local scan of the same tree; it is incremental by the
objects' versions, a second scan writes nothing, a killed scan resumes to the same
dataset, the cache keys an object by its ETag, and a Ray cluster started as users start
one reads the inputs from the bucket only."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import GENERATED, ROOT, SHARED_TRACES, cut_in_half
from s3server import environment, filesystem, s3_server

import traceview as tv
from fixtures.ranks import RankRun, build
from traceview.batch.scan import scan
from traceview.batch.scan_task import ScanOptions
from traceview.cli import cli
from traceview.loader import LoadOptions

DLRM = SHARED_TRACES / "param" / "dlrm_8rank"
BUCKET = "bkt"
RUNS = f"s3://{BUCKET}/runs"
# columns that say where and when a trace was read, not what it holds
WHERE = ["path", "version", "mtime_ns", "scanned_at_ns"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tree of runs: a 2-rank run, lone traces beside it and deeper down, a corrupt
    trace, a sidecar and a hidden folder."""
    root = tmp_path_factory.mktemp("tree")
    build(RankRun(ranks=2, slow_rank=1, slow_factor=1.3, steps=10), root / "tp2")
    single = root / "single"
    single.mkdir()
    for name in ("hybrid_chunked", "dense_sglang"):
        shutil.copy(GENERATED / f"{name}.json.gz", single / f"{name}.json.gz")
    shutil.copy(GENERATED / "hybrid_chunked.truth.json", single / "hybrid_chunked.truth.json")
    (single / "broken.json").write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": ')
    (root / "y" / "z").mkdir(parents=True)
    shutil.copy(GENERATED / "hybrid_vllm_old.json.gz", root / "y" / "z" / "old.json.gz")
    (root / ".hidden").mkdir()
    shutil.copy(GENERATED / "dense_sglang.json.gz", root / ".hidden" / "skip.json.gz")
    return root


@pytest.fixture(scope="module")
def bucket(tree: Path) -> Iterator[str]:
    """The tree uploaded to a bucket of moto's S3 server (and the 8-rank run, where
    ../shared/traces is present); yields the server's endpoint."""
    with s3_server() as url:
        fs = filesystem(url)
        fs.mkdir(BUCKET)
        for f in sorted(tree.rglob("*")):
            if f.is_file():
                fs.put(str(f), f"{BUCKET}/runs/{f.relative_to(tree).as_posix()}")
        if DLRM.is_dir():
            for f in sorted(DLRM.glob("*.json.gz")):
                fs.put(str(f), f"{BUCKET}/dlrm/{f.name}")
        yield url


def _s3_table(url: str, ds: str, table: str) -> pl.DataFrame:
    fs = filesystem(url)
    prefix = ds.removeprefix("s3://")
    keys = sorted(k for k in fs.find(f"{prefix}/{table}") if k.endswith(".parquet"))
    return pl.concat([pl.read_parquet(io.BytesIO(fs.cat(k))) for k in keys])


def _local_table(ds: Path, table: str) -> pl.DataFrame:
    return pl.read_parquet(ds / table / "*.parquet")


def _same(a: pl.DataFrame, b: pl.DataFrame, table: str, where: tuple[str, str] = ("", "")) -> None:
    """Equal row for row, but for where each trace was read (``where``: the local root and
    the URL it stands for, in an error's message)."""
    a = a.drop(WHERE, strict=False)
    b = b.drop(WHERE, strict=False)
    if where[0] and "error" in a.columns:
        a = a.with_columns(pl.col("error").str.replace_all(where[0], where[1], literal=True))
    assert a.columns == b.columns, table
    assert a.sort(pl.all()).equals(b.sort(pl.all())), table


def _snapshot(url: str, prefix: str) -> dict[str, tuple[object, object]]:
    """Every object under ``prefix``: its ETag and last write."""
    fs = filesystem(url)
    return {
        k: (i.get("ETag"), i.get("LastModified")) for k, i in fs.find(prefix, detail=True).items()
    }


def _run_doc(paths: list[str]) -> dict:  # type: ignore[type-arg]
    r = CliRunner().invoke(cli, ["summarize", *paths, "--json", "-j", "1"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


@pytest.mark.slow  # about 2-3 s; CI runs it (the default run stays under 2 minutes)
@pytest.mark.parametrize(
    "local, url",
    [
        pytest.param("tp2", f"{RUNS}/tp2", id="tp2"),
        pytest.param(
            str(DLRM),
            f"s3://{BUCKET}/dlrm",
            id="dlrm_8rank",
            marks=pytest.mark.skipif(not DLRM.is_dir(), reason="../shared/traces not present"),
        ),
    ],
)
def test_a_folder_of_rank_objects_is_the_same_run(
    bucket: str, tree: Path, local: str, url: str
) -> None:
    folder = tree / local if not Path(local).is_absolute() else Path(local)
    remote_doc = _run_doc([url])
    local_doc = _run_doc([str(folder)])
    assert len(remote_doc["ranks"]) == len(local_doc["ranks"]) >= 2
    # the same document, but for where each rank was read from
    text = json.dumps(local_doc).replace(str(folder), url)
    assert json.loads(text) == remote_doc


@pytest.mark.slow
def test_a_glob_url_is_read_as_a_local_glob(bucket: str, tree: Path, tmp_path: Path) -> None:
    run = _run_doc([f"{RUNS}/tp2/*.json.gz"])
    assert (
        json.loads(
            json.dumps(_run_doc([str(tree / "tp2")])).replace(str(tree / "tp2"), f"{RUNS}/tp2")
        )
        == run
    )
    local = scan([str(tree / "*" / "*.json.gz")], tmp_path / "local")
    remote = scan([f"{RUNS}/*/*.json.gz"], tmp_path / "remote")
    assert len(remote.scanned) == len(local.scanned) == 4  # tp2's two ranks, single's two
    _same(
        _local_table(tmp_path / "local", "traces"),
        _local_table(tmp_path / "remote", "traces"),
        "traces",
    )


@pytest.mark.slow  # 8 s: CI's slow run has it (the default run stays under 2 minutes)
def test_scan_from_s3_into_s3_equals_a_local_scan(bucket: str, tree: Path, tmp_path: Path) -> None:
    local = tmp_path / "local"
    report = scan([str(tree)], local, ScanOptions(jobs=2))
    assert len(report.scanned) == 5 and len(report.failed) == 1 and len(report.not_traces) == 1
    r = CliRunner().invoke(cli, ["scan", RUNS, "-o", f"s3://{BUCKET}/ds", "-j", "2"])
    assert r.exit_code == 0, r.stderr
    assert "scanned 5, skipped 0" in r.stderr and "failed 1" in r.stderr
    for table in ("traces", "steps", "families", "gaps", "errors"):
        remote = _s3_table(bucket, f"s3://{BUCKET}/ds", table)
        _same(_local_table(local, table), remote, table, (str(tree), RUNS))
    traces = _s3_table(bucket, f"s3://{BUCKET}/ds", "traces").sort("path")
    # named where they are: the object's URL, its version (the ETag), the same run names
    assert all(p.startswith(f"{RUNS}/") for p in traces["path"])
    assert all(v.startswith("etag:") for v in traces["version"])
    assert sorted(set(traces["run"])) == [
        "single/dense_sglang.json.gz",
        "single/hybrid_chunked.json.gz",
        "tp2",
        "y/z/old.json.gz",
    ]
    errors = _s3_table(bucket, f"s3://{BUCKET}/ds", "errors")
    assert errors["path"].to_list() == [f"{RUNS}/single/broken.json"]
    # the docs' helper reads the dataset in the bucket (polars, with the endpoint's settings)
    from traceview.batch.dataset import committed

    assert committed(f"s3://{BUCKET}/ds", "steps").collect().height == (
        _local_table(local, "steps").height
    )


def test_a_prefix_that_holds_other_things_is_not_written_into(bucket: str) -> None:
    fs = filesystem(bucket)
    fs.pipe(f"{BUCKET}/notes/2026/readme.txt", b"not a dataset")
    r = CliRunner().invoke(cli, ["scan", f"{RUNS}/single", "-o", f"s3://{BUCKET}/notes"])
    assert r.exit_code == 2 and "holds other files and is not a traceview dataset" in r.stderr
    assert fs.find(f"{BUCKET}/notes") == [f"{BUCKET}/notes/2026/readme.txt"]
    r = CliRunner().invoke(
        cli, ["scan", f"{RUNS}/single", "-o", f"s3://{BUCKET}/notes/2026/readme.txt"]
    )
    assert r.exit_code == 2 and "not a directory" in r.stderr


@pytest.mark.slow  # about 2-3 s; CI runs it (the default run stays under 2 minutes)
def test_a_users_own_objects_in_a_bucket_dataset_are_never_removed(bucket: str) -> None:
    """In a bucket as on disk, the sweeps remove only objects named as a scan names them:
    the user's steps/mine.parquet and a .tmp/ object of another name stay; a real orphan
    (a trace id with no traces/ row) is removed."""
    ds = f"s3://{BUCKET}/own"
    scan([f"{RUNS}/single"], ds, ScanOptions(jobs=1))
    fs = filesystem(bucket)
    a_steps_object = sorted(fs.find(f"{BUCKET}/own/steps"))[0]
    dead = f"999999999.{os.uname().nodename}"
    own = {
        f"{BUCKET}/own/steps/mine.parquet": fs.cat(a_steps_object),
        f"{BUCKET}/own/gaps/notes.txt": b"notes",
        f"{BUCKET}/own/.tmp/lock.mine.{dead}": b"x",
    }
    for key, data in own.items():
        fs.pipe(key, data)
    orphan = f"{BUCKET}/own/steps/{'e' * 32}.parquet"
    fs.pipe(orphan, fs.cat(a_steps_object))
    r = CliRunner().invoke(cli, ["scan", f"{RUNS}/single", "-o", ds, "-j", "1"])
    assert r.exit_code == 0, r.stderr
    fs.invalidate_cache()
    assert {key: fs.cat(key) for key in own} == own
    assert not fs.exists(orphan) and "removed 1 uncommitted file(s)" in r.stderr
    assert r.stderr.count(f"{ds}/steps/mine.parquet") == 1


@pytest.mark.slow  # about 2-3 s; CI runs it (the default run stays under 2 minutes)
def test_the_datasets_doc_reads_a_dataset_in_a_bucket(bucket: str) -> None:
    """docs/datasets.md's bucket queries (polars, the committed() helper, DuckDB through
    fsspec) run against a dataset scanned into the bucket, and agree."""
    pytest.importorskip("duckdb")
    import re

    scan([RUNS], f"s3://{BUCKET}/docs-ds", ScanOptions(jobs=1))
    text = (ROOT / "docs" / "datasets.md").read_text()
    blocks = re.findall(r"```python bucket\n(.*?)```", text, re.S)
    assert blocks
    namespace: dict[str, object] = {}
    for block in blocks:
        code = block.replace("s3://my-bucket/ds", f"s3://{BUCKET}/docs-ds")
        exec(compile(code, "docs/datasets.md", "exec"), namespace)
    by_run = namespace["by_run"]
    assert isinstance(by_run, list) and len(by_run) == 4  # tp2 and the three lone traces


@pytest.mark.slow  # 4 s: the default run stays under 2 minutes; CI's slow run has it
def test_a_second_scan_writes_nothing_and_a_changed_object_is_scanned_again(
    bucket: str, tmp_path: Path
) -> None:
    ds = f"s3://{BUCKET}/incremental"
    first = scan([RUNS], ds, ScanOptions(jobs=1))
    before = _snapshot(bucket, f"{BUCKET}/incremental")
    again = scan([RUNS], ds, ScanOptions(jobs=1))
    assert again.scanned == [] and len(again.skipped) == len(first.scanned)
    assert again.failed == first.failed  # tried again, and failing the same way
    assert _snapshot(bucket, f"{BUCKET}/incremental") == before  # not one object written
    # an object written again with other bytes has another ETag: it alone is read again
    fs = filesystem(bucket)
    # a copy of a scanned object is read once, skipped by its content, and recorded as an
    # alias: the scan after skips it unread
    fs.copy(f"{BUCKET}/runs/single/dense_sglang.json.gz", f"{BUCKET}/copies/same.json.gz")
    copy_url = f"s3://{BUCKET}/copies/same.json.gz"
    once = scan([copy_url], ds, ScanOptions(jobs=1))
    assert once.copies == [copy_url] and once.skipped == [] and once.bytes_read > 0
    twice = scan([copy_url], ds, ScanOptions(jobs=1))
    assert twice.skipped == [copy_url] and twice.bytes_read == 0
    fs.put(str(GENERATED / "hybrid_tight.json.gz"), f"{BUCKET}/runs/single/dense_sglang.json.gz")
    try:
        third = scan([RUNS], ds, ScanOptions(jobs=1))
        assert third.scanned == [f"{RUNS}/single/dense_sglang.json.gz"]
        assert len(third.skipped) == len(first.scanned) - 1
    finally:
        fs.put(
            str(GENERATED / "dense_sglang.json.gz"), f"{BUCKET}/runs/single/dense_sglang.json.gz"
        )


@pytest.mark.slow
def test_a_killed_scan_resumes_to_the_same_dataset(bucket: str, tmp_path: Path) -> None:
    clean = f"s3://{BUCKET}/clean"
    scan([RUNS], clean, ScanOptions(jobs=1))
    killed = f"s3://{BUCKET}/killed"
    cmd = [sys.executable, "-m", "traceview", "scan", RUNS, "-o", killed, "-j", "1"]
    env = {**os.environ, **environment(bucket)}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stderr=subprocess.DEVNULL, start_new_session=True
    )
    fs = filesystem(bucket)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if fs.exists(f"{BUCKET}/killed/steps") and fs.find(f"{BUCKET}/killed/steps"):
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL  # killed mid-way, not finished
    # and, whatever the kill hit, a trace whose rows were written but not committed, its
    # writer dead: as a scan killed between them leaves it
    traces = sorted(fs.find(f"{BUCKET}/killed/traces"))
    if traces:
        tid = traces[0].rsplit("/", 1)[-1].removesuffix(".parquet")
        fs.rm(traces[0])
        fs.pipe(f"{BUCKET}/killed/.tmp/lock.{tid}.999999999.{os.uname().nodename}", b"")
    resumed = scan([RUNS], killed, ScanOptions(jobs=1))
    if traces:  # its steps, families and gaps files, and any the kill left
        assert resumed.orphans_removed >= 3
    assert not fs.find(f"{BUCKET}/killed/.tmp")
    for table in ("traces", "steps", "families", "gaps", "errors"):
        _same(_s3_table(bucket, clean, table), _s3_table(bucket, killed, table), table)


def test_the_cache_keys_an_object_by_its_etag(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    loader = importlib.import_module("traceview.loader")  # the module, not tv.load

    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path / "cache"))
    parses: list[str] = []
    real = loader._load

    def counted(name: str, total: int, opts: LoadOptions) -> tv.Trace:
        parses.append(name)
        return real(name, total, opts)

    monkeypatch.setattr(loader, "_load", counted)
    url = f"{RUNS}/single/hybrid_chunked.json.gz"
    opts = LoadOptions(cache_min_bytes=0)
    first = tv.load(url, options=opts)
    second = tv.load(url, options=opts)
    assert len(parses) == 1 and second.kernels.equals(first.kernels)
    assert second.meta.path == url
    # another write of the object: another ETag, so the cache is not served
    fs = filesystem(bucket)
    fs.put(str(GENERATED / "dense_sglang.json.gz"), f"{BUCKET}/runs/single/hybrid_chunked.json.gz")
    try:
        third = tv.load(url, options=opts)
        assert len(parses) == 2
        assert third.kernels.equals(tv.load(GENERATED / "dense_sglang.json.gz").kernels)
    finally:
        fs.put(
            str(GENERATED / "hybrid_chunked.json.gz"),
            f"{BUCKET}/runs/single/hybrid_chunked.json.gz",
        )


def test_storage_options_reach_the_driver(bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    url = f"{RUNS}/single/dense_sglang.json.gz"
    r = CliRunner().invoke(cli, ["info", url, "--storage-option", f"endpoint_url={bucket}"])
    assert r.exit_code == 0, r.stderr
    r = CliRunner().invoke(cli, ["info", url, "--storage-option", "no_such_option=1"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and url in r.stderr
    r = CliRunner().invoke(cli, ["info", url, "--storage-option", "novalue"])
    assert r.exit_code == 2 and "expected KEY=VALUE" in r.stderr
    assert "TRACEVIEW_STORAGE_OPTIONS" not in os.environ  # set for one command only


@pytest.mark.slow
@pytest.mark.usefixtures("ray_alone")  # one Ray cluster on this machine at a time
def test_a_ray_cluster_reads_the_inputs_from_the_bucket_only(bucket: str, tmp_path: Path) -> None:
    """`ray start --head` on 127.0.0.1 in a subprocess whose environment has the bucket's
    credentials but not its endpoint: the driver hands its endpoint to the workers, which
    read each object by URL; the dataset, in the bucket too, equals the local engine's."""
    pytest.importorskip("ray")
    ray_cli = Path(sys.executable).with_name("ray")
    if not ray_cli.exists():
        pytest.skip("the ray command is not installed beside this Python")
    from s3server import free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    start = [str(ray_cli), "start", "--head", "--node-ip-address", "127.0.0.1"]
    start += [f"--port={free_port()}", "--num-cpus=2", "--include-dashboard=false"]
    subprocess.run(start, env=env, check=True, capture_output=True, timeout=120)
    try:
        local = f"s3://{BUCKET}/by-local"
        scan([RUNS], local, ScanOptions(jobs=2))
        on_ray = f"s3://{BUCKET}/by-ray"
        args = ["scan", RUNS, "-o", on_ray, "--engine", "ray", "--address", "auto"]
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 0, r.stderr
        assert "scanned 5" in r.stderr and "failed 1" in r.stderr
        for table in ("traces", "steps", "families", "gaps", "errors"):
            _same(_s3_table(bucket, local, table), _s3_table(bucket, on_ray, table), table)
    finally:
        subprocess.run([str(ray_cli), "stop", "--force"], env=env, capture_output=True, timeout=120)


@pytest.mark.slow
def test_objects_without_a_version_are_read_again_and_skipped_by_content(
    tree: Path, tmp_path: Path
) -> None:
    """A plain HTTP server gives no ETag: its objects' size and time could match changed
    bytes, so every scan reads them, and skips those whose content the dataset holds."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(tree / "single"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        urls = [f"{base}/hybrid_chunked.json.gz", f"{base}/dense_sglang.json.gz"]
        ds = tmp_path / "ds"
        first = scan(urls, ds, ScanOptions(jobs=1))
        assert sorted(first.scanned) == sorted(urls)
        traces = _local_table(ds, "traces")
        assert traces["version"].to_list() == [None, None]
        local = scan([str(tree / "single" / "hybrid_chunked.json.gz")], tmp_path / "local")
        assert local.scanned  # the same bytes have the same trace id over HTTP
        assert set(_local_table(tmp_path / "local", "traces")["trace_id"]) <= set(
            traces["trace_id"]
        )
        again = scan(urls, ds, ScanOptions(jobs=1))
        assert again.scanned == [] and sorted(again.skipped) == sorted(urls)
        assert again.bytes_read == first.bytes_read  # read again: no version to trust
    finally:
        server.shutdown()


@pytest.mark.slow
def test_a_truncated_object_is_said_and_marked(bucket: str, tmp_path: Path) -> None:
    """Issue 32: ``scan s3://…`` and a run of objects took a truncated object for whole,
    silently. Both say it once, and its row carries the planted cut."""
    fs = filesystem(bucket)
    cut = cut_in_half(tmp_path / "half.json.gz")
    fs.put(str(tmp_path / "half.json.gz"), f"{BUCKET}/cut/half.json.gz")
    url = f"s3://{BUCKET}/cut/half.json.gz"
    said = f"{url}: truncated inside an event after byte {cut:,} "
    r = CliRunner().invoke(cli, ["scan", f"s3://{BUCKET}/cut", "-o", f"s3://{BUCKET}/cutds"])
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count(said) == 1 and "scanned 1 (1 truncated)" in r.stderr
    row = _s3_table(bucket, f"s3://{BUCKET}/cutds", "traces").row(0, named=True)
    assert (row["path"], row["truncated"], row["truncated_at_byte"]) == (url, True, cut)
    run = CliRunner().invoke(cli, ["summarize", f"s3://{BUCKET}/cut/", "--json", "-j", "1"])
    assert run.exit_code == 0, run.stderr
    assert run.stderr.count(said) == 1
    rank = json.loads(run.stdout)["ranks"][0]
    assert (rank["truncated"], rank["truncated_at_byte"]) == (True, cut)
