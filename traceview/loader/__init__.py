"""Loading traces: Chrome/Kineto JSON (plain or gzip), Perfetto protobuf and Nsight Systems
SQLite exports, into a :class:`~traceview.model.Trace`.

``load`` opens the file (gzip by its magic bytes, decompressed in a background thread),
reads the first block and dispatches by what it holds: a Perfetto protobuf goes to
:mod:`.pftrace`, JSON to the streaming reader in :mod:`.json`. Both build their frames with
:mod:`.frames`. A local file that starts with SQLite's header goes to :mod:`.nsys`.
"""

from __future__ import annotations

import gc
import io
import os
import re
import sqlite3
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, BinaryIO, Protocol, cast

import polars as pl
from isal.igzip_lib import IsalError

from traceview import environ
from traceview._io import not_a_file
from traceview.errors import TraceFormatError, TraceviewWarning
from traceview.loader import cache, nsys, remote
from traceview.loader.frames import unreadable
from traceview.loader.helpers import worker_count
from traceview.loader.json import BLOCK_BYTES, read_json
from traceview.loader.strings import STRING_CAP, CappedText
from traceview.model import Trace
from traceview.redact import shown

Progress = Callable[[int, int], None]
"""``progress(bytes_read, total_bytes)``, called as the (compressed) file is consumed."""

_GZIP_MAGIC = b"\x1f\x8b"
# the decompressing thread hands over 256 KB blocks and buffers 8 of them: with its default
# 1 MB the reader held 10 MB of buffers (benchmarks/load.py: peak 380 -> 371 MiB, no slower)
_GZIP_BLOCK = 256 << 10
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

# what the decompressors raise on damaged data (not a missing end: that is an EOFError)
_CORRUPT_GZIP: tuple[type[Exception], ...] = (zlib.error, cast(type[Exception], IsalError))

GZIP_RATIO_FLOOR = 4

__all__ = ["LoadOptions", "load"]


class Hasher(Protocol):
    """What :attr:`LoadOptions.hasher` must do: take the bytes as they are read."""

    def update(self, data: bytes | memoryview, /) -> None: ...


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """Options of :func:`load`.

    Attributes:
        block_bytes: JSON text decoded per block (memory/speed trade-off).
        progress: optional ``progress(bytes_read, total_bytes)`` callback.
        raw_args: also keep each event's whole ``args`` object as JSON text, in an
            ``args_json`` column of ``kernels`` and ``events`` (for SQL's ``args`` table and
            ``EXTRACT_ARG``; costs memory and a second decode of each block).
        strict: a truncated trace is an error; by default its complete events load, with
            one warning giving the byte offset of the cut and how many events were kept.
        cache: read the frames from the cache when this file was loaded before, unchanged,
            and store them after a first load (see :mod:`traceview.loader.cache`; also off
            with ``TRACEVIEW_CACHE=0``).
        cache_min_bytes: only files at least this large are cached.
        hasher: given every byte of the file as it is read (a ``hashlib`` object): a
            scan's content digest of an object it streams once; not given on a cache hit.
        workers: processes that decode a JSON trace's blocks: this one and ``workers - 1``
            helpers (:mod:`traceview.loader.helpers`). None: ``TRACEVIEW_WORKERS``, else
            every core this process may use, up to 8. The frames are the same for every count; a
            trace under three blocks is decoded here alone.
    """

    block_bytes: int = BLOCK_BYTES
    progress: Progress | None = None
    raw_args: bool = False
    strict: bool = False
    cache: bool = True
    cache_min_bytes: int = 16 << 20
    hasher: Hasher | None = None
    workers: int | None = None

    def __post_init__(self) -> None:
        if self.workers is not None and (
            isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1
        ):
            from traceview.errors import UsageError

            raise UsageError(f"LoadOptions.workers: {self.workers!r} is not a count >= 1")
        if isinstance(self.block_bytes, bool) or not (
            isinstance(self.block_bytes, int) and self.block_bytes > 0
        ):
            from traceview.errors import UsageError

            raise UsageError(
                f"LoadOptions.block_bytes: {self.block_bytes!r} is not a positive size"
            )


