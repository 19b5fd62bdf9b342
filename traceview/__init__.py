"""traceview: answers from GPU profiler traces of LLM inference engines."""

from importlib.metadata import version as _version

from traceview import capture, plot
from traceview.analysis.analyze import Analysis, AnalysisConfig, analyze
from traceview.analysis.classify.families import load_rules
from traceview.analysis.documents.checks import Bounds, CheckResult, check
from traceview.analysis.documents.compare import Diff, diff
from traceview.analysis.documents.run import RunSummary
from traceview.analysis.documents.summary import Summary
from traceview.analysis.shortcuts import busy, decode_gaps, families, kernels, steps, summarize
from traceview.analysis.work.devices import DeviceSpec
from traceview.analysis.work.devices import device_option as device_spec
from traceview.analysis.work.model_config import ModelSpec, load_model
from traceview.batch.run import RunOptions, summarize_run
from traceview.batch.scan import scan
from traceview.batch.scan_task import ScanOptions
from traceview.errors import (
    CaptureError,
    CheckError,
    CheckFailed,
    EfficiencyInputError,
    MissingDependencyError,
    QueryError,
    RulesError,
    RunError,
    TraceFormatError,
    TraceviewError,
    TraceviewWarning,
    UnsupportedTraceError,
    UsageError,
)
from traceview.load import LoadOptions, load
from traceview.model import Trace, TraceMeta
from traceview.render import markup as _markup  # noqa: F401  (registers the notebook and markdown drawing)
from traceview.sql import run_sql

sql = run_sql  # tv.sql(trace, "select ...") reads as the examples do

__version__ = _version("traceview")  # pyproject.toml is the one place it is written

__all__ = [
    "__version__",
    "analyze",
    "Analysis",
    "AnalysisConfig",
    "Bounds",
    "CheckResult",
    "Diff",
    "check",
    "diff",
    "Summary",
    "busy",
    "capture",
    "decode_gaps",
    "device_spec",
    "DeviceSpec",
    "EfficiencyInputError",
    "load_model",
    "ModelSpec",
    "families",
    "kernels",
    "load_rules",
    "plot",
    "run_sql",
    "sql",
    "steps",
    "summarize",
    "summarize_run",
    "RunOptions",
    "RunSummary",
    "scan",
    "ScanOptions",
    "CaptureError",
    "CheckError",
    "CheckFailed",
    "RulesError",
    "RunError",
    "UsageError",
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
