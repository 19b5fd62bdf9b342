"""The environment variables a command sets for itself and its worker processes, named
once: the modules that read them import the names from here, and so does the command line,
which sets them for one command (``--workers``, ``--storage-option``, ``--no-cache``) without
importing those modules first (``traceview CMD --help`` imports no loader)."""

from __future__ import annotations

WORKERS = "TRACEVIEW_WORKERS"  # the processes that decode each JSON trace (load/helpers.py)
STORAGE_OPTIONS = "TRACEVIEW_STORAGE_OPTIONS"  # JSON object: --storage-option's pairs
CACHE = "TRACEVIEW_CACHE"  # 0, false, no, off: the loaded-trace cache is off (load/cache.py)
