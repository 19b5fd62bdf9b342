"""A run's heartbeat: each rank's step intervals on shared scales (the median and min–max
band past :data:`BAND_RANKS` ranks), the straggler named, and each rank's compute per step
below (the all-reduces even out the cadence, so the straggler shows in its compute)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from traceview.render.breakdown_chart import without_warmup
from traceview.render.charts import COLORS, chart_style, load_matplotlib
from traceview.render.safe import chart

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from traceview.analysis.documents.run import RunSummary


@dataclass
class RunHeartbeatData:
    """What a run's heartbeat draws: each rank's step intervals over time (ms from the
    rank's first kernel), or past ``BAND_RANKS`` ranks the median and min–max band per
    step (by step order), with the straggler drawn on its own.

    Attributes:
        title: the chart's title.
        ranks: per rank: (rank, anchors_ms, interval_ms).
        straggler: the straggler's rank, and its median compute excess (ns), or None.
        band: (x_ms, median_ms, lo_ms, hi_ms) per step, when the ranks are drawn as a band.
        compute: per rank: (rank, aligned step, compute ms): busy time not
            overlapped by collectives.
    """

    title: str
    ranks: list[tuple[int, np.ndarray, np.ndarray]]
    straggler: tuple[int, int | None] | None = None
    band: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    compute: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)


BAND_RANKS = 8  # past this many ranks, a band instead of a line each


def run_heartbeat_data(run: RunSummary, *, title: str = "") -> RunHeartbeatData:
    """The run heartbeat's data from a :class:`~traceview.analysis.documents.run.RunSummary`."""
    lines = []
    for r in run.ranks:
        assert r.summary is not None and r.rank is not None  # an analysed rank has both
        steps = r.summary.steps
        t0 = int(r.summary.to_dict()["trace"]["start_ns"])
        anchors = (steps["anchor_ns"] - t0).to_numpy() / 1e6
        interval = steps["interval_ns"].cast(pl.Float64).fill_null(float("nan")).to_numpy() / 1e6
        without_warmup(steps, interval)  # no interval to or from a warm-up step
        lines.append((int(r.rank), anchors, interval))
    s = run.to_dict()["straggler"]
    band = None
    if len(lines) > BAND_RANKS:
        n = min(a.size for _, a, _ in lines)
        xs = np.stack([a[:n] for _, a, _ in lines])
        ys = np.stack([v[:n] for _, _, v in lines])
        # the first step has no interval on any rank: an all-NaN column is NaN, not a warning
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            band = (
                np.median(xs, axis=0),
                np.nanmedian(ys, axis=0) if n else ys[0],
                np.nanmin(ys, axis=0) if n else ys[0],
                np.nanmax(ys, axis=0) if n else ys[0],
            )
    compute = [
        (int(rank), g["step"].to_numpy(), g["compute_ns"].to_numpy() / 1e6)
        for (rank,), g in run.aligned.sort("step").group_by("rank", maintain_order=True)
    ]
    return RunHeartbeatData(
        title=title or f"{len(lines)} ranks",
        ranks=lines,
        straggler=None if s is None else (int(s["rank"]), s["excess_p50_ns"]),
        band=band,
        compute=sorted(compute, key=lambda c: c[0]),
    )


def run_heartbeat_figure(data: RunHeartbeatData, *, style: str = "light") -> Figure:
    """A run's heartbeat: one line per rank on shared scales (or the median and min–max band
    past 8 ranks), the straggler named in the legend."""
    mpl = load_matplotlib()
    with chart_style(mpl, style):
        fig: Figure = mpl.figure.Figure(figsize=(12, 7.5), dpi=150, layout="constrained")
        ax, cax = fig.subplots(2, 1, height_ratios=[3, 2])
        tab = mpl.colormaps["tab10"]
        palette = [tab(i) for i in (0, 1, 2, 4, 5, 6, 7, 8, 9)]  # red is the straggler's
        straggler = data.straggler[0] if data.straggler else None

        def color(i: int, rank: int) -> object:
            return COLORS[style]["mixed"] if rank == straggler else palette[i % len(palette)]

        def straggler_label(rank: int) -> str:
            assert data.straggler is not None
            excess = data.straggler[1]
            more = "" if excess is None else f", +{excess / 1e3:,.1f} µs compute per step"
            return f"rank {rank} (straggler{more})"

        if data.band is not None:
            x, med, lo, hi = data.band
            ax.fill_between(x, lo, hi, color="#888888", alpha=0.3, lw=0, label="min–max of ranks")
            ax.plot(x, med, color=COLORS[style]["decode"], lw=1.4, label="median of ranks")
        for i, (rank, anchors, interval) in enumerate(data.ranks):
            if data.band is not None and rank != straggler:
                continue
            is_straggler = rank == straggler
            ax.plot(
                anchors,
                interval,
                "-o",
                markersize=2,
                lw=2.0 if is_straggler else 0.9,
                color=color(i, rank),
                alpha=1.0 if is_straggler else 0.75,
                label=straggler_label(rank) if is_straggler else f"rank {rank}",
                zorder=3 if is_straggler else 2,
            )
        ax.set_title(chart(data.title), loc="left", fontsize=11)
        ax.set_xlabel("time from each rank's first kernel (ms)")
        ax.set_ylabel("step-to-step interval (ms)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.25)
        ax.legend(loc="upper left", fontsize=8, ncol=2, framealpha=0.8)
        # compute per aligned step: where the straggler shows (collectives even out cadence)
        many = len(data.compute) > BAND_RANKS
        if many:
            n = min(c[1].size for c in data.compute)
            ys = np.stack([c[2][:n] for c in data.compute])
            x = data.compute[0][1][:n]
            cax.fill_between(x, ys.min(axis=0), ys.max(axis=0), color="#888888", alpha=0.3, lw=0)
            cax.plot(x, np.median(ys, axis=0), color=COLORS[style]["decode"], lw=1.4)
        for i, (rank, steps, ms) in enumerate(data.compute):
            if many and rank != straggler:
                continue
            cax.plot(
                steps,
                ms,
                "-o",
                markersize=2,
                lw=2.0 if rank == straggler else 0.9,
                color=color(i, rank),
                zorder=3 if rank == straggler else 2,
            )
        cax.set_xlabel("aligned step")
        cax.set_ylabel("compute per step (ms)\n(busy, collectives excluded)")
        cax.set_ylim(bottom=0)
        cax.grid(True, alpha=0.25)
    return fig
