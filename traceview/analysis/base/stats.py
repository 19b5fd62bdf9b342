"""Percentiles with their population size (numpy's linear interpolation)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl

from traceview.analysis.base.document import Percentiles


def percentiles(values: Sequence[int] | np.ndarray) -> Percentiles:
    """``n``, ``p50_ns``, ``p90_ns``, ``p99_ns`` and ``max_ns`` of ``values`` (ns).

    Percentiles interpolate linearly between closest ranks (numpy's default) and are
    rounded to the nearest nanosecond (half to even). With no values every figure is None
    and ``n`` is 0.
    """
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return {"n": 0, "p50_ns": None, "p90_ns": None, "p99_ns": None, "max_ns": None}
    p = np.percentile(a, [50, 90, 99])
    return {
        "n": int(a.size),
        "p50_ns": int(np.rint(p[0])),
        "p90_ns": int(np.rint(p[1])),
        "p99_ns": int(np.rint(p[2])),
        "max_ns": int(a.max()),
    }


def samples_for(quantile: float) -> int:
    """The fewest samples a percentile rests on before it says more than the sample's
    extreme: ``ceil(1 / (1 - q))`` for the quantile ``q`` below 1 (p50: 2, p90: 10, p99:
    100). With fewer, the p99 is the sample's maximum or next to it, and moves with ``n``
    alone: the summary warns of such a p99, and ``diff`` and ``check`` judge no percentile
    on fewer (a maximum, which grows with ``n`` whatever it is, they never judge)."""
    return math.ceil(round(1 / (1 - quantile), 9))


def mean(values: pl.Series | np.ndarray) -> float | None:
    """Arithmetic mean of a Series or array of integers (None when empty): the exact integer
    sum divided once, so the result is the correctly rounded mean on every machine (a float
    reduction's order, and so its last digit, depends on the CPU's SIMD width)."""
    a = values.to_numpy() if isinstance(values, pl.Series) else np.asarray(values)
    if a.size == 0:
        return None
    if a.dtype.kind in "iub":
        return sum(int(v) for v in a.tolist()) / a.size
    return math.fsum(a.tolist()) / a.size


def median_ns(values: pl.Series | np.ndarray) -> int | None:
    """The median of integer ns values, rounded to the nearest ns (half to even); None when
    empty. The one median behind every ``*_p50_ns`` that is not a percentile row."""
    a = values.to_numpy() if isinstance(values, pl.Series) else np.asarray(values)
    return int(np.rint(np.median(a))) if a.size else None
