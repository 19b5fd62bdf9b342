"""What a step costs: ordinary least squares of each step's time on the counts the engine's
annotations state (docs/metrics.md, "What a step costs").

A step's **time** is its span: its start to the next step's start, less the pause before
an autotuning that opens the next step (the steps table's ``end_ns − start_ns``; the last
step has none). Not its anchor to the next anchor: where a
step's first full-attention kernel comes after other layers' work (a hybrid model), that
interval charges the next step's early work to this step. Only
serving steps count (:func:`~traceview.analysis.steps.serving.serving_steps`). The counts
are the step record's (:mod:`traceview.analysis.steps.records`):

- ``N``, the decode sequences: ``generation_requests`` (vLLM's
  ``execute_context_C(Ct)_generation_N(Nt)``, SGLang's ``step[DECODE bs=N]``);
- ``T``, the prompt tokens: ``context_tokens`` (vLLM's ``Ct``, SGLang's
  ``step[EXTEND … toks=T]``); ``C``, the prompt requests: ``context_requests``.

vLLM's older ``execute_new_N_cached_M`` and SGLang's ``step[MIXED …]`` do not say how many
sequences decode, so their steps are not fitted.

Two fits, each exact (:func:`~traceview.analysis.base.fit.least_squares`):

- **decode**: the decode steps (no prompt work, ``N ≥ 1``): ``t = fixed + per_sequence × N``;
- **prompt**: the steps with prompt work (``T ≥ 1``, ``N`` stated):
  ``t = fixed + per_sequence × N + per_prompt_token × T``, and a ``T²`` term where the data
  supports one: every prompt step runs one prompt (``C = 1``, so ``T²`` is its square),
  there are at least 3 prompt sizes, and the term's 99.9% interval lies above 0. ``N``'s
  term is left out where its count does not vary (``N = 0`` in every prefill-only step) or
  moves exactly with ``T`` (collinear); ``notes`` says which.

Steps whose time holds an idle their counts do not explain (the engine waiting for work
between request bursts) are left out of each fit by a residual rule (:func:`idle_steps`)
and counted in ``idle_left_out``. A fit needs :data:`MIN_STEPS` steps and two values of its
count; otherwise its figures are null and ``reason`` says why. ``notes`` says what a
reader should know of a fitted one: a coefficient not distinguishable from 0, a batch size
with few steps, a slope that rests on one batch size's steps (their leverage), why the
crossover is null.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import polars as pl

from traceview.analysis.base.document import (
    BatchCost,
    Cost,
    CostWeights,
    DecodeCost,
    Interval95,
    PromptCost,
)
from traceview.analysis.base.fit import ExactFit, least_squares
from traceview.analysis.base.precision import sig
from traceview.analysis.steps.serving import serving_steps
from traceview.analysis.work.cost_idle import IDLE_SHARE, IDLE_SPREADS, idle_steps
from traceview.analysis.work.devices import GpuSpec
from traceview.analysis.work.model_config import ModelSpec

MIN_STEPS = 8  # a fit over fewer steps says too little: its figures are null, with the reason
PROMPT_KINDS = ("prefill", "mixed")

COST_STEP_SCHEMA: dict[str, pl.DataType] = {
    "index": pl.Int64(),
    "kind": pl.String(),
    "sequences": pl.Int64(),
    "prompt_tokens": pl.Int64(),
    "prompt_requests": pl.Int64(),
    "time_ns": pl.Int64(),
}

_DECODE_COUNTS = "vLLM's execute_context_C(T)_generation_N(…), SGLang's step[DECODE bs=N]"
_PROMPT_COUNTS = "vLLM's execute_context_C(T)_generation_N(…), SGLang's step[EXTEND bs=C toks=T]"


def step_time(table: pl.DataFrame) -> pl.Series:
    """Each step's time (ns): its span (``end_ns − start_ns``); null for the
    last step (its end is the last kernel's, not a start) and for a step left out for
    warm-up (``phase`` null)."""
    last = pl.int_range(pl.len()) == pl.len() - 1
    return table.select(
        pl.when(pl.col("phase").is_not_null() & ~last)
        .then(pl.col("end_ns") - pl.col("start_ns"))
        .alias("time_ns")
    ).to_series()


def cost_steps(table: pl.DataFrame) -> pl.DataFrame:
    """The serving steps with what the fits read: ``index``, ``kind`` and the counts
    ``sequences`` (N), ``prompt_tokens`` (T), ``prompt_requests`` (C), each null where no
    annotation states it, and ``time_ns``, the step's span (:func:`step_time`). Columns:
    :data:`COST_STEP_SCHEMA`."""
    timed = table.with_columns(step_time(table))
    return serving_steps(timed).select(
        pl.col("index").cast(pl.Int64),
        pl.col("kind").cast(pl.String),
        pl.col("generation_requests").cast(pl.Int64).alias("sequences"),
        pl.col("context_tokens").cast(pl.Int64).alias("prompt_tokens"),
        pl.col("context_requests").cast(pl.Int64).alias("prompt_requests"),
        pl.col("time_ns").cast(pl.Int64),
    )


def _interval(fit: ExactFit, j: int) -> Interval95 | None:
    bounds = fit.intervals()
    if bounds is None:
        return None
    low, high = bounds[j]
    return {"low_ns": sig(low), "high_ns": sig(high)}


def _value(fit: ExactFit, j: int) -> float:
    return sig(float(fit.coefficients[j]))


def _r2(fit: ExactFit) -> float | None:
    r2 = fit.r2
    return None if r2 is None else sig(float(r2))


def _residual(fit: ExactFit) -> float | None:
    s = fit.residual
    return None if s is None else sig(s)


def _null_decode(n: int, reason: str) -> DecodeCost:
    return {
        "n": n,
        "reason": reason,
        "fixed_ns": None,
        "fixed_ci95": None,
        "per_sequence_ns": None,
        "per_sequence_ci95": None,
        "r2": None,
        "residual_ns": None,
        "crossover_sequences": None,
        "batches": [],
        "idle_left_out": 0,
        "notes": [],
    }


def _one_value(values: pl.Series) -> int | None:
    """The one value of a column, where it has one (else None)."""
    distinct = values.unique()
    return int(distinct[0]) if distinct.len() == 1 else None


def decode_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """Of :func:`cost_steps`' rows (one trace's, or several pooled), those the decode fit
    reads: decode steps with ``sequences ≥ 1`` and a time."""
    return steps.filter(
        (pl.col("kind") == "decode") & (pl.col("sequences") >= 1) & pl.col("time_ns").is_not_null()
    )


def decode_cost(steps: pl.DataFrame) -> DecodeCost:
    """``t = fixed + per_sequence × N`` over the decode steps of ``steps``
    (:func:`cost_steps`' rows; several traces' may be pooled): the exact least-squares
    coefficients with their 95% intervals, R², the residuals' standard deviation, the
    crossover ``fixed / per_sequence``, and per batch size its steps' mean time, the fit's
    time and the decode tokens per second each gives. Null figures, with ``reason``, where
    the counts cannot support a fit."""
    decode = steps.filter(pl.col("kind") == "decode")
    counted = decode.filter(pl.col("sequences") >= 1)
    timed = decode_steps(steps)
    if decode.height == 0:
        return _null_decode(0, "no decode steps")
    if counted.height == 0:
        return _null_decode(
            0, f"no annotation states the decode steps' sequences ({_DECODE_COUNTS})"
        )
    if timed.height < MIN_STEPS:
        return _null_decode(
            timed.height,
            f"{timed.height} of {counted.height} decode step(s) that state their sequences "
            f"have a next step to time them; a fit needs at least {MIN_STEPS}",
        )
    only = _one_value(timed["sequences"])
    if only is not None:
        return _null_decode(
            timed.height,
            f"every decode step runs {only} sequence(s): one batch size gives no "
            "per-sequence cost (pool traces of other batch sizes: traceview cost)",
        )
    n, y = timed["sequences"].to_list(), timed["time_ns"].to_list()
    idle = idle_steps([[1] * len(y), n], y, MIN_STEPS)
    if idle.any():
        timed = timed.filter(pl.Series(~idle))
        n, y = timed["sequences"].to_list(), timed["time_ns"].to_list()
    if timed.height < MIN_STEPS:
        return {
            **_null_decode(timed.height, _idle_reason(timed.height, int(idle.sum()), "decode")),
            "idle_left_out": int(idle.sum()),
        }
    fit = least_squares([[1] * len(y), n], y)
    assert fit is not None  # two values of N: XᵀX is regular (idle_steps keeps them)
    fixed, per = fit.coefficients
    bounds = fit.intervals()
    per_low = None if bounds is None else bounds[1][0]
    # the crossover only where the slope is known to be positive: a slope whose interval
    # reaches 0 puts the crossover anywhere from N to infinity
    crossover = (
        sig(float(fixed / per)) if fixed > 0 and per_low is not None and per_low > 0 else None
    )
    notes = _idle_note(int(idle.sum()), "decode")
    notes += _zero_notes(fit, ["fixed", "per_sequence"])
    if crossover is None:
        notes.append(
            "crossover_sequences is null: it needs a fixed cost above 0 and a per-sequence "
            "cost whose 95% interval lies above 0"
        )
    sizes = timed.group_by("sequences").len().sort("sequences")
    few = sizes.filter(pl.col("len") < BATCH_STEPS)
    if sizes.height < BATCH_SIZES and few.height:
        named = ", ".join(f"N={s} ({c} step{'s' if c > 1 else ''})" for s, c in few.iter_rows())
        notes.append(
            f"the slope rests on {sizes.height} batch sizes, and {named} holds fewer than "
            f"{BATCH_STEPS} steps: one step's noise moves the slope"
        )
    named_sizes = set(few["sequences"].to_list()) if sizes.height < BATCH_SIZES else set()
    for size, count, h in _heavy_sizes(n):
        if size not in named_sizes:
            notes.append(
                f"the slope rests on N={size} ({count} step{'s' if count > 1 else ''}): each "
                f"step there sets {float(h):.0%} of its own fitted time (leverage "
                f"{LEVERAGE} or more), so its noise moves the slope"
            )
    return {
        "n": fit.n,
        "reason": None,
        "fixed_ns": _value(fit, 0),
        "fixed_ci95": _interval(fit, 0),
        "per_sequence_ns": _value(fit, 1),
        "per_sequence_ci95": _interval(fit, 1),
        "r2": _r2(fit),
        "residual_ns": _residual(fit),
        "crossover_sequences": crossover,
        "batches": _batches(timed, fixed, per),
        "idle_left_out": int(idle.sum()),
        "notes": notes,
    }


# a slope over fewer batch sizes than BATCH_SIZES, one of them with fewer steps than
# BATCH_STEPS, is named in the decode fit's notes
BATCH_SIZES = 3
BATCH_STEPS = 3
# a batch size whose steps each set at least this share of their own fitted time (leverage)
# carries the slope alone: named in the decode fit's notes
LEVERAGE = Fraction(1, 2)


def _heavy_sizes(sequences: Sequence[int]) -> list[tuple[int, int, Fraction]]:
    """Each batch size whose steps' leverage in the decode fit reaches :data:`LEVERAGE`:
    (N, its steps, the leverage). A step's leverage ``h = 1/n + (N − N̄)²/Σ(N − N̄)²`` is the
    share of its own fitted time its own time sets; exact."""
    n, total = len(sequences), sum(sequences)
    spread = n * sum(v * v for v in sequences) - total * total  # n·Σ(N − N̄)²
    if spread == 0:
        return []
    counts: dict[int, int] = {}
    for v in sequences:
        counts[v] = counts.get(v, 0) + 1
    out = []
    for size, steps in sorted(counts.items()):
        h = Fraction(1, n) + Fraction((n * size - total) ** 2, n * spread)
        if h >= LEVERAGE:
            out.append((size, steps, h))
    return out


def _idle_reason(kept: int, left_out: int, kind: str) -> str:
    return (
        f"{kept} {kind} step(s) remain once {left_out} that held an idle are left out; a fit "
        f"needs at least {MIN_STEPS}"
    )


def _idle_note(count: int, kind: str) -> list[str]:
    if not count:
        return []
    return [
        f"{count} {kind} step(s) left out: each took more than {IDLE_SPREADS}× the residuals' "
        f"median spread and {IDLE_SHARE:.0%} of its fitted time beyond the fit, an idle its "
        "counts do not explain (the engine waiting for work)"
    ]


def _ns(value: float) -> str:
    return f"{sig(value):,.0f} ns" if abs(value) >= 100 else f"{sig(value):.3g} ns"


def _zero_notes(fit: ExactFit, terms: Sequence[str]) -> list[str]:
    """A note for each coefficient whose 95% interval holds 0: the steps cannot tell it
    from no cost at all (nor its sign). And one for each whose whole interval lies below
    0: more work cannot take less time, so the counts do not explain these steps' time."""
    bounds = fit.intervals()
    if bounds is None:
        return []
    notes = []
    for term, (low, high) in zip(terms, bounds, strict=True):
        if low <= 0 <= high:
            notes.append(
                f"{term}_ns is not distinguishable from 0: its 95% interval runs from "
                f"{_ns(low)} to {_ns(high)}"
            )
        elif high < 0:
            why = (
                "a step cannot take less than no time, so the line does not hold down to no work"
                if term == "fixed"
                else "more work cannot take less time, so these steps' time follows "
                "something their counts do not state; read no cost from this fit"
            )
            notes.append(
                f"{term}_ns is below 0 with its whole 95% interval ({_ns(low)} to "
                f"{_ns(high)}): {why}"
            )
    return notes


