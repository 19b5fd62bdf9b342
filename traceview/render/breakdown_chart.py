"""The heartbeat's ``--breakdown`` panel: per step, a stacked bar of where its span went,
busy against each idle cause (docs/metrics.md, "Where the step time went"), as shares of
the step's span. The steps tile the device's timeline, so the bars do too: each part is one
step function over the step edges, drawn as one artist however many steps there are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from traceview.analysis.idle import CAUSES

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
    """

    edges_ms: np.ndarray
    shares: dict[str, np.ndarray]


def step_breakdown(steps: pl.DataFrame, t0_ns: int) -> StepBreakdown | None:
    """The breakdown of a steps table (``start_ns``, ``end_ns``, ``busy_ns``,
    ``idle_<cause>_ns``); None without steps or without the breakdown's columns."""
    columns = ["busy_ns", *(f"idle_{c}_ns" for c in CAUSES)]
    if steps.height == 0 or not set(columns) <= set(steps.columns):
        return None
    start = steps["start_ns"].to_numpy().astype(np.int64)
    end = steps["end_ns"].to_numpy().astype(np.int64)
    span = np.maximum(end - start, 1).astype(np.float64)
    edges = np.append(start, end[-1]) - t0_ns  # in int64: ns since 1970 lose µs as floats
    shares = {
        part: steps[column].to_numpy().astype(np.float64) / span
        for part, column in zip(PARTS, columns, strict=True)
    }
    return StepBreakdown(edges / 1e6, shares)


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
    ax.set_ylabel("share of step", color=text)
    ax.set_xlabel("time from first kernel (ms)")
    ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=7,
        frameon=False,
        title="where the step time went",
        title_fontsize=7,
    )
