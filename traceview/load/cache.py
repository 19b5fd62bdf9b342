"""Open once, read many times: a cache of loaded traces' frames (Arrow IPC files).

A multi-GB trace costs seconds to parse; ``summarize``, then ``heartbeat``, then ``sql`` on
the same file would pay that each time. The first load writes the frames to the user's
cache folder; the next load of the same, unchanged file reads them back.

- **Key**: the file's identity (real path, device, inode, size, mtime) plus traceview's
  version and the load options that shape the frames. An entry also records a digest of
  the file's bytes sampled across it (first and last MiB, and 64 slices between), checked
  before the entry is used: a changed or replaced file is never served stale.
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

import contextlib
import hashlib
import os
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

from traceview.errors import TraceviewWarning
from traceview.model import Trace, TraceMeta

FRAMES = ("kernels", "events", "flows", "counters", "metadata", "shapes")
FORMAT = 4  # bump when the entry layout, a frame schema or TraceMeta changes
_SAMPLES = 64
_SAMPLE = 64 << 10
_EDGE = 1 << 20
_STALE_TMP_S = 3600


def _version() -> str:
    try:
        return metadata.version("traceview")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a checkout
        return "0"


def enabled() -> bool:
    """False when ``TRACEVIEW_CACHE`` turns the cache off (0, false, no, off)."""
    return os.environ.get("TRACEVIEW_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """Where entries live: ``TRACEVIEW_CACHE_DIR``, else the user cache folder."""
    env = os.environ.get("TRACEVIEW_CACHE_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("traceview", appauthor=False)) / "traces"


def max_bytes() -> int:
    """The cache's size bound (``TRACEVIEW_CACHE_MAX_BYTES``, default 4 GiB)."""
    try:
        return int(os.environ.get("TRACEVIEW_CACHE_MAX_BYTES", 4 << 30))
    except ValueError:
        return 4 << 30


def _key(path: str, variant: str) -> tuple[str, os.stat_result]:
    st = os.stat(path)
    ident = "|".join(
        map(
            str,
            (
                os.path.realpath(path),
                st.st_dev,
                st.st_ino,
                st.st_size,
                st.st_mtime_ns,
                _version(),
                FORMAT,
                variant,
            ),
        )
    )
    return hashlib.blake2b(ident.encode(), digest_size=16).hexdigest(), st


def content_check(path: str, size: int) -> str:
    """A digest of the file's bytes sampled across it: the first and last MiB and
    ``_SAMPLES`` slices between (the whole file when it is small)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(str(size).encode())
    with open(path, "rb") as f:
        if size <= 2 * _EDGE + _SAMPLES * _SAMPLE:
            while chunk := f.read(1 << 20):
                h.update(chunk)
            return h.hexdigest()
        offsets = [0, size - _EDGE]
        step = (size - 2 * _EDGE) // (_SAMPLES + 1)
        offsets[1:1] = [_EDGE + step * (i + 1) for i in range(_SAMPLES)]
        for off in offsets:
            f.seek(off)
            h.update(f.read(_EDGE if off in (0, size - _EDGE) else _SAMPLE))
    return h.hexdigest()


def get(path: str, variant: str) -> Trace | None:
    """The cached trace for ``path``, or None (absent, stale, or unreadable)."""
    try:
        key, st = _key(path, variant)
        entry = cache_dir() / key
        meta_file = entry / "meta.json"
        if not meta_file.exists():
            return None
        doc = orjson.loads(meta_file.read_bytes())
        if doc.get("check") != content_check(path, st.st_size) or doc.get("format") != FORMAT:
            shutil.rmtree(entry, ignore_errors=True)  # the file changed under the same identity
            return None
        frames = {name: pl.read_ipc(entry / f"{name}.arrow") for name in FRAMES}
        os.utime(meta_file)  # most recently used
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None
    meta_fields = {f.name for f in fields(TraceMeta)}
    m = {k: v for k, v in doc["meta"].items() if k in meta_fields}
    m["device_properties"] = tuple(m.get("device_properties") or ())
    m["warnings"] = tuple(m.get("warnings") or ())
    m["path"] = path
    meta = TraceMeta(**m)
    for line in meta.warnings:  # as the first load did
        warnings.warn(TraceviewWarning(f"{path}: {line}"), stacklevel=4)
    return Trace(meta=meta, **frames)


def put(path: str, variant: str, trace: Trace) -> None:
    """Store ``trace`` for ``path`` (best effort: a full disk or a race just skips it)."""
    root = cache_dir()
    try:
        key, st = _key(path, variant)
        if (root / key / "meta.json").exists():
            return
        if (root / key).exists():  # not an entry (a rename is all or nothing): clear it
            shutil.rmtree(root / key, ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".tmp-{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            for name in FRAMES:
                getattr(trace, name).write_ipc(tmp / f"{name}.arrow")
            meta = asdict(trace.meta)
            doc = {"format": FORMAT, "check": content_check(path, st.st_size), "meta": meta}
            (tmp / "meta.json").write_bytes(orjson.dumps(doc, default=str))
            with contextlib.suppress(OSError):  # another writer got there first: keep theirs
                os.rename(tmp, root / key)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        _evict(root, max_bytes())
    except (OSError, pl.exceptions.PolarsError):
        return


def _entries(root: Path) -> list[tuple[float, int, Path]]:
    """(last use, bytes, folder) of every complete entry."""
    out = []
    for entry in root.iterdir() if root.is_dir() else ():
        meta = entry / "meta.json"
        if entry.name.startswith(".") or not meta.exists():
            continue
        size = sum(f.stat().st_size for f in entry.iterdir())
        out.append((meta.stat().st_mtime, size, entry))
    return out


def _evict(root: Path, limit: int) -> None:
    """Remove the least recently used entries until the cache fits ``limit``, and the
    temporary folders of writers that died long ago."""
    now = time.time()
    for tmp in root.glob(".tmp-*"):
        if now - tmp.stat().st_mtime > _STALE_TMP_S:
            shutil.rmtree(tmp, ignore_errors=True)
    entries = sorted(_entries(root))
    total = sum(size for _, size, _ in entries)
    for _, size, entry in entries:
        if total <= limit:
            break
        shutil.rmtree(entry, ignore_errors=True)
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


def clear() -> int:
    """Remove every entry; returns how many there were."""
    root = cache_dir()
    entries = _entries(root)
    for _, _, entry in entries:
        shutil.rmtree(entry, ignore_errors=True)
    for tmp in root.glob(".tmp-*") if root.is_dir() else ():
        shutil.rmtree(tmp, ignore_errors=True)
    return len(entries)
