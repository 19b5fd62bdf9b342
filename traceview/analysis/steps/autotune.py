"""Triton autotuning, read by its kernels (docs/design.md, "Warm-up signatures"; the
regions it finds are marked in the steps by :mod:`.warmup`).

Triton's autotuner benchmarks every config of a kernel with
``triton.testing.do_bench`` the first time it meets a new shape key. For each config:
one first call (the host compiles the config first, with the device idle), five estimate
runs, plain warm-up runs for ``warmup`` ms, and timed runs for ``rep`` ms (whole
milliseconds; 25 and 100 by default, set by ``@triton.autotune(warmup=, rep=)`` or a
caller of ``do_bench``). Before each estimate and each timed run it zeroes a 256 MB
buffer to clear the L2 cache (``cache.zero_()``: an ATen fill kernel,
``FillFunctor<int>``; older versions fill an ``int8`` buffer, and some estimate without
fills). Each timed run sits between two CUDA
event records on the host. The autotuner's hooks (``reset_to_zero``, ``restore_value``,
a config's ``pre_hook``) add a few kernels around each call. On one stream this reads:
the call ``b`` (the tuned kernel and its hooks) alternating with one cache fill (a fill
long enough to write 256 MiB: :data:`FILL_FLOOR_NS`), ``F b F b …``, at least
:data:`MIN_FILLS` fills, each followed by ``b`` repeated (``b^m``), where the run counts
show: ``b^m`` with ``m ≥ 2`` right after exactly four single calls (the 5th estimate run,
then the warm-up), or, in the versions that estimate without fills, 7 calls or more
before the first fill or 8 or more between two fills; where the warm-up count keeps
do_bench's relation to the estimate read back from the trace, for some whole number of
milliseconds (:func:`_configs`); where the runs follow each other with no pause
(:data:`HOST_NS`), but after the first call and after the estimate runs, where do_bench
waits for the device; and where the call holds a kernel that is no fill. A region is one
chain of configs, and ends with its last config's timed runs. A training step that zeroes buffers
(gradients, a bucket before each all-reduce) alternates fills with work, or fills with
fills, but not with those counts. Inductor's own benchmarker (fills repeated without
the call between its estimate and timed runs) is read by its host range instead
(:func:`benchmark_regions`); ``do_bench_cudagraph`` (no fills) is not read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import polars as pl

from traceview.analysis.base.intervals import Union, union
from traceview.analysis.base.launches import launches_within
from traceview.analysis.steps.warmup import BENCH_RANGE, Region
from traceview.model import Trace

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
# the longest rep, in warmups, read as do_bench's: 4 by default (25 and 100 ms), 5 at most
# in the callers known (1 and 5, 100 and 500), twice that for callers unseen. It bounds
# the timed runs of a config whose rep no earlier config in its chain shows
REP_PER_WARMUP = 10
MS_NS = 1_000_000  # do_bench's warmup and rep are whole milliseconds (``int``)
# how far the estimate read from the trace may be from the one do_bench's events measured
# (their records bracket the launches of the first fill and the last call): 1/20
EST_TOL = (1, 20)
MIN_FILLS = 6  # do_bench fills at least 5 times (estimate) and once more (a timed run)
# do_bench issues its runs without waiting for the device, but after the first call and
# after the estimate runs: between two runs the device idles at most for the host's cost to
# issue one (a fill, two event records, the call: tens of microseconds on a slow host). A
# longer idle is a pause: the host waited, as a serving loop does between steps
HOST_NS = 100_000
MAX_CALL = 8  # kernels in one benchmarked call: the tuned kernel and its hooks
SEED_CYCLES = 3  # consecutive identical short cycles that start a search


def _name_codes(frame: pl.DataFrame) -> tuple[np.ndarray, dict[int, str]]:
    """Each kernel's name as the categorical's code (uint32; null as the largest) and
    each code's name, read once per distinct name (no kernel's name becomes a string)."""
    physical = frame["name"].to_physical()
    codes = physical.fill_null(np.iinfo(np.uint32).max).to_numpy()
    first = physical.arg_unique().to_numpy()
    named = frame["name"].gather(first).cast(pl.String).to_list()
    return codes, {int(codes[i]): n for i, n in zip(first, named, strict=True) if n is not None}


def _fill_codes(names: dict[int, str]) -> np.ndarray:
    """The name codes of ATen's fill kernels (:data:`FILL`), whatever their length."""
    return np.array([c for c, n in names.items() if FILL.search(n)], dtype=np.uint32)


