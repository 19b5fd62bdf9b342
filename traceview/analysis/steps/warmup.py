"""Warm-up inside a capture: the engine preparing, not serving (docs/metrics.md, "Warm-up is
not serving"; how each cause is recognised: docs/design.md, "Warm-up signatures").

Four causes are recognised, each by what its tool documents it doing:

- ``graph_capture``: CUDA-graph capture at start-up (:mod:`.capture`); its kernels are left
  out before steps are found, since its warm-up forwards are no engine steps.
- ``triton_autotune``: Triton's autotuner benchmarks every config of a kernel with
  ``triton.testing.do_bench`` the first time it meets a new shape key. For each config:
  one first call (the host compiles the config first, with the device idle), five estimate
  runs, plain warm-up runs for about 25 ms, and timed runs for about 100 ms. Before each
  estimate and each timed run it zeroes a 256 MB buffer to clear the L2 cache
  (``cache.zero_()``: an ATen fill kernel, ``FillFunctor<int>``; older versions fill an
  ``int8`` buffer, and some estimate without fills). Each timed run sits between two CUDA
  event records on the host. The autotuner's hooks (``reset_to_zero``, ``restore_value``,
  a config's ``pre_hook``) add a few kernels around each call. On one stream this reads:
  the call ``b`` (the tuned kernel and its hooks) alternating with one fill, ``F b F b …``,
  at least :data:`MIN_FILLS` fills, each followed by ``b`` repeated (``b^m``), where the
  run counts show: ``b^m`` with ``m ≥ 2`` right after exactly four single calls (the 5th
  estimate run, then the warm-up), or, in the versions that estimate without fills, 7
  calls or more before the first fill or 8 or more between two fills (:func:`_benchmarked`).
  A training step that zeroes buffers (gradients, a bucket before each all-reduce)
  alternates fills with work, but not with those counts. Inductor's own benchmarker
  (fills repeated without the call between its estimate and timed runs) is not read.
- ``compile`` and ``lazy_loading``: the host compiling (torch.compile's ``dynamo_timed``
  ranges, ``… (dynamo_timed)``; Triton's ``compile`` frame) or the driver loading a kernel
  for its first launch (CUPTI's ``Lazy Function Loading``). Every process loads each
  kernel once, so a capture near start-up holds a few loads of microseconds; they are
  warm-up only where they cost a step: a step holds such warm-up when the union of those
  ranges inside its span lasts at least the median step's span (:func:`host_warmup`).

A CompiledFxGraph's first call in a trace is not evidence by itself: a capture started
mid-serving holds first calls that are warm. Where a first call compiles, autotunes or
loads, the evidence above is in it.

A step **holds warm-up** when its span overlaps a warm-up region. Steps that hold warm-up
keep their rows and say why (the steps table's ``warmup``); every serving figure leaves
them out (:mod:`.find`).
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

# ATen's fill kernel (``tensor.zero_()``/``fill_``): FillFunctor in current PyTorch,
# fill_kernel_cuda's lambda in older builds; a memset (by kind) clears a buffer too
FILL = re.compile(r"FillFunctor|fill_kernel_cuda")
MIN_FILLS = 6  # do_bench fills at least 5 times (estimate) and once more (a timed run)
MAX_CALL = 8  # kernels in one benchmarked call: the tuned kernel and its hooks
SEED_CYCLES = 3  # consecutive identical short cycles that start a search

COMPILE_RANGE = re.compile(r" \(dynamo_timed\)$|^triton/compiler/compiler\.py\(\d+\): compile$")
LAZY_LOADING = "Lazy Function Loading"


@dataclass(frozen=True)
class Region:
    """One warm-up region on the analysed device.

    Attributes:
        cause: ``graph_capture``, ``triton_autotune``, ``compile`` or ``lazy_loading``.
        start_ns, end_ns: its span (an autotuning's from the end of the device's activity
            before its first run, since the host compiled the first config then, to the end
            of its last timed run).
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


def _name_codes(frame: pl.DataFrame) -> tuple[np.ndarray, dict[int, str]]:
    """Each kernel's name as the categorical's code (uint32; null as the largest) and
    each code's name, read once per distinct name (no kernel's name becomes a string)."""
    physical = frame["name"].to_physical()
    codes = physical.fill_null(np.iinfo(np.uint32).max).to_numpy()
    first = physical.arg_unique().to_numpy()
    named = frame["name"].gather(first).cast(pl.String).to_list()
    return codes, {int(codes[i]): n for i, n in zip(first, named, strict=True) if n is not None}


