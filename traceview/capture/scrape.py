"""The engine's ``/metrics``, read and parsed in a process of its own.

The probe timestamps every victim token on its event loop. A ``/metrics`` page takes time
to parse (tens of ms for a vLLM page of a thousand lines, seconds for a page of a hundred
thousand), and the loop would hold every token that arrived meanwhile: the client would
see a gap the engine never made. So a child process (``python -m
traceview.capture.scrape URL ENGINE TIMEOUT_S MAX_BYTES``) reads and parses each page; the
loop only asks for a read and takes the few numbers back. Both read ``time.monotonic_ns``,
one clock for every process of the machine.

The protocol is one line each way: the probe writes a read's number; the child answers
with one JSON object, ``{"seq", "t_ns", "values", "names", "missing"}`` (``missing``:
:func:`~traceview.capture.engine_metrics.missing`'s sentence, or null) or ``{"seq",
"failure", "permanent"}``. A page is read up to :data:`MAX_PAGE_BYTES`; a larger one is not
parsed. A failure is ``permanent`` when reading again cannot help (no ``/metrics``, a page
that is not Prometheus text, or too large), else it is one failed read (an HTTP 5xx or 429,
a timeout, a refused connection) and the probe reads again at the next snapshot.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

MAX_PAGE_BYTES = 8 * 2**20
PERMANENT_STATUS = frozenset({401, 403, 404, 405, 410})  # a later read gets the same answer
_REPLY_LIMIT = 2**20


def read_page(url: str, engine: str, timeout_s: float, max_bytes: int) -> dict[str, Any]:
    """One read of ``url`` (the server's ``/metrics``) and its quantities, as the child
    answers it (without ``seq``). urllib, not httpx: the child starts in a fraction of the
    time, and honours the same proxy variables."""
    import urllib.error
    import urllib.request

    from traceview.capture import engine_metrics
    from traceview.errors import CaptureError

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            t_ns = time.monotonic_ns()  # the page was made before its head was sent
            body = resp.read(max_bytes + 1)
    except urllib.error.HTTPError as exc:
        exc.close()
        return {"failure": f"HTTP {exc.code}", "permanent": exc.code in PERMANENT_STATUS}
    except (OSError, ValueError) as exc:  # URLError, a timeout, a reset; a bad URL
        reason = getattr(exc, "reason", exc)
        return {"failure": f"{type(exc).__name__}: {reason}"[:300], "permanent": False}
    if len(body) > max_bytes:
        return {
            "failure": f"the page is larger than {max_bytes:,} bytes: not read",
            "permanent": True,
        }
    try:
        values, names, note = engine_metrics.parse(body.decode("utf-8", "replace"), engine, url)
    except CaptureError as exc:
        return {"failure": str(exc), "permanent": True}
    return {"t_ns": t_ns, "values": values, "names": names, "missing": note}


def main(argv: list[str]) -> None:
    """The child: answer each read's number on stdin with one JSON line on stdout. It runs
    at a lower priority than the probe, so a long parse yields the CPU to the token loop."""
    with contextlib.suppress(OSError, AttributeError):  # no os.nice: Windows
        os.nice(10)
    url, engine, timeout_s, max_bytes = argv[0], argv[1], float(argv[2]), int(argv[3])
    for line in sys.stdin:
        reply = read_page(url, engine, timeout_s, max_bytes)
        reply["seq"] = int(line)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


class Reader:
    """The probe's side: a child process that reads ``url`` when asked.

    ``await read()`` returns the child's answer; a child that cannot start, or has ended,
    answers every read with a permanent failure. ``close()`` ends it."""

    def __init__(self, url: str, engine: str, timeout_s: float, max_bytes: int) -> None:
        self.args = [url, engine, str(timeout_s), str(max_bytes)]
        self.timeout_s = timeout_s
        self.proc: asyncio.subprocess.Process | None = None
        self.seq = 0
        self.ended: str | None = None

    async def start(self) -> None:
        import asyncio

        root = str(Path(__file__).resolve().parents[2])  # the folder traceview is in
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "traceview.capture.scrape",
                *self.args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=env,
                limit=_REPLY_LIMIT,
            )
        except OSError as exc:
            self.ended = f"the /metrics reader could not start ({exc.strerror or exc})"

    async def read(self) -> dict[str, Any]:
        """The next read's answer. Answers to reads that were given up (a cancelled
        read) are skipped by their number."""
        if self.proc is None or self.ended is not None:
            return {
                "failure": self.ended or "the /metrics reader is not running",
                "permanent": True,
            }
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.seq += 1
        try:
            self.proc.stdin.write(f"{self.seq}\n".encode())
            await self.proc.stdin.drain()
            while True:
                line = await self.proc.stdout.readline()
                if not line:
                    break
                reply: dict[str, Any] = json.loads(line)
                if reply.get("seq") == self.seq:
                    return reply
        except (OSError, ValueError) as exc:
            self.ended = f"the /metrics reader failed ({type(exc).__name__})"
            return {"failure": self.ended, "permanent": True}
        code = await self.proc.wait()
        self.ended = f"the /metrics reader ended (exit code {code})"
        return {"failure": self.ended, "permanent": True}

    async def close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


if __name__ == "__main__":
    main(sys.argv[1:])
