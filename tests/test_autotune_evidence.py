"""Triton autotuning needs its own evidence: serving that clears a buffer before most steps,
or a host range that names benchmarking over serving work, is no autotuning.

Each trace here is planned in the test, with what its plan says: serving steps hold no
warm-up, and a real benchmark's runs and fills are counted as planted.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import GENERATED
from test_warmup import KERNEL, OTHER, F, _regions, do_bench

import traceview as tv
from fixtures.build import TraceBuilder
from fixtures.spec import ARGMAX, ATTENTION, EMBED, GEMM
from traceview.analysis.base.intervals import union
from traceview.analysis.steps.autotune import benchmark_regions

MEMSET = "Memset (Device)"
FILL_FLOAT = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"


def _trace(tmp: Path, seq: list[tuple[str, int, int]]) -> tv.Trace:
    """``seq``: (name, duration, idle after) one after another on stream 7."""
    tb = TraceBuilder()
    t = 1_000_000_000
    for name, dur, idle in seq:
        tb.kernel(name, t, dur, cat="gpu_memset" if name == MEMSET else "kernel")
        t += dur + idle
    return tv.load(tb.write(tmp / "t.json.gz"))


def _serving(clear: str, step_ns: int, every: int, pause: tuple[int, int]) -> list:
    """120 serving steps, each [a 40 us clear, embedding, attention, a GEMM of ``step_ns``,
    argmax], ``pause`` ns (range) idle after each; every ``every``-th step skips the clear
    (nothing to clear)."""
    rng = random.Random(1)
    seq: list[tuple[str, int, int]] = []
    for i in range(120):
        if i % every != every - 1:
            seq.append((clear, 40_000, 5_000))
        seq += [(EMBED, 5_000, 2_000), (ATTENTION, 20_000, 2_000), (GEMM, step_ns, 2_000)]
        seq.append((ARGMAX, 10_000, 2_000 + rng.randint(*pause)))
    return seq


@pytest.mark.parametrize(
    ("clear", "step_ns", "every"),
    [
        (MEMSET, 5_000_000, 6),
        (MEMSET, 800_000, 4),
        (MEMSET, 20_000_000, 60),
        (FILL_FLOAT, 2_000_000, 60),
    ],
    ids=["memset 5 ms 1 in 6", "memset 0.8 ms 1 in 4", "memset 20 ms 1 in 60", "fill 2 ms"],
)
def test_a_clear_before_each_serving_step_is_no_autotuning(
    tmp_path: Path, clear: str, step_ns: int, every: int
) -> None:
    """Before: every step was one Triton autotuning (a skipped clear read as a config's
    warm-up run, its timed runs the rest of the capture). The host pauses 0.3-0.6 ms
    between steps, and do_bench waits for no host between its runs."""
    trace = _trace(tmp_path, _serving(clear, step_ns, every, (300_000, 600_000)))
    assert _regions(trace) == []
    if every == 6:
        doc = tv.analyze(trace).summary.to_dict()
        assert doc["warmup"]["regions"] == [] and doc["steps"]["count"] == 120


def test_a_clear_before_each_step_in_no_config_s_layout_is_no_autotuning(
    tmp_path: Path,
) -> None:
    """Steps back to back (no host pause), a clear before six of every seven: five single
    calls, then two, and so on. do_bench's first call comes right before its 4 estimate
    runs after the first, so its layout has 4 single calls before 2, never 5. Before:
    read as autotuning."""
    assert _regions(_trace(tmp_path, _serving(MEMSET, 2_000_000, 7, (0, 0)))) == []


def test_the_timed_runs_end_at_the_first_pause(tmp_path: Path) -> None:
    """A config at warmup=5, rep=20 (33 timed runs), then serving that clears a full-size
    buffer before each call of the same kernel, with a host pause between calls: the
    region holds the planted runs and fills. Before: 100 ms of timed runs were allowed,
    and the serving calls after the config read as its."""
    kernels, runs, fills = do_bench(warmup_ns=5_000_000, rep_ns=20_000_000)
    seq = [(OTHER, 50_000, 3_000)] + [(k, d, 3_000) for k, d in kernels[:-1]]
    seq += [(kernels[-1][0], kernels[-1][1], 400_000)]  # the host goes on to serve
    seq += [(F, 500_000, 3_000), (KERNEL, 100_000, 400_000)] * 200
    assert _regions(_trace(tmp_path, seq)) == [(KERNEL, runs, fills)]


# --- Inductor's benchmarking range --------------------------------------------------------

BENCH = "CachingAutotuner.benchmark_all_configs (dynamo_timed)"
SERVE = "nvjet_tst_192x128_64x5_1x2_h_bz_coopA_NT"


def _bench_trace(tmp: Path, *, bench: bool, launches: bool) -> tuple[tv.Trace, int, int, int]:
    """20 serving GEMMs of 1 ms, launched at once, then a benchmarking range on the same
    thread that opens while they still run; under it (``bench``) Inductor's benchmarker
    for one config: 5 x (fill, call), 100 fills, 40 x (fill, call). ``launches``: the
    trace holds each kernel's launch. The trace, and the benchmark's calls, fills and
    kernels as planted."""
    tb = TraceBuilder()
    cpu = t = 1_000_000_000

    def put(name: str, dur: int) -> None:
        nonlocal cpu, t
        corr = tb.next_correlation()
        tb.kernel(name, t, dur, correlation=corr)
        if launches:
            tb.launch(name, cpu, corr, t)
        cpu += 5_000
        t += dur + 3_000

    for _ in range(20):
        put(SERVE, 1_000_000)
    a = cpu + 10_000  # the range opens while the GEMMs queued before it still run
    cpu = a + 20_000
    plan = [True, False] * 5 + [True] * 100 + [True, False] * 40 if bench else []
    for fill in plan:
        put(F, 60_000) if fill else put(KERNEL, 100_000)
    b = max(cpu, t) + 10_000  # the range closes once the device is done
    tb.cpu_op(BENCH, a, b - a, cat="user_annotation")
    cpu = t = b + 10_000
    for _ in range(5):
        put(SERVE, 1_000_000)
    fills = sum(plan)
    return tv.load(tb.write(tmp / "bench.json.gz")), len(plan) - fills, fills, len(plan)


def _bench(trace: tv.Trace) -> list[tuple[str | None, int | None, int | None, int | None]]:
    k = trace.kernels
    ts, dur = k["ts_ns"].to_numpy(), k["dur_ns"].to_numpy()
    u = union(ts, ts + dur)
    return [
        (r.kernel, r.runs, r.fills, r.kernels) for r in benchmark_regions(trace, k, ts, dur, u, [])
    ]


@pytest.mark.parametrize("launches", [True, False], ids=["launches", "no launches"])
def test_a_benchmarking_range_holds_the_benchmark_s_kernels_only(
    tmp_path: Path, launches: bool
) -> None:
    """With the launches in the trace, the region holds the kernels launched from inside
    the range: the tuned kernel, its calls and fills as planted, none of the serving GEMMs
    queued before it. Without them, the kernels that start under it, on the streams where
    the benchmark runs. Before: the serving GEMMs were counted, and named as the tuned
    kernel (the most time)."""
    trace, calls, fills, kernels = _bench_trace(tmp_path, bench=True, launches=launches)
    got = _bench(trace)
    if launches:
        assert got == [(KERNEL, calls, fills, kernels)]
    else:  # the queued GEMMs that start under the range are on the benchmark's stream
        ((kernel, runs, got_fills, n),) = got
        assert (kernel, runs, got_fills) == (KERNEL, calls, fills) and n > kernels


def test_a_benchmarking_range_over_serving_work_is_no_autotuning(tmp_path: Path) -> None:
    """Serving GEMMs start under the range, but no benchmark runs there (no call repeated
    after cache fills). Before: a region of the serving GEMM."""
    for launches in (True, False):
        trace, _, _, _ = _bench_trace(tmp_path, bench=False, launches=launches)
        assert _bench(trace) == []


def test_a_benchmarking_range_over_annotated_serving_steps_leaves_them_serving(
    tmp_path: Path,
) -> None:
    """A benchmark_all_configs range (a background thread's) over steps 6-18 of the clean
    twin, with no benchmark under it: every step serves, as in the clean twin."""
    from dataclasses import replace

    from fixtures import engine as E

    base = next(s for s in E.SCENARIOS if s.name == "seed_clean")
    tb, steps = E.build(replace(base, name="bench_over_steps"))
    a, b = steps[6].kernels[0].ts_ns, max(k.end_ns for k in steps[18].kernels)
    tb.cpu_op(BENCH, a, b - a, cat="user_annotation")
    an = tv.analyze(tb.write(tmp_path / "over.json.gz"))
    assert an.steps["warmup"].is_null().all()
    assert an.steps.height == len(steps)
    clean = tv.analyze(GENERATED / "seed_clean.json.gz").summary.to_dict()["busy"]
    assert an.summary.to_dict()["busy"]["fraction"] == pytest.approx(clean["fraction"])


def test_a_config_whose_timed_runs_keep_no_rep_ends_the_chain(tmp_path: Path) -> None:
    """A config cut to 2 timed runs (at about 0.6 ms each, no whole number of milliseconds
    makes 2), then a whole config. The first config's timed runs end where the second's
    first call is: two regions, each with its runs and fills as planted. Before: one
    region, read as one chain."""
    kernels, _, _ = do_bench()
    n_warm = next(k for k in range(len(kernels)) if kernels[11 + k][0] == F)
    cut = kernels[: 11 + n_warm + 2 * 2]  # first call, 5 estimate runs, warm-up, 2 timed
    second, runs, fills = do_bench(130_000)
    seq = [(OTHER, 50_000, 3_000)] + [(k, d, 3_000) for k, d in cut + second]
    got = _regions(_trace(tmp_path, seq + [(OTHER, 50_000, 3_000)]))
    assert got == [(KERNEL, 1 + 5 + n_warm + 2, 5 + 2), (KERNEL, runs, fills)]


def _skipping(skips: set[int], step_ns: int, whole: bool = True) -> list:
    """120 serving steps back to back (30-80 us idle after each, as async scheduling
    leaves), each [a 40 us memset, embedding, attention, a GEMM of ``step_ns``, argmax]
    (``whole``; else the GEMM alone, as a graph replay), the memset skipped at ``skips``."""
    rng = random.Random(1)
    seq: list[tuple[str, int, int]] = []
    for i in range(120):
        if i not in skips:
            seq.append((MEMSET, 40_000, 2_000 + rng.randint(0, 4_000)))
        if whole:
            seq += [(EMBED, 5_000, 2_000), (ATTENTION, 20_000, 2_000)]
        seq.append((GEMM, step_ns, 2_000 + rng.randint(30_000, 80_000)))
        if whole:
            seq[-1] = (GEMM, step_ns, 2_000)
            seq.append((ARGMAX, 10_000, 2_000 + rng.randint(30_000, 80_000)))
    return seq


@pytest.mark.parametrize(
    ("skips", "step_ns", "whole"),
    [
        (set(range(40, 51)), 500_000, True),
        (set(range(40, 47)), 1_000_000, True),
        ({3}, 500_000, True),
        ({2}, 500_000, True),
        ({3, *range(40, 51)}, 500_000, True),
        ({3}, 1_000_000, False),
    ],
    ids=["11 mid-trace", "7 mid-trace", "step 3", "step 2", "step 3 and 11", "graph step 3"],
)
def test_serving_that_skips_its_clear_back_to_back_is_no_autotuning(
    tmp_path: Path, skips: set[int], step_ns: int, whole: bool
) -> None:
    """Steps with under 100 us of idle between them, a clear before each but a few. Before:
    the skipped clears read as a config's warm-up runs (Triton 1.x's layout, or a capture
    that began in the estimate runs), its timed runs the rest of the capture (up to 100 ms
    of them), and the steps under it as warm-up: 39 serving steps, or none."""
    trace = _trace(tmp_path, _skipping(skips, step_ns, whole))
    assert _regions(trace) == []
    if skips == {3}:
        doc = tv.analyze(trace).summary.to_dict()
        assert doc["warmup"]["regions"] == [] and doc["steps"]["count"] == 120


@pytest.mark.parametrize(
    ("warmup_ns", "rep_ns"),
    [(1_000_000, 5_000_000), (10_000_000, 100_000_000), (25_000_000, 100_000_000)],
    ids=["1/5", "10/100", "25/100"],
)
def test_one_config_alone_keeps_its_timed_runs(tmp_path: Path, warmup_ns: int, rep_ns: int) -> None:
    """One config, no other in its chain to show the rep, then other work: the region holds
    every planted run and fill, as long as rep is at most REP_PER_WARMUP warmups."""
    kernels, runs, fills = do_bench(warmup_ns=warmup_ns, rep_ns=rep_ns)
    seq = [(OTHER, 50_000, 3_000)] + [(k, d, 3_000) for k, d in kernels]
    seq += [(OTHER, 50_000, 3_000)] * 3
    assert _regions(_trace(tmp_path, seq)) == [(KERNEL, runs, fills)]
