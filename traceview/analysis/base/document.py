"""The types of the JSON documents: ``traceview.summary/1`` and ``traceview.run/1``.

These are the documents docs/metrics.md and docs/design.md describe, as ``TypedDict``s: analysis
builds them, ``orjson`` writes them as they are (a TypedDict is a dict, so the JSON is the
same), and every reader (render, charts, compare, annotate, scan) is checked by
``mypy --strict`` against these keys. A figure that cannot be computed is ``None`` (JSON
``null``), never 0. tests/test_document.py checks every fixture's and shared trace's document
against these types, key for key and type for type.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Literal, NotRequired, TypedDict

from traceview.analysis.base.cost_document import (
    COST_SCHEMA as COST_SCHEMA,
)
from traceview.analysis.base.cost_document import (
    BatchCost as BatchCost,
)
from traceview.analysis.base.cost_document import (
    Cost as Cost,
)
from traceview.analysis.base.cost_document import (
    CostDocument as CostDocument,
)
from traceview.analysis.base.cost_document import (
    CostTrace as CostTrace,
)
from traceview.analysis.base.cost_document import (
    CostWeights as CostWeights,
)
from traceview.analysis.base.cost_document import (
    DecodeCost as DecodeCost,
)
from traceview.analysis.base.cost_document import (
    Interval95 as Interval95,
)
from traceview.analysis.base.cost_document import (
    PromptCost as PromptCost,
)

SUMMARY_SCHEMA = "traceview.summary/1"
RUN_SCHEMA = "traceview.run/1"


Quantile = Literal["p50_ns", "p90_ns", "p99_ns"]
QUANTILES: tuple[Quantile, ...] = ("p50_ns", "p90_ns", "p99_ns")


class Percentiles(TypedDict):
    """A population's size and its percentiles, in ns (all None when ``n`` is 0)."""

    n: int
    p50_ns: int | None
    p90_ns: int | None
    p99_ns: int | None
    max_ns: int | None


Activity = Literal["kernel", "cpu_op"]


class TraceFacts(TypedDict):
    path: str
    format: str
    gpu: str | None
    events: int
    kernels: int
    skipped_events: int
    devices: list[int]
    device: int
    streams: list[int]
    start_ns: int
    end_ns: int
    span_ns: int
    activity: Activity


class FamilyRow(TypedDict):
    family: str
    count: int
    total_ns: int
    mean_ns: float
    share: float


KINDS = ("decode", "mixed", "prefill")  # the step kinds, each with a cadence of its own
DECODING = ("decode", "mixed")  # the kinds that carry decode work


class Phase(TypedDict):
    """A run of consecutive steps of one kind; ``cadence`` excludes the crossing interval."""

    kind: str
    first_step: int
    last_step: int
    steps: int
    start_ns: int
    end_ns: int
    cadence_p50_ns: int | None
    cadence: Percentiles


class StepFinding(TypedDict):
    """How the steps were found."""

    method: str
    marker: str | None
    layers: int | None
    detail: str
    annotation_steps: int
    disagreements: int | None  # None where only one of annotations and bursts was found
    kind_sources: dict[str, int]


class StepFacts(StepFinding):
    """How the steps were found, their number, cadence and phases."""

    count: int
    cadence: Percentiles
    cadence_by_kind: dict[str, Percentiles]  # decode, mixed, prefill: inside phases of a kind
    token_cadence: Percentiles  # between consecutive steps with decode work (decode, mixed)
    phases: list[Phase]
    decoding_cadence: NotRequired[Percentiles]  # deprecated: token_cadence


class PhaseWork(TypedDict):
    kind: str
    first_step: int
    last_step: int
    prompt_tokens: int | None
    decode_tokens: int | None
    prefill_ns: int


GrowthMeasure = Literal["prompt_tokens", "prefill_ns"]


class PrefillGrowth(TypedDict):
    first_step: int
    last_step: int
    steps: int
    measure: GrowthMeasure
    measured_first: int  # the first step's prompt work, as measured (not the fitted line's)
    measured_last: int
    prefill_ns_first: int
    prefill_ns_last: int
    # the fitted line's last value over its first. None: unbounded (the line's first value
    # is <= 0). to_dict() holds math.inf there, which JSON cannot hold: the document as
    # written says null
    growth: float | None
    first: NotRequired[int]  # deprecated: measured_first
    last: NotRequired[int]  # deprecated: measured_last


