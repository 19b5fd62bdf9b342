"""Warm-up is not serving (issue 50): Triton autotuning, compilation and lazy loading inside
a capture are found, their steps keep their rows and are marked, and every serving figure
leaves them out; no trace without warm-up reports any.

The seed twins (fixtures/engine.py: ``seed_autotune``, ``seed_autotune_bursts``,
``seed_clean``) plant the seed's capture: Triton's ``do_bench`` run for 14 configs of
``chunk_fwd_kernel_o`` in steps 2-4 (fixtures/autotune.py). The other traces here are
planned in the tests, with what their plan says.
"""

from __future__ import annotations

import dataclasses
import json
import random
import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import GENERATED, SAMPLE_BYTES, real_traces, truth
from test_analysis import check_against_truth

import traceview as tv
from fixtures.autotune import COMPILE_NS, FILL_NAME
from fixtures.autotune import autotune as autotune_configs
from fixtures.build import Event, TraceBuilder
from fixtures.engine import SCENARIOS, K, PlannedKernel, build, plan_steps
from fixtures.truth import truth as plan_truth
from traceview.analysis.base.intervals import union
from traceview.cli import cli
from traceview.errors import CaptureOnlyError

SEED = GENERATED / "seed_autotune.json.gz"
CLEAN = GENERATED / "seed_clean.json.gz"
TUNED = K["o"][0]


# --- the seed twins: every serving figure is the planted serving figure --------------------


@pytest.mark.parametrize("name", ["seed_autotune", "seed_autotune_bursts"])
def test_the_seed_twins_figures_are_their_serving_steps(name: str) -> None:
    """Before: every figure was drawn over the autotuning too (steps 2-4 in phases and
    cadence, the fills 67% of the GPU time, busy 37%); the planted truth leaves them out."""
    t = truth(name)
    a = tv.analyze(GENERATED / f"{name}.json.gz")
    doc = a.summary.to_dict()
    check_against_truth(doc, t)
    assert doc["steps"]["method"] == ("bursts" if name.endswith("bursts") else "annotations")
    assert doc["warmup"] == t["warmup"]
    assert a.steps["warmup"].to_list() == [s["warmup"] for s in t["steps"]]
    assert a.steps["warmup"].to_list()[2:5] == ["triton_autotune"] * 3
    assert a.steps["phase"].to_list() == [s["phase"] for s in t["steps"]]
    # one autotuning per new shape key: one in each of steps 2, 3 and 4
    regions = [(r["kernel"], r["first_step"], r["last_step"]) for r in doc["warmup"]["regions"]]
    assert regions == [(TUNED, 2, 2), (TUNED, 3, 3), (TUNED, 4, 4)]
    # the steps that hold warm-up keep their rows, all they ran counted in them
    assert a.steps.height == 21 == doc["steps"]["count"] + doc["warmup"]["steps"]
    assert a.steps["kernels"].to_list() == [s["kernels"] for s in t["steps"]]
    # no idle interval of theirs is listed: the compile pauses (150 ms and more) are none
    held = a.steps.filter(pl.col("warmup").is_not_null()).select("start_ns", "end_ns")
    for lo, hi in held.iter_rows():
        assert a.idle.filter(pl.col("start_ns").is_between(lo, hi, closed="left")).height == 0
    assert (a.idle["end_ns"] - a.idle["start_ns"]).max() < COMPILE_NS[0]


def test_the_warmup_is_named_on_the_screen_in_one_line() -> None:
    regions = truth("seed_autotune")["warmup"]["regions"]
    runs, fills = sum(r["runs"] for r in regions), sum(r["fills"] for r in regions)
    out = CliRunner().invoke(cli, ["summarize", str(SEED)])
    assert out.exit_code == 0, out.output
    said = " ".join(out.stdout.split())  # rich wraps a cell at the terminal's width
    assert (
        f"warm-up Triton autotuning of chunk_fwd_kernel_o in steps 2–4 "
        f"({runs:,} runs, {fills:,} cache fills) left out"
    ) in said
    assert "all │ 0–20 │" in said  # the steps' rows, warm-up steps' among them


def test_keep_warmup_keeps_the_steps_in_every_figure() -> None:
    """``AnalysisConfig(keep_warmup=True)`` (``--keep-warmup``): the steps are marked all the
    same, and every figure holds them (the fills' time among the families)."""
    t = truth("seed_autotune")
    kept = tv.analyze(SEED, tv.AnalysisConfig(keep_warmup=True))
    doc = kept.summary.to_dict()
    assert doc["warmup"]["kept"] is True and doc["warmup"]["steps"] == 3
    assert doc["steps"]["count"] == 21
    assert kept.steps["warmup"].to_list() == [s["warmup"] for s in t["steps"]]
    assert kept.steps["phase"].null_count() == 0
    _, planned = build(next(sc for sc in SCENARIOS if sc.name == "seed_autotune"))
    every = [k for s in planned for k in s.kernels]  # the warm-up steps' too
    fams = {f["family"]: f["count"] for f in doc["families"]}
    assert fams["elementwise"] == sum(k.family == "elementwise" for k in every)
    fills = sum(r["fills"] for r in t["warmup"]["regions"])
    assert fams["elementwise"] > t["families"]["elementwise"]["count"] + fills
    assert doc["busy"]["window_ns"] == t["end_ns"] - t["start_ns"]
    # the cost's rows too: every prompt-carrying step, each with a time to the next
    assert doc["cost"]["prompt"]["n"] == sum(s["kind"] == "mixed" for s in t["steps"]) == 4
    out = CliRunner().invoke(cli, ["summarize", "--json", "--keep-warmup", str(SEED)])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["steps"] == doc["steps"]
    assert tv.AnalysisConfig(keep_warmup=True).describe()["keep_warmup"] is True
    with pytest.raises(tv.UsageError, match="keep_warmup"):
        tv.AnalysisConfig(keep_warmup="yes")  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["seed_autotune", "seed_autotune_bursts"])
