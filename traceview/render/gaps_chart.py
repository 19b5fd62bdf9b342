"""The decode-gap chart: one CDF per population on a log time axis, p50/p90/p99 marked,
n in the legend. The data behind it (:func:`gaps_data`) is computed first."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from traceview.render.charts import chart_style, load_matplotlib
from traceview.render.format import fmt_ns
from traceview.render.safe import chart

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from traceview.analysis.documents.summary import Summary

POPULATION_COLORS = {"all": "#7f7f7f", "decode": "#1f77b4", "mixed": "#d62728"}


@dataclass
class GapCurve:
    population: str
    gaps_us: np.ndarray  # sorted
    n: int
    p50_us: float | None
    p90_us: float | None
    p99_us: float | None

    @property
    def label(self) -> str:
        if not self.n:
            return f"{self.population}  n=0"
        return (
            f"{self.population}  n={self.n} · p50 {_fmt_us(self.p50_us)} · "
            f"p90 {_fmt_us(self.p90_us)} · p99 {_fmt_us(self.p99_us)}"
        )


def _fmt_us(us: float | None) -> str:
    return fmt_ns(None if us is None else us * 1000)


def gaps_data(summary: Summary, gaps: pl.DataFrame) -> list[GapCurve]:
    """One CDF per population, with the summary's percentiles (µs)."""
    stats = {g["population"]: g for g in summary.to_dict()["decode_gaps"]}
    curves = []
    for population in ("all", "decode", "mixed"):
        sel = gaps if population == "all" else gaps.filter(pl.col("population") == population)
        g = stats[population]

        def us(v: int | None) -> float | None:
            return None if v is None else v / 1000

        curves.append(
            GapCurve(
                population,
                np.sort(sel["gap_ns"].to_numpy() / 1000),
                g["n"],
                us(g["p50_ns"]),
                us(g["p90_ns"]),
                us(g["p99_ns"]),
            )
        )
    return curves


def gaps_figure(curves: list[GapCurve], *, title: str, style: str = "light") -> Figure:
    """Decode-gap CDF per population on a log time axis, p50/p90/p99 marked."""
    mpl = load_matplotlib()
    with chart_style(mpl, style):
        fig: Figure = mpl.figure.Figure(figsize=(10, 5.5), dpi=150, layout="constrained")
        ax = fig.add_subplot()
        for c in curves:
            if c.n == 0:
                continue
            x = np.maximum(c.gaps_us, 1e-3)  # overlaps (0) sit at the left edge of a log axis
            y = np.arange(1, x.size + 1) / x.size
            color = POPULATION_COLORS[c.population]
            ax.step(x, y, where="post", color=color, linewidth=1.6, label=c.label)
            for q, v in ((0.5, c.p50_us), (0.9, c.p90_us), (0.99, c.p99_us)):
                if v is not None:
                    ax.plot([max(v, 1e-3)], [q], marker="o", color=color, markersize=5)
        for q in (0.5, 0.9, 0.99):
            ax.axhline(q, color="#888888", linewidth=0.6, linestyle=":")
            ax.text(
                1.0,
                q,
                f" p{int(q * 100)}",
                transform=ax.get_yaxis_transform(),
                va="center",
                fontsize=8,
                color="#888888",
            )
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda v, _: _fmt_us(v)))
        ax.xaxis.set_minor_formatter(mpl.ticker.FuncFormatter(_minor_label(ax)))
        ax.set_xlabel("decode gap (log scale)")
        ax.set_ylabel("fraction of gaps ≤ x")
        ax.set_ylim(0, 1.02)
        # wrapped to the figure's width: a long marker name or file name once ran off the
        # right edge and squeezed the axes
        lines = textwrap.wrap(chart(title), width=100, break_on_hyphens=False)
        ax.set_title("\n".join(lines), loc="left", fontsize=11)
        ax.grid(True, which="both", alpha=0.2)
        # below the axes: inside, a legend can cover the foot or the tail of a curve; one
        # population a row (three of them side by side were wider than the figure)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=1, fontsize=8)
    return fig


def _minor_label(ax: Axes) -> Callable[[float, object], str]:
    """Labels for a log axis's minor ticks, each with its unit like the major ones: at 2×
    and 5× a power of ten where the axis spans under two decades (so a narrow axis still
    has labelled ticks), none where it spans more (the decades are labelled)."""

    def label(v: float, _: object) -> str:
        lo, hi = ax.get_xlim()
        if lo <= 0 or hi / lo > 100:
            return ""
        mantissa = v / 10 ** np.floor(np.log10(v) + 1e-9)
        return _fmt_us(v) if np.isclose(mantissa, 2) or np.isclose(mantissa, 5) else ""

    return label