def load(path: str | os.PathLike[str], *, options: LoadOptions | None = None) -> Trace:
    """Load a Chrome/Kineto trace (``.json`` or gzipped, detected by magic bytes).

    Accepts the object form (``{"traceEvents": [...], ...}``) and the bare array form,
    including an array whose closing ``]`` is missing. Events that cannot be used are
    counted in ``trace.meta.skipped_events`` and reported with a
    :class:`~traceview.errors.TraceviewWarning`; device activity that cannot be placed in
    time is an error, since every figure would be wrong without it.

    Args:
        path: the trace file, or an ``s3://``, ``gs://``, ``az://`` or ``http(s)://`` URL
            (streamed through fsspec, the ``traceview[cloud]`` extra; cached by the
            object's version id or strong ETag and size, where the store gives one).
            The trace's ``meta.path``, its warnings and errors name a URL without its
            credentials (:func:`traceview.redact.shown`); the object is read with all of it.
        options: :class:`LoadOptions`.

    Returns:
        The :class:`~traceview.model.Trace`.

    Raises:
        TraceFormatError: the file (or object) is missing, unreachable, not JSON, a
            truncated gzip, not a trace, or holds a kernel with a missing or invalid
            ``ts``/``dur``.
    """
    opts = options or LoadOptions()
    if opts.cache:
        environ.check_cache()  # a setting that means nothing, said before any work
    name = os.fspath(path)
    url = remote.is_url(name)
    if url:  # streamed through fsspec
        obj = remote.stat(name)
        total = obj.size
    else:
        if not os.path.exists(name):
            scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", name)
            if scheme:
                known = ", ".join(s.removesuffix("://") for s in remote.SCHEMES)
                raise TraceFormatError(
                    name, f"unsupported scheme {scheme.group(1)!r} (known: {known}; or a path)"
                )
            raise TraceFormatError(name, "no such file")
        if os.path.isdir(name):
            raise TraceFormatError(name, "is a directory, not a trace file")
        special = not_a_file(name)
        if special is not None:
            raise TraceFormatError(name, f"is {special}, not a trace file")
        total = os.path.getsize(name)
    if total == 0 and (not url or obj.sized):  # a chunked HTTP object gives no size
        raise TraceFormatError(name, "empty file")
    report = nsys.report_problem(name)
    if report is not None:
        raise TraceFormatError(name, report)

    caching = (
        opts.cache
        and opts.hasher is None
        and (not url or (obj.version is not None and obj.sized))  # else not cached
        and total >= opts.cache_min_bytes
        and cache.enabled()
        # an export whose log or journal beside it holds part of its state: the key, a
        # digest of the file alone, would not change with them
        and (url or not nsys.pending(name))
    )
    variant = f"raw_args={opts.raw_args}"
    if caching:
        before = cache.object_identity(obj) if url else cache.identity(name)
        digest = cache.object_key(obj) if url else cache.content_digest(name)
        hit = cache.get(shown(name), variant, digest)
        if hit is not None:
            return hit
    trace = _load(name, total, opts)
    if caching:
        cache.put(name, variant, trace, digest, before)
    return trace


def _load(name: str, total: int, opts: LoadOptions) -> Trace:
    """The trace read from ``name``, named (``meta.path``, warnings, errors) as
    :func:`traceview.redact.shown` names it: a URL without its credentials."""
    label = shown(name)
    if not remote.is_url(name) and _is_sqlite_file(name):
        return _load_sqlite(name, total, opts)
    workers = worker_count(opts.workers)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the cyclic GC costs several times the parse on millions of objects
    try:
        try:
            stream, gzipped = _open_text(name, total, opts.progress, opts.hasher)
        except _Export as export:  # an export at a URL: SQLite reads files, so copy it
            return _load_sqlite_object(label, total, opts, export.stream)
        with stream:
            reader: Any = _EndsEarly(stream, name) if gzipped else stream
            head = reader.read(opts.block_bytes)
            if _is_protobuf(head):
                from traceview.loader.pftrace import load_pftrace

                return load_pftrace(label, io.BufferedReader(_Prefixed(head, reader)))
            text = CappedText(reader, prefix=head)
            try:
                trace = read_json(
                    label,
                    text.read(opts.block_bytes),
                    text,  # type: ignore[arg-type]
                    opts.block_bytes,
                    raw_args=opts.raw_args,
                    strict=opts.strict,
                    workers=workers,
                    # gzip'd JSON traces hold at least 4x their size in text (mostly 8-20x)
                    size_hint=total * (GZIP_RATIO_FLOOR if gzipped else 1),
                )
            except TraceFormatError as exc:
                if text.cuts and " at byte " in exc.problem:  # not the file's own offset
                    raise type(exc)(
                        exc.path,
                        f"{exc.problem} (a byte of the text read, in which strings "
                        f"over {STRING_CAP >> 10} KiB are cut)",
                        index=exc.index,
                        event=exc.event,
                    ) from None
                raise
            return _with_cuts(trace, text.cuts)
    except EOFError as exc:
        raise TraceFormatError(name, f"truncated gzip file ({exc})") from None
    except _CORRUPT_GZIP as exc:
        raise TraceFormatError(
            name, f"corrupt gzip data ({exc}); nothing after it can be read"
        ) from None
    except RecursionError:
        raise TraceFormatError(
            name,
            "JSON nested too deeply to read (an 'args' value thousands of levels deep?); "
            "the trace cannot be loaded",
        ) from None
    except (OSError, ValueError) as exc:
        if isinstance(exc, TraceFormatError):
            raise
        if remote.is_url(name) and isinstance(exc, OSError):  # a server that stalled
            raise remote.failure(name, exc) from None
        raise TraceFormatError(name, f"cannot read: {exc}") from None
    except Exception as exc:  # a driver's own error around a timeout (s3fs: an IndexError)
        if remote.is_url(name) and remote.timed_out(exc) is not None:
            raise remote.failure(name, exc) from None
        raise
    finally:
        if gc_was_enabled:
            gc.enable()


