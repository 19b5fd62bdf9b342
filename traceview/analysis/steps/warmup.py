"""Warm-up inside a capture: the engine preparing, not serving (docs/metrics.md, "Warm-up is
not serving"; how each cause is recognised: docs/design.md, "Warm-up signatures").

Four causes are recognised, each by what its tool documents it doing:

- ``graph_capture``: CUDA-graph capture at start-up (:mod:`.capture`); its kernels are left
  out before steps are found, since its warm-up forwards are no engine steps.
- ``triton_autotune``: Triton's autotuner benchmarks every config of a kernel with
  ``triton.testing.do_bench`` the first time it meets a new shape key. For each config:
  one first call (the host compiles the config first, with the device idle), five estimate
  runs, plain warm-up runs for ``warmup`` ms, and timed runs for ``rep`` ms (whole
  milliseconds; 25 and 100 by default, set by ``@triton.autotune(warmup=, rep=)`` or a
  caller of ``do_bench``). Before each
  estimate and each timed run it zeroes a 256 MB buffer to clear the L2 cache
  (``cache.zero_()``: an ATen fill kernel, ``FillFunctor<int>``; older versions fill an
  ``int8`` buffer, and some estimate without fills). Each timed run sits between two CUDA
  event records on the host. The autotuner's hooks (``reset_to_zero``, ``restore_value``,
  a config's ``pre_hook``) add a few kernels around each call. On one stream this reads:
  the call ``b`` (the tuned kernel and its hooks) alternating with one cache fill (a fill
  long enough to write 256 MiB: :data:`FILL_FLOOR_NS`), ``F b F b …``, at least
  :data:`MIN_FILLS` fills, each followed by ``b`` repeated (``b^m``), where the run counts
  show: ``b^m`` with ``m ≥ 2`` right after exactly four single calls (the 5th estimate run,
  then the warm-up), or, in the versions that estimate without fills, 7 calls or more
  before the first fill or 8 or more between two fills; where the warm-up count keeps
  do_bench's relation to the estimate read back from the trace, for some whole number of
  milliseconds (:func:`_configs`); and where the call holds a kernel that is no fill. A
  region ends with its last config's timed runs. A training step that zeroes buffers
  (gradients, a bucket before each all-reduce) alternates fills with work, or fills with
  fills, but not with those counts. Inductor's own benchmarker (fills repeated without
  the call between its estimate and timed runs) is read by its host range instead
  (:func:`benchmark_regions`); ``do_bench_cudagraph`` (no fills) is not read.
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
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

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
# do_bench clears a 256 MiB buffer (``cache_size = 256 * 1024 * 1024``; 256e6 bytes in older
# versions): no device writes it faster than at 20 TB/s, above any GPU's peak memory
# bandwidth, so a shorter fill (a hook's, a small memset) clears no L2 cache
CACHE_BYTES = 256 * 1024 * 1024
FILL_FLOOR_NS = CACHE_BYTES * 1_000_000_000 // 20_000_000_000_000
WARMUP_NS = 25_000_000  # do_bench's default warmup (ms): the plain runs last about this long
REP_NS = 100_000_000  # do_bench's default rep (ms): the timed runs last about this long
MS_NS = 1_000_000  # do_bench's warmup and rep are whole milliseconds (``int``)
# how far the estimate read from the trace may be from the one do_bench's events measured
# (their records bracket the launches of the first fill and the last call): 1/20
EST_TOL = (1, 20)
MIN_FILLS = 6  # do_bench fills at least 5 times (estimate) and once more (a timed run)
MAX_CALL = 8  # kernels in one benchmarked call: the tuned kernel and its hooks
SEED_CYCLES = 3  # consecutive identical short cycles that start a search

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


def _name_codes(frame: pl.DataFrame) -> tuple[np.ndarray, dict[int, str]]:
    """Each kernel's name as the categorical's code (uint32; null as the largest) and
    each code's name, read once per distinct name (no kernel's name becomes a string)."""
    physical = frame["name"].to_physical()
    codes = physical.fill_null(np.iinfo(np.uint32).max).to_numpy()
    first = physical.arg_unique().to_numpy()
    named = frame["name"].gather(first).cast(pl.String).to_list()
    return codes, {int(codes[i]): n for i, n in zip(first, named, strict=True) if n is not None}


def _fills(
    frame: pl.DataFrame, codes: np.ndarray, names: dict[int, str], dur: np.ndarray
) -> np.ndarray:
    """Per kernel: it clears an L2-sized buffer (an ATen fill kernel, or a memset, that
    lasts at least :data:`FILL_FLOOR_NS`). A shorter fill is part of a call (the
    autotuner's ``reset_to_zero`` hook, or a serving step's own)."""
    hits = np.array([c for c, n in names.items() if FILL.search(n)], dtype=codes.dtype)
    fill: np.ndarray = np.isin(codes, hits)
    fill |= (frame["kind"] == "memset").fill_null(False).to_numpy()
    fill &= dur >= FILL_FLOOR_NS
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


def _expected(est_ns: int, budget_ns: int) -> int:
    """``do_bench``'s count for a budget: ``max(1, int(budget / estimate))``."""
    return max(1, budget_ns // max(est_ns, 1))


def _budget_fits(est_ns: int, count: int) -> bool:
    """Whether some budget of a whole, positive number of milliseconds gives ``count``
    runs at the estimate ``est_ns`` (``max(1, int(budget / estimate))``): a budget in
    ``[count, count + 1)`` estimates, or below 2 of them for a count of 1, where the
    estimate may be :data:`EST_TOL` off the one do_bench's events measured."""
    lo = 0 if count <= 1 else count * est_ns * (EST_TOL[1] - EST_TOL[0]) // EST_TOL[1]
    hi = (max(count, 1) + 1) * est_ns * (EST_TOL[1] + EST_TOL[0]) // EST_TOL[1]
    first = max(MS_NS, -(-lo // MS_NS) * MS_NS)  # the first whole millisecond at or above lo
    return first < hi


def _configs(
    repeats: list[int],
    head: int,
    ends_of: Callable[[tuple[int, int], tuple[int, int]], int],
    opens: bool = True,
) -> list[tuple[int, int]]:
    """The configs ``do_bench`` ran in a stretch, each as (the cycle after which its timed
    runs start, -1 for before the first fill; the timed runs it may make). ``repeats``:
    how many times the call repeats between each pair of consecutive fills; ``head``: the
    calls right before the first fill; ``ends_of((c, a), (d, b))``: the device time from the
    start of call ``a`` of cycle ``c`` (call -1: its fill; cycle -1: the head) to the end
    of call ``b - 1`` of cycle ``d``; ``opens``: nothing runs on the stream before the
    head (the capture may have begun in it).

    A config reads as one where the counts keep ``do_bench``'s relation: after the first
    call, five estimate runs, then ``n_warmup = max(1, int(warmup / estimate))`` plain
    runs, where the estimate is the five runs' mean time (their fills included where they
    have them), read back from the trace, and ``warmup`` is a whole number of milliseconds,
    at least 1 (:func:`_budget_fits`). Each version's layout: the 5 estimate runs each after
    a fill, so a repetition of 2 or more right after exactly 4 single calls (the 5th
    estimate run and the warm-up); or, in the versions that estimate without fills, the
    first call, the estimate and the warm-up before the first fill (7 calls or more), or
    after a config's last timed run (8 or more between two fills). A capture that began
    during the estimate runs shows fewer of them (at least 2, each after a fill, and at
    most one call before, with nothing before on the stream): their mean is the
    estimate.

    The last timed run of a config and the next config's first call share a cycle, 5
    cycles before that config's warm-up: that pair is no config of its own. The last
    config makes ``max(1, int(rep / estimate))`` timed runs, with ``rep`` the longest of:
    do_bench's default (100 ms), 4 times the warm-up read (the defaults' ratio), and the
    timed runs of each earlier config in the stretch."""
    found: list[tuple[int, int, int, bool]] = []  # (after, estimate, warm-up runs, filled)

    def keep(est_ns: int, warm: int, after: int, filled: bool) -> None:
        if _budget_fits(est_ns, warm):
            found.append((after, est_ns, warm, filled))

    if head >= 7:
        keep(ends_of((-1, 1), (-1, 6)) // 5, head - 6, -1, False)
    single = 0
    for r, m in enumerate(repeats):
        if m >= 2 and single >= 4:  # the 5 estimate runs began 4 fills back, at a fill
            keep(ends_of((r - 4, -1), (r, 1)) // 5, m - 1, r, True)
        elif m >= 2 and 1 <= r == single and head <= 1 and opens:  # began in the estimate
            keep(ends_of((0, -1), (r, 1)) // (r + 1), m - 1, r, True)
        if m >= 8 and (not found or found[-1][0] != r):  # the estimate without fills
            keep(ends_of((r, 2), (r, 7)) // 5, m - 7, r, False)
        single = single + 1 if m == 1 else 0
    starts = {after for after, _, _, filled in found if filled}
    found = [c for c in found if not (c[3] and c[0] + 5 in starts)]
    if not found:
        return []
    rep_ns = REP_NS
    for (after, _, _, _), (nxt, _, _, filled) in zip(found, found[1:], strict=False):
        last = nxt - 5 if filled else nxt  # the cycle of the config's last timed run
        if last > after:
            rep_ns = max(rep_ns, ends_of((after + 1, -1), (last, 1)))
    _, est_ns, warm, _ = found[-1]
    rep_ns = max(rep_ns, warm * est_ns * (REP_NS // WARMUP_NS))
    return [(after, _expected(est, rep_ns)) for after, est, _, _ in found]


def _span(
    ts: np.ndarray,
    end: np.ndarray,
    pos: np.ndarray,
    i: int,
    head: int,
    u: int,
    a: tuple[int, int],
    b: tuple[int, int],
) -> int:
    """The device time from call ``a[1]`` of cycle ``a[0]`` to the end of call ``b[1] - 1``
    of cycle ``b[0]`` (cycle ``c``: the calls after fill ``pos[i + c]``, -1: the ``head``
    calls before the first; call -1: the cycle's fill; ``u``: kernels a call)."""

    def at(cycle: int, k: int) -> int:
        base = head if cycle < 0 else int(pos[i + cycle]) + 1
        return base + k * u if k >= 0 else base - 1

    return int(end[at(*b) - 1] - ts[at(*a)])


def _stream_runs(
    codes: np.ndarray, fill: np.ndarray, ts: np.ndarray, end: np.ndarray
) -> list[_Run]:
    """The autotunings on one stream (``codes``: name codes in time order; ``fill``: per
    kernel, a cache clear; ``ts``, ``end``: each kernel's start and end). See the module
    docstring for the pattern; a stretch ends with its last config's timed runs
    (:func:`_configs`: as many as ``do_bench`` makes, 2% more for jitter)."""
    out: list[_Run] = []
    for f in np.unique(codes[fill]):
        pos = np.flatnonzero((codes == f) & fill)  # a hook's short fill is part of a call
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

            spans = partial(_span, ts, end, pos, i, head, u)
            configs = _configs(repeats, back, spans, opens=head == 0)
            if not configs:
                continue
            after_fill = int(pos[j]) + 1  # calls after the last fill, to the stream's end:
            if codes.size - after_fill > u and _repeats(codes, after_fill, codes.size, call):
                # the capture stopped in a config's warm-up runs
                if j - i + 1 >= MIN_FILLS:
                    out.append(_Run(head, codes.size - 1, call, j - i + 1))
                continue
            after, timed = configs[-1]  # the last config's timed runs, and a little jitter
            j = min(j, i + after + timed + timed // 50 + 1)  # the last timed run's fill
            last = int(pos[j])  # the last fill, and after it its one timed call
            tail = last + u if _repeats(codes, last + 1, last + 1 + u, call) else last
            if j - i + 1 >= MIN_FILLS:
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
    fill = _fills(kernels, codes, names, dur)
    if int(fill.sum()) < MIN_FILLS:
        return []
    streams = kernels["stream"].fill_null(-1).to_numpy()
    filling = {c for c, n in names.items() if FILL.search(n)}
    regions: list[Region] = []
    for s in np.unique(streams[fill]):
        idx = np.flatnonzero(streams == s)
        for run in _stream_runs(codes[idx], fill[idx], ts[idx], ts[idx] + dur[idx]):
            rows = idx[run.first : run.last + 1]
            # the tuned kernel: the call's kernel with the most time that is no fill (of any
            # length: a hook's) or copy; a call of fills alone (zero_grad's, back to back)
            # benchmarks nothing
            mine, spent = codes[rows], dur[rows]
            copy = kernels["kind"].gather(rows).is_in(["memcpy", "memset"]).to_numpy()
            best, best_ns = None, -1
            for c in set(run.call) - filling:
                hit = (mine == c) & ~copy
                ns = int(spent[hit].sum())
                if hit.any() and ns > best_ns:
                    best, best_ns = c, ns
            if best is None:
                continue
            first = start = int(ts[rows[0]])
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
                    first_ns=first,
                )
            )
    return sorted(regions, key=lambda r: r.start_ns)


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


def benchmark_regions(
    trace: Trace,
    kernels: pl.DataFrame,
    ts: np.ndarray,
    dur: np.ndarray,
    u: Union,
    found: list[Region],
) -> list[Region]:
    """Inductor's runtime autotuning on one device: each host range that names
    benchmarking (:data:`BENCH_RANGE`, merged) under which the device benchmarks, that
    is, runs a kernel that is no fill or copy (``kernels``: the device's activity in time
    order; ``ts``, ``dur``: their starts and durations; ``u``: their union). Its region
    holds the device activity that starts under the range: the tuned kernel (the one with
    the most time, no fill or copy), its runs, and the fills (ATen fills and memsets:
    cache clears and hooks). It spans from the range's start, or the end of the device's
    activity before its first kernel where that is later (the device's work queued
    before), to its last kernel's end. A range an autotuning in ``found`` overlaps is
    read there already."""
    host = host_ranges(trace)
    host = host.filter(pl.col("cause") == "benchmark") if host.height else host
    if host.height == 0 or kernels.height == 0:
        return []
    codes, names = _name_codes(kernels)
    filling = np.isin(codes, np.array([c for c, n in names.items() if FILL.search(n)]))
    kind = kernels["kind"]
    filling |= (kind == "memset").fill_null(False).to_numpy()
    work = ~filling & ~kind.is_in(["memcpy", "memset"]).fill_null(False).to_numpy()
    out: list[Region] = []
    for a, b in host.select("start_ns", "end_ns").iter_rows():
        if any(r.device_start_ns < b and r.end_ns > a for r in found):
            continue
        i, j = int(np.searchsorted(ts, a, side="left")), int(np.searchsorted(ts, b, side="left"))
        if not work[i:j].any():
            continue
        mine, spent = codes[i:j][work[i:j]], dur[i:j][work[i:j]]
        per = np.bincount(np.unique(mine, return_inverse=True)[1], weights=spent)
        best = int(np.unique(mine)[int(np.argmax(per))])
        first = int(ts[i])
        at = int(np.searchsorted(u.starts, first, side="right")) - 1
        start = first
        if at > 0 and int(u.starts[at]) == first:  # idle before its first kernel
            start = max(int(a), int(u.ends[at - 1]))
        out.append(
            Region(
                "triton_autotune",
                min(start, first),
                int((ts[i:j] + dur[i:j]).max()),
                kernel=names.get(best, ""),
                runs=int((codes[i:j] == best).sum()),
                fills=int(filling[i:j].sum()),
                kernels=j - i,
                gpu_ns=int(dur[i:j].sum()),
                first_ns=first,
            )
        )
    return out


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
