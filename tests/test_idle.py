"""Issue 22: where the step time went. Each device-idle interval's cause against the planted
truth of fixtures/idle.py (host-late launches, queued work held back by a dependency, a
synchronise then host work, CUDA-graph replays), exact to the ns; and on real traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import GENERATED, SHARED_TRACES
from planned import planned_gap_fill

import traceview as tv
from fixtures.build import TraceBuilder
from traceview.analysis.timing.clocks import CLOCK_JITTER_NS, read_clocks
from traceview.analysis.timing.idle import CAUSES, Calls, busy_by_family
from traceview.cli import cli

IDLE = GENERATED / "idle" / "idle_stretches.json.gz"
COLUMNS = ["start_ns", "end_ns", "busy_ns", *(f"idle_{c}_ns" for c in CAUSES)]


@pytest.fixture(scope="module")
def planted() -> tuple[tv.Summary, list[dict]]:
    truth = json.loads((GENERATED / "idle" / "idle_stretches.truth.json").read_text())
    return tv.summarize(tv.load(IDLE)), truth["steps"]


def test_every_step_splits_its_time_as_planted(planted: tuple[tv.Summary, list[dict]]) -> None:
    summary, truth = planted
    got = summary.steps.select(COLUMNS).to_dicts()
    assert got == [{k: t[k] for k in COLUMNS} for t in truth]
    for row in got:  # busy and the five idle parts tile each step's span
        assert sum(row[c] for c in COLUMNS[2:]) == row["end_ns"] - row["start_ns"]


def test_each_step_has_its_host_side_as_planted(
    planted: tuple[tv.Summary, list[dict]],
) -> None:
    """The CPU step annotation's length and its lead before the first submitting call (a
    planted scheduling time that differs per step)."""
    summary, truth = planted
    host = ["host_step_ns", "host_before_gpu_ns"]
    assert summary.steps.select(host).to_dicts() == [{k: t[k] for k in host} for t in truth]
    assert len({t["host_before_gpu_ns"] for t in truth}) > 1


def test_steps_without_a_cpu_annotation_have_no_host_side() -> None:
    """Bursts with no step annotation, and steps with GPU-projected annotations only:
    null, never a made-up figure."""
    for name in ("hybrid_tight", "hybrid_monolithic"):
        steps = tv.summarize(tv.load(GENERATED / f"{name}.json.gz")).steps
        for column in ("host_step_ns", "host_before_gpu_ns"):
            assert steps[column].null_count() == steps.height


def test_each_stretch_shows_its_cause(planted: tuple[tv.Summary, list[dict]]) -> None:
    """Inside each stretch's steps (the between-step pause aside, which is the host's):
    slow launches are host_late, held-back queued work dependency, a synchronise sync, and
    a graph replay's own gaps dependency, never host_late."""
    summary, truth = planted
    table = summary.steps
    by = {s: [t for t in truth if t["stretch"] == s] for s in {t["stretch"] for t in truth}}
    rows = table.to_dicts()

    def total(stretch: str, cause: str) -> int:
        return sum(rows[t["index"]][f"idle_{cause}_ns"] for t in by[stretch])

    assert total("host", "host_late") > 10 * total("host", "launch") > 0
    assert total("dependency", "dependency") == 5 * 2 * 25_000  # two planted 25 µs waits a step
    assert total("sync", "sync") > 0 and total("sync", "host_late") == 0
    assert total("graph", "dependency") == 5 * 7 * 1_500  # the replay's 1.5 µs gaps
    assert all(total(s, "other") == 0 for s in by)


def test_the_phase_breakdown_and_its_verdict(planted: tuple[tv.Summary, list[dict]]) -> None:
    summary, truth = planted
    (phase,) = summary.to_dict()["time_breakdown"]  # one decode phase: every step is decode
    span = truth[-1]["end_ns"] - truth[0]["start_ns"]
    assert phase["span_ns"] == span
    assert phase["busy_ns"] == sum(t["busy_ns"] for t in truth)
    assert phase["idle_ns"] == {c: sum(t[f"idle_{c}_ns"] for t in truth) for c in CAUSES}
    assert sum(phase["busy_by_family"].values()) == phase["busy_ns"]
    host = phase["idle_ns"]["host_late"] + phase["idle_ns"]["sync"]
    assert host >= 0.2 * span and phase["verdict"] == "host-bound"
    shown = CliRunner().invoke(cli, ["summarize", str(IDLE)], terminal_width=120).stdout
    assert "where the step time went" in shown and "host-bound" in shown


