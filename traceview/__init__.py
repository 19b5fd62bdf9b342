"""traceview: answers from GPU profiler traces of LLM inference engines."""

from traceview.errors import (
    CaptureError,
    MissingDependencyError,
    QueryError,
    TraceFormatError,
    TraceviewError,
    TraceviewWarning,
    UnsupportedTraceError,
)
from traceview.load import LoadOptions, load
from traceview.model import Trace, TraceMeta

__version__ = "0.1.0"

__all__ = [
    "CaptureError",
    "LoadOptions",
    "MissingDependencyError",
    "QueryError",
    "Trace",
    "TraceFormatError",
    "TraceMeta",
    "TraceviewError",
    "TraceviewWarning",
    "UnsupportedTraceError",
    "load",
]
