"""Charts: the heartbeat (step cadence over time); the decode-gap distribution is
:mod:`traceview.render.gaps_chart`.

matplotlib is imported lazily, with the Agg backend: nothing here opens a window. The data
behind each chart is computed first (:func:`heartbeat_data`, :func:`gaps_data`) so tests and
notebooks can check exactly what is drawn.
"""

from __future__ import annotations

import math
import os
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from traceview.analysis.base.document import KINDS
from traceview.errors import MissingDependencyError, TraceviewError, UsageError
from traceview.render.base import atomic_write
from traceview.render.breakdown_chart import (
    StepBreakdown,
    StepEfficiency,
    draw_breakdown,
    draw_efficiency,
    shade_warmup,
    step_breakdown,
    step_efficiency,
    without_warmup,
)
from traceview.render.format import fmt_ns
from traceview.render.safe import chart

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from traceview.analysis.documents.summary import Summary
    from traceview.capture.itl import OnTrace

FORMATS = (".png", ".svg", ".pdf")
COLORS = {
    "light": {
        "decode": "#1f77b4",
        "mixed": "#d62728",
        "prefill": "#9467bd",
        "shade": "#d62728",
        "text": "#222222",
        "probe": "#e67e22",
        "warm-up": "#888888",
    },
    "dark": {
        "decode": "#5fb3ff",
        "mixed": "#ff6b6b",
        "prefill": "#c5a3ff",
        "shade": "#ff6b6b",
        "text": "#eeeeee",
        "probe": "#ffb347",
        "warm-up": "#aaaaaa",
    },
}
KIND_ORDER = KINDS
WARMUP_TICK = "warm-up"  # the tick of a step left out for warm-up, whatever its kind


def _tick_kinds(steps: pl.DataFrame) -> list[str]:
    """Each step's kind for its tick: :data:`WARMUP_TICK` for a step left out for warm-up
    (its ``phase`` null), since it serves in no phase of its kind."""
    kinds = steps["kind"].to_list()
    if "phase" not in steps.columns or "warmup" not in steps.columns:
        return kinds
    out = steps["phase"].is_null() & steps["warmup"].is_not_null()
    return [WARMUP_TICK if o else k for k, o in zip(kinds, out.to_list(), strict=True)]


def load_matplotlib() -> ModuleType:
    """matplotlib, imported on first use. Figures are built without pyplot: no global
    state, no window, and a notebook still shows a returned figure inline."""
    try:
        import matplotlib
        import matplotlib.figure
        import matplotlib.style
        import matplotlib.ticker
    except ImportError:  # pragma: no cover - matplotlib is a core dependency
        raise MissingDependencyError(
            "traceview charts need matplotlib: pip install matplotlib"
        ) from None
    return matplotlib


def chart_style(mpl: ModuleType, style: str) -> AbstractContextManager[None]:
    """The chart style, with mathtext off: titles, labels and legends (file names, kernel
    names, ``--title``) are shown as the characters they are (``$`` included), never
    parsed as math."""
    if style not in COLORS:
        raise TraceviewError(f"unknown chart style {style!r} (light or dark)")
    base = "dark_background" if style == "dark" else "default"
    context: AbstractContextManager[None] = mpl.style.context([base, {"text.parse_math": False}])
    return context


# --- the data behind the charts --------------------------------------------------------


@dataclass
class PhaseBand:
    kind: str
    first_step: int
    last_step: int
    start_ms: float
    end_ms: float
    cadence_p50_ms: float | None
    n: int

    @property
    def label(self) -> str:
        if self.cadence_p50_ms is None:
            steps = self.last_step - self.first_step + 1
            return (
                f"{self.kind}: {steps} step{'s' if steps != 1 else ''}, no cadence "
                f"(step {self.first_step}" + (f"–{self.last_step})" if steps > 1 else ")")
            )
        return (
            f"{self.kind} {self.cadence_p50_ms:.1f} ms · n={self.n} "
            f"(steps {self.first_step}–{self.last_step})"
        )


