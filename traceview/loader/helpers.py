"""Helper processes that decode blocks of a JSON trace beside the loading process.

The typed decoder builds a Python object per event and holds the GIL while it does, so
threads cannot share the work; a helper is a fresh interpreter (``python -P -c``, never a
fork: a forked child of a process that ran polars' thread pool can deadlock, and
``multiprocessing`` would import the caller's ``__main__`` again). Each helper is fed by
two threads of this process: a writer that sends it blocks over its stdin and a reader
that takes the blocks' frames back from its stdout. Both wait in ``write``/``read``
without the GIL, so the loading process goes on decoding blocks itself meanwhile. A
helper that cannot start, dies or answers nonsense ends the helpers' work; the blocks
they held are decoded here, and :attr:`Helpers.failure` says why (the loader logs it: the
trace is the same, but the load is slower than the user asked for).

The wire: a 16-byte mark, an 8-byte little-endian length, then a pickle. Both ends are
this package, in this interpreter's version, started by this process: nothing else writes
to the pipes. An answer that is not a message, or not of the type asked for, ends the
helpers' work (a helper that said something else may never answer again).

How many: :func:`worker_count` (``LoadOptions.workers``, else ``TRACEVIEW_WORKERS``, else
every core this process may run on, up to 8). ``workers=N`` is this process and at most
``N - 1`` helpers, one for every four blocks the text is expected to hold
(:func:`traceview.loader.in_order.helpers_for`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import IO, cast

from traceview import environ

try:
    import fcntl
except ImportError:  # Windows: pipes keep their size
    fcntl = None  # type: ignore[assignment]

_MAGIC = b"traceview-block\x01"  # each message starts so, then its length
_HEADER = struct.Struct("<16sQ")
_PIECE = 8 << 20  # a message is read this much at a time
_PIPE_BYTES = 1 << 20
# a helper that holds no block ends as soon as its stdin closes (one that holds blocks is
# ended at close): one still running after this long is ended too
_EXIT_WAIT_S = 2
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding traceview/

# A helper's program, run with -P (the current folder is not put on sys.path: a queue.py
# or polars.py there must not run in a helper). It imports the decoder's modules only:
# ``traceview`` and ``traceview.loader`` are entered as bare packages (their modules are
# found through ``__path__``), so their ``__init__`` (the loader's remote readers and cache,
# the package's drawing hook) never runs in a helper.
_PACKAGES = {
    "traceview": str(Path(_PACKAGE_ROOT, "traceview")),
    "traceview.loader": str(Path(_PACKAGE_ROOT, "traceview", "loader")),
}
_BOOT = f"""
import sys, types
for name, folder in {_PACKAGES!r}.items():
    package = types.ModuleType(name)
    package.__path__ = [folder]
    sys.modules[name] = package
