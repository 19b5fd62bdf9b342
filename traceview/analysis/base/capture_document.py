"""The types of a capture's JSON documents, as ``TypedDict``s: ``traceview.itl/1`` (what the
clients saw: ``traceview itl --json``), ``traceview.itl-diff/1`` (two captures side by side)
and ``traceview.capture/1`` (a capture's ``run.json``).

:mod:`traceview.capture` builds and reads them; the renderers (tables, the report page) read
them through these types, so ``mypy --strict`` checks every key they use. docs/capture.md
describes them. A figure the capture cannot give is ``None`` (JSON ``null``), never 0.
tests/test_capture_document.py checks live documents against these types, key for key.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from traceview.analysis.base.document import Percentiles

ITL_SCHEMA = "traceview.itl/1"
ITL_DIFF_SCHEMA = "traceview.itl-diff/1"
CAPTURE_SCHEMA = "traceview.capture/1"

Role = Literal["victim", "injected"]
Quantity = Literal["prompt_tokens", "generation_tokens", "preemptions", "running", "waiting"]
Counter = Literal["prompt_tokens", "generation_tokens", "preemptions"]
Count = int | float  # an engine's count: an int where it is whole and exact, else a float


# --- the engine's /metrics -------------------------------------------------------------------


class EngineCounts(TypedDict):
    """One ``/metrics`` snapshot: each quantity summed over its label sets; None where the
    server does not serve it."""

    prompt_tokens: Count | None
    generation_tokens: Count | None
    preemptions: Count | None
    running: Count | None
    waiting: Count | None


class CounterDelta(TypedDict):
    """Each counter's increase over the snapshots; None where the first or last lacks it."""

    prompt_tokens: Count | None
    generation_tokens: Count | None
    preemptions: Count | None


class CounterResets(TypedDict):
    """How many times each counter went down between snapshots (a restart)."""

    prompt_tokens: int
    generation_tokens: int
    preemptions: int


class Snapshot(TypedDict):
    """A ``/metrics`` snapshot of the probe file: ``before``, ``during`` or ``after``."""

    label: str
    values: EngineCounts


class ItlMetrics(TypedDict):
    """The engine's counters over the workload. Only ``notes`` is present where the capture
    has no before or no after snapshot."""

    engine: NotRequired[str | None]
    snapshots: NotRequired[int]
    before: NotRequired[EngineCounts]
    after: NotRequired[EngineCounts]
    delta: NotRequired[CounterDelta]
    resets: NotRequired[CounterResets]
    running_max: NotRequired[Count | None]
    waiting_max: NotRequired[Count | None]
    notes: list[str]


class PrefillCheck(TypedDict):
    """The engine's counted prompt tokens against the tokens the probe sent."""

    sent_prompt_tokens: int
    engine_prompt_tokens: Count | None
    excess_tokens: Count | None
    ratio: float | None
    verdict: Literal["match", "re-prefill", "fewer"] | None
    caveats: list[str]


# --- the clock --------------------------------------------------------------------------------


class Fingerprint(TypedDict):
    """What tells one trace from another: its base time, its profiler's span and its events."""

    base_time_ns: int | None
    profiler_start_ns: int | None
    profiler_end_ns: int | None
    events: int | None


class Offset(TypedDict):
    """The offset that puts the probe's times on one trace's clock, and how it was found."""

    offset_ns: int | None
    method: str | None
    uncertainty_ns: int | None
    evidence: str | None
    why: str | None
    profiler_start_ns: int | None
    profiler_end_ns: int | None


class ItlClock(TypedDict):
    """One trace's clock, as ``itl`` reports it (``clock``): every key, None where unknown."""

    trace: str
    offset_ns: int | None
    method: str | None
    uncertainty_ns: int | None
    evidence: str | None
    why: str | None
    base_time_ns: int | None
    profiler_start_ns: int | None
    profiler_end_ns: int | None
    events: int | None


class TraceClock(TypedDict):
    """One trace's entry in ``run.json``'s ``clock.traces``. A trace that could not be read
    has only its name, ``why`` and the null offset."""

    trace: str
    offset_ns: int | None
    method: str | None
    uncertainty_ns: int | None
    why: str | None
    evidence: NotRequired[str | None]
    base_time_ns: NotRequired[int | None]
    profiler_start_ns: NotRequired[int | None]
    profiler_end_ns: NotRequired[int | None]
    events: NotRequired[int | None]


class ProfileCall(TypedDict):
    """A profiler call on the probe's monotonic clock: sent, and answered."""

    sent_ns: int
    answered_ns: int


class ProbeClock(TypedDict):
    """The probe's clock facts: its clock, the wall clock's offset from it (read within
    ``read_width_ns``), and the profiler calls on it. An unprofiled capture makes none."""

    client: str
    wall_minus_monotonic_ns: int
    read_width_ns: int
    profile_start: NotRequired[ProfileCall]
    profile_stop: NotRequired[ProfileCall]


class RunClock(ProbeClock):
    """``run.json``'s ``clock``: the probe's clock facts, and each trace's clock."""

    traces: list[TraceClock]


# --- traceview.itl/1 --------------------------------------------------------------------------


class TtftStats(Percentiles):
    """Time to first token over one population's requests (ns), with their prompt tokens."""

    requests: int
    prompt_tokens: int


class Ttft(TypedDict):
    victims: TtftStats
    injected: TtftStats


class ItlTokens(TypedDict):
    """The victims' tokens, and the chunks they came in (None for a probe file without
    request records)."""

    victims: int
    chunks: int | None


class ItlRequest(TypedDict):
    """One request as the client saw it."""

    role: Role
    index: int
    prompt_tokens: int
    ttft_ns: int | None
    tokens: int
    chunks: int


class ItlDocument(TypedDict):
    """``traceview.itl/1``: what the clients of one capture saw."""

    schema: str
    probe: str
    victims: int
    window_ns: int
    all: Percentiles
    injection: Percentiles
    tokens: ItlTokens
    ttft: Ttft
    requests: list[ItlRequest]
    metrics: ItlMetrics | None
    prefill_check: PrefillCheck | None
    profiled: bool | None
    clock: ItlClock | None
    window_on_trace_ns: list[int] | None
    notes: list[str]


# --- traceview.itl-diff/1 ---------------------------------------------------------------------


class ItlDiffRow(TypedDict):
    """One figure of two captures: A, B, B/A, and a verdict where the figure is a rate."""

    section: str
    metric: str
    field: str
    a: Count | None
    b: Count | None
    n_a: int | None
    n_b: int | None
    ratio: float | None
    verdict: str | None
    unit: str
    role: Literal["rate", "shown", "workload"]


class ItlDiffDocument(TypedDict):
    """``traceview.itl-diff/1``: two captures side by side (A the baseline)."""

    schema: str
    a: str
    b: str
    rows: list[ItlDiffRow]


# --- traceview.capture/1 (run.json) -----------------------------------------------------------


class RunMetrics(TypedDict):
    """What the capture's ``/metrics`` reads came to."""

    engine: str
    names: dict[str, str | None] | None
    snapshots: int
    reads: int
    failed_reads: int
    notes: list[str]


class CaptureRunDocument(TypedDict):
    """``traceview.capture/1``: a capture's ``run.json``, what was run and the clock facts."""

    schema: str
    config: dict[str, object]
    profiled: bool
    started_unix_s: float
    inject_start_ns: int
    inject_end_ns: int
    clock: RunClock
    traces: list[str]
    victim_tokens: list[int]
    sent_prompt_tokens: int
    metrics: RunMetrics
    errors: list[str]
    notes: list[str]
