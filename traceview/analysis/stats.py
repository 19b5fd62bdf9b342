"""Percentiles with their population size (numpy's linear interpolation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def percentiles(values: Sequence[int] | np.ndarray, prefix: str = "") -> dict[str, Any]:
    """``n``, ``p50_ns``, ``p90_ns``, ``p99_ns`` and ``max_ns`` of ``values`` (ns).

    Percentiles interpolate linearly between closest ranks (numpy's default) and are
    rounded to the nearest nanosecond (half to even). With no values every figure is None
    and ``n`` is 0.
    """
    a = np.asarray(values, dtype=np.float64)
    keys = [f"{prefix}{k}" for k in ("p50_ns", "p90_ns", "p99_ns", "max_ns")]
    if a.size == 0:
        return {"n": 0, **dict.fromkeys(keys)}
    p = np.percentile(a, [50, 90, 99])
    return {
        "n": int(a.size),
        keys[0]: int(np.rint(p[0])),
        keys[1]: int(np.rint(p[1])),
        keys[2]: int(np.rint(p[2])),
        keys[3]: int(a.max()),
    }


def mean(values: Any) -> float | None:
    """Arithmetic mean of a Series or array (None when empty)."""
    a = np.asarray(values.to_numpy() if hasattr(values, "to_numpy") else values, dtype=np.float64)
    return float(a.mean()) if a.size else None
