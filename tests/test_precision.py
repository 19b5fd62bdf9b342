"""Figures that do not depend on the machine: the fitted prefill growth and the means, each
computed again here in plain Python with exact fractions, from a definition written out
differently (the centred least-squares slope), and required to equal the library's at the
document's precision."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import polars as pl
import pytest

import traceview as tv
from tests.conftest import GENERATED, SCENARIO_NAMES
from traceview.analysis.base.precision import SIGNIFICANT, line_ends, sig
from traceview.analysis.base.stats import mean


def _centred_fit_ends(y: list[int]) -> tuple[Fraction, Fraction]:
    """The least-squares line's first and last fitted values: slope = Σ(x−x̄)(y−ȳ)/Σ(x−x̄)²,
    the line through (x̄, ȳ)."""
    n = len(y)
    xbar = Fraction(n - 1, 2)
    ybar = Fraction(sum(y), n)
    num = sum((Fraction(i) - xbar) * (v - ybar) for i, v in enumerate(y))
    den = sum((Fraction(i) - xbar) ** 2 for i in range(n))
    slope = num / den
    return ybar - slope * xbar, ybar + slope * (n - 1 - xbar)


@pytest.mark.parametrize("seed", range(30))
def test_line_ends_are_the_exact_least_squares_line(seed: int) -> None:
    rng = random.Random(seed)
    y = [rng.randrange(0, 10 ** rng.randrange(1, 13)) for _ in range(rng.randrange(2, 400))]
    assert line_ends(y) == _centred_fit_ends(y)


@pytest.mark.slow
def test_prefill_growth_of_every_fixture_equals_the_exact_fit() -> None:
    checked = 0
    for name in SCENARIO_NAMES:
        s = tv.summarize(tv.load(GENERATED / f"{name}.json.gz"))
        for g in s.document["work"]["prefill_growth"]:
            steps = s.steps.slice(g["first_step"], g["steps"])
            column = "context_tokens" if g["measure"] == "prompt_tokens" else "prefill_ns"
            y = [int(v) for v in steps[column].to_list()]
            first, last = _centred_fit_ends(y)
            assert g["growth"] == float(f"{float(last / first):.{SIGNIFICANT}g}"), name
            checked += 1
    assert checked >= 3  # the chunked, re-feeding and tight fixtures each have a mixed phase


def test_means_are_the_exact_mean_correctly_rounded() -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(0, 2**40, size=10_001)
    exact = Fraction(sum(int(v) for v in values), values.size)
    assert mean(values) == float(exact)
    assert mean(pl.Series(values)) == float(exact)
    assert mean(np.array([], dtype=np.int64)) is None


@pytest.mark.parametrize(
    "value,expected",
    [
        (0.1234567894999, 0.123456789),
        (2 / 3, 0.666666667),
        (1e-12 / 3, 3.33333333e-13),
        (123456789012.0, 123456789000.0),
        (0.0, 0.0),
        (float("inf"), float("inf")),
    ],
)
def test_sig_keeps_nine_significant_digits(value: float, expected: float) -> None:
    assert sig(value) == expected


def test_every_float_in_a_document_is_at_the_stated_precision() -> None:
    doc = tv.summarize(tv.load(GENERATED / "hybrid_chunked.json.gz")).to_dict()
    floats: list[float] = []

    def walk(v: object) -> None:
        if isinstance(v, float):
            floats.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(doc)
    assert len(floats) > 10
    assert all(f == sig(f) for f in floats)
