"""Which steps serve, and each step's time (issue 52): the rule the step-cost fits read."""

from __future__ import annotations

import polars as pl
from conftest import GENERATED

import traceview as tv
from traceview.analysis.steps.serving import serving_steps
from traceview.analysis.timing.cadence import time_to_next


def test_serving_steps_are_those_without_a_warmup_cause() -> None:
    steps = tv.analyze(GENERATED / "hybrid_chunked.json.gz").steps
    assert serving_steps(steps).equals(steps)  # no warmup column: every step serves
    marked = steps.with_columns(
        pl.when(pl.col("index") < 2).then(pl.lit("graph_capture")).alias("warmup")
    )
    kept = serving_steps(marked)
    assert kept["index"].to_list() == list(range(2, steps.height))
    assert kept.columns == marked.columns


def test_a_steps_time_is_its_anchor_to_the_next_anchor() -> None:
    steps = tv.analyze(GENERATED / "hybrid_chunked.json.gz").steps
    anchors = steps["anchor_ns"].to_list()
    times = time_to_next(steps).to_list()
    assert times == [b - a for a, b in zip(anchors, anchors[1:], strict=False)] + [None]