def test_busy_is_shared_equally_among_overlapping_families() -> None:
    # family 0 runs [0, 100), family 1 [50, 150): 50 alone, 50 shared, 50 alone
    ts, ends = np.array([0, 50]), np.array([100, 150])
    out = busy_by_family(ts, ends, np.array([0, 1]), 2, np.array([0]), np.array([150]))
    assert out.tolist() == [[75, 75]]
    # three families over one instant of 10 ns: 3 + 3 + 4 (the remainder to the largest)
    out = busy_by_family(
        np.array([0, 0, 0]),
        np.array([10, 10, 10]),
        np.array([0, 1, 2]),
        3,
        np.array([0]),
        np.array([10]),
    )
    assert out.sum() == 10 and sorted(out[0].tolist()) == [3, 3, 4]


def _same_fill(got: dict | None, want: dict | None) -> None:
    """A document's gap fill against the plan's: every count and ns exact; busy by family
    within a ns of the plan's exact shares (rounded down; the remainder, one ns per family
    at most, goes to the largest)."""
    assert (got is None) == (want is None)
    if got is None or want is None:
        return
    exact = ["gaps", "span_ns", "busy_ns", "idle_ns"]
    assert {k: got[k] for k in exact} == {k: want[k] for k in exact}
    shares = want["busy_by_family"]
    assert set(got["busy_by_family"]) == set(shares)
    top = max(shares, key=lambda f: shares[f])
    for family, share in shares.items():
        slack = len(shares) if family == top else 1
        assert abs(got["busy_by_family"][family] - share) <= slack, family


@pytest.mark.parametrize("name", ["hybrid_chunked", "dense_sglang", "hybrid_tight"])
def test_what_filled_the_gaps_is_what_the_plan_put_there(name: str) -> None:
    """Each population's gaps, all of them and the widest (at or above its p99), overlaps
    aside: their count, merged span, busy time, busy time by family and idle time by cause,
    against the plan (tests/planned.py): hybrid_chunked and dense_sglang launch from the
    CPU (host_late, launch, dependency), hybrid_tight has no launches (other)."""
    doc = tv.summarize(tv.load(GENERATED / f"{name}.json.gz")).to_dict()
    want = planned_gap_fill(name)
    assert [g["population"] for g in doc["decode_gaps"]] == list(want)
    for g in doc["decode_gaps"]:
        _same_fill(g["filled"], want[g["population"]]["filled"])
        _same_fill(g["widest"], want[g["population"]]["widest"])
    # the helper's windows are the generator's own: over all gaps, its busy share is the
    # truth file's in_gaps and in_widest_gaps
    planted = json.loads((GENERATED / f"{name}.truth.json").read_text())["busy"]
    every = want["all"]
    assert every["filled"] is not None and every["widest"] is not None
    assert every["filled"]["busy_ns"] / every["filled"]["span_ns"] == pytest.approx(
        planted["in_gaps"], rel=1e-12
    )
    assert every["widest"]["busy_ns"] / every["widest"]["span_ns"] == pytest.approx(
        planted["in_widest_gaps"], rel=1e-12
    )
    # the causes the plan puts in the gaps: with no launches in the trace, all of it other
    every_cause = {c for c, ns in every["filled"]["idle_ns"].items() if ns}
    launched = {"host_late", "launch", "dependency"}
    assert every_cause == ({"other"} if name == "hybrid_tight" else launched)


