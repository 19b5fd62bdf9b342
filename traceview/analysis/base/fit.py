"""Ordinary least squares in exact arithmetic, with each coefficient's 95% confidence interval.

A fit of ``y`` (integers) on regressor columns (integers, the first all ones for an
intercept) solves the normal equations ``(XᵀX)·β = Xᵀy`` in integers and fractions, in one
fixed order: the coefficients, the residual sum of squares (``yᵀy − βᵀXᵀy``) and R² are
exact, so a document holds the same figures on every CPU (no BLAS: docs/design.md). The
uncertainty is a float computed once from those exact sums: each coefficient's standard
error ``s·√((XᵀX)⁻¹)ⱼⱼ``, ``s² = RSS / (n − p)``, and its 95% interval ``βⱼ ± t·SE``, with
``t`` Student's 97.5% quantile at ``n − p`` degrees of freedom (:func:`t_quantile`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction


def _dot(a: Sequence[int], b: Sequence[int]) -> int:
    return sum(map(operator.mul, a, b))


def _inverse(matrix: list[list[int]]) -> list[list[Fraction]] | None:
    """The inverse of a square integer matrix by Gauss-Jordan elimination in fractions;
    None where it is singular (a regressor that is constant, or a combination of others)."""
    p = len(matrix)
    a = [
        [Fraction(v) for v in row] + [Fraction(int(i == j)) for j in range(p)]
        for i, row in enumerate(matrix)
    ]
    for col in range(p):
        pivot = next((r for r in range(col, p) if a[r][col] != 0), None)
        if pivot is None:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        lead = a[col][col]
        a[col] = [v / lead for v in a[col]]
        for r in range(p):
            if r != col and a[r][col] != 0:
                factor = a[r][col]
                a[r] = [v - factor * w for v, w in zip(a[r], a[col], strict=True)]
    return [row[p:] for row in a]


@dataclass(frozen=True)
class ExactFit:
    """One least-squares fit (see the module docstring).

    Attributes:
        n: the observations.
        coefficients: β, one per column, exact.
        rss: the residual sum of squares, exact.
        tss: the total sum of squares about the mean of ``y``, exact.
        inverse_diagonal: the diagonal of ``(XᵀX)⁻¹``, exact.
    """

    n: int
    coefficients: tuple[Fraction, ...]
    rss: Fraction
    tss: Fraction
    inverse_diagonal: tuple[Fraction, ...]

    @property
    def dof(self) -> int:
        """Residual degrees of freedom, ``n − p``."""
        return self.n - len(self.coefficients)

    @property
    def r2(self) -> Fraction | None:
        """``1 − RSS/TSS``; None where every ``y`` is the same (TSS 0)."""
        return None if self.tss == 0 else 1 - self.rss / self.tss

    @property
    def residual(self) -> float | None:
        """``s``, the residuals' standard deviation ``√(RSS / (n − p))``; None without a
        residual degree of freedom."""
        return math.sqrt(self.rss / self.dof) if self.dof > 0 else None

    def standard_errors(self) -> tuple[float, ...] | None:
        """Each coefficient's standard error; None without a residual degree of freedom."""
        if self.dof <= 0:
            return None
        variance = self.rss / self.dof
        return tuple(math.sqrt(variance * d) for d in self.inverse_diagonal)

    def intervals(self, quantile: float = 0.975) -> tuple[tuple[float, float], ...] | None:
        """Each coefficient's two-sided confidence interval ``(low, high)``, ``β ± t·SE``
        with ``t`` Student's ``quantile`` (0.975: the 95% interval); None without a
        residual degree of freedom."""
        errors = self.standard_errors()
        if errors is None:
            return None
        t = t_quantile(quantile, self.dof)
        return tuple(
            (float(b) - t * se, float(b) + t * se)
            for b, se in zip(self.coefficients, errors, strict=True)
        )


def least_squares(columns: Sequence[Sequence[int]], y: Sequence[int]) -> ExactFit | None:
    """The least-squares fit of ``y`` on ``columns`` (each as long as ``y``; include a
    column of ones for an intercept), exactly; None where ``XᵀX`` is singular or there are
    fewer observations than columns."""
    n, p = len(y), len(columns)
    if n < p or p == 0:
        return None
    cols = [[int(v) for v in c] for c in columns]
    ys = [int(v) for v in y]
    gram = [[0] * p for _ in range(p)]
    for i in range(p):
        for j in range(i, p):
            gram[i][j] = gram[j][i] = _dot(cols[i], cols[j])
    xty = [_dot(c, ys) for c in cols]
    inverse = _inverse(gram)
    if inverse is None:
        return None
    beta = tuple(sum((inverse[i][j] * xty[j] for j in range(p)), Fraction(0)) for i in range(p))
    yty = _dot(ys, ys)
    rss = yty - sum((b * v for b, v in zip(beta, xty, strict=True)), Fraction(0))
    total = sum(ys)
    tss = yty - Fraction(total * total, n)
    return ExactFit(n, beta, rss, tss, tuple(inverse[i][i] for i in range(p)))


# --- Student's t ------------------------------------------------------------------------------


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified
    Lentz), converging for ``x < (a + 1)/(a + b + 2)``."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, dof: int) -> float:
    """Student's t distribution function at ``t`` with ``dof`` degrees of freedom."""
    tail = 0.5 * _incomplete_beta(dof / 2.0, 0.5, dof / (dof + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, dof: int) -> float:
    """Student's t quantile ``p`` (0.5 < p < 1) at ``dof`` ≥ 1 degrees of freedom, by
    bisection on :func:`t_cdf` to a relative 1e-12 (t(0.975, 1) = 12.706…, t(0.975, ∞) =
    1.960…)."""
    assert 0.5 < p < 1 and dof >= 1, (p, dof)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, dof) < p:
        hi *= 2.0
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2.0
        if t_cdf(mid, dof) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0