def _is_sqlite_file(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return nsys.is_sqlite(f.read(len(nsys.SQLITE_MAGIC)))
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read: {exc}") from None


def _load_sqlite(name: str, total: int, opts: LoadOptions) -> Trace:
    """An Nsight Systems SQLite export (:mod:`.nsys`), read through SQLite, not streamed:
    a hasher is handed the file's bytes first."""
    if opts.hasher is not None:
        with open(name, "rb") as f:
            while chunk := f.read(1 << 20):
                opts.hasher.update(chunk)
    try:
        trace = nsys.load_nsys(name, raw_args=opts.raw_args)
    except (pl.exceptions.PolarsError, OverflowError, sqlite3.Error) as exc:
        raise TraceFormatError(
            name, f"not a readable Nsight Systems export: {unreadable(exc)}"
        ) from None
    if opts.progress is not None:
        opts.progress(total, total)
    return trace


class _Export(Exception):  # noqa: N818 - a signal inside this module, never raised out
    """The object at a URL is a SQLite file (an Nsight Systems export): its open stream."""

    def __init__(self, stream: BinaryIO) -> None:
        super().__init__()
        self.stream = stream


def _load_sqlite_object(name: str, total: int, opts: LoadOptions, stream: BinaryIO) -> Trace:
    """An export at a URL, copied to a temporary file (SQLite reads files, not streams),
    read there as ``name`` (the URL as shown: without its credentials), and removed."""
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix="traceview-", suffix=".sqlite")
    try:
        with os.fdopen(fd, "wb") as out, stream:
            done = 0
            while chunk := stream.read(8 << 20):
                out.write(chunk)
                done += len(chunk)
                if opts.hasher is not None:
                    opts.hasher.update(chunk)
                if opts.progress is not None:
                    opts.progress(done, total)
        return nsys.load_nsys(tmp, raw_args=opts.raw_args, source=name)
    finally:
        os.unlink(tmp)


def _with_cuts(trace: Trace, cuts: int) -> Trace:
    """The trace, its meta saying how many strings were cut (with one warning)."""
    if not cuts:
        return trace
    line = (
        f"{cuts:,} string{'s' if cuts != 1 else ''} longer than {STRING_CAP >> 10} KiB "
        f"cut to {STRING_CAP >> 10} KiB (ending in '…')"
    )
    warnings.warn(f"{trace.meta.path}: {line}", TraceviewWarning, stacklevel=4)
    meta = replace(trace.meta, strings_cut=cuts, warnings=(*trace.meta.warnings, line))
    return replace(trace, meta=meta)


# --- reading ----------------------------------------------------------------------------


class _CountingReader(io.RawIOBase):
    """A raw file that reports how many bytes have been read from it."""

    def __init__(
        self, raw: BinaryIO, total: int, progress: Progress | None, hasher: Hasher | None
    ) -> None:
        self._raw = raw
        self._total = total
        self._progress = progress
        self._hasher = hasher
        self.done = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        if n and self._hasher is not None:
            self._hasher.update(memoryview(buffer)[:n])
        self.done += n or 0
        if self._progress is not None:
            self._progress(self.done, self._total)
        return int(n or 0)

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_source(path: str) -> BinaryIO:
    """The trace file, or the object at a URL (:mod:`.remote`), as a binary stream: what
    the loader reads, and whoever else reads a trace's bytes (``annotate`` copies them)."""
    if remote.is_url(path):
        return remote.open_binary(path)
    return open(path, "rb")  # noqa: SIM115 - the caller closes it


