"""Where a dataset's files live: a folder on disk, or a prefix in an object store.

Both give the dataset the same few operations on files named relative to its root
(``traces/<id>.parquet``, ``.tmp/lock.<id>.<pid>.<host>``). A file is always written whole:
on disk it is written under ``.tmp/`` and renamed into place (its temporary name carries
its writer, see :mod:`.dataset`); in an object store a PUT is whole by itself, so a file
is written under its final name, and nothing is ever renamed.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Protocol

import polars as pl

from traceview.errors import TraceviewError
from traceview.loader import remote

HOST = socket.gethostname().replace(os.sep, "_")


class Store(Protocol):
    """A dataset's files (see the module doc)."""

    @property
    def where(self) -> str:
        """The dataset as the user named it (a folder or a URL)."""
        ...

    def full(self, rel: str) -> str:
        """The path or URL of ``rel``."""
        ...

    def exists(self, rel: str) -> bool: ...

    def names(self, folder: str) -> list[str]:
        """The names of the files in ``folder`` (not its subfolders); none if it is absent."""
        ...

    def children(self) -> list[str]:
        """The names of everything at the dataset's top: files and folders."""
        ...

    def mtime(self, rel: str) -> float | None:
        """When ``rel`` was last written (seconds since the epoch); None if it is gone."""
        ...

    def read(self, rel: str) -> bytes: ...

    def write(self, rel: str, data: bytes) -> None:
        """Write ``rel`` whole: a reader sees the old file, or none, or the new one."""
        ...

    def delete(self, rel: str) -> None:
        """Remove ``rel``, if it is there."""
        ...

    def read_parquet(self, rels: list[str], columns: list[str]) -> pl.DataFrame:
        """The rows of the Parquet files ``rels`` (``columns`` of each), as one frame."""
        ...

    def prepare(self) -> None:
        """Make the dataset's folders, where the store has folders."""
        ...

    def is_file(self) -> bool:
        """Whether the dataset's own name is a file (a dataset is a folder)."""
        ...


class LocalStore:
    """A dataset in a folder on disk."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @property
    def where(self) -> str:
        return str(self.root)

    def full(self, rel: str) -> str:
        return str(self.root / rel)

    def exists(self, rel: str) -> bool:
        return (self.root / rel).exists()

    def names(self, folder: str) -> list[str]:
        d = self.root / folder
        return sorted(f.name for f in d.iterdir() if f.is_file()) if d.is_dir() else []

    def children(self) -> list[str]:
        return sorted(c.name for c in self.root.iterdir()) if self.root.is_dir() else []

    def mtime(self, rel: str) -> float | None:
        try:
            return (self.root / rel).stat().st_mtime
        except FileNotFoundError:
            return None

    def read(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()

    def write(self, rel: str, data: bytes) -> None:
        if not data:  # an empty file (a lock) is whole by itself
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).touch()
            return
        folder, _, name = rel.rpartition("/")
        stem = name.removesuffix(".parquet")
        # the temporary name says who writes it (folder.stem.pid.uuid.host.tmp: .dataset's sweep)
        tmp = self.root / ".tmp" / f"{folder}.{stem}.{os.getpid()}.{uuid.uuid4().hex}.{HOST}.tmp"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, self.root / rel)

    def delete(self, rel: str) -> None:
        (self.root / rel).unlink(missing_ok=True)

    def read_parquet(self, rels: list[str], columns: list[str]) -> pl.DataFrame:
        return pl.read_parquet([self.root / r for r in rels], columns=columns)

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def is_file(self) -> bool:
        return self.root.exists() and not self.root.is_dir()


class ObjectStore:
    """A dataset under a prefix of an object store (``s3://bucket/ds``), through fsspec."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.path = remote.filesystem(self.url)

    @property
    def where(self) -> str:
        return self.url

    def full(self, rel: str) -> str:
        return remote.join(self.url, rel)

    def _key(self, rel: str) -> str:
        return f"{self.path.rstrip('/')}/{rel}"

    def _call(self, rel: str, what: str, *args: object) -> object:
        try:
            return getattr(self.fs, what)(*args)
        except FileNotFoundError:
            raise
        except Exception as exc:  # the drivers' own errors: one line naming the object
            raise remote.failure(self.full(rel), exc) from None

    def exists(self, rel: str) -> bool:
        return self.mtime(rel) is not None

    def names(self, folder: str) -> list[str]:
        key = self._key(folder)
        self.fs.invalidate_cache(key)
        try:
            listed = self._call(folder, "ls", key, True)
        except FileNotFoundError:
            return []
        assert isinstance(listed, list)
        return sorted(
            str(e["name"]).rsplit("/", 1)[-1]
            for e in listed
            if isinstance(e, dict) and e.get("type") != "directory"
        )

    def children(self) -> list[str]:
        key = self.path.rstrip("/")
        self.fs.invalidate_cache(key)
        try:
            listed = self._call("", "ls", key, True)
        except FileNotFoundError:
            return []
        assert isinstance(listed, list)
        return sorted(
            str(e["name"]).rstrip("/").rsplit("/", 1)[-1] for e in listed if isinstance(e, dict)
        )

    def mtime(self, rel: str) -> float | None:
        key = self._key(rel)
        self.fs.invalidate_cache(key)
        try:
            info = self._call(rel, "info", key)
        except FileNotFoundError:
            return None
        assert isinstance(info, dict)
        if info.get("type") == "directory":
            return None
        when = info.get("LastModified") or info.get("last_modified") or info.get("mtime")
        if isinstance(when, datetime):
            return when.timestamp()
        if isinstance(when, int | float):
            return float(when)
        return time.time()  # a store that gives no time: never old, so never swept

    def read(self, rel: str) -> bytes:
        data = self._call(rel, "cat", self._key(rel))
        assert isinstance(data, bytes)
        return data

    def write(self, rel: str, data: bytes) -> None:
        try:
            self._call(rel, "pipe", self._key(rel), data)  # one PUT: whole, or not there
        except FileNotFoundError as exc:  # no bucket to write into
            raise remote.failure(self.full(rel), exc, writing=True) from None

    def delete(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._call(rel, "rm", self._key(rel))

    def read_parquet(self, rels: list[str], columns: list[str]) -> pl.DataFrame:
        if not rels:
            return pl.DataFrame()
        got = self._call(rels[0], "cat", [self._key(r) for r in rels])  # fetched concurrently
        assert isinstance(got, dict)
        return pl.concat(
            [pl.read_parquet(io.BytesIO(data), columns=columns) for data in got.values()],
            how="vertical",
        )

    def prepare(self) -> None:
        """An object store has no folders to make, but its bucket must be there: checked
        before any trace is read."""
        remote.check_bucket(self.url)

    def is_file(self) -> bool:
        key = self.path
        self.fs.invalidate_cache(key)
        try:
            info = self._call("", "info", key)
        except FileNotFoundError:
            return False
        return isinstance(info, dict) and info.get("type") == "file"


def open_store(dataset: str | os.PathLike[str]) -> Store:
    """The store of a dataset folder or URL.

    Raises:
        MissingDependencyError: a URL without the ``traceview[cloud]`` extra.
    """
    name = os.fspath(dataset)
    if remote.is_url(name):
        if name.lower().startswith(("http://", "https://")):
            raise TraceviewError(
                f"{name}: a dataset cannot be written to an HTTP URL (use s3://, gs:// or az://)"
            )
        return ObjectStore(name)
    return LocalStore(name)


def to_frame(data: pl.DataFrame) -> bytes:
    """A table's Parquet bytes."""
    buf = io.BytesIO()
    data.write_parquet(buf)
    return buf.getvalue()
