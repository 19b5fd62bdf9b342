"""How analysis objects show themselves where people look at them, without analysis importing
render: ``Summary._repr_html_`` (notebooks) and ``Diff.to_markdown`` (pull requests) call the
functions :mod:`traceview.render.markup` registers here when it is imported; the charts, those
:mod:`traceview.plot` registers. Neither is imported until something is drawn: then the
loader the package sets here (:func:`set_loader`) imports both, whichever module made the
summary, diff or analysis (``tv.summarize``, a submodule imported directly, an unpickled
object)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from traceview.analysis.base.document import SummaryDocument

if TYPE_CHECKING:
    from traceview.analysis.documents.compare import Diff
    from traceview.analysis.documents.cost import StepCost
    from traceview.analysis.documents.summary import Summary

SummaryHtml = Callable[[SummaryDocument], str]
DiffMarkdown = Callable[["Diff", int], str]

_summary_html: list[SummaryHtml] = []
_diff_markdown: list[DiffMarkdown] = []
_loader: list[Callable[[], None]] = []  # imports the modules that register the drawings


def set_loader(load: Callable[[], None]) -> None:
    """Set the function that imports the drawings (the package sets it)."""
    _loader[:] = [load]


def _drawn() -> None:
    """Import the drawings, the first time one is asked for."""
    if not (_summary_html and _heartbeat) and _loader:
        _loader[0]()


class Figure(Protocol):
    """A chart (a matplotlib Figure: analysis never imports matplotlib)."""

    def savefig(self, fname: str) -> None: ...


HeartbeatChart = Callable[["Summary", str | None, tuple[float, float] | None, str], Figure]
GapsChart = Callable[["Summary", str | None, str], Figure]
CostChart = Callable[["StepCost", str | None, str], Figure]
_heartbeat: list[HeartbeatChart] = []
_gaps: list[GapsChart] = []
_cost: list[CostChart] = []


def register_charts(heartbeat: HeartbeatChart, gaps: GapsChart, cost: CostChart) -> None:
    """Set the functions that draw an analysis' charts (:mod:`traceview.plot` registers
    them when it is imported)."""
    _heartbeat[:] = [heartbeat]
    _gaps[:] = [gaps]
    _cost[:] = [cost]


def _charts_missing() -> Exception:
    from traceview.errors import MissingDependencyError

    return MissingDependencyError("charts need traceview.plot (matplotlib): import traceview.plot")


def heartbeat(
    summary: Summary, title: str | None, window_ms: tuple[float, float] | None, style: str
) -> Figure:
    """The heartbeat chart of a summary (the registered drawing).

    Raises:
        MissingDependencyError: no drawing is registered.
    """
    _drawn()
    if not _heartbeat:
        raise _charts_missing()
    return _heartbeat[0](summary, title, window_ms, style)


def gaps(summary: Summary, title: str | None, style: str) -> Figure:
    """The decode-gap chart of a summary (the registered drawing).

    Raises:
        MissingDependencyError: no drawing is registered.
    """
    _drawn()
    if not _gaps:
        raise _charts_missing()
    return _gaps[0](summary, title, style)


def cost(step_cost: StepCost, title: str | None, style: str) -> Figure:
    """The step-cost chart of a pooled fit (the registered drawing).

    Raises:
        MissingDependencyError: no drawing is registered.
    """
    _drawn()
    if not _cost:
        raise _charts_missing()
    return _cost[0](step_cost, title, style)


def register(summary_html: SummaryHtml, diff_markdown: DiffMarkdown) -> None:
    """Set the functions that draw a summary as HTML and a diff as markdown."""
    _summary_html[:] = [summary_html]
    _diff_markdown[:] = [diff_markdown]


def summary_html(document: SummaryDocument) -> str:
    """The summary as HTML (the registered drawing; else its JSON in a ``<pre>``)."""
    _drawn()
    if _summary_html:
        return _summary_html[0](document)
    import html

    import orjson

    return f"<pre>{html.escape(orjson.dumps(document).decode())}</pre>"


def diff_markdown(diff: Diff, limit: int) -> str:
    """The diff as markdown (the registered drawing; else its JSON in a code block)."""
    _drawn()
    if _diff_markdown:
        return _diff_markdown[0](diff, limit)
    import orjson

    return "```json\n" + orjson.dumps(diff.to_dict()).decode() + "\n```\n"
