"""The bursts' period: which boundaries between step-marker bursts are step boundaries
(docs/metrics.md, Engine steps). A model has a constant number L of full-attention bursts
per step, so the step boundaries are every L-th boundary; L and the pattern's phase are
chosen where the chosen boundaries' idle gaps stand out, locally (each beats every other
boundary within L-1 of it) or against nearly every boundary off the phase (a few host
stalls inside steps then cost only the boundaries beside them)."""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.analysis.base.intervals import I64, distinct

PERIODIC_MIN_SCORE = 0.8  # share of chosen boundaries that must beat their neighbourhood
PERIODIC_SURE = 0.95  # a period this clear ends the search
PERIODIC_MARGIN = 1.15  # ... by at least this factor (a tie or a drift is not a pause)
PERIODIC_TYPICAL = 0.8  # or beat this quantile of the boundaries off the phase (stalls)
PERIODIC_MIN_STEPS = 3  # chosen boundaries needed before a period is believed
MAX_LAYERS = 256


def _periodic_score(idle: I64, period: int, ranked: I64 | None = None) -> tuple[float, int]:
    """Best (score, phase) for boundaries every ``period``: the share of chosen boundaries
    whose idle gap beats every other boundary within ``period - 1`` of them, or nearly
    every boundary off the phase (``ranked``: ``idle`` sorted, where the caller has it)."""
    n = idle.size
    s = pl.Series(idle.astype(np.float64))
    w = period - 1
    left = s.shift(1).rolling_max(window_size=w, min_samples=1).fill_null(-1.0).to_numpy()
    right = (
        s.reverse()
        .shift(1)
        .rolling_max(window_size=w, min_samples=1)
        .fill_null(-1.0)
        .reverse()
        .to_numpy()
    )
    neighbours = np.maximum(left, right)
    wins = idle > PERIODIC_MARGIN * neighbours
    # ... or beats the PERIODIC_TYPICAL quantile of the boundaries off the phase, taken as
    # the quantile of all at PERIODIC_TYPICAL · (period - 1) / period (the same where the
    # phase holds the longest gaps, the steps' pauses): a host stall inside a few steps
    # then costs only the boundaries it stands beside
    ranked = np.sort(idle) if ranked is None else ranked
    typical = ranked[int(PERIODIC_TYPICAL * (period - 1) / period * (n - 1))]
    wins |= idle > PERIODIC_MARGIN * typical
    wins &= idle > 0
    pos = np.arange(n) % period
    total = np.bincount(pos, minlength=period)
    won = np.bincount(pos, weights=wins, minlength=period)
    share = np.where(total > 0, won / np.maximum(total, 1), 0.0)
    # the best share; on a tie, the phase of the longer gaps (a step's pause, not the one
    # long gap a layer of each step may have)
    best = np.flatnonzero(share == share.max())
    phase = int(best[0])
    if best.size > 1 and share[phase] > 0:
        phase = int(max(best, key=lambda p: float(np.median(idle[p::period]))))
    return float(share[phase]), phase


def natural_break(values: I64) -> int | None:
    """A threshold at the widest ratio between consecutive sorted positive values, if that
    ratio is at least 2 (a clear break); None otherwise."""
    v = distinct(values[values > 0]).astype(np.float64)
    if v.size < 2:
        return None
    ratios = v[1:] / v[:-1]
    i = int(np.argmax(ratios))
    if ratios[i] < 2.0:
        return None
    return int(np.ceil(np.sqrt(v[i] * v[i + 1])))


def choose_boundaries(
    idle: I64, others: I64, layers: int | None, step_gap_ns: int | None
) -> tuple[np.ndarray, int | None, str, bool]:
    """Which burst boundaries are step boundaries (mask); L; how, in words; and whether the
    evidence is strong (a period, or the user's own option) rather than a weaker guess.

    ``others`` are the device's idle gaps that are no boundary's longest: when (nearly)
    every boundary's gap stands out above them, every burst is a step (one full-attention
    layer per step).
    """
    n = idle.size
    if n == 0:
        return np.zeros(0, dtype=bool), 1, "a single burst", False
    if step_gap_ns is not None:
        return idle >= step_gap_ns, None, f"--step-gap {step_gap_ns} ns", True
    ranked = np.sort(idle)
    if layers is not None:
        period = max(1, layers)
        if period == 1:
            return np.ones(n, dtype=bool), 1, "--layers 1", True
        score, phase = _periodic_score(idle, period, ranked)
        mask = (np.arange(n) % period) == phase
        return mask, period, f"--layers {period} (boundary score {score:.2f})", True
    best: tuple[float, int, int] | None = None
    for period in range(2, min(MAX_LAYERS, n // PERIODIC_MIN_STEPS) + 1):
        score, phase = _periodic_score(idle, period, ranked)
        if best is None or score > best[0] + 1e-9:
            best = (score, period, phase)
        if score >= PERIODIC_SURE:
            break  # multiples of the period score lower, not higher: no need to look on
    if best is not None and best[0] >= PERIODIC_MIN_SCORE:
        score, period, phase = best
        mask = (np.arange(n) % period) == phase
        return (
            mask,
            period,
            (
                f"every {period} step-marker bursts: the between-step idle gap "
                f"beats every gap within {period - 1} bursts at {score:.0%} of "
                "boundaries"
            ),
            True,
        )
    if others.size:
        typical = float(np.quantile(others, 0.99))
        standing_out = float((idle > PERIODIC_MARGIN * typical).mean())
    else:
        standing_out = float((idle > 0).mean())
    if standing_out >= PERIODIC_MIN_SCORE:
        return (
            np.ones(n, dtype=bool),
            1,
            (
                f"every step-marker burst: {standing_out:.0%} of the idle gaps between bursts "
                "stand out above the device's other idle gaps"
            ),
            False,
        )
    threshold = natural_break(idle)
    if threshold is not None:
        mask = idle >= threshold
        counts = np.diff(np.flatnonzero(np.concatenate(([True], mask, [True]))))
        if counts.size > 2:
            inner = counts[1:-1]
            if (inner == np.bincount(inner).argmax()).mean() >= PERIODIC_MIN_SCORE:
                return (
                    mask,
                    int(np.bincount(inner).argmax()),
                    (f"idle gaps ≥ {threshold} ns (a natural break in the gap distribution)"),
                    False,
                )
    return (
        np.zeros(n, dtype=bool),
        None,
        (
            "no step structure found in the step-marker bursts (no between-step pause stands "
            "out, no period): all of them are taken as one step; set --layers or --step-gap"
        ),
        False,
    )