class Work(TypedDict):
    kernels_per_step: float | None
    prefill_ns: int
    prefill_kernels: int
    prompt_tokens: int | None
    decode_tokens: int | None
    token_steps: int
    shape_tokens: int | None
    shape_token_steps: int
    phases: list[PhaseWork]
    prefill_growth: list[PrefillGrowth]


class GapFill(TypedDict):
    """What filled a population's gaps, or its widest (at or above its p99): their merged
    span, its busy time by family (shared equally where families overlap) and its idle
    time by cause (docs/metrics.md)."""

    gaps: int
    span_ns: int
    busy_ns: int
    busy_by_family: dict[str, int]
    idle_ns: dict[str, int] | None  # None: the host's and the device's clocks disagree


class GapStats(TypedDict):
    """Decode gaps of one population (all, decode, mixed) between ``family`` markers."""

    population: Literal["all", "decode", "mixed"]
    family: str | None
    n: int
    overlaps: int
    p50_ns: int | None
    p90_ns: int | None
    p99_ns: int | None
    max_ns: int | None
    period: Percentiles  # the same pairs' start-to-start intervals (the gap + prev's duration)
    filled: GapFill | None  # what filled all its gaps; None without gaps
    widest: GapFill | None  # what filled the gaps at or above p99; None without gaps


class Busy(TypedDict):
    device: int
    fraction: float | None
    window_start_ns: int | None
    window_end_ns: int | None
    window_ns: int | None  # the window's length, the steps left out for warm-up excepted
    busy_ns: int | None
    in_gaps: float | None
    in_widest_gaps: float | None


class TimeBreakdown(TypedDict):
    """Where one phase's time went: busy by family (shared equally where kernels of
    several families overlap) and idle by cause; ``verdict``: host-bound, device-bound or
    balanced (docs/metrics.md)."""

    kind: str
    first_step: int
    last_step: int
    steps: int
    span_ns: int
    busy_ns: int
    busy_by_family: dict[str, int]
    idle_ns: dict[str, int] | None  # None: the host's and the device's clocks disagree
    verdict: str | None  # None: no idle split, and busy not above 80% of the span


class GpuPeaks(TypedDict):
    """The GPU's peaks (``traceview/presets/devices.toml`` or ``--gpu``): FLOP/s per
    dtype, bytes/s; empty and null where the part is not known."""

    name: str | None
    peak_flops: dict[str, float]
    peak_bytes_per_s: float | None
    source: str | None


class ModelFacts(TypedDict):
    """The model ``--model`` gave: its config's ``model_type``, parameters in all and per
    token, and blocks."""

    name: str
    params: int
    active_params: int
    layers: int


class EfficiencyPhase(TypedDict):
    """MFU and MBU over the steps of one kind (those with tokens and busy time)."""

    kind: str
    steps: int
    mfu_p50: float | None
    mfu_p90: float | None
    mbu_p50: float | None
    mbu_p90: float | None
    tflops_p50: float | None
    gbps_p50: float | None


class EfficiencyFamily(TypedDict):
    """A family's FLOPs and bytes from record_shapes' GEMM and attention ops, over its
    kernels' time: rates, and ``bound`` (compute or memory) by the device's roofline."""

    family: str
    flops: int
    bytes: int
    tflops: float | None
    gbps: float | None
    bound: str | None


class Efficiency(TypedDict):
    """How close to the hardware (docs/metrics.md): ``model`` and ``phases`` null without
    ``--model``; ``families`` null without record_shapes."""

    gpu: GpuPeaks
    model: ModelFacts | None
    phases: list[EfficiencyPhase] | None
    families: list[EfficiencyFamily] | None
    device: NotRequired[GpuPeaks]  # deprecated: gpu


class CaptureSpan(TypedDict):
    """One capture region's span: on its host thread (from its ``capture_*`` annotation or
    begin of capture to its graph's instantiation), else on its device."""

    start_ns: int
    end_ns: int
    span_ns: int


class Capture(TypedDict):
    """CUDA-graph capture / warm-up regions left out of the analysis (engine start-up;
    kept in where ``warmup.kept``): how many, the kernels under them, and each region's
    span in start order."""

    regions: int
    kernels: int
    spans: list[CaptureSpan]