@dataclass
class HeartbeatData:
    """What the heartbeat chart draws. Times in ms from ``t0_ns`` (the first kernel).

    Attributes:
        title: the chart's title.
        t0_ns: the trace's first kernel start (ns): time zero of the x axis.
        anchors_ms: one tick per step, at its anchor.
        kinds: each step's kind (decode | mixed | prefill), or ``warm-up`` for a step left
            out for warm-up.
        interval_ms: step-to-step (anchor-to-anchor) interval, plotted at the later step's
            anchor; NaN for the first step.
        phases: one band per phase, with its median cadence and n.
        prompt_spans_ms: the spans where a prompt was being prefilled (the mixed and
            prefill phases).
        window_ms: the x range shown, when a window was asked for.
        timeline: with fewer than 2 steps there is no cadence to draw: per family, its
            device activity as (start ms, length ms) arrays, what the step did; else None.
        busy: the device's busy fraction over the trace (for the timeline's title).
        breakdown: each step's span split into busy and the idle causes (the heartbeat's
            ``--breakdown`` panel); None without steps.
        efficiency: each step's MBU and MFU (the ``--efficiency`` panel); None without a
            model.
        injection_ms: a capture's injection window on this trace's clock (``--probe``),
            shaded; None without one.
        itl_ms: the capture's victim gaps on this trace's clock (``--probe --itl``): each
            gap's later token (ms from ``t0_ns``) and the gap (ms), drawn on the interval
            axis beside the cadence; None unless asked for.
        injection_label: the window's legend: the bound on its error (``± 2.1 ms``), or
            that nothing bounds it.
    """

    title: str
    t0_ns: int
    anchors_ms: np.ndarray
    kinds: list[str]
    interval_ms: np.ndarray
    phases: list[PhaseBand] = field(default_factory=list)
    prompt_spans_ms: list[tuple[float, float]] = field(default_factory=list)
    window_ms: tuple[float, float] | None = None
    timeline: list[tuple[str, np.ndarray, np.ndarray]] | None = None
    busy: float | None = None
    breakdown: StepBreakdown | None = None
    efficiency: StepEfficiency | None = None
    injection_ms: tuple[float, float] | None = None
    itl_ms: tuple[np.ndarray, np.ndarray] | None = None
    injection_label: str = "injection window (probe)"


def _window(window_ms: object) -> tuple[float, float]:
    """``window_ms`` as (start, end) ms, finite and increasing; else a UsageError."""
    if (
        not isinstance(window_ms, tuple | list)
        or len(window_ms) != 2
        or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in window_ms
        )
        or window_ms[0] >= window_ms[1]
    ):
        raise UsageError(
            f"window_ms={window_ms!r}: expected (start, end) in ms from the first kernel, "
            "two finite numbers with start < end"
        )
    return float(window_ms[0]), float(window_ms[1])


