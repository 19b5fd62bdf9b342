"""Capture: record torch-profiler traces, drive a serving engine, probe what clients saw.

torch, uvicorn, starlette and httpx are imported lazily (``pip install 'traceview[capture]'``).
"""

from __future__ import annotations

from typing import Any


def record(*args: Any, **kwargs: Any) -> Any:
    """See :func:`traceview.capture.recorder.record`."""
    from traceview.capture.recorder import record as _record

    return _record(*args, **kwargs)


__all__ = ["record"]