def test_the_twin_passes_a_check_against_its_clean_twin(name: str) -> None:
    """The serving work is the clean twin's: no judged rate regresses by 10%. With the
    warm-up kept in, the same check fails (the check can fail)."""
    twin = str(GENERATED / f"{name}.json.gz")
    args = ["check", twin, "--baseline", str(CLEAN), "--max-regression", "10%"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    out = CliRunner().invoke(cli, [*args, "--keep-warmup"])
    assert out.exit_code == 1, out.output


@pytest.mark.slow
def test_a_run_and_a_scan_leave_the_warmup_steps_out(tmp_path: Path) -> None:
    """A run's rank row and a dataset's rows: the summary's serving figures; the dataset's
    ``steps/`` rows keep every step, with its ``warmup``."""
    t = truth("seed_autotune")
    doc = tv.analyze(SEED).summary.to_dict()
    run = tv.summarize_run([str(SEED)], tv.RunOptions(jobs=1)).to_dict()
    (rank,) = run["ranks"]
    assert rank["steps"] == doc["steps"]["count"] == t["step_count"]
    assert rank["time_breakdown"]["span_ns"] == doc["busy"]["window_ns"]
    ds = tmp_path / "ds"
    tv.scan([str(SEED)], ds, tv.ScanOptions(jobs=1))
    steps = pl.read_parquet(ds / "steps" / "*.parquet").sort("index")
    assert steps["warmup"].to_list() == [s["warmup"] for s in t["steps"]]
    row = pl.read_parquet(ds / "traces" / "*.parquet").row(0, named=True)
    assert row["steps"] == t["step_count"]
    assert row["decode_gap_p99_ns"] == doc["decode_gaps"][1]["p99_ns"]


# --- what Triton's do_bench leaves on one stream, and what it does not ----------------------


def _stream(tmp: Path, kernels: list[tuple[str, int]], name: str = "t") -> tv.Trace:
    """A trace of ``kernels`` (name, duration) one after another on stream 7, 3 us apart."""
    tb = TraceBuilder()
    t = 1_000_000_000
    for kernel, dur in kernels:
        tb.kernel(kernel, t, dur)
        t += dur + 3_000
    return tv.load(tb.write(tmp / f"{name}.json.gz"))


def _regions(trace: tv.Trace) -> list[tuple[str | None, int | None, int | None]]:
    from traceview.analysis.steps.autotune import autotune_regions

    k = trace.kernels
    ts, dur = k["ts_ns"].to_numpy(), k["dur_ns"].to_numpy()
    return [(r.kernel, r.runs, r.fills) for r in autotune_regions(k, ts, dur, union(ts, ts + dur))]


F, KERNEL, OTHER = FILL_NAME, "_attn_fwd_tuned", "void at::native::other_kernel<float>()"
F8 = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<signed char>>"
RESET = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"


GAP = 3_000  # _stream's gap between kernels


def do_bench(
    kernel_ns: int = 100_000,
    *,
    fill: str = F,
    fill_ns: int = 500_000,
    estimate_fills: bool = True,
    hook: str = "",
    warmup_ns: int = 25_000_000,
    rep_ns: int = 100_000_000,
) -> tuple[list[tuple[str, int]], int, int]:
    """One config as a version of ``triton.testing.do_bench`` runs it (``hook``: a kernel
    the autotuner's pre-hook runs before each call, as ``reset_to_zero`` does), with its
    runs and fills. Its counts follow do_bench: ``max(1, int(warmup / estimate))`` warm-up
    runs and ``max(1, int(rep / estimate))`` timed runs (25 and 100 ms by default), the
    estimate being the mean time of the 5 estimate runs on this plan's clock (fills
    included where it has them)."""
    call = [(hook, 2_000)] * bool(hook) + [(KERNEL, kernel_ns)]
    est_run = [(fill, fill_ns)] * estimate_fills + call
    estimate = (5 * sum(d + GAP for _, d in est_run) - GAP) // 5
    n_warmup, n_repeat = max(1, warmup_ns // estimate), max(1, rep_ns // estimate)
    out = list(call)  # the first call
    for _ in range(5):
        out += est_run
    out += call * n_warmup
    for _ in range(n_repeat):
        out += [(fill, fill_ns), *call]
    return out, 6 + n_warmup + n_repeat, 5 * estimate_fills + n_repeat


VERSIONS = {
    # triton 3: fills before the estimate runs and the timed runs
    "estimate with fills": [do_bench(), do_bench(130_000)],
    # a kernel longer than 100 ms: one warm-up run, one timed run
    "one timed run": [do_bench(120_000_000)],
    # triton 1.x: an int8 buffer, no fills while estimating
    "estimate without fills": [do_bench(fill=F8, estimate_fills=False)] * 2,
    # the autotuner's reset_to_zero hook: a fill of the output before every call
    "reset_to_zero": [do_bench(hook=RESET)],
    # reset_to_zero on an int32 output: its fill is FillFunctor<int>, as the cache clear's,
    # but far shorter than a 256 MiB fill can be
    "reset_to_zero of an int32 output": [do_bench(hook=F)],
}


# do_bench's warmup and rep (ms) as callers pass them: @triton.autotune(warmup=, rep=),
# knobs, Inductor's rep=40, a kernel search's warmup=1, rep=5
BUDGETS = {
    "5/20": [do_bench(k, warmup_ns=5_000_000, rep_ns=20_000_000) for k in (100_000, 130_000)],
    "100/500": [
        do_bench(k, warmup_ns=100_000_000, rep_ns=500_000_000) for k in (100_000, 130_000, 90_000)
    ],
    "25/40": [do_bench(k, rep_ns=40_000_000) for k in (100_000, 130_000)],
    "1/5": [do_bench(k, warmup_ns=1_000_000, rep_ns=5_000_000) for k in (100_000, 130_000)],
    "one config at 5/20": [do_bench(warmup_ns=5_000_000, rep_ns=20_000_000)],
    "slow configs at 100/500": [
        do_bench(k, warmup_ns=100_000_000, rep_ns=500_000_000) for k in (30_000_000, 36_000_000)
    ],
    "estimate without fills at 5/20": [
        do_bench(fill=F8, estimate_fills=False, warmup_ns=5_000_000, rep_ns=20_000_000)
    ]
    * 2,
}


@pytest.mark.parametrize("budget", BUDGETS)
def test_do_bench_with_any_warmup_and_rep_is_autotuning(tmp_path: Path, budget: str) -> None:
    """The configs of one autotuning run with warmup and rep other than do_bench's 25 and
    100 ms: one region, with every run and fill planted."""
    configs = BUDGETS[budget]
    seq = [(OTHER, 50_000)] * 3
    for kernels, _, _ in configs:
        seq += kernels
    seq += [(KERNEL, 100_000), (OTHER, 50_000)]
    runs = sum(r for _, r, _ in configs)
    fills = sum(f for _, _, f in configs)
    assert _regions(_stream(tmp_path, seq)) == [(KERNEL, runs, fills)]


@pytest.mark.parametrize("version", VERSIONS)
def test_each_triton_version_of_do_bench_is_autotuning(tmp_path: Path, version: str) -> None:
    """Between a step's kernels, the configs one after another: one region, the tuned
    kernel, its runs and fills as planned, whichever version ran them."""
    configs = VERSIONS[version]
    seq = [(OTHER, 50_000)] * 3
    for kernels, _, _ in configs:
        seq += kernels
    seq += [(KERNEL, 100_000), (OTHER, 50_000)]  # the real call with the best config
    runs = sum(r for _, r, _ in configs)
    fills = sum(f for _, _, f in configs)
    assert _regions(_stream(tmp_path, seq)) == [(KERNEL, runs, fills)]


def test_autotuning_at_the_end_of_a_stream_is_found(tmp_path: Path) -> None:
    """The last timed run is the stream's last kernel (a capture stopped right after)."""
    kernels, runs, fills = do_bench()
    assert _regions(_stream(tmp_path, [(OTHER, 50_000), *kernels])) == [(KERNEL, runs, fills)]


TRAINING = {
    # zero_grad without set_to_none: one fill per gradient, back to back
    "zero_grad": [(OTHER, 80_000)] * 20 + [(F, 500_000)] * 40 + [(OTHER, 80_000)] * 20,
    # a bucket zeroed before each all-reduce, three iterations of forward and backward
    "bucket before each all-reduce": (
        [(OTHER, 80_000)] * 30 + [(F, 500_000), ("ncclKernel_AllReduce_RING_LL", 300_000)] * 8
    )
    * 3,
    # one all-reduce without its fill among them
    "an all-reduce without a fill": (
        [(OTHER, 80_000)] * 30
        + [(F, 500_000), ("ncclKernel_AllReduce_RING_LL", 300_000)] * 2
        + [("ncclKernel_AllReduce_RING_LL", 300_000)]
        + [(F, 500_000), ("ncclKernel_AllReduce_RING_LL", 300_000)] * 6
    )
    * 3,
    # gradient accumulation: a large buffer cleared before each micro-batch
    "a fill per micro-batch": ([(F, 500_000)] + [(OTHER, 80_000)] * 12) * 16,
    # zero_grad of many small gradients and a few large ones, all by one fill kernel
    # (about 1 ms of small fills between large ones: a do_bench warm-up of warmup=1 in form)
    "zero_grad of small and large gradients": (
        [(OTHER, 80_000)] * 20
        + [(RESET, 35_000), (RESET, 2_000)]
        + ([(RESET, 35_000)] + [(RESET, 2_000)] * 234) * 8
    )
    * 3,
}


@pytest.mark.parametrize("pattern", TRAINING)
def test_training_that_fills_large_buffers_is_no_autotuning(tmp_path: Path, pattern: str) -> None:
    trace = _stream(tmp_path, TRAINING[pattern])
    assert _regions(trace) == []
    doc = tv.analyze(trace).summary.to_dict()
    assert doc["warmup"]["steps"] == 0 and doc["warmup"]["regions"] == []


# --- compilation and lazy loading: warm-up where they cost a step ---------------------------

HYBRID = next(sc for sc in SCENARIOS if sc.name == "hybrid_chunked")


def _with_host_warmup(
    tmp: Path, name: str, cat: str, pause_ns: int, *, at_step: int = 7
) -> tuple[tv.Analysis, dict]:
    """hybrid_chunked's engine, 12 steps, with the host busy for ``pause_ns`` (a range
    ``name`` of category ``cat``) after step ``at_step``'s kernels, the device idle
    meanwhile; the analysis and the plan's truth."""
    sc = dataclasses.replace(HYBRID, name="host_warmup", annotations="vllm-gpu")
    steps = plan_steps(sc, [("decode", 0, -1)] * 12)
    for s in steps[at_step + 1 :]:
        for k in s.kernels:
            k.ts_ns += pause_ns
    tb, planned = build(sc, steps)
    last = max(k.end_ns for k in planned[at_step].kernels)
    pid = -1 if cat == "overhead" else 4242  # CUPTI's overhead events: pid -1, as Kineto's
    tb.events.append(Event("X", name, cat, pid, 0, last + 5_000, pause_ns - 10_000))
    path = tb.write(tmp / f"{name.split()[0]}.json.gz")
    return tv.analyze(path), plan_truth(sc, planned, path.name, tb.event_count)


@pytest.mark.parametrize(
    ("name", "cat", "cause"),
    [
        ("_compile.compile_inner (dynamo_timed)", "user_annotation", "compile"),
        ("Lazy Function Loading", "overhead", "lazy_loading"),
    ],
)
def test_a_compile_or_load_that_costs_a_step_is_warmup(
    tmp_path: Path, name: str, cat: str, cause: str
) -> None:
    """A 60 ms compile (or load) with the device idle, after step 7's kernels: step 7 holds
    it (a step spans until the next starts), and is left out; the intervals to and from
    it count in no cadence."""
    a, t = _with_host_warmup(tmp_path, name, cat, 60_000_000)
    doc = a.summary.to_dict()
    assert a.steps["warmup"].to_list() == [None] * 7 + [cause] + [None] * 4
    (region,) = doc["warmup"]["regions"]
    assert (region["cause"], region["first_step"], region["last_step"]) == (cause, 7, 7)
    assert region["span_ns"] == 60_000_000 - 10_000
    intervals = [s["interval_ns"] for s in t["steps"]]
    kept = [x for i, x in enumerate(intervals) if i and i not in (7, 8)]
    assert doc["steps"]["cadence"]["n"] == len(kept) == 9
    assert doc["steps"]["cadence"]["max_ns"] == max(kept)


@pytest.mark.parametrize(
    ("name", "cat"),
    [
        ("_compile.compile_inner (dynamo_timed)", "user_annotation"),
        ("Lazy Function Loading", "overhead"),
    ],
)
def test_a_load_shorter_than_a_step_is_no_warmup(tmp_path: Path, name: str, cat: str) -> None:
    """A process loads each kernel once: a capture near start-up holds loads of tens of
    microseconds (the shared B200 trace has 8). They cost no step: nothing is left out,
    and a warning says what stays in (the range less its 5 us margins, the device idle)."""
    a, _ = _with_host_warmup(tmp_path, name, cat, 80_000)
    doc = a.summary.to_dict()
    assert doc["warmup"] == {"kept": False, "steps": 0, "span_ns": 0, "regions": []}
    assert a.steps["warmup"].null_count() == a.steps.height == doc["steps"]["count"]
    words = "compilation" if cat == "user_annotation" else "lazy kernel loading"
    said = f"{words} in 1 step(s) is left in: the device idles 0.07 ms under it in all"
    assert [w for w in doc["warnings"] if "is left in" in w] == [
        f"{said}, and it lengthens each of those steps by less than a tenth beyond their usual idle"
    ]


# --- no trace without warm-up reports any ---------------------------------------------------

WITHOUT = [p for p in sorted(GENERATED.glob("*.json.gz")) if not p.name.startswith("seed_autotune")]


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=[pytest.mark.slow] if p.stat().st_size > SAMPLE_BYTES else [])
        for p in real_traces()
    ]
    + [
        pytest.param(p, marks=[] if p.name.startswith("hybrid_chunked") else [pytest.mark.slow])
        for p in WITHOUT
    ],
    ids=lambda p: p.name.removesuffix(".json.gz"),
)
def test_no_trace_without_warmup_reports_any(path: Path) -> None:
    """Every shared trace (training traces that fill large buffers among them; the B200
    trace's lazy loads) and every fixture without planted warm-up: no step holds warm-up,
    and the only regions are graph capture's, left out before any step is found."""
    a = tv.analyze(path)
    doc = a.summary.to_dict()
    assert doc["warmup"]["steps"] == 0
    assert {r["cause"] for r in doc["warmup"]["regions"]} <= {"graph_capture"}
    assert all(r["first_step"] is None for r in doc["warmup"]["regions"])
    assert a.steps["warmup"].null_count() == a.steps.height


