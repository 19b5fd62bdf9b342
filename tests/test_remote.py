"""Traces at URLs (issue 24, first part): read from a real S3 API (moto's server, started
here on 127.0.0.1) and over plain HTTP, streamed through the same loader, with the same
figures as the local file; a missing object or an unreachable endpoint is one line."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GENERATED
from s3server import filesystem, free_port, s3_server

import traceview as tv
from traceview.cli import cli

FILES = ["hybrid_chunked", "dense_vllm_detailed"]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 and a bucket holding fixtures."""
    with s3_server() as url:
        fs = filesystem(url)
        fs.mkdir("traces")
        for name in FILES:
            fs.put(str(GENERATED / f"{name}.json.gz"), f"traces/runs/{name}.json.gz")
        yield url


def _without_path(doc: dict) -> dict:  # type: ignore[type-arg]
    doc = json.loads(json.dumps(doc))
    doc["trace"].pop("path")
    return doc


@pytest.mark.parametrize("name", FILES)
def test_an_s3_object_summarizes_as_the_local_file(endpoint: str, name: str) -> None:
    url = f"s3://traces/runs/{name}.json.gz"
    r = CliRunner().invoke(cli, ["summarize", url, "--json"])
    assert r.exit_code == 0, r.stderr
    remote = json.loads(r.stdout)
    assert remote["trace"]["path"] == url
    local = tv.summarize(tv.load(GENERATED / f"{name}.json.gz")).to_dict()
    assert _without_path(remote) == _without_path(local)


@pytest.mark.slow
def test_steps_heartbeat_and_http(endpoint: str, tmp_path: Path) -> None:
    url = "s3://traces/runs/hybrid_chunked.json.gz"
    out = tmp_path / "steps.csv"
    r = CliRunner().invoke(cli, ["steps", url, "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    local = tv.steps(tv.load(GENERATED / "hybrid_chunked.json.gz"))
    assert out.read_text().count("\n") == local.height + 1
    png = tmp_path / "hb.png"
    r = CliRunner().invoke(cli, ["heartbeat", url, "-o", str(png)])
    assert r.exit_code == 0, r.stderr
    assert png.read_bytes()[:4] == b"\x89PNG"
    # over plain HTTP: a file server on 127.0.0.1 (quiet)
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(GENERATED))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        http_url = f"http://127.0.0.1:{server.server_address[1]}/hybrid_chunked.json.gz"
        r = CliRunner().invoke(cli, ["summarize", http_url, "--json"])
        assert r.exit_code == 0, r.stderr
        local_doc = tv.summarize(tv.load(GENERATED / "hybrid_chunked.json.gz")).to_dict()
        assert _without_path(json.loads(r.stdout)) == _without_path(local_doc)
        missing = http_url.replace("hybrid_chunked", "nope")
        r = CliRunner().invoke(cli, ["summarize", missing])
        assert r.exit_code == 2 and r.stderr.strip() == f"Error: {missing}: no such object"
    finally:
        server.shutdown()


def test_a_missing_object_is_one_line(endpoint: str) -> None:
    r = CliRunner().invoke(cli, ["summarize", "s3://traces/runs/nope.json.gz"])
    assert r.exit_code == 2
    assert r.stderr.strip() == "Error: s3://traces/runs/nope.json.gz: no such object"


@pytest.mark.slow  # about 2-3 s; CI runs it (the default run stays under 2 minutes)
def test_an_unreachable_endpoint_is_one_line_soon(endpoint: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", closed)
    started = time.monotonic()
    r = CliRunner().invoke(cli, ["summarize", "s3://traces/runs/hybrid_chunked.json.gz"])
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "s3://traces/runs/hybrid_chunked.json.gz" in r.stderr
    assert time.monotonic() - started < 60


@pytest.mark.slow  # about 2-3 s; CI runs it (the default run stays under 2 minutes)
def test_every_single_trace_command_reads_a_url(endpoint: str, tmp_path: Path) -> None:
    url = "s3://traces/runs/hybrid_chunked.json.gz"
    commands = [
        ["info", url],
        ["sql", "top_kernels", url],
        ["diff", url, str(GENERATED / "hybrid_chunked.json.gz")],
        ["check", url, "--max", "decode_gaps.decode.p99_ns=1s"],
        ["report", url, "-o", str(tmp_path / "r.html")],
        ["annotate", url, "-o", str(tmp_path / "a.json.gz")],
        ["gaps", url, "-o", str(tmp_path / "g.png")],
    ]
    for args in commands:
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 0, (args[0], r.stderr)
    r = CliRunner().invoke(cli, ["diff", url, str(GENERATED / "hybrid_chunked.json.gz")])
    assert "nothing changed beyond noise" in r.stdout  # the same bytes, read two ways
    # annotate kept the object's events byte for byte: the copy loads to the same kernels
    annotated = tv.load(tmp_path / "a.json.gz")
    assert annotated.kernels.height == tv.load(GENERATED / "hybrid_chunked.json.gz").kernels.height


@pytest.mark.slow  # 4 s: the default run stays under 2 minutes; CI's slow run has it
def test_outputs_at_urls_are_written_whole_and_by_the_writer_rule(endpoint: str) -> None:
    """-o s3://…: the same writer rule as a file (no overwrite without --force, never an
    input, a known suffix), the object written once the command has succeeded, and none
    when it fails."""
    url = "s3://traces/runs/hybrid_chunked.json.gz"
    fs = filesystem(endpoint)
    outputs = {
        "s3://traces/out/hb.png": ["heartbeat", url],
        "s3://traces/out/gaps.svg": ["gaps", url],
        "s3://traces/out/steps.csv": ["steps", url],
        "s3://traces/out/report.html": ["report", url],
        "s3://traces/out/kernels.parquet": ["sql", "top_kernels", url],
    }
    for out, args in outputs.items():
        r = CliRunner().invoke(cli, [*args, "-o", out])
        assert r.exit_code == 0, (args[0], r.stderr)
        assert fs.exists(out.removeprefix("s3://")), out
        assert not [ln for ln in r.stderr.splitlines() if "traceview-out-" in ln]  # the URL
    local = tv.steps(tv.load(GENERATED / "hybrid_chunked.json.gz"))
    assert fs.cat("traces/out/steps.csv").decode().count("\n") == local.height + 1
    assert fs.cat("traces/out/hb.png")[:4] == b"\x89PNG"
    r = CliRunner().invoke(cli, ["heartbeat", url, "-o", "s3://traces/out/hb.png"])
    assert r.exit_code == 2 and "already exists (use --force" in r.stderr
    r = CliRunner().invoke(cli, ["heartbeat", url, "-o", "s3://traces/out/hb.png", "--force"])
    assert r.exit_code == 0 and "wrote s3://traces/out/hb.png" in r.stderr
    r = CliRunner().invoke(cli, ["annotate", url, "-o", url])
    assert r.exit_code == 2 and "is one of this command's inputs" in r.stderr
    # a command that fails after the rule was checked (a CPU capture has no decode gaps
    # to chart) writes nothing
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 5}
    cpu = json.dumps({"traceEvents": [op]}).encode()
    fs.pipe("traces/runs/cpu.json", cpu)
    r = CliRunner().invoke(
        cli, ["gaps", "s3://traces/runs/cpu.json", "-o", "s3://traces/out/never.png"]
    )
    assert r.exit_code == 2 and "no decode gaps" in r.stderr
    assert not fs.exists("traces/out/never.png")
