"""Small traces planned in the tests, and what their plans say, for figures the generated
fixtures do not cover (a prompt whose chunks grow from nearly nothing, a second device).
Everything here is computed from the plan (fixtures/engine.py, fixtures/truth.py), never
from traceview."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path
from typing import Any

from fixtures.engine import SCENARIOS, PlannedStep, Scenario, build, plan_steps
from fixtures.truth import truth

HYBRID_CHUNKED = next(sc for sc in SCENARIOS if sc.name == "hybrid_chunked")

# a prompt prefilled in three chunks that grow from 64 tokens to 8,192: the least-squares
# line through them starts below zero, so its growth is unbounded
GROWTH_FROM_NOTHING = [64, 2_048, 8_192]


def growth_from_nothing(out: Path) -> tuple[Path, dict[str, Any]]:
    """A vLLM trace (CPU annotations that state each step's context tokens) whose one
    mixed phase prefills :data:`GROWTH_FROM_NOTHING`; its path and the plan's truth."""
    sc = dataclasses.replace(HYBRID_CHUNKED, name="growth_from_nothing")
    kinds = [("decode", 0, -1)] * 6
    kinds += [("mixed", tokens, c) for c, tokens in enumerate(GROWTH_FROM_NOTHING)]
    kinds += [("decode", 0, -1)] * 6
    return write(sc, plan_steps(sc, kinds), out)


def write(sc: Scenario, steps: list[PlannedStep], out: Path) -> tuple[Path, dict[str, Any]]:
    tb, planned = build(sc, steps)
    path = out / f"{sc.name}.json.gz"
    tb.write(path)
    return path, truth(sc, planned, path.name, tb.event_count)


def line_ends(y: list[int]) -> tuple[Fraction, Fraction]:
    """The least-squares line through (i, y[i]) at its first and last point, by the normal
    equations solved directly (a 2x2 system), in fractions."""
    n = len(y)
    xs = range(n)
    mx, my = Fraction(sum(xs), n), Fraction(sum(y), n)
    slope = sum((x - mx) * (v - my) for x, v in zip(xs, y, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - slope * mx, my + slope * (n - 1 - mx)