def test_the_heartbeat_breakdown_draws_each_steps_planted_parts(
    planted: tuple[tv.Summary, list[dict]], tmp_path: Path
) -> None:
    """``heartbeat --breakdown``: per step, busy and each cause as shares of its span, the
    steps' edges at their planted bounds; one stacked artist per part that occurs."""
    from traceview.render.charts import heartbeat_data, heartbeat_figure

    summary, truth = planted
    data = heartbeat_data(summary)
    b = data.breakdown
    assert b is not None
    t0 = data.t0_ns
    edges = [t["start_ns"] for t in truth] + [truth[-1]["end_ns"]]
    np.testing.assert_allclose(b.edges_ms, [(e - t0) / 1e6 for e in edges], rtol=0, atol=1e-9)
    for part, column in [("busy", "busy_ns"), *((c, f"idle_{c}_ns") for c in CAUSES)]:
        want = [t[column] / (t["end_ns"] - t["start_ns"]) for t in truth]
        np.testing.assert_allclose(b.shares[part], want, rtol=1e-12)
    fig = heartbeat_figure([data], breakdown=True)
    parts = fig.axes[-1]
    drawn = {t.get_text() for t in parts.get_legend().get_texts()}
    columns = {"busy": "busy_ns", **{c: f"idle_{c}_ns" for c in CAUSES}}
    occurs = {p for p, column in columns.items() if any(t[column] for t in truth)}
    assert len(drawn) == len(occurs) and "idle: after a sync" in drawn
    out = tmp_path / "hb.svg"
    result = CliRunner().invoke(cli, ["heartbeat", str(IDLE), "-o", str(out), "--breakdown"])
    assert result.exit_code == 0, result.stderr
    assert "where the step time went" in out.read_text()


@pytest.mark.parametrize("option", [["--breakdown"], ["--window", "0:1ms"]])
def test_breakdown_of_a_run_is_one_clear_line(option: list[str], tmp_path: Path) -> None:
    """A run's chart has no breakdown, and no window: ``--window`` was silently ignored."""
    from fixtures.ranks import RankRun, build

    run = tmp_path / "tp2"
    run.mkdir()
    build(RankRun(ranks=2, slow_rank=1, steps=4), run)
    result = CliRunner().invoke(
        cli, ["heartbeat", str(run), "-o", str(tmp_path / "h.png"), *option]
    )
    assert (
        result.exit_code == 2
        and "--breakdown, --efficiency and --window chart one or two traces" in result.stderr
    )
    assert "Traceback" not in result.output
    assert not (tmp_path / "h.png").exists()