def heartbeat_data(
    summary: Summary,
    *,
    title: str | None = None,
    window_ms: tuple[float, float] | None = None,
    window_label: str | None = None,
    probe: OnTrace | None = None,
    itl: bool = False,
) -> HeartbeatData:
    """The heartbeat chart's data from a :class:`~traceview.Summary`; with ``probe`` (a
    capture on this trace's clock, :func:`traceview.capture.itl.on_trace`), its injection
    window, and with ``itl`` its victims' inter-token gaps too.

    ``window_label`` names the window in an error as its user wrote it (the command line
    passes ``--window '10s:20s'``); by default it is ``window_ms=(start, end)``.

    Raises:
        TraceviewError: ``window_ms`` lies wholly outside the trace (it names the span).
    """
    if window_ms is not None:
        window_ms = _window(window_ms)
    doc = summary.to_dict()
    steps = summary.steps
    t0 = int(doc["trace"]["start_ns"])
    if window_ms is not None:
        span_ms = (int(doc["trace"]["end_ns"]) - t0) / 1e6
        if window_ms[0] >= span_ms or window_ms[1] <= 0:
            label = window_label or f"window_ms=({window_ms[0]:g}, {window_ms[1]:g})"
            raise TraceviewError(
                f"{doc['trace']['path']}: {label} is outside the trace, which spans "
                f"0-{span_ms:.3f} ms from its first kernel"
            )
    anchors = (steps["anchor_ns"] - t0).to_numpy() / 1e6
    interval = steps["interval_ns"].cast(pl.Float64).fill_null(float("nan")).to_numpy() / 1e6
    without_warmup(steps, interval)
    phases = []
    for p in doc["steps"]["phases"]:
        p50 = p["cadence_p50_ns"]
        phases.append(
            PhaseBand(
                kind=p["kind"],
                first_step=p["first_step"],
                last_step=p["last_step"],
                start_ms=(p["start_ns"] - t0) / 1e6,
                end_ms=(p["end_ns"] - t0) / 1e6,
                cadence_p50_ms=None if p50 is None else p50 / 1e6,
                n=p["cadence"]["n"],
            )
        )
    return HeartbeatData(
        title=title or Path(str(doc["trace"]["path"])).name,
        t0_ns=t0,
        anchors_ms=anchors,
        kinds=_tick_kinds(steps),
        interval_ms=interval,
        phases=phases,
        prompt_spans_ms=[(p.start_ms, p.end_ms) for p in phases if p.kind != "decode"],
        window_ms=window_ms,
        timeline=_timeline(summary, t0),
        busy=doc["busy"]["fraction"],
        breakdown=step_breakdown(steps, t0),
        efficiency=step_efficiency(steps, t0),
        injection_ms=None
        if probe is None or probe.window_ns is None
        else ((probe.window_ns[0] - t0) / 1e6, (probe.window_ns[1] - t0) / 1e6),
        itl_ms=None
        if probe is None or probe.window_ns is None or not itl
        else ((probe.at_ns - t0) / 1e6, probe.gap_ns / 1e6),
        injection_label="injection window (probe)"
        if probe is None
        else "injection window (probe, "
        + (
            "wall clock, unchecked"
            if probe.uncertainty_ns is None
            else f"± {fmt_ns(probe.uncertainty_ns)}"
        )
        + ")",
    )


def _timeline(summary: Summary, t0: int) -> list[tuple[str, np.ndarray, np.ndarray]] | None:
    """Per family, by kernel time (largest first): its activity as (start, length) in ms
    from ``t0``; None where the summary has 2 steps or more (its heartbeat is a cadence)."""
    if summary.timeline is None:
        return None
    out = []
    for (family,), rows in summary.timeline.group_by("family", maintain_order=True):
        start = (rows["start_ns"] - t0).to_numpy() / 1e6
        out.append((str(family), start, (rows["end_ns"] - rows["start_ns"]).to_numpy() / 1e6))
    return out


# --- drawing ----------------------------------------------------------------------------


