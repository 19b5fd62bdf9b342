"""Traces at URLs: ``s3://``, ``gs://``, ``az://`` and ``http(s)://`` objects, read through
fsspec (the ``traceview[cloud]`` extra) as streams, never downloaded whole first.

The standard settings are honoured: the AWS, Google Cloud and Azure credential chains, and
``AWS_ENDPOINT_URL`` for an S3-compatible server (used as given, so a local server's
``http://`` works). A missing object, denied access or an unreachable endpoint is one
:class:`~traceview.errors.TraceFormatError` naming the URL.
"""

from __future__ import annotations

import os
from typing import BinaryIO, Protocol, cast

from traceview.errors import MissingDependencyError, TraceFormatError

SCHEMES = ("s3://", "gs://", "gcs://", "az://", "abfs://", "http://", "https://")
CONNECT_TIMEOUT_S = 10  # an endpoint that does not answer fails in seconds, not minutes


def is_url(name: str) -> bool:
    """Whether ``name`` is an object-store or HTTP URL rather than a path."""
    return name.lower().startswith(SCHEMES)


class _FileSystem(Protocol):
    """What this module asks of an fsspec filesystem."""

    def info(self, path: str) -> dict[str, object]: ...

    def open(self, path: str, mode: str, block_size: int) -> BinaryIO: ...


def _options(url: str) -> dict[str, object]:
    """fsspec's options for ``url``: an S3 endpoint from ``AWS_ENDPOINT_URL``, short
    connect timeouts and one retry, so a wrong endpoint is an error soon."""
    if url.lower().startswith("s3://"):
        options: dict[str, object] = {
            "config_kwargs": {
                "connect_timeout": CONNECT_TIMEOUT_S,
                "read_timeout": 60,
                "retries": {"max_attempts": 2, "mode": "standard"},
            }
        }
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            options["endpoint_url"] = endpoint
        return options
    return {}


def _fs(url: str) -> tuple[_FileSystem, str]:
    try:
        import fsspec
    except ImportError:
        raise MissingDependencyError(
            f"{url}: reading URLs needs fsspec and the store's driver: "
            "pip install 'traceview[cloud]'"
        ) from None
    try:
        fs, path = fsspec.core.url_to_fs(url, **_options(url))
    except (ImportError, ValueError) as exc:
        raise MissingDependencyError(
            f"{url}: no driver for this store ({exc}); pip install 'traceview[cloud]'"
        ) from None
    return cast(_FileSystem, fs), str(path)


def _failure(url: str, exc: BaseException) -> TraceFormatError:
    """One line for what went wrong reaching ``url``."""
    if isinstance(exc, FileNotFoundError):
        return TraceFormatError(url, "no such object")
    if isinstance(exc, PermissionError):
        return TraceFormatError(url, "access denied (check the store's credentials)")
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return TraceFormatError(url, f"cannot read the object: {text}")


def size(url: str) -> int:
    """The object's size in bytes.

    Raises:
        TraceFormatError: a missing object, denied access, an unreachable endpoint.
    """
    fs, path = _fs(url)
    try:
        info = fs.info(path)
    except Exception as exc:  # botocore, aiohttp and the store drivers each raise their own
        raise _failure(url, exc) from None
    if info.get("type") == "directory":
        raise TraceFormatError(url, "is a folder, not a trace object")
    size = info.get("size")
    return int(size) if isinstance(size, int | float) else 0


def open_binary(url: str) -> BinaryIO:
    """The object as a binary stream (read in blocks, seekable).

    Raises:
        TraceFormatError: a missing object, denied access, an unreachable endpoint.
    """
    fs, path = _fs(url)
    try:
        stream: BinaryIO = fs.open(path, "rb", block_size=8 << 20)
    except Exception as exc:  # as in size()
        raise _failure(url, exc) from None
    return stream
