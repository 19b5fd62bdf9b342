"""Capture trusts nothing: the client copies only files under the profile folder it was
given; the lab server answers only localhost Host names and pages, caps max_tokens, stops
generating when its client leaves, and exits within 5 s of SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import ROOT

torch = pytest.importorskip("torch")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

from traceview.capture.lab import LabConfig  # noqa: E402
from traceview.capture.probe import ProbeConfig, run_probe  # noqa: E402
from traceview.capture.server import LabServer  # noqa: E402
from traceview.errors import CaptureError  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]

CFG = LabConfig(layers="LF", token_budget=16)


def _probe(url: str, out: Path, profile_dir: Path | None) -> ProbeConfig:
    return ProbeConfig(
        url=url,
        engine="lab",
        victims=1,
        inject=1,
        prompt_tokens=40,
        victim_prompt_tokens=4,
        steady_tokens=3,
        max_tokens=200,
        profile_dir=str(profile_dir) if profile_dir else None,
        out=str(out),
    )


@pytest.mark.parametrize("case", ["profile-dir", "profile-dir-empty", "no-profile-dir"])
def test_a_server_naming_a_file_outside_the_profile_folder_gets_nothing(
    tmp_path: Path, case: str
) -> None:
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY")
    prof, out = tmp_path / "prof", tmp_path / "out"
    with LabServer(CFG, str(prof)) as server:
        real_stop = server.engine.stop_profile

        def lying_stop() -> str:
            written = Path(real_stop())
            if case == "profile-dir-empty":
                written.unlink()  # nothing in the folder: only the server's word is left
            return str(secret)

        server.engine.stop_profile = lying_stop  # type: ignore[method-assign]
        config = _probe(server.url, out, None if case == "no-profile-dir" else prof)
        if case == "profile-dir":  # the folder's own trace is taken; the named file is not
            result = asyncio.run(run_probe(config))
            assert [p.parent for p in result.traces] == [out]
            assert result.traces[0].name.startswith("lab_")
        else:
            with pytest.raises(CaptureError) as err:
                asyncio.run(run_probe(config))
            assert str(secret) in str(err.value)
            expected = (
                "not a file under the profile folder" if "empty" in case else "no --profile-dir"
            )
            assert expected in str(err.value)
    assert not out.exists() or not any(p.read_bytes() == b"PRIVATE KEY" for p in out.rglob("*"))


def test_only_localhost_names_and_pages_are_answered(tmp_path: Path) -> None:
    with LabServer(CFG, str(tmp_path)) as server, httpx.Client(base_url=server.url) as c:
        assert c.get("/health").status_code == 200
        assert c.get("/health", headers={"Host": "localhost:1"}).status_code == 200
        for headers in (
            {"Host": "attacker.example"},  # DNS rebinding: the page's own name
            {"Host": "attacker.example:8123"},
            {"Origin": "http://attacker.example"},  # a cross-site POST
            {"Origin": "null"},
        ):
            r = c.post(
                "/v1/completions",
                content=b'{"prompt": "hi", "max_tokens": 2}',
                headers={"Content-Type": "text/plain", **headers},
            )
            assert r.status_code == 403, headers
            assert r.json()["error"]["type"] == "forbidden"
        r = c.post(
            "/v1/completions",
            json={"prompt": "hi", "max_tokens": 2},
            headers={"Origin": "http://localhost:3000"},
        )
        assert r.status_code == 200
        assert server.engine.metrics["requests"] == 1  # the refused ones never reached it


def test_max_tokens_is_capped(tmp_path: Path) -> None:
    with (
        LabServer(CFG, str(tmp_path), max_tokens_cap=50) as server,
        httpx.Client(base_url=server.url) as c,
    ):
        r = c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 51})
        assert r.status_code == 400 and "cap of 50" in r.json()["error"]["message"]
        assert c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 50}).status_code == 200


def _generated(server: LabServer) -> int:
    return int(server.engine.metrics["generated_tokens"])


def _settles(server: LabServer) -> bool:
    """Whether generation stops within 3 s (nothing else is running)."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        before = _generated(server)
        time.sleep(0.3)
        if _generated(server) == before and all(s.cancelled for s in server.engine.running):
            return True
    return False


