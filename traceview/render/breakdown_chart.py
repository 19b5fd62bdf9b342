"""The heartbeat's per-step panels. ``--breakdown``: per step, a stacked bar of where its span went,
busy against each idle cause (docs/metrics.md, "Where the step time went"), as shares of
the step's span. The steps tile the device's timeline, so the bars do too: each part is one
step function over the step edges, drawn as one artist however many steps there are.
``--efficiency``: each step's MBU and MFU (docs/metrics.md, "How close to the hardware")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from traceview.analysis.timing.idle import CAUSES

if TYPE_CHECKING:
    from matplotlib.axes import Axes

PARTS = ("busy", *CAUSES)
PART_COLORS = {
    "busy": "#2ca02c",
    "host_late": "#d62728",
    "launch": "#ff7f0e",
    "sync": "#9467bd",
    "dependency": "#1f77b4",
    "other": "#9e9e9e",
}
PART_LABELS = {
    "busy": "busy",
    "host_late": "idle: host late",
    "launch": "idle: launch",
    "sync": "idle: after a sync",
    "dependency": "idle: dependency",
    "other": "idle: unlinked",
}


@dataclass
class StepBreakdown:
    """Each step's span split into busy and the idle causes.

    Attributes:
        edges_ms: the steps' bounds in ms from the chart's time zero: step i spans
            ``[edges_ms[i], edges_ms[i + 1])`` (n steps, n + 1 edges).
        shares: per part (``busy`` and each cause), its share of each step's span (the
            parts of a step add up to 1).
        warmup_ms: the spans of the steps left out for warm-up (``phase`` null), in ms.
    """

    edges_ms: np.ndarray
    shares: dict[str, np.ndarray]
    warmup_ms: list[tuple[float, float]] = field(default_factory=list)


def without_warmup(steps: pl.DataFrame, interval_ms: np.ndarray) -> None:
    """``interval_ms`` (each step's) with the intervals to and from a step left out for
    warm-up made NaN: none counts in a cadence, none is drawn."""
    if "phase" in steps.columns:
        left_out = steps["phase"].is_null().to_numpy()
        interval_ms[left_out] = np.nan
        interval_ms[1:][left_out[:-1]] = np.nan


def shade_warmup(ax: Axes, data: StepBreakdown | None) -> None:
    """The spans of the steps left out for warm-up, shaded grey on the heartbeat's axis."""
    for i, (a, b) in enumerate([] if data is None else data.warmup_ms):
        label = "warm-up (left out)" if i == 0 else None
        ax.axvspan(a, b, color="#888888", alpha=0.15, lw=0, label=label)


def step_breakdown(steps: pl.DataFrame, t0_ns: int) -> StepBreakdown | None:
    """The breakdown of a steps table (``start_ns``, ``end_ns``, ``busy_ns``,
    ``idle_<cause>_ns``); None without steps, without the breakdown's columns, or without
    the idle split (null where the host's and the device's clocks disagree)."""
    columns = ["busy_ns", *(f"idle_{c}_ns" for c in CAUSES)]
    if steps.height == 0 or not set(columns) <= set(steps.columns):
        return None
    if any(steps[c].null_count() for c in columns):
        return None
    start = steps["start_ns"].to_numpy().astype(np.int64)
    end = steps["end_ns"].to_numpy().astype(np.int64)
    span = np.maximum(end - start, 1).astype(np.float64)
    shares = {
        part: steps[column].to_numpy().astype(np.float64) / span
        for part, column in zip(PARTS, columns, strict=True)
    }
    warmup: list[tuple[float, float]] = []
    if "phase" in steps.columns:
        left_out = steps.filter(pl.col("phase").is_null()).select("start_ns", "end_ns")
        warmup = [((a - t0_ns) / 1e6, (b - t0_ns) / 1e6) for a, b in left_out.iter_rows()]
    return StepBreakdown(_edges_ms(steps, t0_ns), shares, warmup)


def _edges_ms(steps: pl.DataFrame, t0_ns: int) -> np.ndarray:
    """The steps' bounds in ms from ``t0_ns``: each step's start, then the last one's end."""
    start = steps["start_ns"].to_numpy().astype(np.int64)
    # subtracted in int64: ns since 1970 as floats would lose microseconds
    edges = np.append(start, int(steps["end_ns"][-1])) - t0_ns
    return edges / 1e6


def draw_breakdown(data: StepBreakdown, ax: Axes, *, text: str) -> None:
    """The stacked parts, busy at the bottom, on ``ax`` (0–100% of each step's span)."""
    bottom = np.zeros(data.edges_ms.size - 1)
    for part in PARTS:
        top = bottom + data.shares[part]
        if data.shares[part].any():
            ax.stairs(
                top,
                data.edges_ms,
                baseline=bottom,
                fill=True,
                color=PART_COLORS[part],
                linewidth=0,
                label=PART_LABELS[part],
            )
        bottom = top
    ax.set_ylim(0, 1)
    ax.set_yticks([0, 0.5, 1], ["0%", "50%", "100%"])
    _label_panel(ax, "share of step", "where the step time went", text)


def _label_panel(ax: Axes, ylabel: str, legend: str, text: str) -> None:
    """A per-step panel's axis labels, and its legend outside the axes on the right."""
    ax.set_ylabel(ylabel, color=text)
    ax.set_xlabel("time from first kernel (ms)")
    if not ax.get_legend_handles_labels()[0]:  # nothing drawn (no step has any time)
        return
    ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=7,
        frameon=False,
        title=legend,
        title_fontsize=7,
    )


@dataclass
class StepEfficiency:
    """Each step's MBU and MFU (the heartbeat's ``--efficiency`` panel).

    Attributes:
        edges_ms: the steps' bounds, as :class:`StepBreakdown`'s.
        mbu, mfu: per step, NaN where not known (no tokens, or no peak).
    """

    edges_ms: np.ndarray
    mbu: np.ndarray
    mfu: np.ndarray


def step_efficiency(steps: pl.DataFrame, t0_ns: int) -> StepEfficiency | None:
    """The MBU and MFU of a steps table summarized with a model; None without them."""
    if steps.height == 0 or "mbu" not in steps.columns:
        return None

    def ratio(column: str) -> np.ndarray:
        return steps[column].cast(pl.Float64).fill_null(float("nan")).to_numpy()

    return StepEfficiency(_edges_ms(steps, t0_ns), ratio("mbu"), ratio("mfu"))


def draw_efficiency(data: StepEfficiency, ax: Axes, *, text: str) -> None:
    """MBU (and MFU, dashed) per step over the step's span, on ``ax``, the y axis scaled
    to the largest."""
    from matplotlib.ticker import PercentFormatter

    for values, label, style in ((data.mbu, "MBU", "-"), (data.mfu, "MFU", "--")):
        if np.isfinite(values).any():
            ax.stairs(
                values,
                data.edges_ms,
                color="#1f77b4" if label == "MBU" else "#d62728",
                linestyle=style,
                linewidth=1.2,
                label=label,
            )
    values = np.concatenate((data.mbu, data.mfu))
    top = float(np.nanmax(values)) if np.isfinite(values).any() else 1.0
    if top >= 1.0:  # an upper bound passing the peak (docs/metrics.md): the peak marked
        ax.axhline(1.0, color="#888888", linewidth=0.6, linestyle=":")
    ax.set_ylim(0, max(top * 1.15, 0.01))  # scaled to the data: decode's MFU is small
    # decimals as the axis' range needs them (below 1% of peak, whole percents repeat)
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=None))
    _label_panel(ax, "of peak", "per step", text)
