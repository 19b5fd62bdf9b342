"""The types of the step-cost fits: the summary's ``cost`` section and ``traceview.cost/1``
(``traceview cost --json``), as ``TypedDict``s (docs/metrics.md, "What a step costs").
:mod:`traceview.analysis.base.document` holds them in the summary's type.
"""

from __future__ import annotations

from typing import TypedDict


class Interval95(TypedDict):
    """A fitted coefficient's 95% confidence interval (Student's t at the fit's residual
    degrees of freedom), in the coefficient's unit."""

    low_ns: float
    high_ns: float


class BatchCost(TypedDict):
    """The decode steps that ran one batch size: their mean time, the fit's time, and the
    decode tokens per second each gives (one token per sequence per step)."""

    sequences: int
    steps: int
    mean_ns: float
    fitted_ns: float
    tokens_per_s: float | None  # None where the mean time is 0
    fitted_tokens_per_s: float | None  # None where the fitted time is not positive


class DecodeCost(TypedDict):
    """``t = fixed + per_sequence × N`` over the decode steps (docs/metrics.md); every
    figure null, and ``reason`` said, where the counts cannot support the fit."""

    n: int
    reason: str | None
    fixed_ns: float | None
    fixed_ci95: Interval95 | None
    per_sequence_ns: float | None
    per_sequence_ci95: Interval95 | None
    r2: float | None
    residual_ns: float | None
    crossover_sequences: float | None  # None unless fixed > 0 and per_sequence's interval > 0
    batches: list[BatchCost]
    idle_left_out: int  # steps left out: an idle their counts do not explain
    notes: list[str]  # what a reader should know of the fit: a term not told from 0, …


class PromptCost(TypedDict):
    """``t = fixed + per_sequence × N + per_prompt_token × T [+ per_prompt_token_squared ×
    T²]`` over the steps with prompt work (docs/metrics.md); a term whose count does not
    vary is left out (null); every figure null, and ``reason`` said, where the counts
    cannot support the fit."""

    n: int
    reason: str | None
    fixed_ns: float | None
    fixed_ci95: Interval95 | None
    per_sequence_ns: float | None
    per_sequence_ci95: Interval95 | None
    per_prompt_token_ns: float | None
    per_prompt_token_ci95: Interval95 | None
    per_prompt_token_squared_ns: float | None
    per_prompt_token_squared_ci95: Interval95 | None
    terms: list[str]  # the terms fitted, in the formula's order
    quadratic: str | None  # why the T² term is in or out; None where nothing was fitted
    r2: float | None
    residual_ns: float | None
    idle_left_out: int  # steps left out: an idle their counts do not explain
    notes: list[str]  # what a reader should know of the fit: a term left out, or not told from 0


class CostWeights(TypedDict):
    """The decode fit's fixed term against the weights one decode step reads, with
    ``--model``: the bytes, their floor at the device's peak bandwidth, and the bandwidth
    the fixed term implies."""

    model: str
    weight_bytes: int
    device: str | None
    peak_bytes_per_s: float | None
    floor_ns: float | None
    fixed_bytes_per_s: float | None
    fraction_of_peak: float | None


class Cost(TypedDict):
    """What a step costs: least squares of each step's time on its counts (docs/metrics.md)."""

    decode: DecodeCost
    prompt: PromptCost
    weights: CostWeights | None


COST_SCHEMA = "traceview.cost/1"


class CostTrace(TypedDict):
    """One trace of a pooled step-cost fit: its serving steps, those each fit reads, and
    the decode batch sizes among them."""

    path: str
    steps: int
    decode_steps: int
    prompt_steps: int
    sequences_min: int | None
    sequences_max: int | None


class CostDocument(TypedDict):
    """``traceview.cost/1`` (``traceview cost --json``): the summary's ``cost`` fields
    over several traces' steps pooled, and each trace's part."""

    schema: str
    traces: list[CostTrace]
    decode: DecodeCost
    prompt: PromptCost
    weights: CostWeights | None
    warnings: list[str]