def _fills(
    frame: pl.DataFrame, codes: np.ndarray, names: dict[int, str], dur: np.ndarray
) -> np.ndarray:
    """Per kernel: it clears an L2-sized buffer (an ATen fill kernel, or a memset, that
    lasts at least :data:`FILL_FLOOR_NS`). A shorter fill is part of a call (the
    autotuner's ``reset_to_zero`` hook, or a serving step's own)."""
    fill: np.ndarray = np.isin(codes, _fill_codes(names))
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


def _budget_range(est_ns: int, count: int) -> tuple[int, int]:
    """The budgets (ns) that give ``count`` runs at the estimate ``est_ns``
    (``max(1, int(budget / estimate))``), ``[lo, hi)``: ``[count, count + 1)``
    estimates, or below 2 of them for a count of 1, where the estimate may be
    :data:`EST_TOL` off the one do_bench's events measured."""
    lo = 0 if count <= 1 else count * est_ns * (EST_TOL[1] - EST_TOL[0]) // EST_TOL[1]
    hi = (max(count, 1) + 1) * est_ns * (EST_TOL[1] + EST_TOL[0]) // EST_TOL[1]
    return lo, hi


def _warmup_ceiling(est_ns: int, count: int) -> int:
    """The longest whole-millisecond warmup (ns, at least 1 ms) that gives ``count``
    warm-up runs at the estimate ``est_ns`` (:func:`_budget_range`)."""
    return max(MS_NS, (_budget_range(est_ns, count)[1] - 1) // MS_NS * MS_NS)


def _budget_fits(est_ns: int, count: int) -> bool:
    """Whether some budget of a whole, positive number of milliseconds gives ``count``
    runs at the estimate ``est_ns`` (``max(1, int(budget / estimate))``): a budget in
    ``[count, count + 1)`` estimates, or below 2 of them for a count of 1, where the
    estimate may be :data:`EST_TOL` off the one do_bench's events measured."""
    lo, hi = _budget_range(est_ns, count)
    first = max(MS_NS, -(-lo // MS_NS) * MS_NS)  # the first whole millisecond at or above lo
    return first < hi


Pos = tuple[int, int]  # (cycle, call): call ``k`` of cycle ``c`` (the calls after fill ``c``)


@dataclass(frozen=True)
class _Config:
    """One config ``do_bench`` ran, as read from the run counts (positions as :data:`Pos`)."""

    after: int  # the cycle after which its timed runs start (-1: before the first fill)
    est_ns: int  # its estimate, read back from the trace
    warm: int  # its warm-up runs
    filled: bool  # its estimate runs each follow a fill
    warm_from: Pos  # its first warm-up run
    first: Pos  # its first kernel in the region


@dataclass(frozen=True)
class _Chain:
    """Configs run one after another, the timed runs its last may make, and the cycle of
    that config's last timed run where the chain breaks (None: where the stretch says)."""

    configs: list[_Config]
    timed: int  # the most timed runs its last config may make, where they end by themselves
    went_on: int | None  # its timed runs where the call and fills go on after (None: no do_bench)
    stop: int | None


def _configs(
    repeats: list[int],
    head: int,
    ends_of: Callable[[Pos, Pos], int],
    calm: Callable[[Pos, Pos], bool],
    opens: bool = True,
) -> list[_Chain]:
    """The configs ``do_bench`` ran in a stretch, in chains, each with the timed runs its
    last config may make. ``repeats``: how many times the call repeats between each pair of
    consecutive fills; ``head``: the calls right before the first fill;
    ``ends_of((c, a), (d, b))``: the device time from the start of call ``a`` of cycle ``c``
    (call -1: its fill; cycle -1: the head) to the end of call ``b - 1`` of cycle ``d``;
    ``calm(a, b)``: the device runs the kernels after position ``a``'s first one, up to
    position ``b``'s first, with no pause (:data:`HOST_NS`); ``opens``: nothing runs on the
    stream before the head (the capture may have begun in it).

    A config reads as one where the counts keep ``do_bench``'s relation: after the first
    call, five estimate runs, then ``n_warmup = max(1, int(warmup / estimate))`` plain
    runs, where the estimate is the five runs' mean time (their fills included where they
    have them), read back from the trace, and ``warmup`` is a whole number of milliseconds,
    at least 1 (:func:`_budget_fits`). Each version's layout: the 5 estimate runs each after
    a fill, so a repetition of 2 or more right after exactly 4 single calls (the 5th
    estimate run and the warm-up), with the first call right before them: the last of the
    head, or the second of a repetition of exactly 2 (the last timed run of the config
    before); or, in the versions that estimate without fills, the first call, the estimate
    and the warm-up before the first fill (7 calls or more), or after a config's last timed
    run (8 or more between two fills). A capture that began during the estimate runs shows
    fewer of them (at least 2, each after a fill, and at most one call before, with nothing
    before on the stream): their mean is the estimate. Its estimate runs, and its warm-up
    runs up to the first timed run, follow each other with no pause (do_bench waits for the
    device only after the first call and after the estimate runs).

    The last timed run of a config and the next config's first call share a cycle, 5
    cycles before that config's warm-up: that pair is no config of its own. Each config but
    the last makes ``max(1, int(rep / estimate))`` timed runs, for a ``rep`` of a whole
    number of milliseconds, at least its warmup and at most :data:`REP_PER_WARMUP` times
    it (the longest warmup that gives its warm-up count), with no pause among them; a
    chain ends at the first config that does not (its timed runs end where the next
    config's first call is), and the next config opens another. The last config of a chain
    makes at most ``max(1, int(rep / estimate))`` timed runs, with ``rep`` the longest
    timed runs of an earlier config in the chain, or, with none, :data:`REP_PER_WARMUP`
    times its warmup. Where its fills and calls go on past those with no pause, the rep
    is no bound: it is read as do_bench's default (100 ms) where its warm-up count fits
    the default warmup (25 ms), or the rep an earlier config shows; else it is no
    ``do_bench`` (:attr:`_Chain.went_on`)."""
    found: list[_Config] = []

    def keep(
        est_ns: int, warm: int, after: int, filled: bool, est: Pos, w: Pos, first: Pos
    ) -> None:
        if _budget_fits(est_ns, warm) and calm(est, w) and calm(w, (after + 1, 0)):
            found.append(_Config(after, est_ns, warm, filled, w, first))

    if head >= 7:
        keep(ends_of((-1, 1), (-1, 6)) // 5, head - 6, -1, False, (-1, 1), (-1, 6), (-1, 0))
    single = 0
    for r, m in enumerate(repeats):
        led = (r == 4 and head >= 1) or (r >= 5 and repeats[r - 5] == 2)  # the first call
        if m >= 2 and single == 4 and led:  # the 5 estimate runs began 4 fills back, at a fill
            first = (-1, 0) if r == 4 else (r - 5, 1)
            keep(ends_of((r - 4, -1), (r, 1)) // 5, m - 1, r, True, (r - 4, -1), (r, 1), first)
        elif m >= 2 and 1 <= r == single <= 4 and head <= 1 and opens:  # began in the estimate
            est = ends_of((0, -1), (r, 1)) // (r + 1)
            keep(est, m - 1, r, True, (0, -1), (r, 1), (-1, 0))
        if m >= 8 and (not found or found[-1].after != r):  # the estimate without fills
            keep(ends_of((r, 2), (r, 7)) // 5, m - 7, r, False, (r, 2), (r, 7), (r, 1))
        single = single + 1 if m == 1 else 0
    starts = {c.after for c in found if c.filled}
    found = [c for c in found if not (c.filled and c.after + 5 in starts)]
    if not found:
        return []
    chains: list[_Chain] = []
    chain, rep_ns, stop = found[:1], 0, None
    for a, b in zip(found, [*found[1:], None], strict=True):
        last = -1 if b is None else b.after - 5 if b.filled else b.after  # a's last timed run
        n = last - a.after
        if (
            b is not None
            and a.warm
            <= n
            <= _expected(a.est_ns, _warmup_ceiling(a.est_ns, a.warm) * REP_PER_WARMUP)
            and _budget_fits(a.est_ns, n)
            and calm(a.warm_from, (last, 1))
        ):
            rep_ns = max(rep_ns, ends_of((a.after + 1, -1), (last, 1)))
            chain.append(b)
            continue
        if b is not None and n >= 1:  # a's timed runs end where b's first call is
            stop = last
        went_on: int | None
        if rep_ns:  # an earlier config of the chain shows the rep
            timed = went_on = _expected(a.est_ns, rep_ns)
        else:  # at most REP_PER_WARMUP times its warmup; do_bench's default where it goes on
            timed = _expected(a.est_ns, _warmup_ceiling(a.est_ns, a.warm) * REP_PER_WARMUP)
            lo, hi = _budget_range(a.est_ns, a.warm)
            went_on = _expected(a.est_ns, REP_NS) if lo <= WARMUP_NS < hi else None
        chains.append(_Chain(chain, timed, went_on, stop))
        if b is not None:
            chain, rep_ns, stop = [b], 0, None
    return chains


def _at(pos: np.ndarray, i: int, head: int, u: int, p: Pos) -> int:
    """The index of position ``p``'s first kernel (cycle ``c``: the calls after fill
    ``pos[i + c]``, -1: the head calls from ``head`` on; call -1: the cycle's fill; ``u``:
    kernels a call)."""
    cycle, k = p
    base = head if cycle < 0 else int(pos[i + cycle]) + 1
    return base + k * u if k >= 0 else base - 1


def _span(
    ts: np.ndarray, end: np.ndarray, pos: np.ndarray, i: int, head: int, u: int, a: Pos, b: Pos
) -> int:
    """The device time from position ``a``'s start to the end of call ``b[1] - 1`` of
    cycle ``b[0]`` (:func:`_at`)."""
    return int(end[_at(pos, i, head, u, b) - 1] - ts[_at(pos, i, head, u, a)])


def _calm(paused: np.ndarray, pos: np.ndarray, i: int, head: int, u: int, a: Pos, b: Pos) -> bool:
    """No pause before any kernel after position ``a``'s first, up to ``b``'s first
    (``paused[k]``: the pauses before kernel ``k``, cumulated)."""
    lo = _at(pos, i, head, u, a) + 1
    hi = min(_at(pos, i, head, u, b), paused.size - 1)
    return lo >= hi or int(paused[hi] - paused[lo]) == 0


def _chain_run(
    codes: np.ndarray,
    pos: np.ndarray,
    i: int,
    j: int,
    head: int,
    u: int,
    call: tuple[int, ...],
    chain: _Chain,
    calm: Callable[[Pos, Pos], bool],
) -> _Run | None:
    """The region of one chain of configs in the stretch of fills ``pos[i..j]`` (its first
    config's first kernel to its last config's last timed run), if it has
    :data:`MIN_FILLS` fills."""
    first = _at(pos, i, head, u, chain.configs[0].first)
    # the fills before the first config's first kernel are none of its own
    skipped = int(np.searchsorted(pos[i:], first))
    after_fill = int(pos[j]) + 1  # calls after the last fill, to the stream's end:
    if (
        chain.stop is None
        and codes.size - after_fill > u
        and _repeats(codes, after_fill, codes.size, call)
    ):  # the capture stopped in a config's warm-up runs
        if j - i + 1 - skipped >= MIN_FILLS:
            return _Run(first, codes.size - 1, call, j - i + 1 - skipped)
        return None
    last, timed = chain.configs[-1], chain.timed  # its timed runs (a little jitter),
    if chain.stop is not None:
        j = min(j, i + chain.stop)
    cap = i + last.after + timed + timed // 50 + 1
    if j > cap and calm(last.warm_from, (cap + 1 - i, 1)):  # the runs go on past any rep
        if chain.went_on is None:
            return None
        timed = chain.went_on
        cap = i + last.after + timed + timed // 50 + 1
    j = min(j, cap)  # up to the first pause
    while j > i + last.after + 1 and not calm(last.warm_from, (j - i, 1)):
        j -= 1
    stop = int(pos[j])  # the last fill, and after it its one timed call
    tail = stop + u if _repeats(codes, stop + 1, stop + 1 + u, call) else stop
    if j - i + 1 - skipped >= MIN_FILLS:
        return _Run(first, tail, call, j - i + 1 - skipped)
    return None


def _stream_runs(
    codes: np.ndarray, fill: np.ndarray, ts: np.ndarray, end: np.ndarray
) -> list[_Run]:
    """The autotunings on one stream (``codes``: name codes in time order; ``fill``: per
    kernel, a cache clear; ``ts``, ``end``: each kernel's start and end). See the module
    docstring for the pattern; a stretch ends with its last config's timed runs
    (:func:`_configs`: as many as ``do_bench`` makes, 2% more for jitter), or at the first
    pause among them."""
    out: list[_Run] = []
    idle = np.zeros(codes.size, dtype=np.int64)
    if codes.size > 1:  # the device's idle before each kernel (overlaps: none)
        idle[1:] = ts[1:] - np.maximum.accumulate(end)[:-1]
    paused = np.concatenate(([0], np.cumsum(idle > HOST_NS)))
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
            calm = partial(_calm, paused, pos, i, head, u)
            for chain in _configs(repeats, back, spans, calm, opens=head == 0):
                run = _chain_run(codes, pos, i, j, head, u, call, chain, calm)
                if run is not None:
                    out.append(run)
    return out


def _lead_in(u: Union, first: int) -> int:
    """Where a region whose first kernel starts at ``first`` starts: the end of the
    device's activity before, where ``first`` follows an idle gap of ``u`` (the host
    compiling the first config); else ``first``."""
    at = int(np.searchsorted(u.starts, first, side="right")) - 1
    return int(u.ends[at - 1]) if at > 0 and int(u.starts[at]) == first else first


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
    filling = set(_fill_codes(names).tolist())
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
            first = int(ts[rows[0]])
            regions.append(
                Region(
                    "triton_autotune",
                    _lead_in(u, first),
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


def _bench_ranges(trace: Trace) -> pl.DataFrame:
    """The host's benchmarking ranges (:data:`BENCH_RANGE`), nested ones merged per thread:
    ``pid``, ``tid``, ``a0``, ``a1`` (ns)."""
    ev = trace.events
    schema = {"pid": pl.Int64, "tid": pl.Int64, "a0": pl.Int64, "a1": pl.Int64}
    names = [n for n in ev["name"].unique().drop_nulls().cast(pl.String) if BENCH_RANGE.search(n)]
    sel = ev.filter(pl.col("name").cast(pl.String).is_in(names) & (pl.col("dur_ns") > 0))
    frames = []
    for (pid, tid), mine in sel.group_by(["pid", "tid"], maintain_order=True):
        a = mine["ts_ns"].to_numpy().astype(np.int64)
        merged = union(a, a + mine["dur_ns"].to_numpy().astype(np.int64))
        frames.append(
            pl.DataFrame(
                {"pid": pid, "tid": tid, "a0": merged.starts, "a1": merged.ends}, schema=schema
            )
        )
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)


def _benchmarked(
    codes: np.ndarray, clear: np.ndarray, streams: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, set[int]]:
    """Of the kernels ``rows`` (in time order), those on the streams where a benchmarker
    ran: one call (a run of 1 to :data:`MAX_CALL` kernels, none a cache clear) repeated
    right after a cache clear (``clear``) at least :data:`MIN_FILLS` times; and the name
    codes of those calls."""
    keep = np.zeros(rows.size, dtype=bool)
    called: set[int] = set()
    for s in np.unique(streams[rows]):
        on = np.flatnonzero(streams[rows] == s)
        mine, cleared = codes[rows[on]], clear[rows[on]]
        at = np.flatnonzero(cleared)
        if at.size < MIN_FILLS:
            continue
        ends = np.append(at[1:], mine.size)
        calls: dict[tuple[int, ...], int] = {}
        for lo, hi in zip(at + 1, ends, strict=True):
            if 1 <= hi - lo <= MAX_CALL:
                call = tuple(int(c) for c in mine[lo:hi])
                calls[call] = calls.get(call, 0) + 1
        if calls and max(calls.values()) >= MIN_FILLS:
            keep[on] = True
            called.update(max(calls.items(), key=lambda kv: kv[1])[0])
    return rows[keep], called


def benchmark_regions(
    trace: Trace,
    kernels: pl.DataFrame,
    ts: np.ndarray,
    dur: np.ndarray,
    u: Union,
    found: list[Region],
) -> list[Region]:
    """Inductor's runtime autotuning on one device: each host range that names
    benchmarking (:data:`BENCH_RANGE`, merged per thread) under which the device runs its
    benchmarker's pattern (``kernels``: the device's activity in time order; ``ts``,
    ``dur``: their starts and durations; ``u``: their union). The range's kernels are those
    launched from inside it (by the correlation of each kernel to its launch), where its
    thread's launches are in the trace; else those that start under it. The pattern: on a
    stream, one call (the tuned kernel and its hooks, no cache clear) repeated right after
    a cache clear (:func:`_fills`) at least :data:`MIN_FILLS` times, as Inductor's
    benchmarker and ``do_bench`` run it. Its region holds the range's kernels on those
    streams: the tuned kernel (the repeated call's kernel with the most time, no fill or
    copy), its runs, and the fills (ATen fills and memsets: cache clears and hooks). It
    spans from the range's start, or the end of the device's activity before its first
    kernel where that is later (the device's work queued before), to its last kernel's
    end. A range an autotuning in
    ``found`` overlaps is read there already."""
    host = _bench_ranges(trace)
    if host.height == 0 or kernels.height == 0:
        return []
    codes, names = _name_codes(kernels)
    clear = _fills(kernels, codes, names, dur)
    filling = np.isin(codes, _fill_codes(names))
    kind = kernels["kind"]
    filling |= (kind == "memset").fill_null(False).to_numpy()
    work = ~filling & ~kind.is_in(["memcpy", "memset"]).fill_null(False).to_numpy()
    streams = kernels["stream"].fill_null(-1).to_numpy()
    corr = kernels["correlation"].fill_null(-1).to_numpy()
    launched, row = launches_within(trace, host)
    threads = set(
        trace.events.filter(
            pl.col("event_kind").is_in(["runtime", "driver"]) & pl.col("correlation").is_not_null()
        )
        .select("pid", "tid")
        .unique()
        .iter_rows()
    )
    out: list[Region] = []
    for n, (pid, tid, a, b) in enumerate(host.iter_rows()):
        if any(r.device_start_ns < b and r.end_ns > a for r in found):
            continue
        if (pid, tid) in threads:  # the kernels launched from inside the range
            rows = np.flatnonzero(np.isin(corr, launched[row == n]) & (corr >= 0))
        else:  # the kernels that start under it
            i, j = np.searchsorted(ts, a, side="left"), np.searchsorted(ts, b, side="left")
            rows = np.arange(int(i), int(j))
        rows, called = _benchmarked(codes, clear, streams, rows)
        tuned = work[rows] & np.isin(codes[rows], np.array(sorted(called), dtype=codes.dtype))
        if not tuned.any():
            continue
        mine, spent = codes[rows][tuned], dur[rows][tuned]
        per = np.bincount(np.unique(mine, return_inverse=True)[1], weights=spent)
        best = int(np.unique(mine)[int(np.argmax(per))])
        first = int(ts[rows[0]])
        out.append(
            Region(
                "triton_autotune",
                min(max(int(a), _lead_in(u, first)), first),  # the idle before, in the range
                int((ts[rows] + dur[rows]).max()),
                kernel=names.get(best, ""),
                runs=int((codes[rows] == best).sum()),
                fills=int(filling[rows].sum()),
                kernels=int(rows.size),
                gpu_ns=int(dur[rows].sum()),
                first_ns=first,
            )
        )
    return out
