"""Scans are safe under concurrency and kills: a sweep removes only its own or dead
writers' temporary files, readers see committed traces only and the next scan removes a
killed scan's orphans, and worker processes exit when the scan's process is SIGKILLed."""

from __future__ import annotations

import os
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
from conftest import GENERATED, ROOT

from traceview.batch import dataset as ds_files
from traceview.batch.dataset import committed, remove_orphans, sweep_tmp
from traceview.batch.scan import scan
from traceview.cli import cli

NAMES = ["hybrid_chunked", "dense_sglang", "hybrid_vllm_old", "hybrid_monolithic"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("traces")
    for name in NAMES:
        shutil.copy(GENERATED / f"{name}.json.gz", root / f"{name}.json.gz")
    return root


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _rows(dataset: Path, table: str) -> pl.DataFrame:
    if not list((dataset / table).glob("*.parquet")):
        return pl.DataFrame()
    return committed(dataset, table).collect().sort(pl.all())


def test_a_sweep_removes_only_its_own_and_dead_writers_files(tmp_path: Path) -> None:
    tmp = tmp_path / ".tmp"
    tmp.mkdir()
    host = socket.gethostname()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        tid, uid = "0123456789abcdef" * 2, "fedcba9876543210" * 2
        dead = _dead_pid()
        files = {
            "live": tmp / f"steps.{tid}.{live.pid}.{uid}.{host}.tmp",
            "dead": tmp / f"steps.{tid}.{_dead_pid()}.{uid}.{host}.tmp",
            "mine": tmp / f"gaps.{tid}.{os.getpid()}.{uid}.{host}.tmp",
            "dead_lock": tmp / f"lock.{tid}.{_dead_pid()}.{host}",
            "live_lock": tmp / f"lock.{tid}.{live.pid}.{host}",
            "foreign_new": tmp / f"steps.{tid}.1.{uid}.other.example.tmp",
            "foreign_old": tmp / f"steps.{tid}.1.{'0' * 32}.other.example.tmp",
            "not_ours": tmp / "notes.txt",
            # a dead writer's names, but not as a scan names its files: the user's
            "no_trace_id": tmp / f"lock.mine.{dead}.{host}",
            "no_table": tmp / f"notes.{tid}.{dead}.{uid}.{host}.tmp",
            "no_uuid": tmp / f"steps.{tid}.{dead}.u1.{host}.tmp",
            "short_id": tmp / f"steps.abc.{dead}.{uid}.{host}.tmp",
        }
        for f in files.values():
            f.write_text("x")
        old = time.time() - ds_files.FOREIGN_AGE_S - 60
        os.utime(files["foreign_old"], (old, old))
        removed = {p.name for p in sweep_tmp(tmp_path)}
    finally:
        live.kill()
        live.wait()
    gone = {k for k, f in files.items() if f.name in removed}
    assert gone == {"dead", "mine", "dead_lock", "foreign_old"}
    assert all(f.exists() == (k not in gone) for k, f in files.items())


@pytest.mark.slow
def test_readers_see_committed_traces_and_the_next_scan_removes_orphans(
    traces: Path, tmp_path: Path
) -> None:
    clean = tmp_path / "clean"
    scan([str(traces)], clean)
    ds = tmp_path / "ds"
    scan([str(traces)], ds)
    # a scan killed between a trace's steps/ file and its traces/ row: the row is missing
    victim = sorted((ds / "traces").glob("*.parquet"))[0]
    tid = victim.stem
    victim.unlink()
    host = socket.gethostname()
    (ds / ".tmp" / f"lock.{tid}.{_dead_pid()}.{host}").touch()
    globbed = pl.read_parquet(ds / "steps" / "*.parquet").height
    seen = committed(ds, "steps").collect().height
    victim_rows = pl.read_parquet(ds / "steps" / f"{tid}.parquet").height
    assert victim_rows > 0 and seen == globbed - victim_rows
    # a trace still being written (its writer alive) is not an orphan
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (ds / ".tmp" / f"lock.{tid}.{live.pid}.{host}").touch()
        assert remove_orphans(ds) == []
    finally:
        live.kill()
        live.wait()
    report = scan([str(traces)], ds)
    assert report.orphans_removed == 3  # steps, families and gaps
    assert len(report.scanned) == 1 and not list((ds / ".tmp").iterdir())
    for table in ("traces", "steps", "families", "gaps", "errors"):
        a = _rows(clean, table).drop("scanned_at_ns", strict=False)
        b = _rows(ds, table).drop("scanned_at_ns", strict=False)
        assert a.equals(b), table


def _scan_cmd(paths: list[str], out: Path, jobs: int) -> list[str]:
    return [sys.executable, "-m", "traceview", "scan", *paths, "-o", str(out), "-j", str(jobs)]


@pytest.mark.slow  # 4 s: the default run stays under 2 minutes; CI's slow run has it
def test_two_concurrent_scans_into_one_dataset(traces: Path, tmp_path: Path) -> None:
    """A finishing scan's sweep once deleted another scan's in-flight file."""
    ds = tmp_path / "ds"
    files = sorted(map(str, traces.iterdir()))
    procs = [
        subprocess.Popen(
            _scan_cmd(part, ds, 1), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for part in (files, files[::-1], files[:1])
    ]
    for proc in procs:
        _out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
        assert b"Traceback" not in err
    clean = tmp_path / "clean"
    scan([str(traces)], clean)
    for table in ("traces", "steps", "families", "gaps"):
        a = _rows(clean, table).drop("scanned_at_ns", strict=False)
        b = _rows(ds, table).drop("scanned_at_ns", strict=False)
        assert a.equals(b), table
    assert not list((ds / ".tmp").iterdir())


@pytest.mark.slow  # 4 s: the default run stays under 2 minutes; CI's slow run has it
def test_workers_exit_when_the_scans_process_is_killed(tmp_path: Path) -> None:
    psutil = pytest.importorskip("psutil")
    many = tmp_path / "many"
    many.mkdir()
    for i, name in enumerate(NAMES * 3):  # distinct content: each is scanned
        src = GENERATED / f"{name}.json.gz"
        (many / f"{i:02d}_{name}.json").write_bytes(
            __import__("gzip").decompress(src.read_bytes()) + b" " * i
        )
    proc = subprocess.Popen(
        _scan_cmd([str(many)], tmp_path / "ds", 2),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    children: list = []
    while time.monotonic() < deadline:
        children = parent.children(recursive=True)
        if len(children) >= 2 and list((tmp_path / "ds" / ".tmp").glob("lock.*")):
            break
        time.sleep(0.05)
    assert len(children) >= 2, "the scan never started its workers"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _gone, alive = psutil.wait_procs(children, timeout=10)
    for p in alive:
        p.kill()
    assert not alive, [p.cmdline()[:3] for p in alive]


def test_the_output_must_be_a_dataset_a_new_folder_or_forced(traces: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from traceview.cli import cli

    file = tmp_path / "file"
    file.write_text("keep")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("keep")
    for out, message in ((file, "not a directory"), (busy, "use --force")):
        result = CliRunner().invoke(cli, ["scan", str(traces), "-o", str(out), "-j", "1"])
        assert result.exit_code == 2 and message in result.stderr
        assert result.stderr.count("\n") == 1
    assert file.read_text() == "keep" and sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    result = CliRunner().invoke(cli, ["scan", str(traces), "-o", str(busy), "-j", "1", "--force"])
    assert result.exit_code == 0, result.stderr
    assert (busy / "notes.txt").read_text() == "keep" and (busy / "traces").is_dir()


@pytest.mark.slow
def test_workers_print_no_trace_text_raw(tmp_path: Path) -> None:
    """A pool worker follows the command's warning filters: the loader's warning about a
    truncated trace whose name holds an ESC byte and markup is not printed raw by the
    worker; the command's own lines escape it."""
    runs = tmp_path / "runs"
    runs.mkdir()
    hostile = "a\x1b[31m[red]$`<!--.json"  # ("/" cannot be in a file name)
    (runs / hostile).write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": ')
    shutil.copy(GENERATED / "hybrid_chunked.json.gz", runs / "ok.json.gz")
    cmd = [sys.executable, "-m", "traceview", "scan", str(runs), "-o", str(tmp_path / "ds")]
    r = subprocess.run([*cmd, "-j", "2"], cwd=ROOT, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert b"\x1b" not in r.stderr and b"TraceviewWarning" not in r.stderr
    assert b"not scanned" in r.stderr and b"\\x1b[31m[red]" in r.stderr


def test_a_users_own_files_in_a_dataset_are_never_removed(traces: Path, tmp_path: Path) -> None:
    """A file of the user's in a dataset's folders, a .tmp/ name a scan does not give, is
    left alone by the next scan's sweeps (it removed steps/mine.parquet as an orphan); one
    a reader of the table would read is named once. A real orphan is still removed."""
    ds = tmp_path / "o4"
    scan([str(traces)], ds)
    a_steps_file = sorted((ds / "steps").glob("*.parquet"))[0]
    host, dead = socket.gethostname(), _dead_pid()
    own = {
        "steps/mine.parquet": a_steps_file.read_bytes(),
        "families/0123456789ABCDEF0123456789ABCDEF.parquet": b"upper case: no trace id",
        "gaps/notes.txt": b"notes",
        ".tmp/notes.txt": b"x",
        f".tmp/lock.mine.{dead}.{host}": b"",
        f".tmp/steps.mine.{dead}.{'0' * 32}.{host}.tmp": b"x",
    }
    for rel, data in own.items():
        (ds / rel).write_bytes(data)
    orphan = ds / "steps" / f"{'e' * 32}.parquet"  # a trace id with no traces/ row
    shutil.copy(a_steps_file, orphan)
    r = CliRunner().invoke(cli, ["scan", str(traces), "-o", str(ds)])
    assert r.exit_code == 0, r.stderr
    assert {rel: (ds / rel).read_bytes() for rel in own} == own
    assert not orphan.exists() and "removed 1 uncommitted file(s)" in r.stderr
    for name in ("steps/mine.parquet", "families/0123456789ABCDEF"):
        assert r.stderr.count(str(ds / name)) == 1, name
    assert "notes.txt" not in r.stderr and "lock.mine" not in r.stderr
    # nor is one in aliases/ read as an alias (it is no Parquet file at all)
    (ds / "aliases" / "mine.parquet").write_bytes(b"x")
    r = CliRunner().invoke(cli, ["scan", str(traces), "-o", str(ds)])
    assert r.exit_code == 0 and r.stderr.count(str(ds / "aliases" / "mine.parquet")) == 1
    assert (ds / "aliases" / "mine.parquet").read_bytes() == b"x"


def test_a_corrupt_table_file_is_named_and_nothing_is_removed(traces: Path, tmp_path: Path) -> None:
    """A traces/ file that is no Parquet: one line naming it, exit 2, and the dataset is
    left as it was (not even an interrupted scan's orphan is removed)."""
    ds = tmp_path / "ds"
    scan([str(traces)], ds)
    bad = ds / "traces" / "0123456789abcdef0123456789abcdef.parquet"
    bad.write_text("x\n")
    shutil.copy(sorted((ds / "steps").glob("*.parquet"))[0], ds / "steps" / f"{'e' * 32}.parquet")
    before = {p: p.read_bytes() for p in ds.rglob("*") if p.is_file()}
    r = CliRunner().invoke(cli, ["scan", str(traces), "-o", str(ds)])
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {bad}: not a readable"), lines
    assert {p: p.read_bytes() for p in ds.rglob("*") if p.is_file()} == before