@contextmanager
def _post_and_wait(address: tuple[str, int]) -> Iterator[None]:
    """A non-streaming client: it sends a long request, then (on leaving) hangs up without
    reading the answer."""
    with socket.create_connection(address) as s:
        payload = b'{"prompt": "hi", "max_tokens": 1000000}'
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        yield


def test_a_client_that_leaves_stops_its_generation(tmp_path: Path) -> None:
    with LabServer(CFG, str(tmp_path), max_tokens_cap=1_000_000) as server:
        body = {"prompt": "hi", "max_tokens": 1_000_000, "stream": True}
        with (
            httpx.Client(base_url=server.url, timeout=30) as c,
            c.stream("POST", "/v1/completions", json=body) as r,
        ):
            lines = r.iter_lines()
            for _ in range(3):
                next(lines)
        assert _settles(server), "streaming: still generating after the client left"
        streamed = _generated(server)
        assert streamed < 100_000
        # non-streaming: the client sends its request and hangs up
        host, port = server.url.removeprefix("http://").split(":")
        with _post_and_wait((host, int(port))):
            deadline = time.monotonic() + 10
            while _generated(server) == streamed and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _generated(server) > streamed  # it started
        assert _settles(server), "non-streaming: still generating after the client left"


def test_a_stream_whose_client_left_gets_no_more_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's loop falls behind (a loaded machine) while its client leaves: the
    tokens queued meanwhile are not written to the closed socket. They were, each write
    past the fifth a line ``socket.send() raised exception.`` on the demo's stderr."""
    with LabServer(CFG, str(tmp_path), max_tokens_cap=1_000_000) as server:
        host, port = server.url.removeprefix("http://").split(":")
        conn = socket.create_connection((host, int(port)))
        payload = b'{"prompt": "hi", "max_tokens": 1000000, "stream": true}'
        conn.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        seen = b""
        while seen.count(b"data:") < 3:  # streaming
            seen += conn.recv(1 << 16)
        holding = threading.Event()

        def behind() -> None:
            """Hold the server's loop until the engine has queued 30 more tokens."""
            holding.set()
            target, deadline = _generated(server) + 30, time.monotonic() + 30
            while _generated(server) < target and time.monotonic() < deadline:
                time.sleep(0.01)

        server.server.servers[0].get_loop().call_soon_threadsafe(behind)
        assert holding.wait(10)
        conn.close()  # the client leaves while the loop is held
        assert _settles(server), "still generating after the client left"
    assert _generated(server) >= 33  # the backlog was there to write
    lost = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert lost == []


def test_sigterm_ends_the_server_within_5_s(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "traceview",
            "capture",
            "lab",
            "--port",
            str(port),
            "--profile-dir",
            str(tmp_path),
            "--layers",
            "LF",
            "--max-tokens-cap",
            "1000000",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        # a non-streaming request whose client hung up, then a streaming one in flight
        with _post_and_wait(("127.0.0.1", port)):
            time.sleep(0.5)
        body = {"prompt": "hi", "max_tokens": 1_000_000, "stream": True}
        with (
            httpx.Client(base_url=url, timeout=30) as c,
            c.stream("POST", "/v1/completions", json=body) as r,
        ):
            next(r.iter_lines())  # a request in flight, its client still there
            sent = time.monotonic()
            os.kill(proc.pid, signal.SIGTERM)
            code = proc.wait(timeout=30)
            took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert took < 5, f"exited {took:.1f} s after SIGTERM"
    assert code in (0, -signal.SIGTERM), proc.stderr.read().decode()[-2000:] if proc.stderr else ""
