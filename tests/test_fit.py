"""The exact least-squares fit behind the step-cost section (traceview.analysis.base.fit):
its coefficients are the normal equations' exact solution, equal to numpy's least squares
within float noise; its sums of squares are exact; its intervals use Student's t."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

from traceview.analysis.base.fit import least_squares, t_quantile


def _random_problem(seed: int) -> tuple[list[list[int]], list[int]]:
    rng = random.Random(seed)
    n = rng.randrange(5, 300)
    p = rng.randrange(1, 5)
    cols = [[1] * n] + [
        [rng.randrange(0, 10 ** rng.randrange(1, 6)) for _ in range(n)] for _ in range(p - 1)
    ]
    y = [rng.randrange(0, 10**10) for _ in range(n)]
    return cols, y


@pytest.mark.parametrize("seed", range(25))
def test_coefficients_equal_numpys_least_squares(seed: int) -> None:
    cols, y = _random_problem(seed)
    fit = least_squares(cols, y)
    x = np.array(cols, dtype=np.float64).T
    if np.linalg.matrix_rank(x) < len(cols):
        assert fit is None
        return
    assert fit is not None
    beta, *_ = np.linalg.lstsq(x, np.array(y, dtype=np.float64), rcond=None)
    scale = max(abs(float(b)) for b in fit.coefficients) or 1.0
    for exact, approx in zip(fit.coefficients, beta, strict=True):
        assert float(exact) == pytest.approx(approx, rel=1e-6, abs=1e-6 * scale)


@pytest.mark.parametrize("seed", range(10))
def test_sums_of_squares_are_exact(seed: int) -> None:
    """RSS and TSS from the normal equations' identity equal the residuals summed in
    fractions, one by one."""
    cols, y = _random_problem(seed)
    fit = least_squares(cols, y)
    if fit is None:
        return
    n = len(y)
    rss = sum(
        (Fraction(y[i]) - sum(b * c[i] for b, c in zip(fit.coefficients, cols, strict=True))) ** 2
        for i in range(n)
    )
    mean = Fraction(sum(y), n)
    assert fit.rss == rss
    assert fit.tss == sum((Fraction(v) - mean) ** 2 for v in y)


def test_a_planted_line_is_found_exactly_with_an_interval_of_zero_width() -> None:
    n = list(range(1, 41))
    y = [19_100_000 + 313_000 * v for v in n]
    fit = least_squares([[1] * 40, n], y)
    assert fit is not None
    assert fit.coefficients == (19_100_000, 313_000)
    assert fit.rss == 0 and fit.r2 == 1
    assert fit.intervals() == ((19_100_000.0, 19_100_000.0), (313_000.0, 313_000.0))


def test_intervals_are_t_times_the_standard_error() -> None:
    """By hand for a line through 5 points: s² = RSS/3, var(slope) = s²/Sxx."""
    x, y = [1, 2, 3, 4, 5], [3, 5, 4, 8, 9]
    fit = least_squares([[1] * 5, x], y)
    assert fit is not None
    sxx = sum((v - 3) ** 2 for v in x)  # 10
    slope = Fraction(sum((a - 3) * (b - Fraction(29, 5)) for a, b in zip(x, y, strict=True)), sxx)
    assert fit.coefficients[1] == slope
    s2 = fit.rss / 3
    se = (s2 / sxx) ** 0.5
    low, high = fit.intervals()[1]  # type: ignore[index]
    assert (low, high) == pytest.approx(
        (float(slope) - 3.182446305 * float(se), float(slope) + 3.182446305 * float(se)), rel=1e-9
    )


def test_a_singular_or_short_problem_has_no_fit() -> None:
    assert least_squares([[1, 1, 1], [2, 2, 2]], [1, 2, 3]) is None  # a constant regressor
    assert least_squares([[1, 1, 1], [1, 2, 3], [2, 4, 6]], [1, 2, 3]) is None  # collinear
    assert least_squares([[1], [2]], [5]) is None  # fewer observations than columns
    fit = least_squares([[1, 1], [1, 2]], [5, 7])  # exactly determined: no interval
    assert fit is not None and fit.dof == 0 and fit.intervals() is None


@pytest.mark.parametrize(
    ("dof", "t"),
    [(1, 12.70620474), (2, 4.30265273), (3, 3.18244631), (5, 2.57058184), (10, 2.22813885),
     (30, 2.04227246), (120, 1.97993041), (100_000, 1.95998771)],
)  # fmt: skip
def test_t_quantiles_match_the_tables(dof: int, t: float) -> None:
    assert t_quantile(0.975, dof) == pytest.approx(t, rel=2e-8)
