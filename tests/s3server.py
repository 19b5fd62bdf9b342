"""A real S3 API for the tests: moto's standalone server, started on 127.0.0.1 in a
subprocess, and the environment a user sets for an S3-compatible server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment(url: str) -> dict[str, str]:
    """What a user of a local S3-compatible server sets."""
    return {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


@contextmanager
def s3_server() -> Iterator[str]:
    """moto's S3 server on a free port of 127.0.0.1, with this process's environment
    pointing at it; yields its endpoint URL."""
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail("moto's S3 server did not start")
            time.sleep(0.1)
    env = environment(url)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield url
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.terminate()
        server.wait(10)


def filesystem(url: str):  # type: ignore[no-untyped-def]
    """An s3fs filesystem on the server, with no cached listings (the tests change the
    bucket between reads)."""
    import s3fs

    return s3fs.S3FileSystem(endpoint_url=url, skip_instance_cache=True, use_listings_cache=False)