def _batches(timed: pl.DataFrame, fixed: Fraction, per: Fraction) -> list[BatchCost]:
    """Per batch size (ascending): its steps, their mean time (the exact sum divided once),
    the fit's time, and the tokens per second each gives (one token per sequence)."""
    out: list[BatchCost] = []
    groups = timed.group_by("sequences").agg(pl.col("time_ns")).sort("sequences")
    for sequences, times in groups.iter_rows():
        total = sum(int(t) for t in times)
        mean = Fraction(total, len(times))
        fitted = fixed + per * sequences
        out.append(
            {
                "sequences": int(sequences),
                "steps": len(times),
                "mean_ns": sig(float(mean)),
                "fitted_ns": sig(float(fitted)),
                "tokens_per_s": sig(float(sequences * Fraction(10**9) / mean))
                if mean > 0
                else None,
                "fitted_tokens_per_s": sig(float(sequences * Fraction(10**9) / fitted))
                if fitted > 0
                else None,
            }
        )
    return out


def _null_prompt(n: int, reason: str) -> PromptCost:
    return {
        "n": n,
        "reason": reason,
        "fixed_ns": None,
        "fixed_ci95": None,
        "per_sequence_ns": None,
        "per_sequence_ci95": None,
        "per_prompt_token_ns": None,
        "per_prompt_token_ci95": None,
        "per_prompt_token_squared_ns": None,
        "per_prompt_token_squared_ci95": None,
        "terms": [],
        "quadratic": None,
        "r2": None,
        "residual_ns": None,
        "idle_left_out": 0,
        "notes": [],
    }


