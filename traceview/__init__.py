"""traceview: answers from GPU profiler traces of LLM inference engines.

Every public name is imported when it is first used (PEP 562): ``import traceview`` costs
the error classes only, ``tv.load`` the loader (polars), and an analysis name the analysis.
What draws a summary, a diff or an analysis' charts (``render/markup.py``, ``plot.py``) is
imported the first time something is drawn, whichever module made it: the package gives
:mod:`traceview.analysis.documents.display` the function that imports them.

No public function shares its name with a subpackage (``tv.load`` lives in
:mod:`traceview.loader`, ``tv.run_sql`` in :mod:`traceview.sqlengine`), so importing a
subpackage never rebinds a public name. A deprecated name (:data:`_DEPRECATED`) still works
for one release and warns when it is read.
"""

from __future__ import annotations

import importlib as _importlib
import importlib.util as _importlib_util
from typing import TYPE_CHECKING

from traceview._deprecated import deprecated as _deprecated
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
    from traceview.analysis.work.devices import GpuSpec, load_gpu
    from traceview.analysis.work.model_config import ModelSpec, load_model
    from traceview.batch.cost import step_cost
    from traceview.batch.run import RunOptions, summarize_run
    from traceview.batch.scan import scan
    from traceview.batch.scan_task import ScanOptions
    from traceview.loader import LoadOptions, load
    from traceview.model import Trace, TraceMeta
    from traceview.sqlengine import run_sql

    # deprecated: they warn when read (_DEPRECATED)
    sql = run_sql
    device_spec = load_gpu
    DeviceSpec = GpuSpec
    __version__: str

# public name -> (module, attribute; None: the module itself)
_NAMES = {
    "load": ("traceview.loader", "load"),
    "LoadOptions": ("traceview.loader", "LoadOptions"),
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
    "GpuSpec": ("traceview.analysis.work.devices", "GpuSpec"),
    "load_gpu": ("traceview.analysis.work.devices", "load_gpu"),
    "ModelSpec": ("traceview.analysis.work.model_config", "ModelSpec"),
    "load_model": ("traceview.analysis.work.model_config", "load_model"),
    "RunOptions": ("traceview.batch.run", "RunOptions"),
    "summarize_run": ("traceview.batch.run", "summarize_run"),
    "scan": ("traceview.batch.scan", "scan"),
    "step_cost": ("traceview.batch.cost", "step_cost"),
    "StepCost": ("traceview.analysis.documents.cost", "StepCost"),
    "ScanOptions": ("traceview.batch.scan_task", "ScanOptions"),
    "plot": ("traceview.plot", None),
    "run_sql": ("traceview.sqlengine", "run_sql"),
}
# deprecated public name -> its new name: it still works for one release, and warns
_DEPRECATED = {
    "sql": "run_sql",
    "device_spec": "load_gpu",
    "DeviceSpec": "GpuSpec",
}
# what draws the analysis' objects: imported the first time one is drawn
_DRAWINGS = ("traceview.render.markup", "traceview.plot")


def _import_drawings() -> None:
    for module in _DRAWINGS:
        _importlib.import_module(module)


_display.set_loader(_import_drawings)

if not TYPE_CHECKING:  # to a type checker, only the names imported above exist

    def __getattr__(name: str) -> object:
        if name == "__version__":
            from importlib.metadata import version

            value = version("traceview")  # pyproject.toml is the one place it is written
        elif name in _DEPRECATED:  # not kept in globals(): every read warns
            _deprecated(f"traceview.{name}", f"traceview.{_DEPRECATED[name]}")
            return __getattr__(_DEPRECATED[name])
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
    "load_gpu",
    "GpuSpec",
    "EfficiencyInputError",
    "load_model",
    "ModelSpec",
    "families",
    "kernels",
    "load_rules",
    "plot",
    "run_sql",
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
