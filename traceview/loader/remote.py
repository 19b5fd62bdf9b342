"""Traces at URLs: ``s3://``, ``gs://``, ``az://`` and ``http(s)://`` objects, read through
fsspec (the ``traceview[cloud]`` extra) as streams, never downloaded whole first.

The standard settings are honoured: the AWS, Google Cloud and Azure credential chains, and
``AWS_ENDPOINT_URL`` for an S3-compatible server (used as given, so a local server's
``http://`` works). ``--storage-option KEY=VALUE`` (kept in ``TRACEVIEW_STORAGE_OPTIONS``,
so worker processes see it too) passes the rest to the store's driver. A missing object,
denied access or an unreachable endpoint is one
:class:`~traceview.errors.TraceFormatError` naming the URL.

An object's **version** is its version id, else its strong ETag (a weak ``W/`` ETag says
nothing about the bytes): with its size, it keys the loaded-trace cache and a scan's
incremental skip without reading the object.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO, Protocol, cast

from traceview import environ
from traceview.errors import MissingDependencyError, TraceFormatError
from traceview.redact import has_userinfo

SCHEMES = ("s3://", "gs://", "gcs://", "az://", "abfs://", "http://", "https://")
# an endpoint that does not answer fails in seconds, not minutes: each request waits this
# long for a connection, and this long for each read (``--storage-option connect_timeout=S``,
# ``read_timeout=S`` change them)
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 10.0
TIMEOUT_OPTIONS = ("connect_timeout", "read_timeout")


def is_url(name: str) -> bool:
    """Whether ``name`` is an object-store or HTTP URL rather than a path."""
    return name.lower().startswith(SCHEMES)


_QUERY = re.compile(r"\?[A-Za-z0-9_.~%-]+=")  # a query: a '?' that starts 'name=', not a glob's


def is_glob(url: str) -> bool:
    """Whether the URL is a glob (``*``, ``?`` or ``[`` in its key); a ``?`` that starts a
    query (``?versionId=…``, a presigned URL's ``?X-Amz-…=…``) is no glob, nor an IPv6
    host's brackets (``http://[::1]:8080/x``)."""
    rest = url.split("://", 1)[-1]
    if rest.startswith("[") and "]" in rest:
        rest = rest[rest.index("]") + 1 :]
    query = _QUERY.search(rest)
    return any(ch in rest[: query.start() if query else None] for ch in "*?[")


class FileSystem(Protocol):
    """What traceview asks of an fsspec filesystem."""

    def info(self, path: str) -> dict[str, object]: ...

    def open(self, path: str, mode: str, block_size: int = ...) -> BinaryIO: ...

    def find(self, path: str, detail: bool) -> dict[str, dict[str, object]]: ...

    def glob(self, path: str, detail: bool) -> dict[str, dict[str, object]]: ...

    def isdir(self, path: str) -> bool: ...

    def ls(self, path: str, detail: bool) -> list[str]: ...

    def rm(self, path: str) -> None: ...

    def cat(self, path: str | list[str]) -> bytes | dict[str, bytes]: ...

    def pipe(self, path: str, value: bytes) -> None: ...

    def put(self, lpath: str, rpath: str) -> None: ...

    def invalidate_cache(self, path: str | None = None) -> None: ...


def option_value(text: str) -> object:
    """A ``--storage-option`` value as its driver wants it: true/false, an integer, a
    number, else the text."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def storage_options() -> dict[str, object]:
    """The ``--storage-option`` pairs this process was given (``TRACEVIEW_STORAGE_OPTIONS``)."""
    text = os.environ.get(environ.STORAGE_OPTIONS, "").strip()
    if not text:
        return {}
    try:
        given = json.loads(text)
    except ValueError:
        raise TraceFormatError(
            environ.STORAGE_OPTIONS, "not a JSON object of storage options"
        ) from None
    if not isinstance(given, dict):
        raise TraceFormatError(environ.STORAGE_OPTIONS, "not a JSON object of storage options")
    return given


ENDPOINT_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


def settings() -> dict[str, str]:
    """The endpoint and storage options this process was given, to hand to workers on
    other machines (their credentials come from their own environment)."""
    return {k: os.environ[k] for k in (*ENDPOINT_ENV, environ.STORAGE_OPTIONS) if k in os.environ}


def apply_settings(given: dict[str, str]) -> None:
    """Use a driver's :func:`settings` in this (worker) process; what the driver was not
    given, the worker's node keeps as its own environment says."""
    for k in (*ENDPOINT_ENV, environ.STORAGE_OPTIONS):
        if k in given:
            os.environ[k] = given[k]


def _options(url: str) -> dict[str, object]:
    """fsspec's options for ``url``: an S3 endpoint from ``AWS_ENDPOINT_URL``, connect and
    read timeouts (:func:`timeouts`) and one retry, so a wrong endpoint or a server that
    does not answer is an error soon; then the other ``--storage-option`` pairs, which
    win."""
    given = {k: v for k, v in storage_options().items() if k not in TIMEOUT_OPTIONS}
    return {**_defaults(url, *timeouts(url)), **given}


def timeouts(url: str) -> tuple[float, float]:
    """The connect and read timeouts, in seconds, of a request for ``url``:
    ``--storage-option connect_timeout=S`` and ``read_timeout=S``, else
    :data:`CONNECT_TIMEOUT_S` and :data:`READ_TIMEOUT_S`.

    Raises:
        TraceFormatError: a timeout that is not a number of seconds above 0.
    """
    given = storage_options()
    chosen = []
    for key, default in zip(TIMEOUT_OPTIONS, (CONNECT_TIMEOUT_S, READ_TIMEOUT_S), strict=True):
        value = given.get(key, default)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 < value < 86400 * 365
        ):
            raise TraceFormatError(
                url, f"--storage-option {key}={value!r}: not a number of seconds above 0"
            )
        chosen.append(float(value))
    return chosen[0], chosen[1]


def _defaults(url: str, connect: float, read: float) -> dict[str, object]:
    low = url.lower()
    if low.startswith("s3://"):
        options: dict[str, object] = {
            "config_kwargs": {
                "connect_timeout": connect,
                "read_timeout": read,
                "retries": {"max_attempts": 2, "mode": "standard"},
            }
        }
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            options["endpoint_url"] = endpoint
        return options
    if low.startswith(("http://", "https://")):
        import aiohttp  # fsspec's HTTP driver is built on it

        timeout = aiohttp.ClientTimeout(
            total=None, connect=connect, sock_connect=connect, sock_read=read
        )
        return {"client_kwargs": {"timeout": timeout}}
    return {}


def filesystem(url: str) -> tuple[FileSystem, str]:
    """The fsspec filesystem of ``url`` and the path within it.

    Raises:
        MissingDependencyError: fsspec or the store's driver is not installed.
    """
    try:
        import fsspec
    except ImportError:
        raise MissingDependencyError(
            f"{url}: reading URLs needs fsspec and the store's driver: "
            "pip install 'traceview[cloud]'"
        ) from None
    where = url.split("://", 1)[1].split("/", 1)[0] if "://" in url else ""
    if not where:  # s3://, s3:///key: fsspec would name the store's root, or fail
        http = url.lower().startswith(("http://", "https://"))
        raise TraceFormatError(
            url,
            f"names no {'host' if http else 'bucket'}; give "
            f"{scheme(url).lower()}{'HOST' if http else 'BUCKET'}/PATH",
        )
    if scheme(url).lower() in ("s3://", "s3a://") and has_userinfo(url):
        # s3fs reads "user:pw@bkt" as the bucket's name; botocore then refuses that name
        raise TraceFormatError(
            url,
            "an s3:// URL carries no credentials (the driver would read what precedes the "
            "'@' as part of the bucket's name); give them with --storage-option key=KEY "
            "--storage-option secret=SECRET, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
        )
    try:
        options = _options(url)
    except ImportError:  # aiohttp, for an http(s) URL
        raise MissingDependencyError(
            f"{url}: reading URLs needs fsspec and the store's driver: "
            "pip install 'traceview[cloud]'"
        ) from None
    try:
        # schemes are case-insensitive (RFC 3986); fsspec knows only their lower case
        lowered = scheme(url).lower() + url[len(scheme(url)) :]
        if lowered.startswith(("http://", "https://")):
            # the whole URL is the path: url_to_fs would read an IPv6 host's "::" as its
            # separator of chained URLs ("https://[::1]:8080/x")
            fs, path = fsspec.filesystem(scheme(lowered)[:-3], **options), lowered
        else:
            fs, path = fsspec.core.url_to_fs(lowered, **options)
    except (ImportError, ValueError) as exc:
        raise MissingDependencyError(
            f"{url}: no driver for this store ({exc}); pip install 'traceview[cloud]'"
        ) from None
    except TypeError as exc:  # an option the driver does not take
        raise TraceFormatError(
            url, f"the store's driver refused its options {sorted(options)}: {exc}"
        ) from None
    if url.lower().startswith("s3://"):
        # botocore already tries twice (``_defaults``); s3fs's own 5 tries on top of that
        # made a server that never answers cost 5 x 2 x the read timeout
        fs.retries = 1
    return cast(FileSystem, fs), str(path)


def failure(url: str, exc: BaseException, *, writing: bool = False) -> TraceFormatError:
    """One line for what went wrong reaching ``url`` (``writing``: an upload to it)."""
    waited = timed_out(exc)
    if waited is not None:
        kind = "connect" if "connect" in type(waited).__name__.lower() else "read"
        seconds = dict(zip(TIMEOUT_OPTIONS, timeouts(url), strict=True))[f"{kind}_timeout"]
        return TraceFormatError(
            url,
            f"no answer from {_server(url, waited)} within {seconds:g} s ({kind} timeout); "
            f"--storage-option {kind}_timeout=SECONDS waits longer",
        )
    if writing:
        return TraceFormatError(url, f"cannot be written: {_write_problem(url, exc)}")
    if isinstance(exc, FileNotFoundError):
        return TraceFormatError(url, "no such object")
    if isinstance(exc, PermissionError):
        return TraceFormatError(url, "access denied (check the store's credentials)")
    return TraceFormatError(url, f"cannot read the object: {_reason(exc)}")


def _reason(exc: BaseException) -> str:
    """An exception's first line, else its type's name (a bare ``TimeoutError()``); a
    first line that only heads the lines below it (botocore's "Parameter validation
    failed:") with those lines, on one line."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        return " ".join(lines)
    return lines[0]


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from (fsspec's HTTP driver turns any
    failure of a request into a ``FileNotFoundError`` raised from the real one)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 16:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def timed_out(exc: BaseException) -> BaseException | None:
    """The timeout among ``exc``'s chain (Python's, asyncio's, aiohttp's, botocore's)."""
    for e in _chain(exc):
        if isinstance(e, TimeoutError) or "Timeout" in type(e).__name__:
            return e
    return None


def _server(url: str, exc: BaseException) -> str:
    """``host:port`` of the server that did not answer: the endpoint botocore names, else
    the S3 endpoint this process was given, else the URL's own host (never its userinfo)."""
    from urllib.parse import urlsplit

    candidates = []
    for e in _chain(exc):
        kwargs = getattr(e, "kwargs", None)
        if isinstance(kwargs, dict) and isinstance(kwargs.get("endpoint_url"), str):
            candidates.append(kwargs["endpoint_url"])
    if url.lower().startswith("s3://"):
        endpoint = _options(url).get("endpoint_url")
        if isinstance(endpoint, str):
            candidates.append(endpoint)
    candidates.append(url)
    for text in candidates:
        try:
            parts = urlsplit(text)
            host, port = parts.hostname, parts.port
        except ValueError:
            continue
        if host and parts.scheme.lower() in ("http", "https"):
            return f"{host}:{port or (443 if parts.scheme.lower() == 'https' else 80)}"
    return "the store"


def _write_problem(url: str, exc: BaseException) -> str:
    """Why an object could not be written at ``url``, in words."""
    if isinstance(exc, FileNotFoundError) and not url.lower().startswith(("http:", "https:")):
        bucket = url.split("://", 1)[1].split("/", 1)[0]
        return f"the bucket {bucket!r} does not exist"
    if isinstance(exc, PermissionError):
        return "access denied (check the store's credentials)"
    for e in _chain(exc):
        status = getattr(e, "status", None)
        if isinstance(status, int) and url.lower().startswith(("http:", "https:")):
            message = getattr(e, "message", "") or ""
            method = getattr(getattr(e, "request_info", None), "method", "") or ""
            said = f"{status} {message}".strip()
            return f"the server refused the upload{f' ({method})' if method else ''}: {said}"
    return _reason(exc)


@dataclass(frozen=True, slots=True)
class RemoteObject:
    """An object at a URL: its size and version (None where the store gives neither a
    version id nor a strong ETag). ``sized`` is False where the store gave no size (an
    HTTP server sending the object in chunks, without a Content-Length): ``size`` is 0
    then, and says nothing."""

    url: str
    size: int
    version: str | None
    mtime_ns: int | None = None
    sized: bool = True


def version_of(info: dict[str, object]) -> str | None:
    """The object's version id, else its strong ETag, from the driver's ``info``."""
    for key in ("VersionId", "version_id", "generation"):
        v = info.get(key)
        if v not in (None, "", "null"):
            return f"version:{v}"
    for key in ("ETag", "etag", "Etag"):
        v = info.get(key)
        if isinstance(v, str) and v and not v.startswith("W/"):
            return "etag:" + v.strip('"')
    return None


def _object(url: str, info: dict[str, object]) -> RemoteObject:
    size = info.get("size")
    when = info.get("LastModified") or info.get("last_modified") or info.get("updated")
    mtime_ns = int(when.timestamp() * 1e9) if isinstance(when, datetime) else None
    if isinstance(size, int | float):
        return RemoteObject(url, int(size), version_of(info), mtime_ns)
    return RemoteObject(url, 0, version_of(info), mtime_ns, sized=False)  # chunked HTTP


_ABSENT = object()


def _ask(url: str, question: Callable[[FileSystem, str], object]) -> object:
    """``question(fs, path)`` of the store at ``url``, its cached listing dropped first (a
    scan's own writes, or another writer's, may have changed it); ``_ABSENT`` where the
    store says there is nothing there.

    Raises:
        TraceFormatError: an unreachable endpoint, denied access.
    """
    fs, path = filesystem(url)
    try:
        fs.invalidate_cache(path)
        return question(fs, path)
    except FileNotFoundError as exc:
        underlying = exc.__cause__  # fsspec's HTTP driver says "not found" for any failure
        if timed_out(exc) is not None or (
            isinstance(underlying, OSError) and not isinstance(underlying, FileNotFoundError)
        ):
            raise failure(url, underlying or exc) from None  # no answer, or refused
        return _ABSENT
    except Exception as exc:  # botocore, aiohttp and the store drivers each raise their own
        raise failure(url, exc) from None


def stat(url: str) -> RemoteObject:
    """The object's size and version.

    Raises:
        TraceFormatError: a missing object, denied access, an unreachable endpoint, a folder.
    """
    info = _ask(url, lambda fs, path: fs.info(path))
    if info is _ABSENT:
        raise TraceFormatError(url, "no such object")
    assert isinstance(info, dict)
    if info.get("type") == "directory":
        raise TraceFormatError(url, "is a folder, not a trace object")
    return _object(url, info)


def size(url: str) -> int:
    """The object's size in bytes (:func:`stat`)."""
    return stat(url).size


def scheme(url: str) -> str:
    """``s3://`` of ``s3://bucket/key``."""
    return url[: url.index("://") + 3]


def is_folder(url: str) -> bool:
    """Whether ``url`` names a folder (a prefix holding objects) rather than an object.

    Raises:
        TraceFormatError: an unreachable endpoint, denied access.
    """
    return _ask(url, lambda fs, path: fs.isdir(path)) is True


def listing(url: str) -> list[RemoteObject]:
    """Every object under the folder ``url``, in all its subfolders, sorted by URL.

    Raises:
        TraceFormatError: an unreachable endpoint, denied access.
    """
    found = _ask(url, lambda fs, path: fs.find(path, detail=True))
    if not isinstance(found, dict):
        return []
    prefix = scheme(url)
    objects = []
    for key, info in found.items():
        if info.get("type") == "directory":
            continue
        full = key if "://" in key else prefix + key.lstrip("/")
        objects.append(_object(full, info))
    return sorted(objects, key=lambda o: o.url)


def matching(pattern: str) -> list[RemoteObject]:
    """The objects a glob URL matches (``s3://b/runs/*/rank*.json.gz``), sorted by URL;
    a matching folder gives every object under it.

    Raises:
        TraceFormatError: an unreachable endpoint, denied access.
    """
    found = _ask(pattern, lambda fs, path: fs.glob(path, detail=True))
    objects = []
    for key, info in found.items() if isinstance(found, dict) else ():
        full = key if "://" in key else scheme(pattern) + key.lstrip("/")
        if info.get("type") == "directory":
            objects += listing(full)
        else:
            objects.append(_object(full, info))
    return sorted(objects, key=lambda o: o.url)


def relative(url: str, root: str) -> str:
    """``url``'s path under the folder URL ``root`` (``a/b.json`` of ``s3://x/r/a/b.json``
    under ``s3://x/r``)."""
    base = root.rstrip("/") + "/"
    return url[len(base) :] if url.startswith(base) else posixpath.basename(url)


def join(root: str, name: str) -> str:
    """``root/name`` for a folder URL."""
    return f"{root.rstrip('/')}/{name}"


def exists(url: str) -> bool:
    """Whether an object (or a folder) is at ``url``.

    Raises:
        TraceFormatError: an unreachable endpoint, denied access.
    """
    return _ask(url, lambda fs, path: fs.info(path)) is not _ABSENT


def check_bucket(url: str) -> None:
    """That the bucket (or container) an output at ``url`` goes into exists, asked before
    any work; an HTTP server is not asked (only the upload can tell). A store that will not
    say (denied) is left to the upload.

    Raises:
        TraceFormatError: the bucket does not exist, or the store cannot be reached.
    """
    if url.lower().startswith(("http://", "https://")):
        return
    fs, path = filesystem(url)
    bucket = path.strip("/").split("/", 1)[0]
    try:
        fs.invalidate_cache(bucket)
        there = fs.info(bucket) is not None
    except FileNotFoundError:
        there = False
    except PermissionError:
        return
    except Exception as exc:  # as in stat()
        raise failure(url, exc) from None
    if not there:
        raise failure(url, FileNotFoundError(bucket), writing=True)


def upload(local: str, url: str) -> None:
    """Write the file ``local`` to ``url`` (one PUT, or a multipart upload the store
    completes whole: a reader never sees half of it).

    Raises:
        TraceFormatError: the store refused it or cannot be reached.
    """
    fs, path = filesystem(url)
    try:
        fs.put(local, path)
    except Exception as exc:  # as in stat()
        raise failure(url, exc, writing=True) from None


def digest(url: str) -> str:
    """BLAKE2b-128 of the object's bytes (read whole, in blocks): a trace's identity in a
    dataset, the same digest a local copy of it has."""
    with open_binary(url) as f:
        return stream_digest(f)


def stream_digest(stream: BinaryIO) -> str:
    """BLAKE2b-128 of what is left to read of ``stream``, read in blocks, as hex: the
    digest :func:`digest` gives an object and a dataset gives a local file."""
    h = hashlib.blake2b(digest_size=16)
    while chunk := stream.read(8 << 20):
        h.update(chunk)
    return h.hexdigest()


def open_binary(url: str) -> BinaryIO:
    """The object as a binary stream (read in blocks, seekable).

    Raises:
        TraceFormatError: a missing object, denied access, an unreachable endpoint.
    """
    fs, path = filesystem(url)
    try:
        stream: BinaryIO = fs.open(path, "rb", block_size=8 << 20)
    except Exception as exc:  # as in size()
        raise failure(url, exc) from None
    return stream