def draw_heartbeat(
    data: HeartbeatData,
    tick_ax: Axes,
    ax: Axes,
    *,
    style: str = "light",
    y_max: float | None = None,
) -> None:
    """Draw one trace's heartbeat on a tick axis (top) and an interval axis (main)."""
    colors = COLORS[style]
    if data.timeline is not None:
        draw_timeline(data, tick_ax, ax, style=style)
        return
    kinds = np.array(data.kinds)
    for kind in (*KIND_ORDER, WARMUP_TICK):
        sel = data.anchors_ms[kinds == kind]
        if sel.size:
            tick_ax.eventplot(
                sel,
                lineoffsets=0.5,
                linelengths=0.8,
                linewidths=0.8,
                colors=colors[kind],
                label="warm-up step (left out)" if kind == WARMUP_TICK else f"{kind} step",
            )
    tick_ax.set_ylim(0, 1.35)
    tick_ax.set_yticks([])
    tick_ax.set_title(chart(data.title), loc="left", fontsize=11, color=colors["text"])
    for i, (a, b) in enumerate(data.prompt_spans_ms):
        tick_ax.plot(
            [a, b],
            [1.15, 1.15],
            color=colors["mixed"],
            linewidth=2.5,
            solid_capstyle="butt",
            label="prompt prefill" if i == 0 else None,
        )
    tick_ax.legend(
        loc="lower right",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=8,
        ncol=3,
        frameon=False,
        borderaxespad=0.2,
    )

    for band in data.phases:
        if band.kind != "decode":
            ax.axvspan(
                band.start_ms,
                band.end_ms,
                color=colors["shade" if band.kind == "mixed" else "prefill"],
                alpha=0.22 if style == "dark" else 0.12,
                lw=0,
            )
    if data.injection_ms is not None:  # the client's window, hatched over the phases
        ax.axvspan(
            *data.injection_ms,
            facecolor="none",
            edgecolor=colors["probe"],
            hatch="//",
            linewidth=0.8,
            label=data.injection_label,
        )
    if data.itl_ms is not None:
        ax.plot(
            data.itl_ms[0],
            data.itl_ms[1],
            "x",
            markersize=3,
            color=colors["probe"],
            alpha=0.7,
            label=f"victims' inter-token gaps (probe) · n={data.itl_ms[1].size}",
        )
    valid = ~np.isnan(data.interval_ms)
    shade_warmup(ax, data.breakdown)
    # an interval that crosses a phase boundary belongs to neither phase: drawn hollow
    crossing = np.zeros(kinds.size, dtype=bool)
    crossing[1:] = kinds[1:] != kinds[:-1]
    for kind in KIND_ORDER:
        sel = valid & (kinds == kind) & ~crossing
        ax.plot(
            data.anchors_ms[sel],
            data.interval_ms[sel],
            "o",
            markersize=2.5,
            color=colors[kind],
            alpha=0.85,
        )
    if (valid & crossing).any():
        ax.plot(
            data.anchors_ms[valid & crossing],
            data.interval_ms[valid & crossing],
            "o",
            markersize=4,
            markerfacecolor="none",
            color="#888888",
            label="interval across a phase change",
        )
    lone = [band for band in data.phases if band.cadence_p50_ms is None]
    if len(lone) > 2:  # one legend line for the phases of one step, not one each
        ax.plot([], [], " ", label=f"{len(lone)} one-step phases: no cadence")
    for band in data.phases:
        if band.cadence_p50_ms is None:  # listed, nothing to draw
            if len(lone) <= 2:
                ax.plot([], [], " ", label=band.label)
            continue
        ax.hlines(
            band.cadence_p50_ms,
            band.start_ms,
            band.end_ms,
            colors=colors[band.kind],
            linestyles="--",
            linewidth=1.6,
            label=band.label,
        )
    ax.set_xlabel("time from first kernel (ms)")
    ax.set_ylabel("step-to-step interval (ms)")
    finite = data.interval_ms[valid]
    if data.itl_ms is not None:  # the gaps share the axis: the scale holds them too
        finite = np.concatenate([finite, data.itl_ms[1]])
    top = y_max if y_max is not None else (float(finite.max()) * 1.15 if finite.size else 1.0)
    ax.set_ylim(0, top)
    ax.grid(True, alpha=0.25)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(
            handles,
            labels,
            loc="upper left",
            fontsize=8,
            frameon=True,
            framealpha=0.8,
            title="median cadence by phase",
            title_fontsize=8,
        )
    if data.window_ms is not None:
        ax.set_xlim(*data.window_ms)


def draw_timeline(data: HeartbeatData, tick_ax: Axes, ax: Axes, *, style: str = "light") -> None:
    """A trace of fewer than 2 steps: what its step did, one row per family (its device
    activity over time), and how busy the device was; there is no cadence to draw."""
    mpl = load_matplotlib()
    assert data.timeline is not None
    colors = COLORS[style]
    palette = mpl.colormaps["tab10"]
    tick_ax.set_axis_off()
    steps = len(data.kinds)
    what = f"{steps} step ({data.kinds[0]})" if steps == 1 else "no step"
    busy = "—" if data.busy is None else f"{data.busy:.1%}"
    tick_ax.set_title(
        chart(f"{data.title} — {what}: its timeline by family, GPU busy {busy}"),
        loc="left",
        fontsize=11,
        color=colors["text"],
    )
    tick_ax.text(
        0.0,
        0.1,
        "fewer than 2 steps: no step-to-step interval to draw, so this is what the step ran",
        transform=tick_ax.transAxes,
        fontsize=8,
        color=colors["text"],
    )
    labels = []
    for row, (family, start, length) in enumerate(data.timeline):
        ax.broken_barh(
            list(zip(start.tolist(), np.maximum(length, 1e-4).tolist(), strict=True)),
            (row - 0.4, 0.8),
            facecolors=palette(row % 10),
            linewidth=0,
        )
        labels.append(chart(family))
    if not labels:  # device activity that all lasts 0 ns: nothing has a length to draw
        ax.text(
            0.5,
            0.5,
            "no device time to draw: every device event lasts 0 ns",
            transform=ax.transAxes,
            ha="center",
            fontsize=9,
            color=colors["text"],
        )
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(max(len(labels), 1) - 0.5, -0.5)
    ax.set_xlabel("time from first kernel (ms)")
    ax.grid(True, axis="x", alpha=0.25)
    if data.window_ms is not None:
        ax.set_xlim(*data.window_ms)