from traceview.loader.helpers import serve
from traceview.loader.json import decode_block
serve(decode_block)
"""


def cores() -> int:
    """The cores this process may run on (its affinity where the system has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# The default's bound. The loading process reads, cuts and adds every block itself (about
# 13 ms a block against 70-100 ms for a block's decode, docs/loading.md), which bounds
# the speed-up near 6x whatever the cores; each helper costs about 0.1 GB while it runs.
DEFAULT_MAX_WORKERS = 8


def worker_count(requested: int | None) -> int:
    """The processes a load decodes on: ``requested``, else ``TRACEVIEW_WORKERS``, else
    :func:`cores` up to :data:`DEFAULT_MAX_WORKERS`. A bad ``TRACEVIEW_WORKERS`` is a usage
    error naming it."""
    if requested is not None:
        return requested
    text = os.environ.get(environ.WORKERS, "").strip()
    if not text:
        return min(cores(), DEFAULT_MAX_WORKERS)
    value = int(text) if text.isascii() and text.isdigit() else 0
    if value < 1:
        from traceview.errors import UsageError

        raise UsageError(f"{environ.WORKERS}={text!r} is not a count of processes >= 1")
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


class _Helper:
    """One helper process and the two threads of this process that feed it: the writer
    sends blocks as they come (it waits in ``write`` while the helper decodes the block
    before, so the next is there as soon as the helper asks), the reader takes answers as
    they come (so a helper never waits to hand one over). Answers come in the order the
    blocks went, so each resolves the oldest future sent."""

    def __init__(self, owner: Helpers, process: subprocess.Popen[bytes]) -> None:
        self.owner = owner
        self.process = process
        # each written by one thread only: given by the loader's, skipped by the writer,
        # taken and answered by the reader
        self.given = 0
        self.skipped = 0  # blocks decoded by the loader before they were sent: never sent
        self.taken = 0  # answers taken, None included
        self.answered = 0  # answers that were decoded blocks
        self.blocks: queue.SimpleQueue[tuple[bytes, Future[object]] | None] = queue.SimpleQueue()
        self.sent: queue.SimpleQueue[Future[object] | None] = queue.SimpleQueue()
        # the futures sent and not answered, oldest (the block being decoded) first
        self.inflight: deque[Future[object]] = deque()
        for pipe in (process.stdin, process.stdout):
            _widen_pipe(pipe)
        self.threads = [
            threading.Thread(target=self._write, name="traceview-helper-in", daemon=True),
            threading.Thread(target=self._read, name="traceview-helper-out", daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _write(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        while (item := self.blocks.get()) is not None:
            block, future = item
            del item
            if not future.set_running_or_notify_cancel():  # decoded by the loader meanwhile
                self.skipped += 1
                continue
            if self.owner.broken:
                future.set_result(None)
                continue
            self.inflight.append(future)
            self.sent.put(future)  # before the block: its answer may come at once
            try:
                _send(stdin, (block, self.owner.args))
            except Exception:  # a helper that died: the reader answers its blocks None
                self.owner.fail(self, f"one {self._ended()}, leaving blocks unanswered")
        self.sent.put(None)  # no more blocks: the reader ends after the last answer
        with contextlib.suppress(OSError, ValueError):
            stdin.close()  # the helper ends once it has answered what it holds

    def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            try:
                answer = _receive(stdout)
                if answer is not None and not isinstance(answer, self.owner.answer):
                    raise ValueError(f"a helper answered a {type(answer).__name__}")
            except EOFError:  # it ended: every block it took was answered, or it died
                if self.backlog() > 0:
                    self.owner.fail(self, f"one {self._ended()}, leaving blocks unanswered")
                break
            except Exception:  # nonsense: this helper's blocks are decoded by the loader
                self.owner.fail(self, "one answered something that is not a block")
                break
            future = self.sent.get()
            if future is None:  # an answer to no block, after the last: nothing to drain
                self.owner.fail(self, "one answered a block it was never given")
                return
            if answer is not None:
                self.answered += 1
            self.taken += 1
            self.inflight.popleft()
            future.set_result(answer)
        while (future := self.sent.get()) is not None:  # sent, never answered
            future.set_result(None)

    def backlog(self) -> int:
        """Blocks given and neither answered nor skipped: queued, sent or being decoded."""
        return self.given - self.taken - self.skipped

    def _ended(self) -> str:
        """How the helper ended: its exit status or the signal that ended it (one of its
        pipes closed, so it is ending: waited for briefly)."""
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "closed a pipe"
        if code < 0:
            try:
                return f"was ended by {signal.Signals(-code).name}"
            except ValueError:
                return f"was ended by signal {-code}"
        return f"exited with status {code}"


class Helpers:
    """``count`` helper processes: :meth:`submit` a block, get a future of what
    ``decode(block, *args)`` returned in a helper: an ``answer`` or None (where it failed:
    the caller decodes that block itself). Once one helper fails, no block goes to any."""

    def __init__(self, count: int, args: tuple[object, ...], answer: type) -> None:
        self.count = count
        self.args = args
        self.answer = answer
        self.broken = False
        self.failure: str | None = None  # why the helpers stopped before the load ended
        self._failing = threading.Lock()  # fail() is called from the helpers' threads
        self._processes: list[subprocess.Popen[bytes]] = []
        self._helpers: list[_Helper] = []
        # each future submitted and not yet forgotten: its helper
        self._placed: dict[int, _Helper] = {}
        try:  # started now: each imports its modules while this process reads on
            for _ in range(count):
                process = subprocess.Popen(
                    [sys.executable, "-P", "-c", _BOOT],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    env={**os.environ, environ.WORKERS: "1"},
                )
                self._processes.append(process)
                self._helpers.append(_Helper(self, process))
        except OSError as exc:  # no interpreter to start (an embedded Python): decode here
            self.broken = True
            self.failure = f"one could not start ({exc.strerror or exc})"

    def submit(self, block: bytes) -> Future[object]:
        """A future of the block's answer, given to the helper with the fewest blocks."""
        future: Future[object] = Future()
        if self.broken or not self._helpers:
            future.set_result(None)
            return future
        helper = min(self._helpers, key=lambda h: h.backlog())
        self._placed[id(future)] = helper
        helper.given += 1
        helper.blocks.put((block, future))
        return future

    def worth_waiting(self, future: Future[object], *, last: bool) -> bool:
        """Whether to wait for ``future``'s answer rather than decode its block in the
        caller: not while its helper starts (an interpreter and polars take longer than a
        block's decode); ``last`` (no block comes after), only where its helper is decoding
        that block now (one queued behind another is decoded sooner by the caller)."""
        if future.done():
            return True
        helper = self._placed.get(id(future))
        if helper is None or helper.taken == 0:
            return False
        try:
            decoding = helper.inflight[0] is future
        except IndexError:  # none in flight (the reader may take the last at any moment)
            decoding = False
        return not last or decoding

    def forget(self, future: Future[object]) -> None:
        """``future``'s answer is no longer wanted (handed back, or its block decoded by
        the caller): a block not yet sent is not sent."""
        future.cancel()  # only a future not yet sent (pending) is cancelled
        self._placed.pop(id(future), None)

    def backlog(self) -> int:
        """Blocks given to the helpers and neither answered nor skipped (a block the caller
        decoded itself holds its memory until its helper's writer skips it)."""
        return sum(h.backlog() for h in self._helpers)

    @property
    def answered(self) -> int:
        """Blocks the helpers decoded."""
        return sum(h.answered for h in self._helpers)

    def fail(self, helper: _Helper, why: str) -> None:
        """A helper failed (``why``: what it did, for :attr:`failure`): give no block to
        any; end it (its pipes then close, and its blocks sent and not answered are
        answered None)."""
        with self._failing:
            if not self.broken:
                self.failure = why
            self.broken = True
        helper.process.kill()

    def give_up(self, why: str) -> None:
        """No helper answered in time (``why``, for :attr:`failure`): end them all; the
        blocks they hold are answered None, to be decoded by the caller."""
        with self._failing:
            if not self.broken:
                self.failure = why
            self.broken = True
        for process in self._processes:
            process.kill()

    def close(self) -> None:
        """End the helpers and wait for them: each exits when its stdin closes, once the
        blocks it holds are answered; one still holding blocks (decoded by the caller
        meanwhile, or the loader stopped on an error) is ended at once, its futures
        answered None."""
        # the caller has every block by now: a helper that fails from here on (killed
        # below, or dying on its own) is no failure to report
        with self._failing:
            self.broken = True
        for helper in self._helpers:
            helper.blocks.put(None)
            if helper.backlog() > 0:
                helper.process.kill()
        self._placed.clear()
        for process in self._processes:
            try:
                process.wait(timeout=_EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for helper in self._helpers:
            for thread in helper.threads:
                thread.join()
        for process in self._processes:
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()


def _widen_pipe(pipe: IO[bytes] | None) -> None:
    """A pipe of 1 MiB where the system allows it (Linux), instead of 64 KiB: a block and
    most answers cross in a few writes, not a hundred."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if pipe is None or set_size is None:
        return
    with contextlib.suppress(OSError):  # over /proc/sys/fs/pipe-max-size: as it is
        fcntl.fcntl(pipe.fileno(), set_size, _PIPE_BYTES)


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
