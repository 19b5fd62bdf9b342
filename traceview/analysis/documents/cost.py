"""``traceview cost``: several traces' steps pooled into one step-cost fit (a batch sweep of
fixed-batch captures, Part 1's figure), by the definitions of the summary's ``cost``
section (:mod:`traceview.analysis.work.cost`), which reads one trace's steps alone."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from traceview.analysis.base.document import (
    COST_SCHEMA,
    CostDocument,
    CostTrace,
    GpuPeaks,
)
from traceview.analysis.documents import display
from traceview.analysis.documents.summary import Summary
from traceview.analysis.work.cost import COST_STEP_SCHEMA, cost_section, decode_steps, prompt_steps
from traceview.analysis.work.devices import GpuSpec
from traceview.analysis.work.model_config import ModelSpec

_NO_GPU: GpuPeaks = {"name": None, "peak_flops": {}, "peak_bytes_per_s": None, "source": None}


@dataclass(frozen=True)
class CostedTrace:
    """What one trace gives a pooled fit: its path, its steps with their counts and times
    (``Summary.cost_steps``), its GPU's peaks, and what a reader should know of it; or
    why it gives none (``skipped``: no serving steps; ``error``: it cannot be read)."""

    path: str
    steps: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=COST_STEP_SCHEMA))
    gpu: GpuPeaks = field(default_factory=lambda: dict(_NO_GPU))  # type: ignore[assignment]
    warnings: list[str] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None

    @classmethod
    def of(cls, path: str, summary: Summary, warnings: list[str] | None = None) -> CostedTrace:
        """A trace's part from its summary."""
        return cls(path, summary.cost_steps, summary.document["efficiency"]["gpu"], warnings or [])


@dataclass
class StepCost:
    """Several traces' steps in one step-cost fit (:func:`pool_cost`).

    Attributes:
        document: ``traceview.cost/1``: ``traces`` (each one's path and steps), and the
            summary's ``cost`` fields (``decode``, ``prompt``, ``weights``) over the steps
            of all of them, and ``warnings``.
        steps: the pooled steps (``Summary.cost_steps``' columns, and ``trace``: the
            index of the trace in ``document["traces"]``).
    """

    document: CostDocument
    steps: pl.DataFrame

    def to_dict(self) -> CostDocument:
        return self.document

    def chart(self, *, title: str | None = None, style: str = "light") -> display.Figure:
        """Step time against the decode batch with the fitted line, and decode tokens per
        second against it, each trace's steps in its own colour (a matplotlib Figure)."""
        return display.cost(self, title, style)


def _gpu(traces: list[CostedTrace]) -> tuple[GpuSpec | None, list[str]]:
    """The GPU whose bandwidth the fixed term is set against: the first trace's whose
    peak is known; a warning where the traces ran on different GPUs."""
    names = sorted({t.gpu["name"] or "an unknown GPU" for t in traces})
    warnings = []
    if len(names) > 1:
        warnings.append(
            f"the traces ran on different GPUs ({', '.join(names)}): their steps are "
            "pooled in one fit all the same"
        )
    for t in traces:
        peak = t.gpu["peak_bytes_per_s"]
        if peak is not None:
            name = t.gpu["name"] or "GPU"
            return GpuSpec(name, dict(t.gpu["peak_flops"]), peak, t.gpu["source"]), warnings
    return None, warnings


def pool_cost(traces: list[CostedTrace], model: ModelSpec | None = None) -> StepCost:
    """One fit over every trace's steps (the summary's ``cost`` definitions), each trace's
    steps tagged with its index."""
    left_out = [t for t in traces if t.skipped is not None]
    traces = [t for t in traces if t.skipped is None]
    frames = [
        t.steps.select(list(COST_STEP_SCHEMA)).with_columns(pl.lit(i, pl.Int64).alias("trace"))
        for i, t in enumerate(traces)
    ]
    empty = pl.DataFrame(schema={**COST_STEP_SCHEMA, "trace": pl.Int64()})
    steps = pl.concat([empty, *frames], how="vertical")
    gpu, warnings = _gpu(traces)
    warnings += [f"{t.path}: left out: {t.skipped}" for t in left_out]
    rows: list[CostTrace] = []
    for i, t in enumerate(traces):
        mine = steps.filter(pl.col("trace") == i)
        decode = decode_steps(mine)
        rows.append(
            {
                "path": t.path,
                "steps": mine.height,
                "decode_steps": decode.height,
                "prompt_steps": prompt_steps(mine).height,
                "sequences_min": decode["sequences"].min() if decode.height else None,  # type: ignore[typeddict-item]
                "sequences_max": decode["sequences"].max() if decode.height else None,  # type: ignore[typeddict-item]
            }
        )
        warnings += [f"{t.path}: {w}" for w in t.warnings]
    section = cost_section(steps, model, gpu)
    document: CostDocument = {
        "schema": COST_SCHEMA,
        "traces": rows,
        "decode": section["decode"],
        "prompt": section["prompt"],
        "weights": section["weights"],
        "warnings": warnings,
    }
    return StepCost(document, steps)
