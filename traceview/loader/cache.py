"""Open once, read many times: a cache of loaded traces' frames (Arrow IPC files).

A multi-GB trace costs seconds to parse; ``summarize``, then ``heartbeat``, then ``sql`` on
the same file would pay that each time. The first load writes the frames to the user's
cache folder; the next load of the same, unchanged file reads them back.

- **Key**: a SHA-256 digest (128 bits kept) of the file's whole content, read on every
  open, hit or miss (SHA-256 runs on the CPU's SHA instructions where it has them: 1 GB/s
  here, 2.6x BLAKE2b), plus traceview's version, the entry format and the load options
  that shape the frames.
  A changed file has another key: it is never served stale, whatever its size and mtime.
  An object at a URL is keyed by its URL, version id or strong ETag, and size
  (:func:`object_key`), which the store changes with every write; an object with neither
  is not cached.
- **Only whole, stable parses are stored**: the file's identity (device, inode, size,
  mtime) is read before and after the parse, and nothing is stored if it changed (a
  profiler still flushing, a copy in progress); a truncated trace is never stored.
- **Checked on read**: every entry records the size and CRC-32 of each of its frame files
  (ISA-L's, 9 GB/s: a check of accidental damage, as gzip's and PNG's are; the key, not
  the check, tells traces apart); a frame whose bytes do not match, or an entry that cannot
  be read, is removed, and the trace is parsed again and stored anew.
- **Atomic**: an entry is written in a temporary folder and renamed into place; a killed or
  concurrent writer leaves no half entry, and the loser of a race discards its copy.
- **Bounded**: past ``TRACEVIEW_CACHE_MAX_BYTES`` (default 4 GiB) the least recently used
  entries are evicted.
- **Off**: ``LoadOptions(cache=False)``, ``traceview --no-cache``, or ``TRACEVIEW_CACHE=0``.
  Only traces of at least ``cache_min_bytes`` (16 MiB by default) are cached: smaller ones
  load in well under a second anyway.

The folder is ``TRACEVIEW_CACHE_DIR`` if set, else the platform's user cache folder.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
import uuid
import warnings
from dataclasses import asdict, fields
from importlib import metadata
from pathlib import Path
from typing import TypedDict

import orjson
import polars as pl
from isal import isal_zlib

from traceview import environ
from traceview.errors import TraceviewError, TraceviewWarning
from traceview.loader import remote
from traceview.model import DEPRECATED_COLUMNS, Trace, TraceMeta

FRAMES = ("kernels", "events", "flows", "counters", "metadata", "shapes")
FORMAT = 11  # bump when the entry layout, a frame schema, TraceMeta or a loaded value changes
_CHUNK = 1 << 20  # bytes hashed at a time (small: a first open is at its memory peak)
_STALE_TMP_S = 3600
# What the cache writes in its folder, and so all it ever removes there: an entry is a
# folder named by its key (:func:`_key`), a writer's is ``.tmp-`` and a uuid, and either
# holds only an entry's files. TRACEVIEW_CACHE_DIR may name a folder that holds the user's
# own files and folders (even one with a meta.json): those are never touched.
_ENTRY_NAME = re.compile(r"[0-9a-f]{32}")
_TMP_NAME = re.compile(r"\.tmp-[0-9a-f]{32}")
_ENTRY_FILES = frozenset({"meta.json", *(f"{name}.arrow" for name in FRAMES)})


def _version() -> str:
    try:
        return metadata.version("traceview")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a checkout
        return "0"


def enabled() -> bool:
    """Whether the cache is on (:func:`traceview.environ.cache_on`)."""
    return environ.cache_on()


def cache_dir() -> Path:
    """Where entries live: ``TRACEVIEW_CACHE_DIR``, else the user cache folder."""
    env = os.environ.get("TRACEVIEW_CACHE_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("traceview", appauthor=False)) / "traces"


def max_bytes() -> int:
    """The cache's size bound (:func:`traceview.environ.cache_max_bytes`)."""
    return environ.cache_max_bytes()


