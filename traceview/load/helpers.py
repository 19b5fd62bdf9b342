"""Helper processes that decode blocks of a JSON trace beside the loading process.

The typed decoder builds a Python object per event and holds the GIL while it does, so
threads cannot share the work; a helper is a fresh interpreter (``python -c``, never a
fork: a forked child of a process that ran polars' thread pool can deadlock, and
``multiprocessing`` would import the caller's ``__main__`` again). Each helper is owned by
one thread of this process, which sends it a block over its stdin and reads the block's
frames back from its stdout: the thread waits in ``read``/``write`` without the GIL, so
the loading process goes on decoding blocks itself meanwhile. A helper that cannot start,
dies or answers nonsense is given no more blocks; the blocks it held are decoded here.

The wire: a 16-byte mark, an 8-byte little-endian length, then a pickle. Both ends are
this package, in this interpreter's version, started by this process: nothing else writes
to the pipes. An answer that is not a message, or not of the type asked for, ends the
helpers' work (a helper that said something else may never answer again).

How many: :func:`worker_count` (``LoadOptions.workers``, else ``TRACEVIEW_WORKERS``, else
every core this process may run on). ``workers=N`` is this process and ``N - 1`` helpers.
"""

from __future__ import annotations

import gc
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, cast

ENV = "TRACEVIEW_WORKERS"
_MAGIC = b"traceview-block\x01"  # each message starts so, then its length
_HEADER = struct.Struct("<16sQ")
_PIECE = 8 << 20  # a message is read this much at a time
_EXIT_WAIT_S = 30  # a helper given no more blocks ends once it answers the one it holds
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding traceview/

# A helper's program. It imports the decoder's modules only: ``traceview`` and
# ``traceview.load`` are entered as bare packages, so their ``__init__`` (the analyses, the
# plots, the remote readers: about 0.6 s and 20 MB more) never runs in a helper.
_PACKAGES = {
    "traceview": str(Path(_PACKAGE_ROOT, "traceview")),
    "traceview.load": str(Path(_PACKAGE_ROOT, "traceview", "load")),
}
_BOOT = f"""
import sys, types
sys.path.insert(0, {_PACKAGE_ROOT!r})
for name, folder in {_PACKAGES!r}.items():
    package = types.ModuleType(name)
    package.__path__ = [folder]
    sys.modules[name] = package
from traceview.load.helpers import serve
from traceview.load.json import decode_block
serve(decode_block)
"""


def cores() -> int:
    """The cores this process may run on (its affinity where the system has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_count(requested: int | None) -> int:
    """The processes a load decodes on: ``requested``, else ``TRACEVIEW_WORKERS``, else
    :func:`cores`. A bad ``TRACEVIEW_WORKERS`` is a usage error naming it."""
    if requested is not None:
        return requested
    text = os.environ.get(ENV, "").strip()
    if not text:
        return cores()
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        from traceview.errors import UsageError

        raise UsageError(f"{ENV}={text!r} is not a count of processes >= 1")
    return value


def _send(pipe: IO[bytes], obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_HEADER.pack(_MAGIC, len(data)))
    pipe.write(data)
    pipe.flush()


def _receive(pipe: IO[bytes]) -> object:
    """The next message; EOFError where the pipe closed, ValueError where what came is not
    a message (read as it arrives, so a bad length never reserves memory for itself)."""
    head = pipe.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the pipe closed")
    magic, size = _HEADER.unpack(head)
    if magic != _MAGIC:
        raise ValueError("not a message from a traceview helper")
    data = bytearray()
    while len(data) < size:
        piece = pipe.read(min(size - len(data), _PIECE))
        if not piece:
            raise EOFError("the pipe closed mid-message")
        data += piece
    return pickle.loads(data)  # noqa: S301 - our own helper, started by this process


class Helpers:
    """``count`` helper processes, each run by a thread of this process: :meth:`submit`
    a block, get a future of what ``decode(block, *args)`` returned in a helper: an
    ``answer`` or None (where it failed: the caller decodes that block itself)."""

    def __init__(self, count: int, args: tuple[object, ...], answer: type) -> None:
        self.count = count
        self._args = args
        self._answer = answer
        self._threads = ThreadPoolExecutor(count, thread_name_prefix="traceview-helper")
        self._local = threading.local()
        self._processes: list[subprocess.Popen[bytes]] = []
        self._idle: queue.SimpleQueue[subprocess.Popen[bytes]] = queue.SimpleQueue()
        self.broken = False
        self.answered = 0  # blocks the helpers decoded
        try:  # started now: each imports its modules while this process reads on
            for _ in range(count):
                process = subprocess.Popen(
                    [sys.executable, "-c", _BOOT],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    env={**os.environ, ENV: "1"},
                )
                self._processes.append(process)
                self._idle.put(process)
        except OSError:  # no interpreter to start (an embedded Python): decode here
            self.broken = True

    def submit(self, block: bytes) -> Future[object]:
        return self._threads.submit(self._run, block)

    def _process(self) -> subprocess.Popen[bytes]:
        """This thread's helper (each thread keeps the one it took first)."""
        process: subprocess.Popen[bytes] | None = getattr(self._local, "process", None)
        if process is None:
            process = self._idle.get_nowait()
            self._local.process = process
        return process

    def _run(self, block: bytes) -> object:
        if self.broken:
            return None
        try:
            process = self._process()
            assert process.stdin is not None and process.stdout is not None
            _send(process.stdin, (block, self._args))
            answer = _receive(process.stdout)
            if answer is not None and not isinstance(answer, self._answer):
                raise ValueError(f"a helper answered a {type(answer).__name__}")
        except Exception:  # a helper that failed in any way is done: decode it here
            self.broken = True
            return None
        if answer is not None:
            self.answered += 1  # one thread at a time: the GIL is held between reads
        return answer

    def close(self) -> None:
        """End the helpers and wait for them: each exits when its stdin closes, once the
        block it holds is answered; blocks still queued are cancelled (the loader closes
        with blocks outstanding only when it stops on an error)."""
        self.broken = True
        self._threads.shutdown(wait=False, cancel_futures=True)
        processes = self._processes
        for process in processes:
            try:
                if process.stdin is not None:
                    process.stdin.close()
            except (OSError, ValueError):  # a block half sent to a helper that died
                pass
        for process in processes:
            try:
                process.wait(timeout=_EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._threads.shutdown(wait=True)
        for process in processes:
            if process.stdout is not None:
                process.stdout.close()


def serve(decode: Callable[..., object]) -> None:
    """A helper's loop: read a block and its arguments, answer ``decode(block, *args)``
    (None where it raised), until stdin closes (the loading process finished or died)."""
    gc.disable()  # as the loader does: the cyclic GC costs more than the decode
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            block, args = cast(tuple[bytes, tuple[object, ...]], _receive(stdin))
        except EOFError:
            return
        try:
            answer = decode(block, *args)
        except Exception:  # the loading process decodes it itself, and reports it
            answer = None
        del block
        _send(stdout, answer)
