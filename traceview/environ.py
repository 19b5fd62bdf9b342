"""The environment variables a command sets for itself and its worker processes, named
once: the modules that read them import the names from here, and so does the command line,
which sets them for one command (``--workers``, ``--storage-option``, ``--no-cache``) without
importing those modules first (``traceview CMD --help`` imports no loader)."""

from __future__ import annotations

import os

WORKERS = "TRACEVIEW_WORKERS"  # the processes that decode each JSON trace (load/helpers.py)
STORAGE_OPTIONS = "TRACEVIEW_STORAGE_OPTIONS"  # JSON object: --storage-option's pairs
CACHE = "TRACEVIEW_CACHE"  # 0, false, no, off: the loaded-trace cache is off (load/cache.py)
CACHE_MAX_BYTES = "TRACEVIEW_CACHE_MAX_BYTES"  # the cache's size bound, bytes (default 4 GiB)

_OFF = ("0", "false", "no", "off")
_ON = ("", "1", "true", "yes", "on")


def _refuse(message: str) -> None:
    from traceview.errors import UsageError

    raise UsageError(message)


def cache_on() -> bool:
    """False when ``TRACEVIEW_CACHE`` turns the cache off (0, false, no, off); on when it
    is unset or 1, true, yes, on. Any other value is a usage error naming it (a typo must
    not leave the cache on, or off, unsaid)."""
    text = os.environ.get(CACHE, "1").strip().lower()
    if text not in _ON + _OFF:
        _refuse(
            f"{CACHE}={os.environ.get(CACHE)!r} is neither on (1, true, yes, on) nor off "
            "(0, false, no, off)"
        )
    return text not in _OFF


def cache_max_bytes() -> int:
    """The cache's size bound (``TRACEVIEW_CACHE_MAX_BYTES``, bytes, default 4 GiB); a value
    that is not a count of bytes is a usage error naming it."""
    text = os.environ.get(CACHE_MAX_BYTES, "").strip()
    if not text:
        return 4 << 30
    if not (text.isascii() and text.isdigit()):
        _refuse(f"{CACHE_MAX_BYTES}={text!r} is not a count of bytes >= 0")
    return int(text)


def check_cache() -> None:
    """Refuse, before any work, a cache setting that means nothing (each is also read
    where it is used)."""
    cache_on()
    cache_max_bytes()
