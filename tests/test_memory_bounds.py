"""Bounded memory on any input: a small compressed file that expands to a gigabyte string,
a gigabyte key before traceEvents, megabytes of whitespace, a huge header value. Each runs
the real CLI in a subprocess whose address space is capped at 2 GiB (RLIMIT_AS) and must
finish within 60 s with a summary, or exit 2 with one line: never a MemoryError, a
traceback or a crash."""

from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT

LIMIT = 2 << 30
KERNEL = {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "dur": 5.0, "args": {"stream": 7}}


def _kernels(n: int = 40) -> bytes:
    return b", ".join(
        json.dumps({**KERNEL, "name": f"gemm_{i % 3}", "ts": 10.0 + 10 * i}).encode()
        for i in range(n)
    )


def _write_gz(path: Path, parts: Iterator[bytes]) -> Path:
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        for part in parts:
            f.write(z.compress(part))
        f.write(z.flush())
    return path


def _repeat(unit: bytes, total: int) -> Iterator[bytes]:
    block = unit * max(1, (8 << 20) // len(unit))
    for _ in range(total // len(block)):
        yield block


def long_name(path: Path, size: int) -> Path:
    """One kernel whose name is ``size`` bytes of ``x}, {`` (false event boundaries)."""
    return _write_gz(
        path,
        iter(
            [
                b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "',
                *_repeat(b"x}, {", size),
                b'", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": {"stream": 7}}, ',
                _kernels(),
                b"]}",
            ]
        ),
    )


def long_key(path: Path, size: int) -> Path:
    """A ``size``-byte string key before ``traceEvents``."""
    return _write_gz(
        path,
        iter([b'{"', *_repeat(b"k", size), b'": 1, "traceEvents": [', _kernels(), b"]}"]),
    )


def whitespace(path: Path, size: int) -> Path:
    """``size`` bytes of whitespace before a valid trace."""
    return _write_gz(path, iter([*_repeat(b" \n", size), b'{"traceEvents": [', _kernels(), b"]}"]))


def huge_header_value(path: Path, size: int) -> Path:
    """A ``size``-byte array of numbers under a key before ``traceEvents``."""
    return _write_gz(
        path,
        iter(
            [
                b'{"stackFrames": [',
                *_repeat(b"0, ", size),
                b'0], "traceEvents": [',
                _kernels(),
                b"]}",
            ]
        ),
    )


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _summarize_limited(path: Path) -> tuple[int, str, str, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "traceview", "--no-cache", "summarize", "--json", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit,
    )
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


# the default run reads one shape (the fastest); CI's slow run reads every one
SLOW = pytest.mark.slow
SHAPES = [
    pytest.param(long_name, 256 << 20, "summary", id="name-256MB", marks=SLOW),
    pytest.param(long_key, 256 << 20, "summary", id="key-256MB", marks=SLOW),
    pytest.param(whitespace, 16 << 20, "summary", id="whitespace-16MB"),
    pytest.param(huge_header_value, 96 << 20, "error", id="header-array-96MB", marks=SLOW),
    pytest.param(long_name, 1 << 30, "summary", id="name-1GB", marks=pytest.mark.slow),
    pytest.param(long_key, 2 << 30, "summary", id="key-2GB", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("shape", "size", "outcome"), SHAPES)
def test_a_small_file_is_read_in_bounded_memory_and_time(
    tmp_path: Path, shape: object, size: int, outcome: str
) -> None:
    path = shape(tmp_path / "t.json.gz", size)  # type: ignore[operator]
    assert path.stat().st_size <= 10 << 20  # the shapes are small files
    code, out, err, seconds = _summarize_limited(path)
    assert "Traceback" not in err and "MemoryError" not in err, err[-2000:]
    assert seconds < 60
    if outcome == "error":
        assert code == 2 and err.count("\n") == 1 and str(path) in err, err
        return
    assert code == 0, err[-2000:]
    doc = json.loads(out)
    assert doc["trace"]["kernels"] >= 40
    if shape in (long_name, long_key):
        assert "longer than 64 KiB cut" in err


def test_leading_whitespace_keeps_the_trace_whole(tmp_path: Path) -> None:
    import traceview as tv

    path = whitespace(tmp_path / "w.json.gz", 16 << 20)
    trace = tv.load(path, options=tv.LoadOptions(cache=False))
    assert trace.kernels.height == 40 and not trace.meta.warnings
    plain = tmp_path / "w.json"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    assert tv.load(plain, options=tv.LoadOptions(cache=False)).kernels.height == 40