def _fills(frame: pl.DataFrame, codes: np.ndarray, names: dict[int, str]) -> np.ndarray:
    """Per kernel: it clears a buffer (an ATen fill kernel, or a memset)."""
    hits = np.array([c for c, n in names.items() if FILL.search(n)], dtype=codes.dtype)
    fill: np.ndarray = np.isin(codes, hits)
    fill |= (frame["kind"] == "memset").fill_null(False).to_numpy()
    return fill


def _repeats(codes: np.ndarray, lo: int, hi: int, call: tuple[int, ...]) -> int:
    """How many times ``call`` repeats to fill ``codes[lo:hi]`` exactly; 0 if it does not."""
    n, u = hi - lo, len(call)
    if n <= 0 or n % u or lo < 0 or hi > codes.size:
        return 0
    block = codes[lo:hi].reshape(n // u, u)
    return n // u if bool((block == np.array(call, dtype=codes.dtype)).all()) else 0


@dataclass(frozen=True)
class _Run:
    """An autotuning found on one stream: positions in the stream's sequence."""

    first: int  # first kernel of the region
    last: int  # last kernel of the region
    call: tuple[int, ...]  # the benchmarked call's name codes
    fills: int


def _benchmarked(repeats: list[int], head: int) -> bool:
    """Whether the calls between consecutive fills (``repeats``: how many times the call
    repeats between each pair) and before the first (``head``) read as ``do_bench``'s:
    five estimate runs each after a fill, then the warm-up runs with none (a repetition of
    2 or more after exactly 4 single calls: the 5th estimate run and the warm-up); or, in
    the versions that estimate without fills, the first call, 5 estimate runs and the
    warm-up before the first fill (7 or more), or between a config's last timed run and
    the next config's first fill (8 or more)."""
    if head >= 7 or any(m >= 8 for m in repeats):
        return True
    single = 0
    for m in repeats:
        if m >= 2 and single == 4:
            return True
        single = single + 1 if m == 1 else 0
    return False


def _stream_runs(codes: np.ndarray, fill: np.ndarray) -> list[_Run]:
    """The autotunings on one stream (``codes``: name codes in time order; ``fill``: per
    kernel, a buffer clear). See the module docstring for the pattern."""
    out: list[_Run] = []
    for f in np.unique(codes[fill]):
        pos = np.flatnonzero(codes == f)
        if pos.size < MIN_FILLS:
            continue
        between = np.diff(pos) - 1  # kernels between consecutive fills of this name
        done = 0  # the cycles before this one belong to a stretch already read
        for i in np.flatnonzero((between >= 1) & (between <= MAX_CALL)).tolist():
            if i < done:
                continue
            call = tuple(int(c) for c in codes[pos[i] + 1 : pos[i + 1]])
            # the cycles from i on whose content is the call repeated: fills i..j
            j, repeats = i, []
            while j < between.size:
                m = _repeats(codes, pos[j] + 1, pos[j + 1], call)
                if m == 0:
                    break
                repeats.append(m)
                j += 1
            if j - i < SEED_CYCLES and max(repeats, default=0) < 2:
                continue
            done = j
            u = len(call)
            head, back = int(pos[i]), 0  # the calls right before the first fill
            while _repeats(codes, head - u, head, call):
                head -= u
                back += 1
            last = int(pos[j])  # the last fill, and after it its one timed call
            tail = last + u if _repeats(codes, last + 1, last + 1 + u, call) else last
            if j - i + 1 >= MIN_FILLS and _benchmarked(repeats, back):
                out.append(_Run(head, tail, call, j - i + 1))
    return out


def autotune_regions(
    kernels: pl.DataFrame, ts: np.ndarray, dur: np.ndarray, u: Union
) -> list[Region]:
    """Triton autotuning on one device (``kernels``: its activity in time order, with
    ``name``, ``kind`` and ``stream``; ``ts``, ``dur``: their starts and durations, as read
    already; ``u``: the union of all of it), found per stream (the module docstring)."""
    if kernels.height == 0:
        return []
    codes, names = _name_codes(kernels)
    fill = _fills(kernels, codes, names)
    if int(fill.sum()) < MIN_FILLS:
        return []
    streams = kernels["stream"].fill_null(-1).to_numpy()
    regions: list[Region] = []
    for s in np.unique(streams[fill]):
        idx = np.flatnonzero(streams == s)
        for run in _stream_runs(codes[idx], fill[idx]):
            rows = idx[run.first : run.last + 1]
            # the tuned kernel: the call's kernel with the most time that is no fill or copy
            mine, spent = codes[rows], dur[rows]
            copy = kernels["kind"].gather(rows).is_in(["memcpy", "memset"]).to_numpy()
            best, best_ns = None, -1
            for c in set(run.call):
                hit = (mine == c) & ~fill[rows] & ~copy
                ns = int(spent[hit].sum())
                if hit.any() and ns > best_ns:
                    best, best_ns = c, ns
            if best is None:
                continue
            start = int(ts[rows[0]])
            at = int(np.searchsorted(u.starts, start, side="right")) - 1
            if at > 0 and int(u.starts[at]) == start:  # idle before: the first compile
                start = int(u.ends[at - 1])
            regions.append(
                Region(
                    "triton_autotune",
                    start,
                    int((ts[rows] + spent).max()),
                    kernel=names.get(best, ""),
                    runs=int((mine == best).sum()),
                    fills=run.fills,
                    kernels=int(rows.size),
                    gpu_ns=int(spent.sum()),
                )
            )
    return sorted(regions, key=lambda r: r.start_ns)


def host_ranges(trace: Trace) -> pl.DataFrame:
    """The host's compile ranges and the driver's lazy loads, overlapping ones of a cause
    merged: ``cause`` (``compile`` | ``lazy_loading``), ``start_ns``, ``end_ns``."""
    ev = trace.events
    schema = {"cause": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64}
    distinct = ev["name"].unique().drop_nulls().cast(pl.String).to_list()
    compiling = [n for n in distinct if COMPILE_RANGE.search(n)]
    loading = [n for n in distinct if n == LAZY_LOADING]
    if not compiling and not loading:
        return pl.DataFrame(schema=schema)
    frames = []
    for cause, wanted in (("compile", compiling), ("lazy_loading", loading)):
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


def with_regions(u: Union, regions: list[Region]) -> Union:
    """``u`` with each region's span filled, as if busy."""
    if not regions:
        return u
    a = np.array([r.start_ns for r in regions], dtype=np.int64)
    b = np.array([r.end_ns for r in regions], dtype=np.int64)
    return union(np.concatenate((u.starts, a)), np.concatenate((u.ends, b)))


def _overlapping(lo: np.ndarray, hi: np.ndarray, a: int, b: int) -> range:
    """The steps (spans ``[lo, hi)``, in order, tiling) that overlap ``[a, b)``."""
    first = int(np.searchsorted(hi, a, side="right"))
    last = int(np.searchsorted(lo, b, side="left"))
    return range(first, max(first, last))


def mark_warmup(
    table: pl.DataFrame, trace: Trace, regions: list[Region]
) -> tuple[pl.DataFrame, list[Region]]:
    """The steps with ``warmup`` (String, the last column): the cause of the warm-up
    their span holds, the first of :data:`CAUSES` where several; null for a serving step.
    Also every warm-up region with the steps it lies in: ``regions`` (graph capture's and
    autotuning's) and the host's compile and lazy-loading ranges where they cost a step
    (the union of one cause's ranges inside the step's span at least as long as the median
    step's span), one region per run of consecutive steps they cost."""
    n = table.height
    lo = table["start_ns"].to_numpy().astype(np.int64)
    hi = table["end_ns"].to_numpy().astype(np.int64)
    rank = np.full(n, len(CAUSES), dtype=np.int64)
    out: list[Region] = []
    for r in regions:
        steps = _overlapping(lo, hi, r.start_ns, r.end_ns)
        for i in steps:
            rank[i] = min(rank[i], CAUSES.index(r.cause))
        out.append(replace(r, first_step=steps[0], last_step=steps[-1]) if steps else r)
    host = host_ranges(trace) if n else pl.DataFrame()
    if host.height:
        median = float(np.median(hi - lo))
        for cause in ("compile", "lazy_loading"):
            mine = host.filter(pl.col("cause") == cause)
            if mine.height == 0:
                continue
            ranges = Union(mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy())
            costly = ranges.clipped_lengths(lo, hi) >= max(median, 1.0)
            rank[costly] = np.minimum(rank[costly], CAUSES.index(cause))
            edges = np.flatnonzero(np.diff(np.concatenate(([0], costly.astype(np.int8), [0]))))
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
    return table, sorted(out, key=lambda r: (r.start_ns, r.end_ns))


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