def _open_text(
    path: str, total: int, progress: Progress | None, hasher: Hasher | None
) -> tuple[BinaryIO, bool]:
    """The file's text as a stream (decompressed where it is gzip), and whether it is gzip
    (an object is opened once: every open of a URL is a request)."""
    raw = open_source(path)  # closed by the returned stream
    magic = raw.read(len(nsys.SQLITE_MAGIC))
    try:
        raw.seek(0)
    except (OSError, ValueError):  # a stream read once: an object served without a length
        raw = cast(BinaryIO, _Prefixed(magic, raw))
    if nsys.is_sqlite(magic):  # a local export never gets here (see _load)
        raise _Export(raw)
    counting = _CountingReader(raw, total, progress, hasher)
    if magic[:2] == _GZIP_MAGIC:
        from isal import igzip_threaded

        # Decompression runs in a background thread (ISA-L releases the GIL), overlapping
        # with JSON decoding in this one.
        stream: BinaryIO = igzip_threaded.open(  # type: ignore[no-untyped-call]
            counting, "rb", threads=1, block_size=_GZIP_BLOCK
        )
        return stream, True
    if magic[:4] == _ZSTD_MAGIC:
        counting.close()
        raise TraceFormatError(path, "zstd-compressed traces are not supported; run zstd -d")
    return io.BufferedReader(counting, buffer_size=1 << 20), False


class _EndsEarly:
    """A stream whose compressed data may stop short (a profiler that died, a full disk).

    The fast decompressor raises EOFError at the cut and may lose what it had buffered, so
    the text from there on comes from a plain zlib stream over the same file, which yields
    every byte before the cut; ``cut_short`` says the text ended early."""

    def __init__(self, stream: BinaryIO, path: str) -> None:
        self._stream = stream
        self._path = path
        self._delivered = 0
        self._rest: Iterator[bytes] | None = None
        self._pending = b""
        self.cut_short = False

    def read(self, size: int = -1) -> bytes:
        if self._rest is None:
            try:
                data = self._stream.read(size)
                self._delivered += len(data)
                return data
            except EOFError:
                self.cut_short = True
                self._rest = _gzip_until_cut(self._path, skip=self._delivered)
        out = [self._pending]
        have = len(self._pending)
        while size < 0 or have < size:
            chunk = next(self._rest, b"")
            if not chunk:
                break
            out.append(chunk)
            have += len(chunk)
        data = b"".join(out)
        if size >= 0:
            data, self._pending = data[:size], data[size:]
        else:
            self._pending = b""
        return data


def _gzip_until_cut(path: str, *, skip: int) -> Iterator[bytes]:
    """The decompressed text of a gzip file whose end is missing, from byte ``skip`` of the
    text up to the cut (every gzip member in turn)."""
    with open_source(path) as f:
        d = zlib.decompressobj(wbits=31)
        while chunk := f.read(1 << 20):
            while chunk:
                try:
                    out = d.decompress(chunk)
                except zlib.error:
                    return  # damaged past this point: the text ends here
                chunk = d.unused_data if d.eof else b""
                if d.eof:
                    d = zlib.decompressobj(wbits=31)
                if skip >= len(out):
                    skip -= len(out)
                    continue
                yield out[skip:]
                skip = 0


def _is_protobuf(head: bytes) -> bool:
    """A Perfetto trace starts with field 1 (``packet``), length-delimited: byte 0x0A then a
    varint length, then binary; JSON starts with '{' or '[' after optional whitespace."""
    if not head.startswith(b"\x0a"):
        return False
    return head.lstrip()[:1] not in (b"{", b"[")


class _Prefixed(io.RawIOBase):
    """``prefix`` followed by the rest of ``stream``, as one readable raw stream."""

    def __init__(self, prefix: bytes, stream: BinaryIO) -> None:
        self._prefix = memoryview(prefix)
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._prefix.nbytes:
            n = min(len(buffer), self._prefix.nbytes)
            buffer[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stream.close()
        super().close()