def prompt_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """Of :func:`cost_steps`' rows, those the prompt fit reads: steps with prompt work
    (prefill, mixed) whose ``prompt_tokens ≥ 1`` and ``sequences`` are stated, with a
    time."""
    return steps.filter(
        pl.col("kind").is_in(PROMPT_KINDS)
        & (pl.col("prompt_tokens") >= 1)
        & pl.col("sequences").is_not_null()
        & pl.col("time_ns").is_not_null()
    )


def _fit(terms: Sequence[str], columns: dict[str, list[int]], y: list[int]) -> ExactFit | None:
    return least_squares([columns[t] for t in terms], y)


def prompt_cost(steps: pl.DataFrame) -> PromptCost:
    """``t = fixed + per_sequence × N + per_prompt_token × T [+ per_prompt_token_squared ×
    T²]`` over the steps with prompt work of ``steps`` (:func:`cost_steps`' rows; several
    traces' may be pooled); see the module docstring for which terms are fitted. Null
    figures, with ``reason``, where the counts cannot support a fit."""
    prompt = steps.filter(pl.col("kind").is_in(PROMPT_KINDS))
    counted = prompt.filter((pl.col("prompt_tokens") >= 1) & pl.col("sequences").is_not_null())
    timed = prompt_steps(steps)
    if prompt.height == 0:
        return _null_prompt(0, "no steps with prompt work")
    if counted.height == 0:
        tokens = prompt.filter(pl.col("prompt_tokens") >= 1).height
        if tokens:
            return _null_prompt(
                0,
                f"the annotations of {tokens} step(s) with prompt work state their prompt "
                "tokens but not how many sequences decode beside them (SGLang's step[MIXED "
                "bs=B toks=T] does not split its batch into prompt and decode); the fit "
                f"needs both ({_PROMPT_COUNTS})",
            )
        return _null_prompt(
            0,
            "no annotation states the prompt steps' tokens and decode sequences "
            f"({_PROMPT_COUNTS})",
        )
    if timed.height < MIN_STEPS:
        return _null_prompt(
            timed.height,
            f"{timed.height} of {counted.height} step(s) with prompt work that state their "
            f"counts have a next step to time them; a fit needs at least {MIN_STEPS}",
        )
    only = _one_value(timed["prompt_tokens"])
    if only is not None:
        return _null_prompt(
            timed.height,
            f"every step with prompt work runs {only} prompt token(s): one size gives no "
            "per-token cost",
        )
    notes: list[str] = []
    terms = ["fixed", "per_sequence", "per_prompt_token"]
    y = timed["time_ns"].to_list()
    columns = _columns(timed)
    constant = _one_value(timed["sequences"])
    if constant is not None:
        terms = ["fixed", "per_prompt_token"]
        notes.append(
            f"per_sequence left out: every step with prompt work runs N = {constant} "
            "decode sequences (its count does not vary)"
        )
    elif _fit(terms, columns, y) is None:
        terms = ["fixed", "per_prompt_token"]
        notes.append(
            "per_sequence left out: N moves exactly with T (collinear), so the steps "
            "cannot tell a sequence's cost from a token's; per_prompt_token_ns holds both"
        )
    idle = idle_steps([columns[t] for t in terms], y, MIN_STEPS)
    if idle.any():
        timed = timed.filter(pl.Series(~idle))
        y = timed["time_ns"].to_list()
        columns = _columns(timed)
    if timed.height < MIN_STEPS:
        return {
            **_null_prompt(timed.height, _idle_reason(timed.height, int(idle.sum()), "prompt")),
            "idle_left_out": int(idle.sum()),
        }
    notes += _idle_note(int(idle.sum()), "prompt")
    fit = _fit(terms, columns, y)
    assert fit is not None  # two values of T, N left out where it adds nothing
    quadratic, wider = _quadratic(timed, terms, columns, y)
    if wider is not None:
        terms, fit = [*terms, "per_prompt_token_squared"], wider
    at = {term: j for j, term in enumerate(terms)}
    notes += _zero_notes(fit, terms)

    def coefficient(term: str) -> float | None:
        return _value(fit, at[term]) if term in at else None

    def interval(term: str) -> Interval95 | None:
        return _interval(fit, at[term]) if term in at else None

    return {
        "n": fit.n,
        "reason": None,
        "fixed_ns": coefficient("fixed"),
        "fixed_ci95": interval("fixed"),
        "per_sequence_ns": coefficient("per_sequence"),
        "per_sequence_ci95": interval("per_sequence"),
        "per_prompt_token_ns": coefficient("per_prompt_token"),
        "per_prompt_token_ci95": interval("per_prompt_token"),
        "per_prompt_token_squared_ns": coefficient("per_prompt_token_squared"),
        "per_prompt_token_squared_ci95": interval("per_prompt_token_squared"),
        "terms": terms,
        "quadratic": quadratic,
        "r2": _r2(fit),
        "residual_ns": _residual(fit),
        "idle_left_out": int(idle.sum()),
        "notes": notes,
    }