def _y_top(data: HeartbeatData) -> float:
    """The largest value the interval axis shows: a step interval, or a probe's gap."""
    values = data.interval_ms[np.isfinite(data.interval_ms)]
    if data.itl_ms is not None:
        values = np.concatenate([values, data.itl_ms[1]])
    return float(values.max()) if values.size else 1.0


def heartbeat_figure(
    datas: list[HeartbeatData],
    *,
    style: str = "light",
    breakdown: bool = False,
    efficiency: bool = False,
) -> Figure:
    """One heartbeat, or several stacked on the same scales (before/after). ``breakdown``:
    under each, a panel of where each step's time went (busy against each idle cause);
    ``efficiency``: a panel of each step's MBU and MFU."""
    mpl = load_matplotlib()
    rows = len(datas)
    panels = [1, 4] + [2] * (int(breakdown) + int(efficiency))
    with chart_style(mpl, style):
        height = 4.2 + 1.4 * (len(panels) - 2)
        fig: Figure = mpl.figure.Figure(
            figsize=(12, height * rows + 0.6), dpi=150, layout="constrained"
        )
        grid = fig.add_gridspec(len(panels) * rows, 1, height_ratios=panels * rows)
        x_max = max(_x_end(d) for d in datas)
        y_max = max(_y_top(d) for d in datas) * 1.15
        first_ax = None
        for i, data in enumerate(datas):
            at = len(panels) * i
            ax = fig.add_subplot(grid[at + 1], sharex=first_ax)
            first_ax = first_ax or ax
            tick_ax = fig.add_subplot(grid[at], sharex=first_ax)
            tick_ax.tick_params(labelbottom=False)
            draw_heartbeat(data, tick_ax, ax, style=style, y_max=y_max)
            below = at + 2
            extra = [(breakdown, data.breakdown), (efficiency, data.efficiency)]
            for wanted, panel in extra:
                if not wanted:
                    continue
                if panel is not None:
                    ax.set_xlabel("")
                    ax.tick_params(labelbottom=False)
                    ax = fig.add_subplot(grid[below], sharex=first_ax)
                    if isinstance(panel, StepBreakdown):
                        draw_breakdown(panel, ax, text=COLORS[style]["text"])
                    else:
                        draw_efficiency(panel, ax, text=COLORS[style]["text"])
                below += 1
            if data.window_ms is None:
                ax.set_xlim(-0.01 * x_max, x_max * 1.01)
    return fig


def _x_end(data: HeartbeatData) -> float:
    """Where the x axis ends: the last anchor, or a timeline's last activity."""
    if data.timeline is not None:
        ends = [float((s + n).max()) for _, s, n in data.timeline if s.size]
        return max(ends, default=1.0)
    return float(data.anchors_ms.max()) if data.anchors_ms.size else 1.0


def save_figure(fig: Figure, output: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Save as PNG, SVG or PDF (from the suffix), atomically; an existing file is replaced
    only with ``overwrite`` (``--force``)."""
    path = Path(output)
    if path.suffix.lower() not in FORMATS:
        raise TraceviewError(
            f"{path}: unsupported chart format {path.suffix or '(none)'!r} "
            f"(use {', '.join(FORMATS)})"
        )
    fmt = path.suffix.lower().lstrip(".")
    return atomic_write(path, lambda target: fig.savefig(target, format=fmt), overwrite=overwrite)
