"""Outputs never cost a user's files (issue 32, item 1): an output bound for a URL is
written in a folder the command creates under $TMPDIR, and the command removes that
folder, by the name it recorded, and nothing else. An output URL that names a folder
(its last segment empty, ``.`` or ``..``) is refused before anything is staged: it once
made the command remove ``$TMPDIR`` itself.

Every command that takes ``-o`` runs here with local and URL outputs, good and odd, under
a sandboxed ``$TMPDIR`` and working folder that hold canary files."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GENERATED
from s3server import filesystem, free_port, s3_server

from traceview.cli import cli

TRACE = "s3://bkt/in/t.json.gz"
LOCAL_TRACE = str(GENERATED / "dense_vllm_detailed.json.gz")

# every command with -o, and the suffix its output takes
COMMANDS: dict[str, tuple[list[str], str]] = {
    "steps": (["steps", TRACE, "--format", "csv"], ".csv"),
    "sql": (["sql", "top_kernels", TRACE, "--format", "csv"], ".csv"),
    "heartbeat": (["heartbeat", TRACE], ".png"),
    "gaps": (["gaps", TRACE], ".png"),
    "report": (["report", TRACE], ".html"),
    "annotate": (["annotate", TRACE], ".json.gz"),
}


@pytest.fixture(scope="module")
def bucket() -> Iterator[str]:
    with s3_server() as url:
        fs = filesystem(url)
        fs.mkdir("bkt")
        fs.put(LOCAL_TRACE, TRACE.removeprefix("s3://"))
        yield url


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """$TMPDIR and the working folder, each holding canaries; yields the canaries."""
    tmp = tmp_path / "tmp"
    work = tmp_path / "work"
    canaries = [tmp / "canary", tmp / "keep" / "canary", work / "canary", tmp_path / "canary"]
    for c in canaries:
        c.parent.mkdir(parents=True, exist_ok=True)
        c.write_text("alive")
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.chdir(work)
    yield canaries


def _survived(canaries: list[Path], what: object) -> None:
    for c in canaries:
        assert c.is_file() and c.read_text() == "alive", (what, c)
    tmp = canaries[0].parent
    # the command removed what it created, and only that
    assert sorted(p.name for p in tmp.iterdir()) == ["canary", "keep"], what


ODD_URLS = [
    "s3://bkt/out/.",
    "s3://bkt/.",
    "s3://bkt/out/..",
    "s3://bkt/out/",
    "s3://bkt",
    "http://127.0.0.1:{port}/z/.",
    "http://127.0.0.1:{port}/z/",
]


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=pytest.mark.slow) if c == "annotate" else c for c in sorted(COMMANDS)],
)
def test_an_output_url_that_names_a_folder_is_refused_before_staging(
    bucket: str, sandbox: list[Path], command: str
) -> None:
    args, _ = COMMANDS[command]
    port = free_port()  # nothing listens: the refusal asks no server
    for odd in ODD_URLS:
        url = odd.format(port=port)
        r = CliRunner().invoke(cli, [*args, "-o", url])
        _survived(sandbox, (command, url))
        assert r.exit_code == 2, (command, url, r.stderr)
        assert r.stderr.splitlines() == [
            f"Error: {url}: names a folder, not an object; give a file name for the output"
        ], (command, url)


# the default run stages one command's output; CI's slow run stages every one
@pytest.mark.parametrize(
    "command",
    [c if c == "steps" else pytest.param(c, marks=pytest.mark.slow) for c in sorted(COMMANDS)],
)
def test_every_output_form_leaves_the_users_files(
    bucket: str, sandbox: list[Path], command: str
) -> None:
    args, suffix = COMMANDS[command]
    fs = filesystem(bucket)
    key = f"bkt/out/{command}{suffix}"
    # at a URL: written, uploaded, and the staging folder gone
    r = CliRunner().invoke(cli, [*args, "-o", f"s3://{key}"])
    assert r.exit_code == 0, (command, r.stderr)
    assert fs.exists(key)
    _survived(sandbox, (command, "url"))
    # refused after staging (already there): nothing uploaded, staging folder gone
    r = CliRunner().invoke(cli, [*args, "-o", f"s3://{key}"])
    assert r.exit_code == 2 and "already exists" in r.stderr
    _survived(sandbox, (command, "exists"))
    # a local file, then the odd local names, none of which may cost a canary
    r = CliRunner().invoke(cli, [*args, "-o", f"out{suffix}"])
    assert r.exit_code == 0, (command, r.stderr)
    assert Path(f"out{suffix}").stat().st_size > 0
    for odd in (".", "./", "..", "sub/..", str(sandbox[0].parent), str(sandbox[0].parent) + "/."):
        r = CliRunner().invoke(cli, [*args, "-o", odd])
        assert r.exit_code == 2 and "Traceback" not in r.stderr, (command, odd, r.stderr)
        _survived(sandbox, (command, odd))


def test_a_command_that_fails_after_staging_removes_only_its_folder(
    bucket: str, sandbox: list[Path]
) -> None:
    fs = filesystem(bucket)
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 5}
    fs.pipe("bkt/in/cpu.json", json.dumps({"traceEvents": [op]}).encode())
    r = CliRunner().invoke(cli, ["gaps", "s3://bkt/in/cpu.json", "-o", "s3://bkt/out/never.png"])
    assert r.exit_code == 2 and "no decode gaps" in r.stderr
    assert not fs.exists("bkt/out/never.png")
    _survived(sandbox, "failed gaps")


@pytest.mark.slow
def test_scan_and_a_run_annotation_leave_the_users_files(bucket: str, sandbox: list[Path]) -> None:
    r = CliRunner().invoke(cli, ["scan", TRACE, "-o", "s3://bkt/ds", "-j", "1"])
    assert r.exit_code == 0, r.stderr
    r = CliRunner().invoke(cli, ["scan", LOCAL_TRACE, "-o", "ds", "-j", "1"])
    assert r.exit_code == 0, r.stderr
    _survived(sandbox, "scan")
    r = CliRunner().invoke(cli, ["annotate", "s3://bkt/in/", "-o", "annotated", "-j", "1"])
    assert r.exit_code == 0, r.stderr
    assert Path("annotated/t.json.gz").is_file()
    _survived(sandbox, "annotate run")