def _columns(timed: pl.DataFrame) -> dict[str, list[int]]:
    t = timed["prompt_tokens"].to_list()
    return {
        "fixed": [1] * len(t),
        "per_sequence": timed["sequences"].to_list(),
        "per_prompt_token": t,
        "per_prompt_token_squared": [v * v for v in t],
    }


QUADRATIC_SIZES = 3  # a curve through fewer prompt sizes is a line
# the T² term is kept where its two-sided 99.9% interval lies above 0: on straight-line data
# it is kept by chance 0.05% of the time (a 95% interval kept it in 2.5%, and a diff then
# compared per-token costs of different fits)
QUADRATIC_QUANTILE = 0.9995


def _quadratic(
    timed: pl.DataFrame, terms: list[str], columns: dict[str, list[int]], y: list[int]
) -> tuple[str, ExactFit | None]:
    """Whether the data supports a ``T²`` term, in words, and the fit with it where it
    does: every step runs one prompt (``T²`` its square), at least
    :data:`QUADRATIC_SIZES` prompt sizes, and the term's 99.9% interval above 0."""
    sizes = timed["prompt_tokens"].n_unique()
    if sizes < QUADRATIC_SIZES:
        return f"not tried: {sizes} prompt sizes (a curve needs {QUADRATIC_SIZES})", None
    requests = timed["prompt_requests"]
    if requests.null_count() or (requests != 1).any():
        return (
            "not tried: a step runs several prompts, or does not say how many (T² is "
            "then not each prompt's square)",
            None,
        )
    fit = _fit([*terms, "per_prompt_token_squared"], columns, y)
    if fit is None:
        return "not tried: T² varies only with the other terms", None
    bounds = fit.intervals(QUADRATIC_QUANTILE)
    if bounds is None:
        return "not tried: no step left to judge the term by", None
    low, high = bounds[-1]
    if low > 0:
        return "kept: its 99.9% interval lies above 0", fit
    return (
        f"left out: its 99.9% interval reaches 0 or below ({sig(low):.3g} to "
        f"{sig(high):.3g} ns per token²)",
        None,
    )


