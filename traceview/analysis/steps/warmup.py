"""Warm-up inside a capture: the engine preparing, not serving (docs/metrics.md, "Warm-up is
not serving"; how each cause is recognised: docs/design.md, "Warm-up signatures").

Four causes are recognised, each by what its tool documents it doing:

- ``graph_capture``: CUDA-graph capture at start-up (:mod:`.capture`); its kernels are left
  out before steps are found, since its warm-up forwards are no engine steps.
- ``triton_autotune``: Triton's autotuner benchmarking every config of a kernel, read by
  its kernels (``do_bench``'s signature) or by Inductor's benchmarking range
  (:mod:`.autotune`).
- ``compile`` and ``lazy_loading``: the host compiling (torch.compile's ``dynamo_timed``
  ranges, ``… (dynamo_timed)``, but for those that name benchmarking: autotuning;
  Triton's ``compile`` frame) or the driver loading a kernel
  for its first launch (CUPTI's ``Lazy Function Loading``). Every process loads each
  kernel once, so a capture near start-up holds a few loads of microseconds; they are
  warm-up only where they cost a step: the idle they add to it, beyond the usual idle of
  steps that do not compile, is at least a tenth of the rest of the step's span
  (:func:`costly`). So a range over busy steps, which pause as usual under it, costs none;
  and a capture where most steps compile still reads them all as warm-up.

A CompiledFxGraph's first call in a trace is not evidence by itself: a capture started
mid-serving holds first calls that are warm. Where a first call compiles, autotunes or
loads, the evidence above is in it.

A step **holds warm-up** when its span overlaps a warm-up region's device activity. Steps
that hold warm-up keep their rows and say why (the steps table's ``warmup``); every
serving figure leaves them out (:mod:`.find`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from traceview.analysis.base.intervals import Union, union
from traceview.analysis.steps.capture import Capture
from traceview.model import Trace

# the causes, in the order a step that holds several is named by
CAUSES = ("graph_capture", "triton_autotune", "compile", "lazy_loading")

COMPILE_RANGE = re.compile(r" \(dynamo_timed\)$|^triton/compiler/compiler\.py\(\d+\): compile$")
LAZY_LOADING = "Lazy Function Loading"
# a compile range that names benchmarking: Inductor's runtime autotuning
# (``CachingAutotuner.benchmark_all_configs``, ``….coordinate_descent_tuning``) and its
# benchmarker (``InductorBenchmarker.benchmark_gpu``), each a ``dynamo_timed`` range
BENCH_RANGE = re.compile(r"(?i)(autotun|benchmark).* \(dynamo_timed\)$")
# a compile or load costs a step when the idle it adds is at least a tenth of the rest of
# the step's span (the step lasts at least 10% longer for it)
COST_SHARE = (1, 10)
HOST_WORDS = {"compile": "compilation", "lazy_loading": "lazy kernel loading"}


@dataclass(frozen=True)
class Region:
    """One warm-up region on the analysed device.

    Attributes:
        cause: ``graph_capture``, ``triton_autotune``, ``compile`` or ``lazy_loading``.
        start_ns, end_ns: its span (an autotuning's from the end of the device's activity
            before its first run, since the host compiled the first config then, to the end
            of its last timed run).
        first_ns: the start of its first device activity (``start_ns`` where it has none
            of its own). The idle time before it belongs to the region, but the device
            work before it does not: a step holds the region where it overlaps
            ``[first_ns, end_ns)``.
        kernel: the autotuned kernel's name (None for the other causes).
        runs: the autotuned kernel's runs in the region.
        fills: the cache fills in it.
        kernels: the device activity in it.
        gpu_ns: that activity's kernel time (the sum of durations, as families count).
        first_step, last_step: the steps whose spans it overlaps (None where none does:
            graph capture, left out before steps are found).
    """

    cause: str
    start_ns: int
    end_ns: int
    kernel: str | None = None
    runs: int | None = None
    fills: int | None = None
    kernels: int | None = None
    gpu_ns: int | None = None
    first_step: int | None = None
    last_step: int | None = None
    first_ns: int | None = None

    @property
    def device_start_ns(self) -> int:
        """Where its device activity starts (:attr:`first_ns`, else :attr:`start_ns`)."""
        return self.start_ns if self.first_ns is None else self.first_ns


def host_ranges(trace: Trace) -> pl.DataFrame:
    """The host's compile ranges, its benchmarking ranges (:data:`BENCH_RANGE`) and the
    driver's lazy loads, overlapping ones of a cause merged: ``cause`` (``compile`` |
    ``benchmark`` | ``lazy_loading``), ``start_ns``, ``end_ns``."""
    ev = trace.events
    schema = {"cause": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64}
    distinct = ev["name"].unique().drop_nulls().cast(pl.String).to_list()
    benching = [n for n in distinct if BENCH_RANGE.search(n)]
    compiling = [n for n in distinct if COMPILE_RANGE.search(n) and n not in benching]
    loading = [n for n in distinct if n == LAZY_LOADING]
    if not compiling and not loading and not benching:
        return pl.DataFrame(schema=schema)
    frames = []
    for cause, wanted in (
        ("compile", compiling),
        ("benchmark", benching),
        ("lazy_loading", loading),
    ):
        if not wanted:
            continue
        sel = ev.filter(pl.col("name").cast(pl.String).is_in(wanted) & (pl.col("dur_ns") > 0))
        if sel.height == 0:
            continue
        a = sel["ts_ns"].to_numpy().astype(np.int64)
        merged = union(a, a + sel["dur_ns"].to_numpy().astype(np.int64))
        frames.append(
            pl.DataFrame(
                {"cause": cause, "start_ns": merged.starts, "end_ns": merged.ends}, schema=schema
            )
        )
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)


def capture_warmup(trace: Trace, capture: Capture) -> list[Region]:
    """The CUDA-graph capture regions as warm-up regions, each with the device activity
    under it (a kernel under capture belongs to the last region starting at or before it,
    else to the first)."""
    if not capture.regions or not capture.spans:
        return []
    a0 = np.array([a for a, _ in capture.spans], dtype=np.int64)
    under = trace.kernels.filter(pl.Series(capture.mask))
    ts = under["ts_ns"].to_numpy().astype(np.int64)
    dur = under["dur_ns"].to_numpy().astype(np.int64)
    at = np.clip(np.searchsorted(a0, ts, side="right") - 1, 0, a0.size - 1)
    count = np.bincount(at, minlength=a0.size)
    ns = np.bincount(at, weights=dur, minlength=a0.size)
    return [
        Region("graph_capture", a, b, kernels=int(count[i]), gpu_ns=int(round(ns[i])))
        for i, (a, b) in enumerate(capture.spans)
    ]


def with_regions(u: Union, regions: list[Region], opening: np.ndarray | None = None) -> Union:
    """``u`` with each region's span filled, as if busy: its idle time (the host compiling
    a config) is no pause between steps. ``opening``: where the annotations start their
    steps (each step's first kernel). A region whose first activity opens a step is filled
    from that activity on, so that the step starts there (the tuned kernel is the step's
    first); the pause before it stays a pause, which no step's span holds
    (:func:`trim_lead_ins`)."""
    if not regions:
        return u
    a = np.array([r.start_ns for r in regions], dtype=np.int64)
    if opening is not None and opening.size:
        first = np.array([r.device_start_ns for r in regions], dtype=np.int64)
        at = np.clip(np.searchsorted(opening, first), 0, opening.size - 1)
        a = np.where(opening[at] == first, first, a)
    b = np.array([r.end_ns for r in regions], dtype=np.int64)
    return union(np.concatenate((u.starts, a)), np.concatenate((u.ends, b)))


def trim_lead_ins(starts: np.ndarray, ends: np.ndarray, regions: list[Region]) -> np.ndarray:
    """The steps' ends (spans ``[starts, ends)``, in order) with each warm-up region's idle
    lead-in left out. A region whose span starts inside a step, and whose device activity
    starts at or after that step's end, opens the next step: the idle time before its first
    run (the host compiling its first config) spans warm-up, so it belongs to neither step.
    That step ends where the region starts."""
    out = ends.copy()
    if not regions or starts.size == 0:
        return out
    for r in regions:
        if r.device_start_ns <= r.start_ns:
            continue
        k = int(np.searchsorted(starts, r.start_ns, side="right")) - 1
        if k >= 0 and r.start_ns < out[k] <= r.device_start_ns:
            out[k] = r.start_ns
    return out


def idle_under(ranges: Union, u: Union, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per window ``[lo, hi)``: how long the device is idle under ``ranges`` inside it
    (``|(ranges ∪ u) ∩ w| − |u ∩ w|``)."""
    both = union(np.concatenate((ranges.starts, u.starts)), np.concatenate((ranges.ends, u.ends)))
    out: np.ndarray = both.clipped_lengths(lo, hi) - u.clipped_lengths(lo, hi)
    return out


def usual_idle(
    own: np.ndarray, plain: np.ndarray, pool: np.ndarray, kind: np.ndarray | None = None
) -> np.ndarray:
    """Per step (``own``: each step's idle, its span less its busy time): the idle a step
    of its kind has without warm-up, the median idle of the ``plain`` steps of its kind;
    of every plain step where none is of its kind; the least idle of the ``pool`` (the
    steps that may be plain) where no step is plain."""
    out = np.zeros(own.size, dtype=np.int64)
    if own.size == 0:
        return out
    if not plain.any():
        out[:] = int(own[pool].min() if pool.any() else own.min())
        return out
    out[:] = int(np.median(own[plain]))
    if kind is not None:
        for k in np.unique(kind[plain]):
            mine = kind == k
            out[mine] = int(np.median(own[plain & mine]))
    return out


def costly(
    ranges: Union,
    u: Union,
    lo: np.ndarray,
    hi: np.ndarray,
    held: np.ndarray | None = None,
    kind: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per step (spans ``[lo, hi)``): whether the host's ``ranges`` cost it, and the
    device's idle time under them (ns). The idle they add to a step is its idle beyond its
    usual idle (:func:`usual_idle`, over the other steps with no idle under them, none
    ``held`` for other warm-up; the last one only where no other is plain, since it ends
    with its last kernel, with no pause after it; ``kind``: each step's kind), at most the
    idle under them. They cost
    the step where that is at least :data:`COST_SHARE` of the rest of its span. So a range
    over busy steps costs none of them, though the ordinary pauses between them lie under
    it; and each compiling step is judged against steps that do not compile, so a capture
    where most steps compile still reads them all."""
    idle = idle_under(ranges, u, lo, hi)
    pool = np.ones(idle.size, dtype=bool) if held is None else ~held
    plain = pool & (idle == 0)
    if plain[:-1].any():  # the last step has no pause after it: the others' idle, if any
        plain[-1] = False
    own = (hi - lo) - u.clipped_lengths(lo, hi)
    usual = usual_idle(own, plain, pool, kind)
    added = np.minimum(idle, np.clip(own - usual, 0, None))
    hit: np.ndarray = (added > 0) & (added * COST_SHARE[1] >= (hi - lo - added) * COST_SHARE[0])
    return hit, idle


def _overlapping(lo: np.ndarray, hi: np.ndarray, a: int, b: int) -> range:
    """The steps (spans ``[lo, hi)``, in order, tiling) that overlap ``[a, b)``."""
    first = int(np.searchsorted(hi, a, side="right"))
    last = int(np.searchsorted(lo, b, side="left"))
    return range(first, max(first, last))


def mark_warmup(
    table: pl.DataFrame, trace: Trace, regions: list[Region], u: Union
) -> tuple[pl.DataFrame, list[Region], list[str]]:
    """The steps with ``warmup`` (String, the last column): the cause of the warm-up
    their span holds, the first of :data:`CAUSES` where several; null for a serving step.
    Also every warm-up region with the steps it lies in: ``regions`` (graph capture's and
    autotuning's) and the host's compile and lazy-loading ranges where they cost a step
    (:func:`costly`), one region per run of consecutive steps they cost. ``u``: the
    device's activity. Also a line for each cause whose ranges cost some steps too little
    to be warm-up."""
    n = table.height
    lo = table["start_ns"].to_numpy().astype(np.int64)
    hi = table["end_ns"].to_numpy().astype(np.int64)
    kind = table["kind"].to_numpy()
    rank = np.full(n, len(CAUSES), dtype=np.int64)
    out: list[Region] = []
    said: list[str] = []
    for r in regions:
        steps = _overlapping(lo, hi, r.device_start_ns, r.end_ns)
        for i in steps:
            rank[i] = min(rank[i], CAUSES.index(r.cause))
        out.append(replace(r, first_step=steps[0], last_step=steps[-1]) if steps else r)
    host = host_ranges(trace) if n else pl.DataFrame()
    if host.height:
        for cause in ("compile", "lazy_loading"):
            mine = host.filter(pl.col("cause") == cause)
            if mine.height == 0:
                continue
            ranges = Union(mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy())
            hit, idle = costly(ranges, u, lo, hi, rank < len(CAUSES), kind)
            rank[hit] = np.minimum(rank[hit], CAUSES.index(cause))
            cheap = (idle > 0) & ~hit
            if cheap.any():  # below the threshold: say what stays in the figures
                said.append(
                    f"{HOST_WORDS[cause]} in {int(cheap.sum())} step(s) is left in: the device "
                    f"idles {int(idle[cheap].sum()) / 1e6:.3g} ms under it in all, and it "
                    "lengthens each of those steps by less than a tenth beyond their usual idle"
                )
            edges = np.flatnonzero(np.diff(np.concatenate(([0], hit.astype(np.int8), [0]))))
            for first, stop in zip(edges[::2], edges[1::2], strict=True):
                a, b = int(lo[first]), int(hi[stop - 1])
                inside = (ranges.ends > a) & (ranges.starts < b)
                out.append(
                    Region(
                        cause,
                        max(int(ranges.starts[inside].min()), a),
                        min(int(ranges.ends[inside].max()), b),
                        first_step=int(first),
                        last_step=int(stop - 1),
                    )
                )
    named = [CAUSES[i] if i < len(CAUSES) else None for i in rank.tolist()]
    table = table.with_columns(pl.Series("warmup", named, dtype=pl.String))
    return table, sorted(out, key=lambda r: (r.start_ns, r.end_ns)), said


def leave_out(table: pl.DataFrame, ts: np.ndarray) -> tuple[pl.DataFrame, np.ndarray]:
    """The steps with the ones that hold warm-up left out of the phases (``phase`` null;
    a phase is a run of consecutive serving steps of one kind, so a warm-up step ends one),
    and per kernel (starts ``ts``) whether it lies outside those steps."""
    left = table["warmup"].is_not_null().to_numpy()
    kind = table["kind"].to_list()
    phase: list[int | None] = []
    current = -1
    for i, k in enumerate(kind):
        if left[i]:
            phase.append(None)
            continue
        if i == 0 or left[i - 1] or kind[i - 1] != k:
            current += 1
        phase.append(current)
    table = table.with_columns(pl.Series("phase", phase, dtype=pl.Int64))
    lo = table["start_ns"].to_numpy().astype(np.int64)
    step = np.searchsorted(lo, ts, side="right") - 1
    serving = np.ones(ts.size, dtype=bool)
    inside = step >= 0
    serving[inside] = ~left[step[inside]]
    return table, serving
