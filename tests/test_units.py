"""The one duration formatter and quantity reader, against values worked by hand."""

from __future__ import annotations

import math

import pytest

from traceview.render.format import fmt_ns, fmt_ratio, fmt_value
from traceview.units import duration_ns, read_quantity


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (None, "—"),
        (0, "0 ns"),
        (999, "999 ns"),
        (1_000, "1.0 µs"),
        (12_345, "12.3 µs"),
        (2_500_000, "2.50 ms"),
        (1_500_000_000, "1.5 s"),
        (250_000_000_000, "250 s"),
        (-2_500_000, "-2.50 ms"),
    ],
)
def test_fmt_ns(ns: int | None, text: str) -> None:
    assert fmt_ns(ns) == text


def test_fmt_ratio_and_value() -> None:
    assert fmt_ratio(None) == "—"
    assert fmt_ratio(math.inf) == "∞"
    assert fmt_ratio(1.254) == "1.25×"
    assert fmt_value(0.4567, "fraction") == "45.7%"
    assert fmt_value(2_500_000, "ns") == "2.50 ms"
    assert fmt_value(1234, "count") == "1,234"
    assert fmt_value(1234.5, "tokens") == "1,234.5"
    assert fmt_value(None, "ns") == "—"


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("50us", 50_000),
        ("50µs", 50_000),
        ("2.5ms", 2_500_000),
        (" 1200 ns ", 1_200),
        ("1200", 1_200),
        ("1s", 1_000_000_000),
        ("1e3us", 1_000_000),
        ("-5ms", None),
        ("90%", None),
        ("fast", None),
        ("", None),
    ],
)
def test_duration_ns(text: str, ns: int | None) -> None:
    assert duration_ns(text) == ns


def test_read_quantity() -> None:
    assert read_quantity("90%") == (90.0, "%")
    assert read_quantity("-0.5MS") == (-0.5, "ms")
    assert read_quantity("7") == (7.0, "")
    assert read_quantity("7 apples") is None
