"""Quantities in: the one reader of durations and percentages (``5ms``, ``250us``, ``90%``)
that check files and command options share, and :func:`written_as`, which writes a figure
in the unit its bound was read in. Numbers out are otherwise render/format.py's."""

from __future__ import annotations

import math
import re

NS_PER = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}

_QUANTITY = re.compile(r"\s*([-+]?[0-9]*\.?[0-9]+(?:e[-+]?\d+)?)\s*(ns|us|µs|ms|s|%)?\s*", re.I)


def read_quantity(text: str) -> tuple[float, str] | None:
    """``2.5ms`` -> (2.5, "ms"); ``90%`` -> (90.0, "%"); ``7`` -> (7.0, ""); None when the
    text is not a number with an optional unit."""
    m = _QUANTITY.fullmatch(text)
    if not m:
        return None
    # the micro sign (U+00B5) and the Greek mu (U+03BC) are one unit: the case-blind
    # pattern takes either, and NS_PER spells the first
    return float(m.group(1)), (m.group(2) or "").lower().replace("\u03bc", "\u00b5")


TIME_UNITS = ("ns", "us", "µs", "ms", "s")
DURATION_HINT = "a duration needs a unit: 50us, 2.5ms, 1200ns, 1s (0 needs none)"


MAX_DURATION_NS = 2**63 - 1  # an Int64 of ns: about 292 years


def duration_ns(text: str) -> int | None:
    """``50us`` -> 50000; ``0`` -> 0; None when the text is not a duration: a bare number
    other than 0 (units are never guessed), a negative one, a percentage, no number, or one
    past :data:`MAX_DURATION_NS` (``1e400s`` is infinite as a float)."""
    quantity = read_quantity(text)
    if quantity is None or quantity[0] < 0 or quantity[1] == "%":
        return None
    number, unit = quantity
    if not unit and number != 0:
        return None
    ns = number * NS_PER[unit or "ns"]
    if not math.isfinite(ns) or ns > MAX_DURATION_NS:
        return None
    return round(ns)


def too_long(text: str) -> bool:
    """Whether ``text`` is a duration with its unit, but past :data:`MAX_DURATION_NS`."""
    quantity = read_quantity(text)
    return (
        quantity is not None
        and quantity[1] in NS_PER
        and quantity[0] >= 0
        and not quantity[0] * NS_PER[quantity[1]] <= MAX_DURATION_NS
    )


def unitless_number(text: str) -> bool:
    """Whether ``text`` is a number without a unit (``5``, ``2.5``)."""
    quantity = read_quantity(text)
    return quantity is not None and not quantity[1]


def _digits(number: float, significant: int) -> str:
    """``number`` with ``significant`` digits, never in exponent form, without trailing
    zeros: 10133.456 -> ``10133`` (4), 0.8492 -> ``0.8492``."""
    if number == 0 or not math.isfinite(number):
        return f"{number:g}"
    decimals = max(0, significant - 1 - math.floor(math.log10(abs(number))))
    text = f"{number:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def written_as(value: float, unit: str, limit: float | None = None) -> str:
    """``value`` written in ``unit`` as a bound is (``%``: ``value`` a fraction; a time
    unit: ``value`` in ns; ``""``: the number as it is): 0.008492 in ``%`` -> ``0.8492%``,
    10_133_456 in ``ms`` -> ``10.13 ms``. Four significant digits, more where fewer would
    write a value that is not ``limit`` (in ``value``'s unit) as the limit: a failed bound
    never reads as its own limit."""
    scale = 100.0 if unit == "%" else 1 / NS_PER[unit] if unit in NS_PER else 1.0
    suffix = "%" if unit == "%" else f" {unit}" if unit else ""
    if isinstance(value, int) and scale == 1:
        return f"{value}{suffix}"
    number = value * scale
    for significant in range(4, 18):
        text = _digits(number, significant)
        if limit is None or value == limit or text != _digits(limit * scale, significant):
            break
    else:  # the scaling merged two floats a step apart: say it is not the limit itself
        if limit is not None:
            text = f"{'>' if value > limit else '<'}{text}"
    return f"{text}{suffix}"