@pytest.mark.slow
def test_the_report_shows_the_breakdown_table_and_chart(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["report", str(IDLE), "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    page = out.read_text()
    assert "Where the step time went (share of each phase" in page
    assert 'class="breakdown"' in page and "host-bound" in page
    assert "idle: after a sync" in page  # the chart's legend, in the SVG


def test_annotate_draws_each_long_idle_interval_by_its_planted_cause(tmp_path: Path) -> None:
    """Issue 22, item 5: one slice per idle interval of at least 50 µs on the "traceview
    idle" track, named by its cause (the one with the most of its time), each cause's part
    in its args; all against the plan, exact to the ns."""
    truth = json.loads((GENERATED / "idle" / "idle_stretches.truth.json").read_text())
    want = truth["long_idle"]
    assert want  # the fixture plants long idle intervals
    out = tmp_path / "annotated.json"
    result = CliRunner().invoke(cli, ["annotate", str(IDLE), "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    events = json.loads(out.read_bytes())["traceEvents"]
    slices = [e for e in events if e.get("cat") == "traceview.idle"]
    assert len(slices) == len(want)
    for e, w in zip(sorted(slices, key=lambda e: float(e["ts"])), want, strict=True):
        parts = {c: w[f"{c}_ns"] for c in CAUSES}
        top = max(CAUSES, key=lambda c: (parts[c], -CAUSES.index(c)))
        assert e["name"] == f"idle · {top}"
        assert e["args"]["idle_ns"] == w["end_ns"] - w["start_ns"]
        assert {c: e["args"].get(f"{c}_ns", 0) for c in CAUSES} == parts
    names = [e["args"]["name"] for e in events if e.get("name") == "thread_name"]
    assert any(n.startswith("traceview idle") for n in names)
    # the slices' times, as traceview reads them back: the planted intervals, to the ns
    read = tv.run_sql(
        out, "select ts, dur from slice where category = 'traceview.idle' order by ts"
    )
    assert read["ts"].to_list() == [w["start_ns"] for w in want]
    assert read["dur"].to_list() == [w["end_ns"] - w["start_ns"] for w in want]


BLOCKING_COPIES = ("cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream")


def _stdlib_idle(path: Path, device: int, lo: int, hi: int) -> dict[str, int]:
    """docs/metrics.md's idle split read with the standard library alone: the device's
    activity (kernels, copies, memsets) from the JSON, its union's gaps inside [lo, hi),
    each ended by the first activity to start at its end, whose submitting call (the
    runtime or driver event with its correlation id) and the synchronising calls on that
    call's thread decide the cause."""
    import gzip
    from decimal import Decimal

    def ns(us: Decimal) -> int:
        return int(us * 1000)

    with gzip.open(path, "rb") as f:
        events = json.loads(f.read(), parse_float=Decimal)["traceEvents"]
    activity, calls, syncs = [], {}, {}
    for order, e in enumerate(events):
        cat, args = str(e.get("cat", "")), e.get("args") or {}
        if e.get("ph") != "X":
            continue
        if cat in ("kernel", "gpu_memcpy", "gpu_memset") and args.get("device") == device:
            activity.append(
                (ns(e["ts"]), order, ns(e["ts"]) + ns(e["dur"]), args.get("correlation"))
            )
        elif cat in ("cuda_runtime", "cuda_driver"):
            thread = (e.get("pid"), e.get("tid"))
            if "correlation" in args:
                start = ns(e["ts"])
                calls.setdefault(args["correlation"], (start, start + ns(e["dur"]), thread))
            if "Synchronize" in e["name"] or e["name"] in BLOCKING_COPIES:
                syncs.setdefault(thread, []).append(ns(e["ts"]) + ns(e["dur"]))
    activity.sort()
    out = dict.fromkeys(CAUSES, 0)
    reach = activity[0][2]
    for start, _, end, corr in activity[1:]:
        i0, i1 = reach, start
        reach = max(reach, end)
        if i1 <= i0 or i0 < lo or i1 > hi:
            continue
        call = calls.get(corr)
        if call is None:
            out["other"] += i1 - i0
            continue
        l0, l1, thread = call
        if l1 <= i0:
            out["dependency"] += i1 - i0
            continue
        cut = min(l1, i1)
        synced = any(i0 <= s <= l0 for s in syncs.get(thread, []))
        out["sync" if synced else "host_late"] += cut - i0
        out["launch"] += i1 - cut
    return out


REAL = SHARED_TRACES / "tracelens"


@pytest.mark.parametrize(
    "name",
    [
        "b200-vllm-eager",
        "b300-sglang-qwen3-30b-a3b-moe-decode-graph",
        "b300-sglang-deepseek-r1-decode-graph",
        "rocm-mi-vllm-decode-cudagraph",
        "rocm-mi-sglang-qwen3-8b-decode",
    ],
)
def test_real_traces_split_their_idle_as_a_stdlib_reading_does(name: str) -> None:
    """Each cause's idle over the steps equals an independent reading of the JSON, to the
    ns. What it says, by trace: vLLM eager waits on its host (host_late, then launch);
    vLLM's full decode graph leaves only the replay's own small gaps (dependency: all of it
    queued). SGLang's decode-graph captures on B300 are host-bound too, and the stdlib
    reading agrees: their long gaps end at eager launches (future-token resolution,
    sampling, a device copy) issued 0.1-0.2 ms after the GPU drained, around the replay."""
    path = REAL / f"{name}.json.gz"
    if not path.exists():
        pytest.skip("../shared/traces is not present")
    summary = tv.summarize(tv.load(path))
    steps = summary.steps
    got = {c: int(steps[f"idle_{c}_ns"].sum()) for c in CAUSES}
    lo, hi = int(steps["start_ns"].min()), int(steps["end_ns"].max())  # type: ignore[arg-type]
    assert got == _stdlib_idle(path, summary.to_dict()["trace"]["device"], lo, hi)
    idle = sum(got.values())
    if name == "rocm-mi-vllm-decode-cudagraph":
        assert got["dependency"] == idle > 0
    else:
        assert got["host_late"] + got["launch"] > 0.9 * idle


def test_inside_a_graph_replay_the_idle_is_queued_work() -> None:
    """A CUDA graph's replay is submitted by one call: inside the span of its kernels no
    gap waits on the host (no host_late); what idle there is, is the replay's own
    dependency gaps."""
    import numpy as np
    import polars as pl

    from traceview.analysis.base.intervals import union
    from traceview.analysis.timing.idle import idle_in_windows

    path = REAL / "b300-sglang-qwen3-30b-a3b-moe-decode-graph.json.gz"
    if not path.exists():
        pytest.skip("../shared/traces is not present")
    t = tv.load(path)
    graph = t.events.filter(pl.col("name").cast(pl.String) == "cudaGraphLaunch")
    (corr,) = graph["correlation"].to_list()
    k = t.kernels.sort("ts_ns")
    replay = k.filter(pl.col("correlation") == corr)
    assert replay.height > 100  # one launch fans out to the whole replay
    ts = k["ts_ns"].to_numpy()
    u = union(ts, ts + k["dur_ns"].to_numpy())
    lo = np.array([replay["ts_ns"].min()])
    hi = np.array([(replay["ts_ns"] + replay["dur_ns"]).max()])
    idle = idle_in_windows(t, ts, k["correlation"], u, lo, hi)
    assert idle["host_late"] == idle["sync"] == idle["other"] == 0
    assert idle["dependency"] > 0


@pytest.mark.parametrize(
    ("copy", "sync"),
    [("hipMemcpyWithStream", "hipMemcpyWithStream"), ("cudaMemcpyAsync", "cudaStreamSynchronize")],
)
def test_a_blocking_copy_to_the_host_is_a_sync(tmp_path: Path, copy: str, sync: str) -> None:
    """An unseen-trace probe's finding: ROCm's PyTorch copies the sampled ids to the host
    with hipMemcpyWithStream (one blocking call, where CUDA's issues cudaMemcpyAsync and
    cudaStreamSynchronize), and the idle after it read host_late, not sync. Planted: the
    kernel ends at 100 µs, the blocking call ends at 105 µs, the host works until it
    launches the next kernel at 405-410 µs, which starts at 412 µs: 310 µs of sync (the
    device drained, the host caught up), then 2 µs of launch."""
    host = {"pid": 1, "tid": 1}
    runtime = "cuda_runtime"  # Kineto's category on ROCm too
    launch = "hipLaunchKernel" if copy.startswith("hip") else "cudaLaunchKernel"
    events = [
        {"ph": "X", "cat": runtime, "name": launch, "ts": 0, "dur": 5}
        | host
        | {"args": {"correlation": 1}},
        {"ph": "X", "cat": runtime, "name": copy, "ts": 90, "dur": 15 if copy == sync else 3}
        | host
        | {"args": {"correlation": 9}},
        *(
            [{"ph": "X", "cat": runtime, "name": sync, "ts": 94, "dur": 11} | host | {"args": {}}]
            if copy != sync
            else []
        ),
        {"ph": "X", "cat": runtime, "name": launch, "ts": 405, "dur": 5}
        | host
        | {"args": {"correlation": 2}},
        *(
            {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7}
            | {"ts": ts, "dur": dur, "args": {"correlation": c, "stream": 7, "device": 0}}
            for c, ts, dur in ((1, 10, 90), (2, 412, 50))
        ),
    ]
    path = tmp_path / "copy.json"
    path.write_text(json.dumps({"traceEvents": events}))
    from traceview.analysis.base.intervals import union
    from traceview.analysis.timing.idle import idle_in_windows

    t = tv.load(path)
    k = t.kernels.sort("ts_ns")
    ts = k["ts_ns"].to_numpy()
    u = union(ts, ts + k["dur_ns"].to_numpy())
    idle = idle_in_windows(t, ts, k["correlation"], u, ts[:1], (ts + k["dur_ns"].to_numpy())[-1:])
    assert {c: int(v) for c, v in idle.items()} == {
        "host_late": 0, "launch": 2_000, "sync": 310_000, "dependency": 0, "other": 0
    }  # fmt: skip


def test_a_sync_call_without_any_linked_launch_is_no_crash(tmp_path: Path) -> None:
    """A hostile probe's finding: a trace with a synchronising runtime call but no launch
    that links by correlation was an IndexError in the idle split, in every command. Its
    gaps have no launch to blame: busy is the kernels' time over the span, 60 of 410 µs."""
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1}
        | {"ts": 100, "dur": 50, "args": {}},
        *(
            {"ph": "X", "cat": "kernel", "name": "flash_fwd_kernel", "pid": 0, "tid": 7}
            | {"ts": ts, "dur": 20, "args": {"correlation": c, "stream": 7, "device": 0}}
            for c, ts in ((5, 10), (6, 200), (7, 400))
        ),
    ]
    path = tmp_path / "sync.json"
    path.write_text(json.dumps({"traceEvents": events}))
    doc = tv.summarize(tv.load(path)).to_dict()
    assert doc["busy"]["busy_ns"] == 60_000 and doc["trace"]["span_ns"] == 410_000


@pytest.mark.parametrize("dropped", [0, 3])
def test_graph_launches_whose_records_were_dropped_are_said(tmp_path: Path, dropped: int) -> None:
    """An unseen-trace probe's finding: graph replays whose device records the profiler
    dropped (or an Nsight export traced at graph level) left steps out and read as the
    host being late, with no word said. Ten replays of eight kernels each, ``dropped`` of
    them (in the middle) without their kernels: the summary counts them."""
    tb = TraceBuilder()
    t0, period = 1_000_000_000, 400_000
    for step in range(10):
        corr = tb.next_correlation()
        launch = t0 + step * period
        tb.launch("graph", launch, corr, launch + 50_000, call="cudaGraphLaunch")
        if 3 <= step < 3 + dropped:
            continue  # its records dropped
        for j in range(8):
            name = "flash_attn_fwd_kernel" if j % 2 else "gemm_kernel"
            tb.kernel(name, launch + 50_000 + j * 20_000, 15_000, correlation=corr)
    summary = tv.summarize(tv.load(tb.write(tmp_path / "t.json")))
    said = [w for w in summary.warnings if "CUDA-graph launches" in w]
    if dropped:
        assert len(said) == 1 and said[0].startswith(f"{dropped} of 9 CUDA-graph launches")
    else:
        assert said == []


@pytest.mark.parametrize(
    ("name", "blocks"),
    [
        ("cudaStreamSynchronize", True),
        ("cudaMemcpy", True),
        ("cudaMemcpy2D", True),
        ("hipMemcpy", True),
        ("hipMemcpyDtoH", True),
        ("hipMemcpyWithStream", True),
        ("cuMemcpyDtoH_v2", True),
        ("cudaMemcpyAsync", False),
        ("cudaMemcpy2DAsync", False),
        ("hipMemcpyDtoHAsync", False),  # a review's finding: it read as a sync
        ("cuMemcpyDtoHAsync_v2", False),
    ],
)
def test_blocking_calls_are_syncs_and_async_ones_are_not(name: str, blocks: bool) -> None:
    from traceview.analysis.timing.idle import SYNC

    assert bool(SYNC.search(name)) is blocks


# --- clocks that cannot be right (issue 49) --------------------------------------------------


def _shifted(tmp_path: Path, shift_ns: int, *, sync_records: bool) -> tuple[tv.Summary, dict]:
    """The idle stretches with every host event written ``shift_ns`` later on the device's
    clock, summarized, and their truth."""
    from fixtures import idle

    tb, truth = idle.build(host_shift_ns=shift_ns, sync_records=sync_records)
    path = tb.write(tmp_path / f"shifted{shift_ns}.json.gz")
    return tv.summarize(tv.load(path)), truth


def _split_left_out(summary: tv.Summary, plain: tv.Summary) -> None:
    """No idle time is split by cause on any surface; every other figure is the
    unshifted trace's (busy time is the device's alone)."""
    steps = summary.steps
    for cause in CAUSES:
        assert steps[f"idle_{cause}_ns"].null_count() == steps.height
    assert steps["busy_ns"].to_list() == plain.steps["busy_ns"].to_list()
    doc = summary.to_dict()
    for phase in doc["time_breakdown"]:  # busy is 66% of the span: no verdict without causes
        assert phase["idle_ns"] is None and phase["verdict"] is None
        assert phase["busy_ns"] < 0.8 * phase["span_ns"]
    for g in doc["decode_gaps"]:
        for fill in (g["filled"], g["widest"]):
            assert fill is None or fill["idle_ns"] is None
    assert summary.idle.height == plain.idle.height
    assert summary.idle["cause"].null_count() == summary.idle.height
    assert summary.idle.select("start_ns", "end_ns").equals(plain.idle.select("start_ns", "end_ns"))


def test_a_host_clock_ahead_of_the_device_is_said_and_no_idle_is_split(tmp_path: Path) -> None:
    """Issue 49: with every host event 200 µs late, every kernel of the host-late stretch
    starts before its own launch call: there was no warning, and the idle split read 100%
    host_late. The clocks are read from the pairs themselves (here: 195 µs, the shift less
    the plan's shortest launch-to-start, 5 µs), said, and the split is left out."""
    summary, truth = _shifted(tmp_path, 200_000, sync_records=False)
    clocks = truth["clocks"]
    assert clocks["host_lead_ns"] == 195_000
    plain = tv.summarize(tv.load(IDLE))
    said = [w for w in summary.warnings if w.startswith("host and device clocks disagree")]
    assert len(said) == 1 and "kernels start before their own launch call begins" in said[0]
    assert f"at least {clocks['host_lead_ns'] / 1000:,.1f} µs ahead" in said[0]
    assert f"of {clocks['launches']} kernels" in said[0]
    _split_left_out(summary, plain)
    assert not any("clocks disagree" in w for w in plain.warnings)


@pytest.mark.parametrize("sync_records", [True, False], ids=["stream-sync-records", "inferred"])
def test_a_host_clock_behind_the_device_is_said_and_no_idle_is_split(
    tmp_path: Path, sync_records: bool
) -> None:
    """Issue 49: shifted 2 ms the other way, every idle interval read as queued work held
    back (dependency). No launch contradicts that shift; the synchronises do: each returns
    1,997 µs before the copy it waits for ends (the plan's synchronise returns 3 µs after
    it). Read through Kineto's ``Stream Sync`` records, or, without them, through the copy
    to the host that each synchronise follows on its thread."""
    summary, truth = _shifted(tmp_path, -2_000_000, sync_records=sync_records)
    assert truth["clocks"]["wait_overshoot_ns"] == 1_997_000
    said = [w for w in summary.warnings if w.startswith("host and device clocks disagree")]
    assert len(said) == 1
    assert "5 of 5 synchronising calls return before the device work they wait for" in said[0]
    assert "at least 1,997.0 µs behind" in said[0]
    _split_left_out(summary, tv.summarize(tv.load(IDLE)))


@pytest.mark.parametrize("shift_ns", [8_000, -8_000, 0])
def test_clocks_within_the_jitter_keep_the_split(tmp_path: Path, shift_ns: int) -> None:
    """A shift of a few µs is the clocks' jitter (the real traces here keep 3 µs or more on
    the right side of every pair): no warning, and the split is read."""
    summary, truth = _shifted(tmp_path, shift_ns, sync_records=True)
    c = truth["clocks"]
    assert c["host_lead_ns"] <= CLOCK_JITTER_NS and c["wait_overshoot_ns"] <= CLOCK_JITTER_NS
    assert not any("clocks disagree" in w for w in summary.warnings)
    assert summary.steps["idle_host_late_ns"].null_count() == 0
    if shift_ns == 0:  # the sync records change nothing of the split
        got = summary.steps.select(COLUMNS).to_dicts()
        assert got == [{k: t[k] for k in COLUMNS} for t in truth["steps"]]


def test_a_few_mislinked_pairs_do_not_make_the_clocks_disagree(tmp_path: Path) -> None:
    """A hostile case for the measure: four of hybrid_chunked's 4,890 launch calls moved
    1 ms after their kernel (a merged trace's reused correlation ids could link so) are
    fewer than the 0.1% of pairs the shift must show; forty are not."""
    import gzip

    doc = json.loads(gzip.decompress((GENERATED / "hybrid_chunked.json.gz").read_bytes()))
    device = ("kernel", "gpu_memcpy", "gpu_memset")
    kernels = {e["args"]["correlation"]: e for e in doc["traceEvents"] if e.get("cat") in device}
    launches = [e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime" and "args" in e]
    for moved in (4, 40):
        for e in launches[:moved]:
            e["ts"] = kernels[e["args"]["correlation"]]["ts"] + 1000.0
        path = tmp_path / f"moved{moved}.json"
        path.write_text(json.dumps(doc))
        trace = tv.load(path)
        k = trace.kernels
        ts = k["ts_ns"].to_numpy()
        clocks = read_clocks(trace, 0, k, ts, ts + k["dur_ns"].to_numpy(), Calls.of(trace))
        assert clocks.launches == 4_890 and clocks.early == moved
        assert clocks.consistent == (moved == 4), moved  # 0.1% of 4,890 is 5 pairs


@pytest.mark.parametrize("shift_ns", [-5_000, -9_000, 5_000])
def test_a_wait_read_within_the_jitter_keeps_its_idle(tmp_path: Path, shift_ns: int) -> None:
    """The probe of issue 49: a host clock 5 µs behind, inside the tolerated jitter, moved
    every sync-caused idle interval into host_late (sync 28.8% -> 0%, 2.78 ms of 556 µs
    intervals changing cause whole): a wait had to end at or after the idle's start to
    the ns. Within the jitter, each idle stretch keeps its cause; at most the shift's
    length of each moves (host_late to launch)."""
    summary, truth = _shifted(tmp_path, shift_ns, sync_records=False)
    plain = tv.summarize(tv.load(IDLE))
    assert not [w for w in summary.warnings if w.startswith("host and device clocks disagree")]
    got, want = summary.steps, plain.steps
    assert got["idle_sync_ns"].sum() > 0
    moved = (got["idle_sync_ns"] - want["idle_sync_ns"]).abs()
    # each step's sync idle moves by at most the shift, once per idle interval it holds
    assert (moved <= abs(shift_ns) * 4).all(), moved.to_list()
    assert got["idle_sync_ns"].sum() >= 0.95 * want["idle_sync_ns"].sum()


def test_a_copy_on_a_side_stream_is_no_clock_evidence(tmp_path: Path) -> None:
    """The probe of issue 49: each step copies to the host on a side stream (9), then
    synchronises the compute stream (7), which returns when stream 7 drains, before the
    copy ends. Kineto records no stream for the synchronize, and the copy was taken as its
    work: "30 of 30 synchronising calls return before the device work they wait for ends",
    and the idle split was dropped. A synchronize that another of its thread's streams had
    drained for is no evidence of the clocks. No clock is shifted here."""
    from fixtures.build import TraceBuilder

    fa = "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64>>(Params)"
    gemm = "nvjet_tst_128x64_64x8_2x1_v_bz_TNT"
    copy = "Memcpy DtoH (Device -> Pinned)"
    tb = TraceBuilder(base_time_ns=1_767_189_312_000_000_000)
    cpu = 1_767_189_312_000_000_000 + 1_000_000
    gpu = cpu + 50_000
    for _ in range(30):
        t = max(gpu, cpu + 10_000)
        for name, d in [(fa, 20_000), (gemm, 40_000)] * 4:
            c = tb.next_correlation()
            tb.launch(name, cpu, c, t, dur_ns=3_000)
            tb.kernel(name, t, d, stream=7, correlation=c)
            cpu += 4_000
            t += d + 2_000
        c = tb.next_correlation()
        tb.launch(copy, cpu, c, t, stream=9, dur_ns=3_000, call="cudaMemcpyAsync")
        tb.kernel(copy, t + 1_000, 60_000, stream=9, correlation=c, cat="gpu_memcpy")
        cpu += 4_000
        sync_end = max(cpu + 2_000, t + 1_000)  # stream 7 drained 3 µs before
        tb.cpu_op("cudaStreamSynchronize", cpu, sync_end - cpu, cat="cuda_runtime")
        cpu = sync_end + 200_000
        gpu = t + 61_000
    summary = tv.summarize(tv.load(tb.write(tmp_path / "sidecopy.json.gz")))
    assert not [w for w in summary.warnings if "clocks disagree" in w], summary.warnings
    assert all(p["idle_ns"] is not None for p in summary.to_dict()["time_breakdown"])


@pytest.mark.parametrize("early", [1, 3])
def test_one_mislinked_pair_is_no_clock_shift(tmp_path: Path, early: int) -> None:
    """The probe of issue 49: with fewer than 1,000 pairs, one pair decided the clocks
    (ROBUST_SHARE of them, at least one). Planted: 200 launches, each kernel 5 µs after
    its launch; ``early`` of them start 100 µs before it (a mislinked id). One is no
    shift; three say one."""
    from fixtures.build import TraceBuilder

    gemm = "nvjet_tst_128x64_64x8_2x1_v_bz_TNT"
    tb = TraceBuilder(base_time_ns=1_767_189_312_000_000_000)
    cpu = 1_767_189_312_000_000_000 + 1_000_000
    for i in range(200):
        c = tb.next_correlation()
        start = cpu + (-100_000 if i in range(50, 50 + early) else 5_000)
        tb.launch(gemm, cpu, c, start, dur_ns=3_000)
        tb.kernel(gemm, start, 20_000, stream=7, correlation=c)
        cpu += 30_000
    summary = tv.summarize(tv.load(tb.write(tmp_path / f"early{early}.json.gz")))
    said = [w for w in summary.warnings if "clocks disagree" in w]
    assert len(said) == (early >= 3), said