class WarmupRegion(TypedDict):
    """One warm-up region: its cause (``graph_capture``, ``triton_autotune``, ``compile``,
    ``lazy_loading``), the steps whose spans it overlaps (null for graph capture left out
    before steps are found), its span, and for an autotuning the kernel tuned, its runs and
    the cache fills; the device activity in it and its kernel time (null where unknown)."""

    cause: str
    first_step: int | None
    last_step: int | None
    start_ns: int
    end_ns: int
    span_ns: int
    kernel: str | None
    runs: int | None
    fills: int | None
    kernels: int | None
    gpu_ns: int | None


class Warmup(TypedDict):
    """The engine preparing rather than serving: the steps that hold warm-up, their total
    span, whether the figures keep them (``kept``; else every serving figure leaves them
    out), and each region in start order."""

    kept: bool
    steps: int
    span_ns: int
    regions: list[WarmupRegion]


class SummaryDocument(TypedDict):
    """``traceview.summary/1``."""

    schema: str
    trace: TraceFacts
    classification: str
    families: list[FamilyRow]
    families_rollup: list[FamilyRow]
    steps: StepFacts
    work: Work
    decode_gaps: list[GapStats]  # all, decode, mixed: in that order, always three
    decode_marker: str | None
    decode_marker_source: str | None
    decode_marker_kernels: list[str]
    busy: Busy
    time_breakdown: list[TimeBreakdown]  # one entry per phase, as the cadence table
    efficiency: Efficiency
    cost: Cost
    capture: Capture
    warmup: Warmup
    warnings: list[str]


class PhaseCadence(TypedDict):
    n: int
    p50_ns: int | None
    p99_ns: int | None


class TraceFigures(TypedDict):
    """The figures a run document's rank rows and a scan's ``traces/`` rows share, each the
    same population everywhere (:mod:`traceview.analysis.documents.figures`, docs/datasets.md)."""

    steps: int
    cadence_p50_ns: int | None
    cadence_p99_ns: int | None
    decode_cadence_n: int
    decode_cadence_p50_ns: int | None
    decode_cadence_p99_ns: int | None
    mixed_cadence_n: int
    mixed_cadence_p50_ns: int | None
    mixed_cadence_p99_ns: int | None
    decode_gaps_n: int  # the decode population, as everywhere
    decode_gap_p50_ns: int | None
    decode_gap_p99_ns: int | None
    busy: float | None
    cost_decode_n: int  # the decode fit of the cost section, as in the summary
    cost_decode_fixed_ns: float | None
    cost_decode_per_sequence_ns: float | None
    cost_decode_r2: float | None
    cost_decode_fixed_low_ns: float | None  # the 95% intervals of the two coefficients
    cost_decode_fixed_high_ns: float | None
    cost_decode_per_sequence_low_ns: float | None
    cost_decode_per_sequence_high_ns: float | None
    cost_decode_idle_left_out: int
    cost_decode_reason: str | None  # why the fit is null


class StepTime(TypedDict):
    """Where steps' time went, summed over them (docs/metrics.md): a rank's, over all its
    steps."""

    span_ns: int
    busy_ns: int
    idle_ns: dict[str, int] | None  # host_late, launch, sync, dependency, other; None: no split
    verdict: str | None  # host-bound | device-bound | balanced; None: not known


class RankRow(TraceFigures):
    rank: int | None
    rank_source: str
    path: str
    truncated: bool  # the trace's text ends early: its complete events only were analysed
    truncated_at_byte: int | None  # where its (decompressed) JSON text is cut; null when whole
    cadence_by_kind: dict[str, PhaseCadence]  # decode, mixed (the summary's cadence_by_kind)
    compute_p50_ns: int | None
    collective_ns_per_step: float | None
    collective_wait_p50_ns: int | None
    idle_dependency_p50_ns: int | None  # per aligned step, beside the collective wait
    time_breakdown: StepTime
    cadence_by_phase: NotRequired[dict[str, PhaseCadence]]  # deprecated: cadence_by_kind


AlignMethod = Literal["annotation name", "annotation order", "step order"]


class Alignment(TypedDict):
    method: AlignMethod
    steps: int


class Straggler(TypedDict):
    """The rank the others wait for (``by``: ``collective wait``, or ``compute`` in a run
    without collectives), and whether the rank slowest by compute is the same one."""

    rank: int
    by: Literal["collective wait", "compute"]
    steps_slowest: int
    excess_p50_ns: int | None
    slowest_compute_rank: int
    agrees: bool


class LeftOut(TypedDict):
    path: str
    reason: str | None
    skipped: bool


