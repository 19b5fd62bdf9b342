"""A server that does not answer is an error within the timeouts (issue 32, item 3): a
connect and a read timeout on every request (``--storage-option connect_timeout=S``,
``read_timeout=S``), and one line naming what did not answer. It took 600 s, and said
"no such object" or "cannot read: " with no reason. An object served in chunks (no
Content-Length) is read, not refused as an empty file.

The servers here are tiny socket servers on 127.0.0.1, each stopping itself within a few
seconds; the timeouts are set short through the storage option, so each test takes
seconds."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import pytest
from click.testing import CliRunner
from conftest import GENERATED
from s3server import environment

import traceview as tv
from traceview import environ
from traceview.cli import cli
from traceview.loader import remote

pytest.importorskip("aiohttp")
pytest.importorskip("s3fs")

Behaviour = Callable[[socket.socket], None]
SHORT = ["--storage-option", "connect_timeout=1", "--storage-option", "read_timeout=0.5"]


@contextmanager
def serving(behaviour: Behaviour, seconds: float = 20) -> Iterator[int]:
    """A server on 127.0.0.1 that runs ``behaviour`` on each connection; it stops when the
    block ends, or after ``seconds`` at most. Yields its port."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.1)
    done = threading.Event()
    deadline = time.monotonic() + seconds
    conns: list[socket.socket] = []

    def run() -> None:
        while not done.is_set() and time.monotonic() < deadline:
            try:
                c, _ = srv.accept()
            except TimeoutError:
                continue
            c.settimeout(seconds)
            conns.append(c)
            threading.Thread(target=behaviour, args=(c,), daemon=True).start()
        for c in conns:
            c.close()
        srv.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1]
    finally:
        done.set()
        thread.join(5)


def _request(c: socket.socket) -> bytes:
    got = b""
    while b"\r\n\r\n" not in got:
        part = c.recv(65536)
        if not part:
            return b""
        got += part
    return got


def silent(c: socket.socket) -> None:
    """Accepts, reads the request, never answers."""
    with suppress(OSError):
        _request(c)


def headers_then_stall(c: socket.socket) -> None:
    """Answers HEAD with a length, and GET with its headers and a few bytes, then stalls."""
    try:
        while req := _request(c):
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nAccept-Ranges: bytes\r\n\r\n")
            if not req.startswith(b"HEAD"):
                c.sendall(b'{"traceEv')
                return
    except OSError:
        pass


def chunked(data: bytes) -> Behaviour:
    """Serves ``data`` with Transfer-Encoding: chunked (no Content-Length), to any request."""

    def answer(c: socket.socket) -> None:
        try:
            while req := _request(c):
                c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                if req.startswith(b"HEAD"):
                    continue
                for i in range(0, len(data), 10_000):
                    part = data[i : i + 10_000]
                    c.sendall(b"%x\r\n%s\r\n" % (len(part), part))
                c.sendall(b"0\r\n\r\n")
        except OSError:
            pass

    return answer


def _one_line(args: list[str], expected: str, budget_s: float) -> None:
    started = time.monotonic()
    r = CliRunner().invoke(cli, args)
    took = time.monotonic() - started
    assert r.exit_code == 2, r.stderr
    assert r.stderr.splitlines() == [expected]
    assert took < budget_s, took


@pytest.mark.parametrize(
    "behaviour", [pytest.param(silent, marks=pytest.mark.slow), headers_then_stall]
)
def test_an_http_server_that_does_not_answer_fails_within_the_read_timeout(
    behaviour: Behaviour,
) -> None:
    with serving(behaviour) as port:
        url = f"http://127.0.0.1:{port}/x.json"
        _one_line(
            ["info", url, *SHORT],
            f"Error: {url}: no answer from 127.0.0.1:{port} within 0.5 s (read timeout); "
            "--storage-option read_timeout=SECONDS waits longer",
            budget_s=6,  # a HEAD, then a GET: two reads of 0.5 s each
        )


@pytest.mark.slow  # about 2-3 s; CI runs it (the default run stays under 2 minutes)
@pytest.mark.parametrize("behaviour", [silent, headers_then_stall])
def test_an_s3_endpoint_that_does_not_answer_fails_within_the_read_timeout(
    behaviour: Behaviour, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serving(behaviour) as port:
        for k, v in environment(f"http://127.0.0.1:{port}").items():
            monkeypatch.setenv(k, v)
        _one_line(
            ["info", "s3://bkt/x.json", *SHORT],
            f"Error: s3://bkt/x.json: no answer from 127.0.0.1:{port} within 0.5 s "
            "(read timeout); --storage-option read_timeout=SECONDS waits longer",
            budget_s=10,  # two tries of a HEAD and of a listing, 0.5 s each
        )


def test_the_default_timeouts_are_short_and_reach_the_drivers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(environ.STORAGE_OPTIONS, raising=False)
    assert remote.timeouts("s3://b/x") == (10, 10)
    config = remote._options("s3://b/x")["config_kwargs"]
    assert isinstance(config, dict)
    assert (config["connect_timeout"], config["read_timeout"]) == (10, 10)
    client = remote._options("https://h/x")["client_kwargs"]
    assert isinstance(client, dict)
    timeout = client["timeout"]
    assert (timeout.sock_connect, timeout.sock_read, timeout.total) == (10, 10, None)
    monkeypatch.setenv(
        environ.STORAGE_OPTIONS, json.dumps({"connect_timeout": 2, "read_timeout": 3.5})
    )
    assert remote.timeouts("s3://b/x") == (2, 3.5)
    assert "read_timeout" not in remote._options("s3://b/x")  # never handed to the driver


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon", "true"])
def test_a_timeout_that_is_not_seconds_is_one_line(value: str) -> None:
    url = "http://127.0.0.1:9/x.json"
    r = CliRunner().invoke(cli, ["info", url, "--storage-option", f"read_timeout={value}"])
    assert r.exit_code == 2
    shown = {"true": "True", "soon": "'soon'"}.get(value, value)
    assert r.stderr.splitlines() == [
        f"Error: {url}: --storage-option read_timeout={shown}: not a number of seconds above 0"
    ]


def test_a_trace_served_in_chunks_is_read() -> None:
    local = GENERATED / "dense_vllm_detailed.json.gz"
    with serving(chunked(local.read_bytes())) as port:
        url = f"http://127.0.0.1:{port}/t.json.gz"
        r = CliRunner().invoke(cli, ["summarize", url, "--json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    expected = tv.summarize(tv.load(local)).to_dict()
    doc["trace"].pop("path")
    expected["trace"].pop("path")
    assert doc == json.loads(json.dumps(expected))


def test_a_closed_port_is_not_a_missing_object() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x.json"
    r = CliRunner().invoke(cli, ["info", url])
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        f"Error: {url}: cannot read the object: Cannot connect to host 127.0.0.1:{port} "
        f"ssl:default [Connect call failed ('127.0.0.1', {port})]"
    ]
