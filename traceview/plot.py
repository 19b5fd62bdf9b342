"""Charts for notebooks and scripts: ``tv.plot.heartbeat(...)``, ``tv.plot.gaps(...)``.

Each returns a matplotlib Figure (shown inline by Jupyter); nothing opens a window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceview.analysis.analyze import Analysis, analyze
from traceview.analysis.documents import display
from traceview.analysis.documents.cost import StepCost
from traceview.analysis.documents.summary import Summary
from traceview.errors import UsageError
from traceview.model import Trace
from traceview.render.charts import draw_heartbeat, heartbeat_data, heartbeat_figure
from traceview.render.cost_chart import cost_data, cost_figure, trace_labels
from traceview.render.format import gap_title
from traceview.render.gaps_chart import gaps_data, gaps_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["cost", "gaps", "heartbeat"]


Chartable = Trace | Analysis | Summary


def _summary(x: Chartable) -> Summary:
    if isinstance(x, Summary):
        return x
    return (x if isinstance(x, Analysis) else analyze(x)).summary


def heartbeat(
    trace_or_summary: Chartable | list[Chartable],
    ax: Axes | None = None,
    *,
    title: str | None = None,
    window_ms: tuple[float, float] | None = None,
    style: str = "light",
) -> Figure:
    """The heartbeat: one tick per engine step, the step-to-step interval over time, mixed
    phases shaded, each phase's median cadence drawn and labelled with its n.

    Args:
        trace_or_summary: a Trace, an Analysis, a Summary, or a list of them (stacked on
            the same scales).
        ax: draw only the interval panel onto this axes (single trace).
        title: chart title (default: the file name).
        window_ms: x range to show, in ms from the first kernel.
        style: ``light`` or ``dark``.
    """
    items = trace_or_summary if isinstance(trace_or_summary, list) else [trace_or_summary]
    datas = [heartbeat_data(_summary(x), title=title, window_ms=window_ms) for x in items]
    if ax is not None:
        if len(datas) != 1:
            raise UsageError("ax= draws one trace; pass a single trace")
        tick_ax = ax.inset_axes((0, 1.02, 1, 0.18), sharex=ax)
        tick_ax.tick_params(labelbottom=False)
        draw_heartbeat(datas[0], tick_ax, ax, style=style)
        return ax.get_figure()  # type: ignore[return-value]
    return heartbeat_figure(datas, style=style)


def gaps(trace_or_summary: Chartable, *, title: str | None = None, style: str = "light") -> Figure:
    """Decode-gap distribution per population (CDF, log time axis, p50/p90/p99, n)."""
    summary = _summary(trace_or_summary)
    doc = summary.to_dict()
    trace_path = doc["trace"]["path"]
    return gaps_figure(
        gaps_data(summary, summary.decode_gaps),
        title=title or f"{gap_title(doc)} — {trace_path}",
        style=style,
    )


def cost(step_cost: StepCost, *, title: str | None = None, style: str = "light") -> Figure:
    """The step-cost chart of a pooled fit (``tv.step_cost(paths)``): step time and decode
    tokens per second against the decode batch with the fitted line, each trace's steps in
    its own colour; with a prompt fit, step time against the prompt tokens too."""
    doc = step_cost.to_dict()
    shown = ", ".join(trace_labels([t["path"] for t in doc["traces"]])[:4])
    more = f" and {len(doc['traces']) - 4} more" if len(doc["traces"]) > 4 else ""
    return cost_figure(
        cost_data(step_cost), title=title or f"what a step costs — {shown}{more}", style=style
    )


display.register_charts(
    lambda summary, title, window_ms, style: heartbeat(
        summary, title=title, window_ms=window_ms, style=style
    ),
    lambda summary, title, style: gaps(summary, title=title, style=style),
    lambda step_cost, title, style: cost(step_cost, title=title, style=style),
)