Identity = tuple[object, ...]  # device, inode, size, mtime (ns); an object's size, version


def identity(path: str) -> Identity:
    """What the file system (or the store) says of the file: read before and after a
    parse, so a file that changed while it was read is never stored."""
    if remote.is_url(path):
        return object_identity(remote.stat(path))
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def object_identity(obj: remote.RemoteObject) -> Identity:
    """An object's :func:`identity`, from a stat already made."""
    return obj.size, obj.version


def object_key(obj: remote.RemoteObject) -> str:
    """An object's stand-in for a content digest: its URL, version and size (the store
    gives a new version id or ETag to every write)."""
    text = f"{obj.url}|{obj.version}|{obj.size}"
    return "object-" + hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def content_digest(path: str | Path) -> str:
    """SHA-256 of a file's whole content (the bytes on disk, compressed or not), its first
    128 bits as hex: the trace's key."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()[:32]


def frame_check(path: Path) -> list[int]:
    """A frame file's size and CRC-32: what it must still be when it is read back."""
    size, crc = 0, 0
    buffer = bytearray(_CHUNK)  # read in place, a piece at a time: a first open is at its peak
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            crc = isal_zlib.crc32(view[:n], crc)
            size += n
    return [size, crc]


def _key(digest: str, variant: str) -> str:
    """An entry's name: the content's digest, traceview's version, the entry format and the
    load options that shape the frames. Content, not path: a copy of a file shares it."""
    ident = "|".join(map(str, (digest, _version(), FORMAT, variant)))
    return hashlib.blake2b(ident.encode(), digest_size=16).hexdigest()


def get(path: str, variant: str, digest: str) -> Trace | None:
    """The cached trace of the content ``digest`` (of ``path``), or None: absent, or an
    entry that is damaged (a frame whose size or CRC-32 is not the one stored with it, a
    missing file, an unreadable one), which is removed so the next store replaces it."""
    entry = cache_dir() / _key(digest, variant)
    meta_file = entry / "meta.json"
    if not entry.exists():
        return None
    try:
        doc = orjson.loads(meta_file.read_bytes())
        stored = doc["frames"]
        if doc.get("format") != FORMAT or doc.get("content") != digest:
            raise ValueError("another entry's")
        for name in FRAMES:
            if frame_check(entry / f"{name}.arrow") != stored[name]:
                raise ValueError(f"{name}.arrow damaged")
        frames = {name: pl.read_ipc(entry / f"{name}.arrow") for name in FRAMES}
        os.utime(meta_file)  # most recently used
        meta_fields = {f.name for f in fields(TraceMeta)}
        m = {k: v for k, v in doc["meta"].items() if k in meta_fields}
    except (OSError, ValueError, KeyError, TypeError, pl.exceptions.PolarsError):
        _remove(entry)  # damaged or incomplete: parse and replace
        return None
    m["device_properties"] = tuple(m.get("device_properties") or ())
    m["warnings"] = tuple(m.get("warnings") or ())
    m["path"] = path
    meta = TraceMeta(**m)
    for line in meta.warnings:  # as the first load did
        warnings.warn(TraceviewWarning(f"{path}: {line}"), stacklevel=4)
    return Trace(meta=meta, **frames)


