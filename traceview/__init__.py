"""traceview: answers from GPU profiler traces of LLM inference engines.

Every public name is imported when it is first used (PEP 562): ``import traceview`` costs
the error classes only, ``tv.load`` the loader (polars), and an analysis name the analysis.
What draws a summary, a diff or an analysis' charts (``render/markup.py``, ``plot.py``) is
imported the first time something is drawn, whichever module made it: the package gives
:mod:`traceview.analysis.documents.display` the function that imports them.
"""

from __future__ import annotations

import importlib as _importlib
import importlib.util as _importlib_util
import sys as _sys
import types as _types
from typing import TYPE_CHECKING

from traceview.analysis.documents import display as _display
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

if TYPE_CHECKING:
    from traceview import capture, plot
    from traceview.analysis.analyze import Analysis, AnalysisConfig, analyze
    from traceview.analysis.classify.families import load_rules
    from traceview.analysis.documents.checks import Bounds, CheckResult, check
    from traceview.analysis.documents.compare import Diff, diff
    from traceview.analysis.documents.cost import StepCost
    from traceview.analysis.documents.run import RunSummary
    from traceview.analysis.documents.summary import Summary
    from traceview.analysis.shortcuts import busy, decode_gaps, families, kernels, steps, summarize
    from traceview.analysis.work.devices import DeviceSpec
    from traceview.analysis.work.devices import device_option as device_spec
    from traceview.analysis.work.model_config import ModelSpec, load_model
    from traceview.batch.cost import step_cost
    from traceview.batch.run import RunOptions, summarize_run
    from traceview.batch.scan import scan
    from traceview.batch.scan_task import ScanOptions
    from traceview.load import LoadOptions, load
    from traceview.model import Trace, TraceMeta
    from traceview.sql import run_sql

    sql = run_sql
    __version__: str

# public name -> (module, attribute; None: the module itself)
_NAMES = {
    "load": ("traceview.load", "load"),
    "LoadOptions": ("traceview.load", "LoadOptions"),
    "Trace": ("traceview.model", "Trace"),
    "TraceMeta": ("traceview.model", "TraceMeta"),
    "capture": ("traceview.capture", None),  # torch itself is imported when recording
    "analyze": ("traceview.analysis.analyze", "analyze"),
    "Analysis": ("traceview.analysis.analyze", "Analysis"),
    "AnalysisConfig": ("traceview.analysis.analyze", "AnalysisConfig"),
    "load_rules": ("traceview.analysis.classify.families", "load_rules"),
    "Bounds": ("traceview.analysis.documents.checks", "Bounds"),
    "CheckResult": ("traceview.analysis.documents.checks", "CheckResult"),
    "check": ("traceview.analysis.documents.checks", "check"),
    "Diff": ("traceview.analysis.documents.compare", "Diff"),
    "diff": ("traceview.analysis.documents.compare", "diff"),
    "RunSummary": ("traceview.analysis.documents.run", "RunSummary"),
    "Summary": ("traceview.analysis.documents.summary", "Summary"),
    "busy": ("traceview.analysis.shortcuts", "busy"),
    "decode_gaps": ("traceview.analysis.shortcuts", "decode_gaps"),
    "families": ("traceview.analysis.shortcuts", "families"),
    "kernels": ("traceview.analysis.shortcuts", "kernels"),
    "steps": ("traceview.analysis.shortcuts", "steps"),
    "summarize": ("traceview.analysis.shortcuts", "summarize"),
    "DeviceSpec": ("traceview.analysis.work.devices", "DeviceSpec"),
    "device_spec": ("traceview.analysis.work.devices", "device_option"),
    "ModelSpec": ("traceview.analysis.work.model_config", "ModelSpec"),
    "load_model": ("traceview.analysis.work.model_config", "load_model"),
    "RunOptions": ("traceview.batch.run", "RunOptions"),
    "summarize_run": ("traceview.batch.run", "summarize_run"),
    "scan": ("traceview.batch.scan", "scan"),
    "step_cost": ("traceview.batch.cost", "step_cost"),
    "StepCost": ("traceview.analysis.documents.cost", "StepCost"),
    "ScanOptions": ("traceview.batch.scan_task", "ScanOptions"),
    "plot": ("traceview.plot", None),
    "run_sql": ("traceview.sql", "run_sql"),
    # tv.sql(trace, "select ...") reads as the examples do
    "sql": ("traceview.sql", "run_sql"),
}
# what draws the analysis' objects: imported the first time one is drawn
_DRAWINGS = ("traceview.render.markup", "traceview.plot")
# names that are also subpackages: importing ``traceview.load`` or ``traceview.sql`` binds
# the subpackage to the package's attribute, which must stay the function
_FUNCTIONS_OVER_PACKAGES = frozenset(("load", "sql"))


def _import_drawings() -> None:
    for module in _DRAWINGS:
        _importlib.import_module(module)


_display.set_loader(_import_drawings)

if not TYPE_CHECKING:  # to a type checker, only the names imported above exist

    def __getattr__(name: str) -> object:
        if name == "__version__":
            from importlib.metadata import version

            value = version("traceview")  # pyproject.toml is the one place it is written
        elif name in _NAMES:
            where, attribute = _NAMES[name]
            module = _importlib.import_module(where)
            value = module if attribute is None else getattr(module, attribute)
        elif not name.startswith("_") and _importlib_util.find_spec(f"{__name__}.{name}"):
            value = _importlib.import_module(f"{__name__}.{name}")  # traceview.batch, .units
        else:
            raise AttributeError(f"module 'traceview' has no attribute {name!r}")
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})


class _Package(_types.ModuleType):
    """The package, whose ``load`` and ``sql`` stay the functions when their subpackages
    are imported (Python binds a subpackage to its parent's attribute as it imports it)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _FUNCTIONS_OVER_PACKAGES and isinstance(value, _types.ModuleType):
            return  # the subpackage stays in sys.modules; the name is the function's
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package

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
    "step_cost",
    "StepCost",
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
