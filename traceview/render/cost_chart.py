"""The step-cost chart (``traceview cost -o chart.png``): step time against the decode batch
with the fitted line, and decode tokens per second against it, each trace's steps in its own
colour; with a prompt fit, step time against prompt tokens beside them.

The data behind it (:func:`cost_data`) is computed first, from the pooled fit's document and
steps, so tests check exactly what is drawn.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from traceview.analysis.work.cost import decode_steps, prompt_steps
from traceview.render.charts import chart_style, load_matplotlib
from traceview.render.format import fmt_ns
from traceview.render.safe import chart

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from traceview.analysis.documents.cost import StepCost

PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
FIT_COLOR = {"light": "#222222", "dark": "#eeeeee"}


@dataclass
class TracePoints:
    """One trace's steps as drawn: its label, its decode steps' sequences, times (ms) and
    tokens per second, and its prompt steps' tokens and times (ms, less the per-sequence
    term where the fit has one)."""

    label: str
    sequences: np.ndarray
    decode_ms: np.ndarray
    tokens_per_s: np.ndarray
    prompt_tokens: np.ndarray
    prompt_ms: np.ndarray


@dataclass
class CostChartData:
    """What the cost chart draws (every time in ms)."""

    traces: list[TracePoints]
    decode_line: tuple[float, float] | None  # (fixed, per sequence), ms
    decode_label: str
    crossover: float | None
    prompt_curve: tuple[float, float, float] | None  # (fixed, per token, per token²), ms
    prompt_label: str
    prompt_adjusted: bool  # the prompt times are less per_sequence × N
    notes: list[str] = field(default_factory=list)


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def _term(ns: float) -> str:
    """`` + 313.0 µs`` or `` − 388.1 µs``: a coefficient as the next term of a sum."""
    return f" {'−' if ns < 0 else '+'} {fmt_ns(abs(ns))}"


def cost_data(cost: StepCost) -> CostChartData:
    """The points and lines of :func:`cost_figure` from a pooled fit."""
    doc = cost.to_dict()
    d, p = doc["decode"], doc["prompt"]
    per_seq_prompt = p["per_sequence_ns"] or 0.0
    traces = []
    names = trace_labels([t["path"] for t in doc["traces"]])
    for i, _ in enumerate(doc["traces"]):
        mine = cost.steps.filter(pl.col("trace") == i)
        dec = decode_steps(mine)
        n = dec["sequences"].to_numpy().astype(np.float64)
        ms = dec["time_ns"].to_numpy().astype(np.float64) / 1e6
        pro = prompt_steps(mine)
        tokens = pro["prompt_tokens"].to_numpy().astype(np.float64)
        pms = (
            pro["time_ns"].to_numpy().astype(np.float64)
            - per_seq_prompt * pro["sequences"].to_numpy().astype(np.float64)
        ) / 1e6
        traces.append(TracePoints(names[i], n, ms, n / (ms / 1e3), tokens, pms))
    # the legend in batch order (a sweep's files sort by name: batch1, batch146, batch64)
    traces.sort(key=lambda t: float(np.median(t.sequences)) if t.sequences.size else np.inf)
    line = None
    label, notes = "", []
    if d["fixed_ns"] is not None and d["per_sequence_ns"] is not None:
        line = (d["fixed_ns"] / 1e6, d["per_sequence_ns"] / 1e6)
        label = (
            f"fit: {fmt_ns(d['fixed_ns'])}{_term(d['per_sequence_ns'])} × N "
            f"(n={d['n']}, r² {d['r2']:.4f})"
        )
    else:
        notes.append(f"decode: {d['reason']}")
    curve = None
    prompt_label = ""
    if p["fixed_ns"] is not None and p["per_prompt_token_ns"] is not None:
        squared = p["per_prompt_token_squared_ns"] or 0.0
        curve = (p["fixed_ns"] / 1e6, p["per_prompt_token_ns"] / 1e6, squared / 1e6)
        prompt_label = f"fit: {fmt_ns(p['fixed_ns'])}{_term(p['per_prompt_token_ns'])} × T"
        if squared:
            sign = " − " if squared < 0 else " + "
            prompt_label += f"{sign}{abs(squared) * 1e3:.3g} ps × T²"
        prompt_label += f" (n={p['n']}, r² {p['r2']:.4f})"
    return CostChartData(
        traces,
        line,
        label,
        d["crossover_sequences"],
        curve,
        prompt_label,
        p["per_sequence_ns"] is not None,
        notes,
    )


def trace_labels(paths: Sequence[str]) -> list[str]:
    """Each path's label: its file name, with as many of its folders as tell it from the
    others (``b1/rank0.json.gz`` and ``b8/rank0.json.gz``, not ``rank0.json.gz`` twice)."""
    parts = [PurePath(p).parts for p in paths]
    depth = [1] * len(paths)
    while True:
        labels = ["/".join(q[-d:]) for q, d in zip(parts, depth, strict=True)]
        clash = {lab for lab in labels if labels.count(lab) > 1}
        grow = [i for i, lab in enumerate(labels) if lab in clash and depth[i] < len(parts[i])]
        if not grow:
            return labels
        for i in grow:
            depth[i] += 1


def _scatter(ax: Axes, x: np.ndarray, y: np.ndarray, color: str, label: str) -> None:
    if x.size:
        ax.scatter(x, y, s=16, color=color, alpha=0.8, label=chart(label) or None, zorder=3)


def cost_figure(data: CostChartData, *, title: str, style: str = "light") -> Figure:
    """Two panels (three with a prompt fit): step time and decode tokens per second against
    the decode batch N, and step time against the prompt tokens T."""
    mpl = load_matplotlib()
    panels = 3 if data.prompt_curve is not None else 2
    with chart_style(mpl, style):
        fig: Figure = mpl.figure.Figure(figsize=(5.2 * panels, 5.2), dpi=150, layout="constrained")
        axes = fig.subplots(1, panels, squeeze=False)[0]
        time_ax, rate_ax = axes[0], axes[1]
        fit = FIT_COLOR[style]
        top = max((float(t.sequences.max()) for t in data.traces if t.sequences.size), default=1.0)
        n = np.linspace(0.0, top * 1.05, 200)
        for i, t in enumerate(data.traces):  # named once, in the first panel's legend
            color = PALETTE[i % len(PALETTE)]
            _scatter(time_ax, t.sequences, t.decode_ms, color, t.label)
            _scatter(rate_ax, t.sequences, t.tokens_per_s, color, "")
            if panels == 3:
                _scatter(axes[2], t.prompt_tokens, t.prompt_ms, color, "")
        if data.decode_line is not None:
            fixed, per = data.decode_line
            dashed = {"color": fit, "linestyle": "--", "linewidth": 1.2}
            dotted = {"linestyle": ":", "linewidth": 0.8}
            time_ax.plot(n, fixed + per * n, label=chart(data.decode_label), **dashed)
            with np.errstate(divide="ignore", invalid="ignore"):
                rate = np.where(fixed + per * n > 0, n / ((fixed + per * n) / 1e3), np.nan)
            said = "the fit's tokens/s: N / (fixed + per sequence × N)"
            rate_ax.plot(n, rate, label=chart(said), **dashed)
            if per > 0:
                said = f"ceiling 1 / per sequence: {1e3 / per:,.0f} tokens/s"
                rate_ax.axhline(1e3 / per, color=fit, label=chart(said), **dotted)
            if data.crossover is not None and data.crossover <= top * 1.05:
                said = f"crossover N = {data.crossover:.1f} (fixed = per-sequence work)"
                time_ax.axvline(data.crossover, color="#888888", label=chart(said), **dotted)
        time_ax.set_xlabel("decode batch N (sequences)")
        time_ax.set_ylabel("step time (ms, start to next start)")
        time_ax.set_title("decode step time against batch", loc="left", fontsize=10)
        rate_ax.set_xlabel("decode batch N (sequences)")
        rate_ax.set_ylabel("decode tokens per second (N / step time)")
        rate_ax.set_title("decode throughput against batch", loc="left", fontsize=10)
        for ax in (time_ax, rate_ax):
            ax.set_xlim(left=0)
            ax.set_ylim(bottom=0)
        if panels == 3 and data.prompt_curve is not None:
            ax = axes[2]
            fixed, per, squared = data.prompt_curve
            tops = [float(t.prompt_tokens.max()) for t in data.traces if t.prompt_tokens.size]
            tt = np.linspace(0.0, max(tops, default=1.0) * 1.05, 200)
            curve = fixed + per * tt + squared * tt * tt
            ax.plot(
                tt, curve, color=fit, linestyle="--", linewidth=1.2, label=chart(data.prompt_label)
            )
            ax.set_xlabel("prompt tokens T")
            ax.set_ylabel(
                "step time less per-sequence × N (ms)" if data.prompt_adjusted else "step time (ms)"
            )
            ax.set_title("prompt step time against prompt tokens", loc="left", fontsize=10)
            ax.set_xlim(left=0)
            ax.set_ylim(bottom=0)
        for ax in axes:
            ax.grid(True, alpha=0.2)
            if ax.get_legend_handles_labels()[0]:  # a panel with nothing named has none
                ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=1, fontsize=7)
        heading = "\n".join(textwrap.wrap(chart(title), width=60 * panels))
        if data.notes:
            heading += "\n" + chart("; ".join(data.notes))
        fig.suptitle(heading, x=0.01, ha="left", fontsize=11)
    return fig