# --- how the warm-up is drawn -----------------------------------------------------------------


def test_the_heartbeat_draws_no_interval_to_or_from_warmup_and_shades_it() -> None:
    """The intervals of steps 2-5 (to, from and between the steps that hold autotuning) are
    NaN, as they count in no cadence; the three steps' spans are the shaded bands."""
    from traceview.render.charts import heartbeat_data

    t = truth("seed_autotune")
    data = heartbeat_data(tv.analyze(SEED).summary)
    nan = np.isnan(data.interval_ms)
    assert np.flatnonzero(nan).tolist() == [0, 2, 3, 4, 5]
    assert data.breakdown is not None
    t0 = t["start_ns"]
    assert data.breakdown.warmup_ms == [
        ((s["start_ns"] - t0) / 1e6, (s["end_ns"] - t0) / 1e6)
        for s in t["steps"]
        if s["warmup"] is not None
    ]
    # their ticks say warm-up, not the kind of work they also ran
    assert data.kinds == ["warm-up" if s["warmup"] else s["kind"] for s in t["steps"]]


@pytest.mark.slow
def test_the_heartbeat_of_a_trace_with_warmup_draws(tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["heartbeat", str(SEED), "-o", str(tmp_path / "hb.png")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "hb.png").stat().st_size > 0


def test_the_overlay_names_the_warmup_steps() -> None:
    from traceview.render.overlay import overlay_events

    names = [e.name for e in overlay_events(tv.analyze(SEED).summary) if e.ph == "X"]
    held = [n for n in names if "warm-up" in n]
    assert held == [f"step {i} · mixed · warm-up (triton_autotune)" for i in (2, 3, 4)]


def test_the_notebook_views_name_the_warmup() -> None:
    summary = tv.analyze(SEED).summary
    assert "warm-up         Triton autotuning of chunk_fwd_kernel_o in steps 2–4" in repr(summary)
    assert "warm-up: Triton autotuning of chunk_fwd_kernel_o" in summary._repr_html_()


def test_graph_capture_kept_in_is_said_so() -> None:
    """``--keep-warmup`` on a trace that captures CUDA graphs before serving: the capture's
    kernels form steps, marked ``graph_capture``, and the screen says they are kept in."""
    path = GENERATED / "vllm_capture_then_serve.json.gz"
    t = truth("vllm_capture_then_serve")
    kept = tv.analyze(path, tv.AnalysisConfig(keep_warmup=True))
    held = kept.steps.filter(pl.col("warmup") == "graph_capture")
    assert held.height > 0 and kept.steps["phase"].null_count() == 0
    assert kept.summary.to_dict()["trace"]["kernels"] == t["in_trace"]["kernels"]
    out = CliRunner().invoke(cli, ["summarize", "--keep-warmup", str(path)])
    said = " ".join(out.stdout.split())
    assert f"{t['capture']['kernels']:,} kernels kept in" in said
    assert "left out" not in said


# --- the probe's findings: each against planted truth ----------------------------------------

SHORT = [
    # fills far shorter than a 256 MiB clear can be: a serving step's own fills
    ("a 3 us fill", F, 3_000),
    ("a 1.5 us memset", "Memset (Device)", 1_500),
]


@pytest.mark.parametrize(("label", "fill", "fill_ns"), SHORT, ids=[s[0] for s in SHORT])
def test_a_fill_too_short_to_clear_the_cache_is_no_autotuning(
    tmp_path: Path, label: str, fill: str, fill_ns: int
) -> None:
    """4 x [F c], [F c c], then 1,000 x [F c]: the counts alone read as do_bench's, but no
    device clears 256 MiB in microseconds."""
    c = (OTHER, 20_000)
    seq = [(fill, fill_ns), c] * 4 + [(fill, fill_ns), c, c] + [(fill, fill_ns), c] * 1000
    tb = TraceBuilder()
    t = 1_000_000_000
    for kernel, dur in seq:
        tb.kernel(kernel, t, dur, cat="gpu_memset" if kernel.startswith("Memset") else "kernel")
        t += dur + GAP
    assert _regions(tv.load(tb.write(tmp_path / "short.json.gz"))) == []


def test_a_loop_whose_counts_are_not_do_bench_s_is_no_autotuning(tmp_path: Path) -> None:
    """A user's benchmark loop: 10 plain calls, then 100 calls each after a full-size
    fill. do_bench would have made 1 + 5 + 25 ms / estimate (about 240) plain calls."""
    seq = [(KERNEL, 100_000)] * 10 + [(F, 500_000), (KERNEL, 100_000)] * 100
    assert _regions(_stream(tmp_path, seq)) == []


def test_a_loop_whose_warmup_lasts_no_whole_millisecond_is_no_autotuning(
    tmp_path: Path,
) -> None:
    """do_bench's layout, but 2 plain calls of about 0.6 ms each after the estimate: no
    warmup of a whole number of milliseconds makes 2 (it would take 1.2-1.8 ms)."""
    c, fill = (KERNEL, 100_000), (F, 500_000)
    seq = [c] + [fill, c] * 5 + [c] * 2 + [fill, c] * 100 + [(OTHER, 50_000)]
    assert _regions(_stream(tmp_path, seq)) == []


def test_an_autotuning_ends_with_its_last_timed_run(tmp_path: Path) -> None:
    """A config, then serving that clears a full-size buffer before each call of the same
    kernel: the region holds do_bench's timed runs (2% more at most, for jitter), not the
    1,000 cycles after them."""
    kernels, runs, fills = do_bench()
    seq = [(OTHER, 50_000), *kernels] + [(F, 500_000), (KERNEL, 100_000)] * 1000
    ((kernel, got_runs, got_fills),) = _regions(_stream(tmp_path, seq))
    slack = 1 + (fills - 5) // 50
    assert kernel == KERNEL
    assert fills <= got_fills <= fills + slack and runs <= got_runs <= runs + slack


def _compiling(tmp: Path, name: str, cat: str, pause_ns: int, at: list[int]) -> tv.Analysis:
    """hybrid_chunked's engine, 12 decode steps, the host busy for ``pause_ns`` (a range
    ``name`` of category ``cat``) after each of steps ``at``, the device idle meanwhile."""
    sc = dataclasses.replace(HYBRID, name="compiling", annotations="vllm-gpu")
    steps = plan_steps(sc, [("decode", 0, -1)] * 12)
    for i in at:
        for s in steps[i + 1 :]:
            for k in s.kernels:
                k.ts_ns += pause_ns
    tb, planned = build(sc, steps)
    pid = -1 if cat == "overhead" else 4242
    for i in at:
        last = max(k.end_ns for k in planned[i].kernels)
        tb.events.append(Event("X", name, cat, pid, 0, last + 5_000, pause_ns - 10_000))
    return tv.analyze(tb.write(tmp / "compiling.json.gz"))


# the last step ends with its last kernel: a compile after it lies in no step
@pytest.mark.parametrize("at", [[7], [1, 2, 3, 5, 7, 9, 10], list(range(11))])
def test_every_step_a_compile_costs_is_warmup_however_many(tmp_path: Path, at: list[int]) -> None:
    """Each compiling step is judged against the steps that do not compile: when most
    steps compile, they are all warm-up still (a median over all steps would rise with
    them)."""
    compile_range = "_compile.compile_inner (dynamo_timed)"
    a = _compiling(tmp_path, compile_range, "user_annotation", 60_000_000, at)
    assert [i for i, w in enumerate(a.steps["warmup"].to_list()) if w] == at


@pytest.mark.parametrize(
    ("name", "cat", "pause_ns"),
    [
        ("_compile.compile_inner (dynamo_timed)", "user_annotation", 9_000_000),
        ("Lazy Function Loading", "overhead", 7_700_000),
    ],
)
def test_a_compile_shorter_than_a_step_that_costs_it_is_warmup(
    tmp_path: Path, name: str, cat: str, pause_ns: int
) -> None:
    """A pause of most of a step (the steps last about 10 ms): the step lasts far longer
    for it, and is left out."""
    a = _compiling(tmp_path, name, cat, pause_ns, [7])
    assert [i for i, w in enumerate(a.steps["warmup"].to_list()) if w] == [7]


CLEAN_PLAN = next(sc for sc in SCENARIOS if sc.name == "seed_clean")


@pytest.mark.parametrize("stall", [None, 8], ids=["busy steps", "and one stall"])
def test_a_compile_over_busy_steps_costs_only_the_steps_it_stalls(
    tmp_path: Path, stall: int | None
) -> None:
    """seed_clean's engine, 16 decode steps with its 1.8-2.6 ms pauses (about a fifth of
    each step's span), and a compile range (another graph, on a background thread) from
    step 3's first kernel to step 12's last. The device keeps its cadence under it: the
    pauses under the range are the usual ones, and no step holds warm-up. Where the
    device also stalls 40 ms before step ``stall`` under the same range, that step's
    predecessor alone holds it (a step spans until the next starts)."""
    sc = dataclasses.replace(CLEAN_PLAN, name="compile_over_busy")
    steps = plan_steps(sc, [("decode", 0, -1)] * 16)
    if stall is not None:
        for s in steps[stall:]:
            for k in s.kernels:
                k.ts_ns += 40_000_000
    tb, planned = build(sc, steps)
    a0 = min(k.ts_ns for k in planned[3].kernels)
    b0 = max(k.end_ns for k in planned[12].kernels)
    tb.events.append(
        Event("X", "compile_fx_inner (dynamo_timed)", "user_annotation", 4242, 0, a0, b0 - a0)
    )
    a = tv.analyze(tb.write(tmp_path / "over_busy.json.gz"))
    held = [i for i, w in enumerate(a.steps["warmup"].to_list()) if w]
    assert held == ([] if stall is None else [stall - 1])
    assert a.summary.to_dict()["steps"]["count"] == 16 - len(held)


def test_busy_over_a_window_leaves_the_warmup_out() -> None:
    """busy_between() with no ends is .busy; a window over steps 0-2 (step 2 holds
    warm-up) measures steps 0-1 alone: their kernels' union over their spans."""
    a = tv.analyze(SEED)
    assert a.busy_between().row(0) == a.busy.row(0)
    st = a.steps
    assert st["warmup"].to_list()[:3] == [None, None, "triton_autotune"]
    k = a.trace.kernels.filter(
        (pl.col("ts_ns") >= st["start_ns"][0]) & (pl.col("ts_ns") < st["start_ns"][2])
    )
    ts = k["ts_ns"].to_numpy()
    u = union(ts, ts + k["dur_ns"].to_numpy())
    lo, hi = np.array([st["start_ns"][0]]), np.array([st["start_ns"][2]])
    row = a.busy_between(int(st["start_ns"][0]), int(st["end_ns"][2])).row(0, named=True)
    assert row["busy_ns"] == int(u.clipped_lengths(lo, hi)[0])
    assert row["fraction"] == pytest.approx(row["busy_ns"] / int(hi[0] - lo[0]), rel=1e-8)


def test_a_trace_that_is_all_warmup_has_no_busy(tmp_path: Path) -> None:
    """do_bench alone: its one step holds warm-up, so no serving figure is measured, and
    the warning says why."""
    kernels, _, _ = do_bench()
    a = tv.analyze(_stream(tmp_path, kernels * 3))
    doc = a.summary.to_dict()
    assert doc["warmup"]["steps"] == a.steps.height >= 1
    assert doc["busy"]["fraction"] is None and doc["busy"]["window_ns"] is None
    assert any(w.startswith("no serving steps") for w in doc["warnings"])
    assert not any(w.startswith("no decode steps") for w in doc["warnings"])
    with pytest.raises(CaptureOnlyError, match="no serving steps: all 1 step"):
        a.busy_between()  # as every surface that draws or judges steps
    png = str(tmp_path / "hb.png")
    result = CliRunner().invoke(cli, ["heartbeat", str(a.trace.meta.path), "-o", png])
    assert result.exit_code == 0 and "wrote" not in result.output
    assert f"{a.trace.meta.path}: no serving steps: all 1 step(s) hold warm-up" in result.stderr
    result = CliRunner().invoke(cli, ["summarize", str(a.trace.meta.path)])
    assert result.stdout == "" and result.stderr.count("no serving steps: all 1 step") == 1
    # where the document is drawn all the same (report): no range of steps, and why no gap
    from traceview.render.format import gap_title, phase_rows

    assert [cells[1] for _, cells in phase_rows(doc["steps"])] == ["—"]
    assert gap_title(doc) == "decode gaps: no serving steps (every step holds warm-up)"


@pytest.mark.slow
def test_a_run_compares_the_steps_that_serve_on_every_rank(tmp_path: Path) -> None:
    """Two ranks of one plan and the same serving kernels; rank 0 autotunes in step 10,
    rank 1 in steps 10 and 11. The steps are paired by their place in each trace and
    compared where both serve: 21 of 23, with no skew and no straggler (the serving
    kernels are the same), in both annotation modes."""
    seed = next(sc for sc in SCENARIOS if sc.name == "seed_autotune")
    d, m = ("decode", 0, 0, 4), ("mixed", 2_044, 1, 4)
    for mode in ("vllm-gpu", "none"):
        paths = []
        for rank, tune in ((0, ((10, 2),)), (1, ((10, 2), (11, 1)))):
            sc = dataclasses.replace(
                seed,
                name=f"{mode}_rank{rank}",
                annotations=mode,
                steps_plan=(d,) * 10 + (m,) * 3 + (d,) * 10,
                autotune=tune,
            )
            tb, _ = build(sc)
            paths.append(str(tb.write(tmp_path / f"{mode}_rank{rank}.json.gz")))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            run = tv.summarize_run(paths, tv.RunOptions(jobs=1)).to_dict()
        assert run["alignment"]["steps"] == 21
        assert run["skew"]["n"] == 21 and run["skew"]["max_ns"] == 0
        assert run["straggler"] is None
        said = "2 aligned step(s) hold warm-up on some rank: they are compared on none"
        assert said in run["warnings"]


def _opening(tmp: Path) -> tuple[tv.Analysis, list]:
    """hybrid_chunked's engine, 12 decode steps (vLLM annotations), with an autotuning of 2
    configs whose tuned kernel is step 6's first; the analysis and the planned steps."""
    sc = dataclasses.replace(HYBRID, name="opening", annotations="vllm-gpu")
    steps = plan_steps(sc, [("decode", 0, -1)] * 12)
    first = min(steps[6].kernels, key=lambda k: k.ts_ns)
    t0 = max(k.end_ns for k in steps[5].kernels) + 500_000
    benches, t1 = autotune_configs(random.Random(1), t0, 2)
    shift = t1 + 5_000 - first.ts_ns
    for s in steps[6:]:
        for k in s.kernels:
            k.ts_ns += shift
    for bench in benches:
        for fill, ts, dur in bench.kernels:
            key = "cache_fill" if fill else first.key
            steps[6].kernels.append(PlannedKernel(key, ts, dur, 7, 6, warmup="triton_autotune"))
    steps[6].kernels.sort(key=lambda k: k.ts_ns)
    steps[6].tuned = benches
    tb, planned = build(sc, steps)
    return tv.analyze(tb.write(tmp / "opening.json.gz")), planned


def test_an_autotuning_that_opens_a_step_marks_that_step(tmp_path: Path) -> None:
    """The tuned kernel is step 6's first (vLLM annotations): step 6 holds the autotuning
    and all its kernels; step 5 keeps its own and serves."""
    a, planned = _opening(tmp_path)
    assert a.steps["warmup"].to_list() == [None] * 6 + ["triton_autotune"] + [None] * 5
    assert a.steps["kernels"].to_list() == [len(s.kernels) for s in planned]


def test_the_pause_before_an_autotuning_that_opens_a_step_is_neither_step_s(
    tmp_path: Path,
) -> None:
    """The device idles for the first config's compile (150-300 ms) between step 5's last
    kernel and step 6's first run. That pause spans warm-up, so it belongs to neither step:
    step 5 ends with its last kernel. Its span is the same in the steps table, the time
    breakdown, the step cost and busy's window."""
    a, planned = _opening(tmp_path)
    st = a.steps
    start5 = min(k.ts_ns for k in planned[5].kernels)
    end5 = max(k.end_ns for k in planned[5].kernels)
    assert (st["start_ns"][5], st["end_ns"][5]) == (start5, end5)
    row = st.row(5, named=True)
    idle = sum(row[c] for c in st.columns if c.startswith("idle_") and c.endswith("_ns"))
    assert row["busy_ns"] + idle == end5 - start5
    doc = a.summary.to_dict()
    (phase,) = [p for p in doc["time_breakdown"] if p["last_step"] == 5]
    first = phase["first_step"]
    assert phase["span_ns"] == end5 - int(st["start_ns"][first])
    cost = a.summary.cost_steps.filter(pl.col("index") == 5)
    assert cost["time_ns"].to_list() == [end5 - start5]
    serving = st.filter(pl.col("phase").is_not_null())
    assert doc["busy"]["window_ns"] == int((serving["end_ns"] - serving["start_ns"]).sum())
    # with the warm-up kept in, the steps tile the timeline as ever
    kept = tv.analyze(a.trace.meta.path, tv.AnalysisConfig(keep_warmup=True)).steps
    assert kept["end_ns"][5] == kept["start_ns"][6]


def _inductor_bench(
    tmp: Path, range_name: str | None, *, calls: bool = True
) -> tuple[tv.Analysis, str, int, int]:
    """hybrid_chunked's engine, 12 decode steps (vLLM annotations), and Inductor's runtime
    autotuning of 3 configs at the start of step 6, under a host range ``range_name``
    (None: no range): per config, 5 x (L2 fill, call), 100 fills, then 40 x (fill, call),
    as its benchmarker runs them (fills repeated between its estimate and timed runs: no
    do_bench signature). ``calls`` False: the fills alone. The analysis, the tuned kernel's
    name, and the calls and fills planted."""
    sc = dataclasses.replace(HYBRID, name="inductor", annotations="vllm-gpu")
    steps = plan_steps(sc, [("decode", 0, -1)] * 12)
    first = min(steps[6].kernels, key=lambda k: k.ts_ns)
    t0 = t = max(k.end_ns for k in steps[5].kernels) + 500_000
    rng = random.Random(3)
    planted: list[PlannedKernel] = []
    for _ in range(3):
        for fill in [True, False] * 5 + [True] * 100 + [True, False] * 40:
            if not fill and not calls:
                continue
            key = "cache_fill" if fill else first.key
            dur = rng.randint(60_000, 70_000) if fill else rng.randint(100_000, 110_000)
            planted.append(PlannedKernel(key, t, dur, 7, 6, warmup="triton_autotune"))
            t += dur + rng.randint(2_000, 6_000)
    shift = t + 5_000 - first.ts_ns
    for s in steps[6:]:
        for k in s.kernels:
            k.ts_ns += shift
    steps[6].kernels = sorted(steps[6].kernels + planted, key=lambda k: k.ts_ns)
    tb, _ = build(sc, steps)
    if range_name is not None:
        tb.events.append(Event("X", range_name, "user_annotation", 4242, 0, t0 - 40_000, t - t0))
    a = tv.analyze(tb.write(tmp / "inductor.json.gz"))
    fills = sum(k.key == "cache_fill" for k in planted)
    return a, first.name, len(planted) - fills, fills


@pytest.mark.parametrize(
    "name",
    [
        "CachingAutotuner.benchmark_all_configs (dynamo_timed)",
        "CachingAutotuner.coordinate_descent_tuning (dynamo_timed)",
        "InductorBenchmarker.benchmark_gpu (dynamo_timed)",
    ],
)
def test_inductor_s_runtime_autotuning_is_read_by_its_range(tmp_path: Path, name: str) -> None:
    """Under a dynamo_timed range that names benchmarking, the device benchmarks: step 6
    holds Triton autotuning, with the tuned kernel, its runs and every fill planted, and
    no compile time is said to stay in the figures."""
    a, tuned, runs, fills = _inductor_bench(tmp_path, name)
    assert a.steps["warmup"].to_list() == [None] * 6 + ["triton_autotune"] + [None] * 5
    doc = a.summary.to_dict()
    (region,) = doc["warmup"]["regions"]
    assert (region["kernel"], region["runs"], region["fills"]) == (tuned, runs, fills)
    assert region["first_step"] == region["last_step"] == 6
    assert not [w for w in doc["warnings"] if "is left in" in w]


@pytest.mark.parametrize(
    ("name", "calls"),
    [
        (None, True),  # no range: neither signature, as documented
        ("_compile.compile_inner (dynamo_timed)", True),  # a range that names no benchmark
        ("CachingAutotuner.benchmark_all_configs (dynamo_timed)", False),  # no call under it
    ],
    ids=["no range", "a compile range", "fills alone"],
)
def test_inductor_s_autotuning_needs_its_range_and_a_call(
    tmp_path: Path, name: str | None, calls: bool
) -> None:
    """Without the benchmarking range, or without a kernel that is no fill under it, no
    step holds Triton autotuning."""
    a, _, _, _ = _inductor_bench(tmp_path, name, calls=calls)
    assert "triton_autotune" not in a.steps["warmup"].to_list()


def test_the_warmup_line_names_the_steps_that_hold_it() -> None:
    """Two autotunings, in steps 4 and 9, and one over steps 12-14: the line names those
    steps, not every step from 4 to 14."""
    from traceview.analysis.documents.summary import warmup_line

    def region(first: int, last: int) -> dict:
        return {
            "cause": "triton_autotune", "first_step": first, "last_step": last,
            "start_ns": 0, "end_ns": 1, "span_ns": 1, "kernel": TUNED, "runs": 10,
            "fills": 5, "kernels": 15, "gpu_ns": 1,
        }  # fmt: skip

    warmup = {"kept": False, "steps": 5, "span_ns": 5, "regions": [region(4, 4), region(9, 9)]}
    assert " in steps 4, 9 (20 runs, 10 cache fills) left out" in str(warmup_line(warmup))
    warmup["regions"] = [region(4, 4), region(9, 9), region(12, 14)]
    assert " in steps 4, 9, 12–14 (" in str(warmup_line(warmup))
    warmup["regions"] = [region(4, 4)]
    assert " in step 4 (" in str(warmup_line(warmup))


def test_check_refuses_a_trace_whose_every_step_is_warmup(tmp_path: Path) -> None:
    """do_bench alone: no serving step to judge. check refuses it in one line, as it does
    a capture of CUDA-graph capture alone, exit 2: a gate with nothing to judge never
    passes. It draws no table of checks."""
    kernels, _, _ = do_bench()
    path = str(_stream(tmp_path, kernels * 3).meta.path)
    result = CliRunner().invoke(cli, ["check", path, "--max", "busy.fraction=0.9"])
    assert result.exit_code == 2, result.output
    assert "checks" not in result.stdout
    said = [
        x for x in result.stderr.splitlines() if x.startswith(f"Error: {path}: no serving steps")
    ]
    assert len(said) == 1 and "Triton autotuning of _attn_fwd_tuned in step 0" in said[0]


def test_diff_and_check_say_what_warmup_they_leave_out() -> None:
    """The seed twin against its clean twin: diff notes B's steps left out for warm-up,
    check warns of them; the clean twin gets no such line."""
    doc = tv.analyze(SEED).summary.to_dict()
    line = f"{doc['warmup']['steps']} step(s) left out of every figure for warm-up"
    result = CliRunner().invoke(cli, ["diff", str(CLEAN), str(SEED), "--format", "markdown"])
    assert result.exit_code == 0, result.output
    assert f"B: {line}" in result.stdout and "A: " not in result.stdout.replace("A = ", "")
    result = CliRunner().invoke(
        cli, ["check", str(SEED), "--baseline", str(CLEAN), "--max-regression", "10%"]
    )
    assert result.exit_code == 0, result.output
    warned = [x for x in result.stderr.splitlines() if "warm-up: Triton autotuning" in x]
    assert len(warned) == 1 and warned[0].startswith(f"Warning: {SEED}: warm-up: ")


def test_a_capture_that_stops_in_a_config_s_warmup_counts_its_runs(tmp_path: Path) -> None:
    """The capture stops during the second config's warm-up runs: the region holds every
    run and fill the trace has of both configs."""
    first, runs, fills = do_bench()
    second, _, _ = do_bench(130_000)
    cut = second[: 1 + 10 + 5]  # its first call, 5 estimate runs with fills, 5 warm-up runs
    seq = [(OTHER, 50_000)] * 3 + first + cut
    assert _regions(_stream(tmp_path, seq)) == [(KERNEL, runs + 11, fills + 5)]


def test_a_compile_in_a_cpu_capture_is_warmup_not_an_op(tmp_path: Path) -> None:
    """A CPU-only capture: 12 annotated steps of 20 ops each, and a 40 ms compile inside
    step 6. The ops stand in for kernels, not the compile range: 12 steps, step 6 held
    for compilation, and the other 11 steps' 220 ops counted."""
    tb = TraceBuilder()
    t = 1_000_000_000
    for step in range(12):
        s0 = t
        for _ in range(20):
            tb.cpu_op("aten::mm", t, 200_000)
            t += 250_000
        if step == 6:
            name = "_compile.compile_inner (dynamo_timed)"
            tb.cpu_op(name, t, 40_000_000, cat="user_annotation")
            t += 40_000_000
        tb.cpu_op("execute_context_0(0)_generation_4(4)", s0, t - s0, cat="user_annotation")
        t += 1_000_000
    a = tv.analyze(tb.write(tmp_path / "cpu.json.gz"))
    assert a.steps["warmup"].to_list() == [None] * 6 + ["compile"] + [None] * 5
    assert sum(f["count"] for f in a.summary.to_dict()["families"]) == 11 * 20


def test_a_capture_that_starts_in_a_config_s_estimate_finds_it(tmp_path: Path) -> None:
    """The capture starts after the first call and two estimate runs of a config: three
    estimate runs, the warm-up and the timed runs are in it, and so in the region."""
    kernels, runs, fills = do_bench()
    seq = kernels[1 + 2 * 2 :] + [(OTHER, 50_000)] * 3
    assert _regions(_stream(tmp_path, seq)) == [(KERNEL, runs - 3, fills - 2)]