def put(path: str, variant: str, trace: Trace, digest: str, before: Identity) -> bool:
    """Store ``trace``, parsed from ``path`` whose content had ``digest`` and whose identity
    was ``before`` when the parse began. Nothing is stored for a truncated trace, nor when
    the file's identity changed during the parse (a profiler still writing, a copy in
    progress). Best effort: a full disk or a race just skips it. Returns whether it
    stored."""
    if trace.meta.truncated_at is not None:
        return False
    root = cache_dir()
    try:
        try:
            if identity(path) != before:
                return False
        except TraceviewError:  # the object is gone now
            return False
        key = _key(digest, variant)
        if (root / key).exists():
            return False  # another writer got there first (a damaged entry was removed)
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".tmp-{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            stored = {}
            for name in FRAMES:
                # a deprecated column is the same values under another name: the Trace
                # read back adds it again
                frame: pl.DataFrame = getattr(trace, name)
                frame.drop(DEPRECATED_COLUMNS, strict=False).write_ipc(tmp / f"{name}.arrow")
                stored[name] = frame_check(tmp / f"{name}.arrow")
            meta = asdict(trace.meta)
            doc = {"format": FORMAT, "content": digest, "frames": stored, "meta": meta}
            (tmp / "meta.json").write_bytes(orjson.dumps(doc, default=str))
            try:
                os.rename(tmp, root / key)
            except OSError:  # another writer got there first: keep theirs
                return False
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        _evict(root, max_bytes())
        return True
    except (OSError, pl.exceptions.PolarsError):
        return False


def _ours(folder: Path, name: re.Pattern[str]) -> bool:
    """Whether ``folder`` is one the cache wrote: named as it names them, a folder (not a
    link to one), holding nothing but an entry's files."""
    try:
        if not name.fullmatch(folder.name) or folder.is_symlink() or not folder.is_dir():
            return False
        return all(
            f.name in _ENTRY_FILES and not f.is_symlink() and f.is_file() for f in folder.iterdir()
        )
    except OSError:
        return False


def _remove(folder: Path, name: re.Pattern[str] = _ENTRY_NAME) -> None:
    """Remove ``folder`` if the cache wrote it (:func:`_ours`); anything else stays."""
    if _ours(folder, name):
        shutil.rmtree(folder, ignore_errors=True)


def _temporary(root: Path) -> list[Path]:
    """The folders of writers, finished or not (:data:`_TMP_NAME`)."""
    return [t for t in root.glob(".tmp-*") if _ours(t, _TMP_NAME)] if root.is_dir() else []


def _entries(root: Path) -> list[tuple[float, int, Path]]:
    """(last use, bytes, folder) of every complete entry."""
    out = []
    for entry in root.iterdir() if root.is_dir() else ():
        meta = entry / "meta.json"
        if not _ours(entry, _ENTRY_NAME) or not meta.exists():
            continue
        size = sum(f.stat().st_size for f in entry.iterdir())
        out.append((meta.stat().st_mtime, size, entry))
    return out


def _evict(root: Path, limit: int) -> None:
    """Remove the least recently used entries until the cache fits ``limit``, and the
    temporary folders of writers that died long ago."""
    now = time.time()
    for tmp in _temporary(root):
        if now - tmp.stat().st_mtime > _STALE_TMP_S:
            _remove(tmp, _TMP_NAME)
    entries = sorted(_entries(root))
    total = sum(size for _, size, _ in entries)
    for _, size, entry in entries:
        if total <= limit:
            break
        _remove(entry)
        total -= size


class CacheInfo(TypedDict):
    """``traceview cache info``: the cache's folder, whether it is on, its size and bound."""

    dir: str
    enabled: bool
    entries: int
    bytes: int
    max_bytes: int


def info() -> CacheInfo:
    """Where the cache is, how many entries and bytes it holds, and its bound."""
    root = cache_dir()
    entries = _entries(root)
    return {
        "dir": str(root),
        "enabled": enabled(),
        "entries": len(entries),
        "bytes": sum(size for _, size, _ in entries),
        "max_bytes": max_bytes(),
    }


def clear() -> tuple[int, list[str]]:
    """Remove every entry and every temporary folder. Returns how many entries were
    removed, and the folders that could not be (for example on a read-only cache)."""
    root = cache_dir()
    removed, failed = 0, []
    for _, _, entry in _entries(root):
        _remove(entry)
        if entry.exists():
            failed.append(str(entry))
        else:
            removed += 1
    for tmp in _temporary(root):
        _remove(tmp, _TMP_NAME)
        if tmp.exists():
            failed.append(str(tmp))
    return removed, failed