def weights_section(
    model: ModelSpec | None, device: GpuSpec | None, decode: DecodeCost
) -> CostWeights | None:
    """With a model: the weights one decode step of one sequence reads
    (:meth:`ModelSpec.weight_bytes`), their time at the device's peak bandwidth (the
    floor), and the bandwidth the decode fit's fixed term implies (``weight_bytes /
    fixed``), as a fraction of the peak; None without a model."""
    if model is None:
        return None
    weight_bytes = int(round(float(model.weight_bytes(np.array([1], dtype=np.int64))[0])))
    peak = None if device is None else device.peak_bytes_per_s
    fixed = decode["fixed_ns"]
    achieved = weight_bytes / (fixed / 1e9) if fixed is not None and fixed > 0 else None
    return {
        "model": model.name,
        "weight_bytes": weight_bytes,
        "device": None if device is None else device.name,
        "peak_bytes_per_s": peak,
        "floor_ns": sig(weight_bytes / peak * 1e9) if peak else None,
        "fixed_bytes_per_s": None if achieved is None else sig(achieved),
        "fraction_of_peak": sig(achieved / peak) if achieved is not None and peak else None,
    }


def cost_section(
    steps: pl.DataFrame, model: ModelSpec | None = None, device: GpuSpec | None = None
) -> Cost:
    """The summary's ``cost`` section (and ``traceview cost``'s document) from
    :func:`cost_steps`' rows, one trace's or several pooled."""
    decode = decode_cost(steps)
    return {
        "decode": decode,
        "prompt": prompt_cost(steps),
        "weights": weights_section(model, device, decode),
    }
