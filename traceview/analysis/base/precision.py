"""How precise a document's floats are, and the exact least-squares line behind prefill growth.

Every float in ``traceview.summary/1`` and ``traceview.run/1`` (fractions, shares, ratios,
means) is rounded to :data:`SIGNIFICANT` significant digits by :func:`sig`: the digits past
that are arithmetic noise, not information, and rounding them off keeps a document the same
on every machine. No figure in a document goes through BLAS (``polyfit``, ``lstsq``, ``dot``):
the one fitted figure, prefill growth, is a least-squares line computed in exact integer and
rational arithmetic (:func:`line_ends`), so its value does not depend on the CPU's kernels or
the thread count. docs/metrics.md states this precision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

SIGNIFICANT = 9


def sig(value: float) -> float:
    """``value`` rounded to :data:`SIGNIFICANT` significant digits (correctly rounded, by
    Python's decimal conversion); infinities and NaN pass through."""
    if not math.isfinite(value) or value == 0:
        return value
    return float(f"{value:.{SIGNIFICANT}g}")


def sig_or_none(value: float | None) -> float | None:
    """:func:`sig`, keeping None (an absent figure) as it is."""
    return None if value is None else sig(value)


def line_ends(y: Sequence[int]) -> tuple[Fraction, Fraction]:
    """The least-squares line through ``(i, y[i])`` for i = 0..n-1, evaluated at its first
    and last point, exactly (n >= 2; the ``y`` are integers).

    With sums over i: slope = (n·Σiy − Σi·Σy) / (n·Σi² − (Σi)²) and
    intercept = (Σy − slope·Σi) / n, all in integers and fractions, in one fixed order."""
    n = len(y)
    assert n >= 2, "a line needs at least two points"
    sx = n * (n - 1) // 2
    sxx = (n - 1) * n * (2 * n - 1) // 6
    sy = sum(int(v) for v in y)
    sxy = sum(i * int(v) for i, v in enumerate(y))
    slope = Fraction(n * sxy - sx * sy, n * sxx - sx * sx)
    intercept = (sy - slope * sx) / n
    return intercept, intercept + slope * (n - 1)
