"""Quantities in: the one reader of durations and percentages (``5ms``, ``250us``, ``90%``)
that check files and command options share. Numbers out are render/format.py's."""

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
    return float(m.group(1)), (m.group(2) or "").lower()


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