class RunDocument(TypedDict):
    """``traceview.run/1``."""

    schema: str
    ranks: list[RankRow]
    alignment: Alignment
    skew: Percentiles
    straggler: Straggler | None
    left_out: list[LeftOut]
    warnings: list[str]
    summaries: list[SummaryDocument]


DIFF_SCHEMA = "traceview.diff/1"
INFO_SCHEMA = "traceview.info/1"

Unit = Literal["ns", "count", "fraction", "ratio"]


class DiffRow(TypedDict):
    """One figure of a diff: A (the baseline), B, the ratio B/A and the verdict."""

    section: str
    metric: str
    field: str | None  # the document's path of the figure (check's syntax); None: derived
    a: float | None
    b: float | None
    ratio: float | None  # B/A; None where A is 0 and B is not, or either is absent
    verdict: str | None  # same, better, worse, new, gone; None: not judged (see why)
    why: str | None  # why the row is not judged (compare.judgement); None: judged
    unit: Unit
    better: str | None  # lower, higher, or None: which way is an improvement
    role: Literal["headline", "rate", "workload"]


class KernelChange(TypedDict):
    """One kernel name's time in A and B."""

    name: str
    a_ns: int | None
    b_ns: int | None
    ratio: float | None
    change: str  # appeared, vanished, changed


class DiffDocument(TypedDict):
    """``traceview.diff/1`` (``traceview diff --json``)."""

    schema: str
    a: str
    b: str
    unchanged: bool  # nothing moved beyond noise
    workload: str  # the change in work done, in one line
    notes: list[str]
    rows: list[DiffRow]
    kernels: list[KernelChange]


class CheckRow(TypedDict):
    """One bound checked: its text, the value found, the limit and whether it held; ``kind``
    is the unit of ``value`` and ``limit`` (the document's); ``unit`` the one the bound is
    written in (``%``, ``ns``, ``us``, ``µs``, ``ms``, ``s``, or ``""`` for a plain number)
    and ``shown`` the value written in it (None where there is no value); ``why`` why the
    value is null, where its section says (a step-cost fit's ``reason``)."""

    check: str
    value: float | None
    limit: float
    ok: bool
    kind: Unit
    unit: str
    shown: str | None
    why: str | None


class DeviceFacts(TypedDict):
    device: int
    kernels: int
    kernel_time_ns: int
    streams: list[int]


class CategoryCount(TypedDict):
    frame: str
    cat: str | None
    count: int


class InfoDocument(TypedDict):
    """``traceview.info/1`` (``traceview info --json``): what a trace holds."""

    schema: str
    path: str
    format: str
    schema_version: int | None
    gpu: str | None
    base_time_ns: int | None
    events: int
    skipped_events: int
    warnings: list[str]
    kernels: int
    kernels_by_event_kind: dict[str, int]  # kernel, memcpy, memset
    kernels_by_kind: NotRequired[dict[str, int]]  # deprecated: kernels_by_event_kind
    devices: list[DeviceFacts]
    streams: list[list[int]]
    start_ns: int | None
    end_ns: int | None
    span_ns: int | None
    categories: list[CategoryCount]
    flows: int
    counters: int


# Renamed keys, by the section that holds them: old key -> new key. For one release a
# document holds each old key beside its new one, with the same value (written by
# :func:`keep_deprecated_keys`); docs/metrics.md says which are deprecated, and ``check``
# reads an old key as its new one and warns.
DEPRECATED_KEYS: dict[type, dict[str, str]] = {
    StepFacts: {"decoding_cadence": "token_cadence"},
    PrefillGrowth: {"first": "measured_first", "last": "measured_last"},
    Efficiency: {"device": "gpu"},
    RankRow: {"cadence_by_phase": "cadence_by_kind"},
    InfoDocument: {"kernels_by_kind": "kernels_by_event_kind"},
}


def keep_deprecated_keys(doc: SummaryDocument) -> None:
    """Write each deprecated key of ``doc`` beside its new one (:data:`DEPRECATED_KEYS`)."""
    doc["steps"]["decoding_cadence"] = deepcopy(doc["steps"]["token_cadence"])
    doc["efficiency"]["device"] = deepcopy(doc["efficiency"]["gpu"])
    for growth in doc["work"]["prefill_growth"]:
        growth["first"], growth["last"] = growth["measured_first"], growth["measured_last"]
