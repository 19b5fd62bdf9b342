"""Durations in and out: the one nanosecond formatter and the one quantity reader that the
terminal, charts, reports, diff, check files and command options share."""

from __future__ import annotations

import math
import re

NS_PER = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}

_QUANTITY = re.compile(r"\s*([-+]?[0-9]*\.?[0-9]+(?:e[-+]?\d+)?)\s*(ns|us|µs|ms|s|%)?\s*", re.I)


def fmt_ns(ns: int | float | None) -> str:
    """A duration in ns as a human unit (ns, µs, ms, s); ``—`` for none."""
    if ns is None:
        return "—"
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3g} s" if a < 1e11 else f"{ns / 1e9:,.0f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def fmt_ratio(ratio: float | None) -> str:
    """B/A as ``1.25×``; ``∞`` where A was zero, ``—`` for none."""
    if ratio is None:
        return "—"
    return "∞" if math.isinf(ratio) else f"{ratio:.2f}×"


def fmt_value(value: float | None, unit: str) -> str:
    """A metric's value in its unit: ns as a duration, a fraction as a percentage, counts
    with thousands separators (one decimal where they are not whole)."""
    if value is None:
        return "—"
    if unit == "ns":
        return fmt_ns(value)
    if unit == "fraction":
        return f"{value:.1%}"
    whole = not isinstance(value, float) or float(value).is_integer()
    return f"{value:,.0f}" if whole else f"{value:,.1f}"


def read_quantity(text: str) -> tuple[float, str] | None:
    """``2.5ms`` -> (2.5, "ms"); ``90%`` -> (90.0, "%"); ``7`` -> (7.0, ""); None when the
    text is not a number with an optional unit."""
    m = _QUANTITY.fullmatch(text)
    if not m:
        return None
    return float(m.group(1)), (m.group(2) or "").lower()


def duration_ns(text: str) -> int | None:
    """``50us`` -> 50000; a plain number is ns; None when the text is not a duration
    (a negative one, a percentage, or no number)."""
    quantity = read_quantity(text)
    if quantity is None or quantity[0] < 0 or quantity[1] == "%":
        return None
    number, unit = quantity
    return round(number * NS_PER[unit or "ns"])
