"""Which steps of a step-cost fit hold an idle their counts do not explain
(docs/metrics.md, "What a step costs": idle steps).

Between request bursts the engine may wait for work, and that step's span holds the wait.
:func:`idle_steps` finds such steps by their residuals: first on a robust start (a fit
through each repeated count's median time, which one idle step cannot pull), then on least
squares refitted without the steps found. The exact coefficients
(:func:`~traceview.analysis.base.fit.least_squares`) are read as floats; the rule is
elementwise, no BLAS.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from traceview.analysis.base.fit import ExactFit, least_squares

IDLE_SPREADS = 10  # a step further above the fit than this many residual spreads holds an idle
IDLE_SHARE = 0.1  # ... and than this share of its fitted time
IDLE_ROUNDS = 3  # fits refitted without the steps found so far
# the robust start of :func:`idle_steps` fits the median time of each count held by at
# least this many steps: one long step cannot pull it
GROUP_STEPS = 3
# a count held by at least this many steps is judged by its own steps' spread where that is
# the larger: a median absolute deviation of 5 steps holds with 2 of them idle
OWN_SPREAD_STEPS = 5


def _fit_of(
    columns: Sequence[Sequence[int]], y: Sequence[int], keep: np.ndarray
) -> ExactFit | None:
    """The least squares of the steps ``keep`` alone (None where it has no one solution)."""
    return least_squares(
        [[v for v, k in zip(c, keep, strict=True) if k] for c in columns],
        [v for v, k in zip(y, keep, strict=True) if k],
    )


def _fitted(coefficients: Sequence[Fraction], xs: Sequence[np.ndarray]) -> np.ndarray:
    """Each step's fitted time: the exact coefficients, read as floats, times its counts."""
    fitted = np.zeros(xs[0].size, dtype=np.float64)
    for b, x in zip(coefficients, xs, strict=True):
        fitted += float(b) * x
    return fitted


def _count_groups(columns: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """The steps of each count (one set of column values) that at least
    :data:`GROUP_STEPS` steps share, as index arrays."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, key in enumerate(zip(*columns, strict=True)):
        groups.setdefault(tuple(int(v) for v in key), []).append(i)
    return [np.asarray(m) for m in groups.values() if len(m) >= GROUP_STEPS]


def _stands_out(
    residual: np.ndarray, fitted: np.ndarray, among: np.ndarray, groups: list[np.ndarray]
) -> np.ndarray:
    """Which residuals exceed the median of those ``among`` by more than
    :data:`IDLE_SPREADS` spreads, and by more than :data:`IDLE_SHARE` of their ``fitted``
    time; only those ``among`` can stand out. The spread is the residuals' median absolute
    deviation, or, where larger and the step's count (``groups``) holds at least
    :data:`OWN_SPREAD_STEPS` steps, that of its own count's residuals: a batch size whose
    steps vary more is judged by its own spread."""
    middle = float(np.median(residual[among]))
    spread = np.full(len(residual), float(np.median(np.abs(residual[among] - middle))))
    for at in groups:
        own = at[among[at]]
        if own.size >= OWN_SPREAD_STEPS:
            centre = float(np.median(residual[own]))
            spread[at] = np.maximum(spread[at], float(np.median(np.abs(residual[own] - centre))))
    above = np.where(among, residual - middle, 0.0)
    return (
        among
        & (above > IDLE_SPREADS * spread)
        & (above > IDLE_SHARE * np.where(among, fitted, 0.0))
    )


def _robust_start(
    columns: Sequence[Sequence[int]], ys: np.ndarray, groups: list[np.ndarray]
) -> np.ndarray:
    """Which steps stand out (:func:`_stands_out`) on a fit one long step cannot pull: the
    least squares of each step's time on its counts, the time replaced by the median time
    of the steps with the same counts where at least :data:`GROUP_STEPS` steps share them
    (``groups``). Where one of three or more steps holds an idle, their median is still
    an honest step's time (or between two). Only a step of ``groups`` above its own
    counts' median can stand out, so at most half of each count's steps do, and every
    count stays."""
    twice = 2 * np.asarray(ys, dtype=np.int64)  # twice the time (a median is a half)
    judged = np.zeros(len(ys), dtype=bool)
    for at in groups:
        twice[at] = int(round(2 * float(np.median(ys[at]))))
        judged[at] = True
    fit = least_squares(columns, [int(v) for v in twice])
    if fit is None:
        return np.zeros(len(ys), dtype=bool)
    xs = [np.asarray(c, dtype=np.float64) for c in columns]
    fitted = _fitted([b / 2 for b in fit.coefficients], xs)
    everyone = np.ones(len(ys), dtype=bool)
    found: np.ndarray = judged & (2 * ys > twice)  # above its count's median
    found &= _stands_out(ys - fitted, fitted, everyone, groups)
    return found


def idle_steps(columns: Sequence[Sequence[int]], y: Sequence[int], min_steps: int) -> np.ndarray:
    """Which steps' time holds an idle their counts do not explain (the engine waited for
    work between request bursts). A step's residual stands out where it exceeds the
    residuals' median by more than :data:`IDLE_SPREADS` times their median absolute
    deviation and by more than :data:`IDLE_SHARE` of its fitted time. Idle only lengthens
    a step, so only long steps are left out.

    First, the robust start (:func:`_robust_start`): a fit one long step cannot pull
    judges the steps whose counts at least :data:`GROUP_STEPS` steps share. The steps it
    finds are *sure*. Then the least squares of the steps not yet left out judges every
    step, refitted without those it finds, up to :data:`IDLE_ROUNDS` times. Where leaving
    out all the steps found would leave fewer than ``min_steps`` steps or one value of
    a count, only the sure ones stay out. The exact coefficients are read as floats; the
    rule is elementwise, no BLAS."""
    ys = np.asarray(y, dtype=np.float64)
    xs = [np.asarray(c, dtype=np.float64) for c in columns]
    groups = _count_groups(columns)
    sure = _robust_start(columns, ys, groups)
    out = sure.copy()
    for _ in range(IDLE_ROUNDS):
        keep = ~out
        fit = _fit_of(columns, y, keep)
        if fit is None:
            break
        fitted = _fitted(fit.coefficients, xs)
        found = _stands_out(ys - fitted, fitted, keep, groups)
        if not found.any():
            break
        out |= found
    kept = ~out
    if (out & ~sure).any() and (
        int(kept.sum()) < min_steps
        or any(np.unique(x[kept]).size < 2 for x in xs[1:] if np.unique(x).size > 1)
        or _fit_of(columns, y, kept) is None
    ):
        return sure
    return out
