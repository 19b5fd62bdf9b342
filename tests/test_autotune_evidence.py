"""Triton autotuning needs its own evidence: serving that clears a buffer before most steps
is no autotuning.

Each trace here is planned in the test, with what its plan says: serving steps hold no
warm-up, and a real benchmark's runs and fills are counted as planted.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from test_warmup import KERNEL, OTHER, F, _regions, do_bench

import traceview as tv
from fixtures.build import TraceBuilder
from fixtures.spec import ARGMAX, ATTENTION, EMBED, GEMM

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
