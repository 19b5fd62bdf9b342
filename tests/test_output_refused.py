"""An output the system refuses (a read-only folder, a full disk, standard output on a full
device) is one line naming it, exit code 2, never a traceback; a reader that stops early
(``| head``) ends the command quietly. Found by a probe: every writer raised a Python
traceback from ``tempfile.mkstemp`` or ``write``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GENERATED

from traceview.cli import cli

TRACE = str(GENERATED / "hybrid_chunked.json.gz")
# sysfs is read-only for every user, root included: a folder no file can be made in
READ_ONLY = Path("/sys/kernel")

WRITERS = {
    "heartbeat": (["heartbeat", TRACE], "hb.png"),
    "gaps": (["gaps", TRACE], "g.png"),
    "steps": (["steps", TRACE, "--format", "csv"], "s.csv"),
    "report": (["report", TRACE], "r.html"),
    "annotate": (["annotate", TRACE], "a.json.gz"),
    "sql": (["sql", "-e", "select 1 as x", TRACE], "q.csv"),
    "scan": (["scan", TRACE], "ds"),
}


def _read_only() -> bool:
    try:
        with open(READ_ONLY / "traceview-probe", "w"):
            return False
    except OSError:
        return True


@pytest.mark.skipif(not READ_ONLY.is_dir() or not _read_only(), reason="needs a read-only /sys")
@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=pytest.mark.slow) if c == "report" else c for c in sorted(WRITERS)],
)
def test_an_output_in_a_read_only_folder_is_one_line(command: str) -> None:
    args, name = WRITERS[command]
    target = READ_ONLY / name
    result = CliRunner().invoke(cli, [*args, "-o", str(target)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("Error:")]
    assert errors == [errors[0]] and str(target) in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not target.exists()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args", [["summarize", TRACE, "--json"], ["steps", TRACE, "--format", "csv"]]
)
def test_standard_output_on_a_full_device_is_one_line(args: list[str]) -> None:
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "traceview", *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TRACEVIEW_CACHE": "0"},
            check=False,
        )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], proc.stderr


@pytest.mark.slow
def test_a_reader_that_stops_early_ends_the_command_quietly() -> None:
    """``traceview sql … | head -1``: no BrokenPipeError traceback, and no "Error:" line
    from the net that turns other refused writes into one (it ended quietly before it)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "traceview",
            "sql",
            "-e",
            "select * from slice",
            TRACE,
            "--format",
            "csv",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TRACEVIEW_CACHE": "0"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # the reader is gone before the rows are all written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in (0, 141)  # 141: a shell's code for SIGPIPE, never 1
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert "Error:" not in err, err


def test_a_file_the_writer_reads_is_named_as_itself(tmp_path: Path) -> None:
    """A writer that reads a file (annotate reads its source) and fails there says so, with
    that file's name, not "<output>: cannot be written"."""
    from traceview._io import atomic_write
    from traceview.errors import TraceviewError

    missing = tmp_path / "gone.json.gz"

    def write(target: Path) -> None:
        target.write_bytes(missing.read_bytes())

    with pytest.raises(FileNotFoundError) as caught:
        atomic_write(tmp_path / "out.json.gz", write)
    assert not isinstance(caught.value, TraceviewError)
    assert caught.value.filename == str(missing)
    assert list(tmp_path.iterdir()) == []  # no temp file left


@pytest.mark.parametrize("links", [True, False], ids=["hard-links", "no-hard-links"])
def test_a_file_another_writer_made_meanwhile_is_kept_without_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: bool
) -> None:
    """A hostile probe's finding: two `heartbeat -o same.png` at once both said "wrote",
    and the later replaced the earlier, without --force (the writer rule is checked before
    the work; the file appeared during it). The commit itself now refuses an existing
    file unless asked to overwrite; on a file system without hard links too."""
    from traceview._io import atomic_write
    from traceview.errors import TraceviewError

    if not links:

        def no_link(*args: object) -> None:
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(os, "link", no_link)
    out = tmp_path / "same.png"

    def write(target: Path) -> None:
        out.write_bytes(b"the other command's chart")  # made while this one worked
        target.write_bytes(b"this command's chart")

    with pytest.raises(TraceviewError, match="already exists .*use --force"):
        atomic_write(out, write)
    assert out.read_bytes() == b"the other command's chart"
    assert [p.name for p in tmp_path.iterdir()] == ["same.png"]  # no temp file left
    assert atomic_write(out, write, overwrite=True) == out  # --force replaces it
    assert out.read_bytes() == b"this command's chart"
    assert [p.name for p in tmp_path.iterdir()] == ["same.png"]


def test_without_hard_links_a_failed_commit_leaves_no_empty_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reviewer's finding: where the file system has no hard links, the name is claimed
    by an exclusive create, then replaced by the whole file; a replace that failed left
    the empty claim at the output (and a rerun said it already exists)."""
    from traceview._io import atomic_write
    from traceview.errors import TraceviewError

    def no_link(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    def full_disk(src: object, dst: object) -> None:  # as os.replace says it: both names
        raise OSError(28, "No space left on device", str(src), None, str(dst))

    monkeypatch.setattr(os, "link", no_link)
    monkeypatch.setattr(os, "replace", full_disk)
    out = tmp_path / "out.png"
    with pytest.raises(TraceviewError, match="cannot be written: No space left on device"):
        atomic_write(out, lambda target: target.write_bytes(b"chart"))
    assert list(tmp_path.iterdir()) == []  # neither the claim nor the temporary file


def test_a_dangling_link_at_the_output_is_refused_before_the_work(tmp_path: Path) -> None:
    from traceview._io import check_output
    from traceview.errors import TraceviewError

    out = tmp_path / "out.png"
    out.symlink_to(tmp_path / "nowhere.png")
    with pytest.raises(TraceviewError, match="already exists"):
        check_output(out)
    assert check_output(out, force=True) == out


@pytest.mark.slow
def test_a_table_to_a_closed_pipe_ends_with_141_not_a_check_failure() -> None:
    """``traceview summarize … | head`` whose reader is gone: rich's own answer to a closed
    pipe is exit 1, which means a check failed; the command ends quietly with 141, as a shell
    reports SIGPIPE."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "traceview", "summarize", TRACE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TRACEVIEW_CACHE": "0"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # gone before the first row
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "Error:" not in err, err
