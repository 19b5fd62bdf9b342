"""One clock: the probe's monotonic times laid on a trace's, against planted offsets (each
stated bound holds the true error); a trace the capture did not record refused; a
capture folder on the heartbeat and in the report; two captures compared; the old
run.json schema still read."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import ROOT

import traceview as tv
from traceview.capture.clock import fingerprint, trace_offset
from traceview.capture.itl import compare, itl, on_trace, supports
from traceview.cli import cli
from traceview.errors import CaptureError
from traceview.render.charts import heartbeat_data
from traceview.render.report import report_html

S = 1_000_000_000  # one second in ns
# the profiler ran from 10 s to 20 s on the trace's clock; the probe sent /start_profile at
# 1 s (answered 1.05 s) and /stop_profile at 11 s (answered 11.2 s) on its own: the offset
# lies in [8.95 s, 9 s] by the start call and in [8.8 s, 9 s] by the stop call
SPAN = (10 * S, 20 * S)
CLOCK = {
    "profile_start": {"sent_ns": 1 * S, "answered_ns": 1_050_000_000},
    "profile_stop": {"sent_ns": 11 * S, "answered_ns": 11_200_000_000},
    "read_width_ns": 80,
}


@pytest.mark.parametrize(
    ("wall", "base", "offset", "method", "uncertainty"),
    [
        # the calls allow 8.95-9 s: the wall clock's error is at most 40 ms, not its read's
        (8_990_000_000 + 5 * S, 5 * S, 8_990_000_000, "wall clock", 40_000_000),
        (8 * S, 0, 8_975_000_000, "bracket", 25_000_000),
    ],
    ids=["wall-clock-confirmed", "wall-clock-off-by-a-second"],
)
def test_the_offset_is_the_planted_one(
    wall: int, base: int, offset: int, method: str, uncertainty: int
) -> None:
    got = trace_offset({**CLOCK, "wall_minus_monotonic_ns": wall}, base, SPAN)
    assert (got["offset_ns"], got["method"], got["uncertainty_ns"]) == (offset, method, uncertainty)
    assert (got["profiler_start_ns"], got["profiler_end_ns"]) == SPAN


def test_calls_the_trace_contradicts_give_no_offset() -> None:
    late_stop = {**CLOCK, "profile_stop": {"sent_ns": 12 * S, "answered_ns": 12_100_000_000}}
    got = trace_offset({**late_stop, "wall_minus_monotonic_ns": 0}, None, SPAN)
    assert got["offset_ns"] is None and got["method"] is None
    unchecked = trace_offset({**CLOCK, "wall_minus_monotonic_ns": 7 * S}, 2 * S, None)
    assert (unchecked["offset_ns"], unchecked["method"]) == (5 * S, "wall clock, unchecked")
    assert unchecked["uncertainty_ns"] is None  # nothing bounds it


def test_a_trace_without_its_span_is_bounded_by_its_activity() -> None:
    """No profiler span: the events ran from 10.5 s to 19 s on the trace's clock, inside
    the calls (sent at 1 s, answered at 11.2 s): the offset lies in [7.8 s, 9.5 s]."""
    activity = (10_500_000_000, 19 * S)
    wall = trace_offset({**CLOCK, "wall_minus_monotonic_ns": 9 * S}, 0, None, activity)
    assert (wall["method"], wall["evidence"]) == ("wall clock", "trace activity")
    assert wall["offset_ns"] == 9 * S and wall["uncertainty_ns"] == 1_200_000_000
    skewed = trace_offset({**CLOCK, "wall_minus_monotonic_ns": 12 * S}, 0, None, activity)
    assert (skewed["method"], skewed["offset_ns"]) == ("bracket", 8_650_000_000)
    assert skewed["uncertainty_ns"] == 850_000_000


def test_a_span_that_began_before_the_start_call_gives_no_offset() -> None:
    """The profiler had run 5 s before /start_profile was sent (the engine was profiling
    already): no offset, and the reason says so."""
    early = (5 * S, 20 * S)
    got = trace_offset({**CLOCK, "wall_minus_monotonic_ns": 9 * S}, 0, early)
    assert got["offset_ns"] is None
    assert got["why"].startswith("the trace's profiler span began 5.00 s before this capture")


TRACE = ROOT / "fixtures" / "generated" / "hybrid_chunked.json.gz"


def _capture(tmp_path: Path, schema: str = "traceview.capture/1") -> tuple[Path, int]:
    """A capture folder around a fixture trace: the injection window planted 10–30 ms
    after the trace's first kernel, two victims' tokens planted on the probe's clock."""
    folder = tmp_path / "capture"
    folder.mkdir()
    shutil.copy(TRACE, folder / TRACE.name)
    t0 = int(tv.analyze(folder / TRACE.name).summary.to_dict()["trace"]["start_ns"])
    off = t0 - 50 * S  # the probe's clock 50 s behind the trace's first kernel
    mono = 50 * S
    rows: list[dict[str, object]] = [
        {"event": "inject_start", "t_ns": mono + 10_000_000},
        {"event": "inject_end", "t_ns": mono + 30_000_000},
        {"victim": 0, "token": 0, "t_ns": mono + 1_000_000},
        {"victim": 0, "token": 1, "t_ns": mono + 4_000_000},  # a 3 ms gap at 4 ms
        {"victim": 0, "token": 2, "t_ns": mono + 24_000_000},  # 20 ms at 24 ms
    ]
    for i, (role, prompt, sent, first) in enumerate(
        [("victim", 8, 0, 1_000_000), ("injected", 500, 10_000_000, 25_000_000)]
    ):
        rows.append(
            {
                "request": i,
                "role": role,
                "index": 0,
                "prompt_tokens": prompt,
                "sent_ns": mono + sent,
                "first_token_ns": mono + first,
                "end_ns": None,
                "tokens": 3 if role == "victim" else 1,
                "chunks": 3 if role == "victim" else 1,
                "usage": None,
            }
        )
    (folder / "probe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    entry = {
        "trace": TRACE.name,
        "offset_ns": off,
        "method": "wall clock",
        "uncertainty_ns": 0,
        **fingerprint(tv.load(folder / TRACE.name)),
    }
    run = {
        "schema": schema,
        "config": {"engine": "vllm"},
        "traces": [TRACE.name],
        "clock": {"wall_minus_monotonic_ns": off, "traces": [entry]},
    }
    (folder / "run.json").write_text(json.dumps(run))
    return folder, t0


@pytest.mark.parametrize("schema", ["traceview.capture/1", "traceview.run/1"])
def test_the_window_and_the_gaps_land_where_planted(tmp_path: Path, schema: str) -> None:
    """The window 10–30 ms and the gaps at 4 ms (3 ms) and 24 ms (20 ms) after the first
    kernel, on the heartbeat's axes; the old schema name is read as well."""
    folder, t0 = _capture(tmp_path, schema)
    doc = itl(folder)
    assert doc["window_on_trace_ns"] == [t0 + 10_000_000, t0 + 30_000_000]
    assert doc["ttft"]["injected"]["p50_ns"] == 15_000_000
    laid = on_trace(folder, tv.load(folder / TRACE.name))
    data = heartbeat_data(tv.analyze(folder / TRACE.name).summary, probe=laid, itl=True)
    assert data.injection_ms == pytest.approx((10.0, 30.0), abs=1e-9)
    assert data.itl_ms is not None
    assert np.allclose(data.itl_ms[0], [4.0, 24.0]) and np.allclose(data.itl_ms[1], [3.0, 20.0])


def test_a_rank_run_document_is_not_a_capture(tmp_path: Path) -> None:
    folder, _ = _capture(tmp_path)
    (folder / "run.json").write_text(json.dumps({"schema": "traceview.run/1", "ranks": []}))
    done = CliRunner().invoke(cli, ["itl", str(folder)])
    assert done.exit_code == 2
    assert (
        done.stderr
        == f"Error: {folder / 'run.json'}: a run of rank traces, not a capture's run.json\n"
    )


@pytest.mark.slow
def test_heartbeat_and_report_show_both_views(tmp_path: Path) -> None:
    folder, _ = _capture(tmp_path)
    png = tmp_path / "hb.png"
    done = CliRunner().invoke(
        cli,
        ["heartbeat", str(folder / TRACE.name), "--probe", str(folder), "--itl", "-o", str(png)],
    )
    assert done.exit_code == 0, done.output
    assert png.read_bytes()[:4] == b"\x89PNG"
    alone = CliRunner().invoke(
        cli, ["heartbeat", str(TRACE), "--itl", "-o", str(tmp_path / "x.png")]
    )
    assert alone.exit_code == 2 and "--probe" in alone.stderr
    summary = tv.analyze(folder / TRACE.name).summary
    page = report_html(
        [summary],
        clients=[itl(folder)],
        probes=[on_trace(folder, tv.load(folder / TRACE.name))],
    )
    assert "What the clients saw" in page and 'id="traceview-itl-0"' in page
    html = tmp_path / "r.html"
    done = CliRunner().invoke(cli, ["report", str(folder), "-o", str(html)])
    assert done.exit_code == 0, done.output
    assert "TTFT, injected" in html.read_text()


def test_two_captures_are_judged_only_where_n_supports_the_percentile(tmp_path: Path) -> None:
    """A p99 over 2 gaps is its maximum: shown, not judged; a p50 over 2 is judged."""
    folder, _ = _capture(tmp_path)
    a = itl(folder)
    b = json.loads(json.dumps(a))
    b["all"]["p50_ns"] = a["all"]["p50_ns"] * 2
    b["all"]["p99_ns"] = a["all"]["p99_ns"] * 2
    rows = {r["field"]: r for r in compare(a, b)["rows"]}
    assert rows["all.p50_ns"]["verdict"] == "worse" and rows["all.p50_ns"]["ratio"] == 2
    assert rows["all.p99_ns"]["verdict"] == "too few"
    assert rows["all.max_ns"]["verdict"] is None  # a maximum is shown, never judged
    assert rows["metrics.delta.prompt_tokens"]["role"] == "workload"
    assert [supports("p99_ns", n) for n in (99, 100)] == [False, True]
    assert [supports("p90_ns", n) for n in (9, 10)] == [False, True]


def test_a_trace_the_capture_did_not_record_is_refused(tmp_path: Path) -> None:
    """Another trace laid on the capture: its base time, span and events match no entry
    of run.json, so no window is drawn on it; the capture's own trace is laid as ever."""
    folder, _ = _capture(tmp_path)
    other = ROOT / "fixtures" / "generated" / "hybrid_monolithic.json.gz"
    with pytest.raises(CaptureError, match="not a trace this capture recorded"):
        on_trace(folder, tv.load(other))
    assert on_trace(folder, tv.load(folder / TRACE.name)).window_ns is not None


def test_a_capture_without_a_clock_is_refused(tmp_path: Path) -> None:
    folder, _ = _capture(tmp_path)
    run = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**run, "profiled": False, "traces": []}))
    with pytest.raises(CaptureError, match="an unprofiled capture"):
        on_trace(folder, tv.load(folder / TRACE.name))
    (folder / "run.json").unlink()
    with pytest.raises(CaptureError) as err:
        on_trace(folder, tv.load(folder / TRACE.name))
    assert "no run.json beside it: a bare probe file holds no clock" in str(err.value)


@pytest.mark.parametrize(("shift_s", "side"), [(1000, "after"), (-1000, "before")])
def test_a_window_that_misses_the_trace_is_said_and_not_drawn(
    tmp_path: Path, shift_s: int, side: str
) -> None:
    folder, _ = _capture(tmp_path)
    run = json.loads((folder / "run.json").read_text())
    run["clock"]["traces"][0]["offset_ns"] += shift_s * S
    (folder / "run.json").write_text(json.dumps(run))
    laid = on_trace(folder, tv.load(folder / TRACE.name))
    assert laid.window_ns is None and laid.at_ns.size == 0
    (note,) = laid.notes
    assert note.startswith(f"the injection window lies wholly {side} the trace's")
    data = heartbeat_data(tv.analyze(folder / TRACE.name).summary, probe=laid, itl=True)
    assert data.injection_ms is None and data.itl_ms is None


PROBE = {
    "engine": "vllm",
    "victims": 2,
    "inject": 2,
    "prompt_tokens": 120,
    "victim_prompt_tokens": 8,
    "max_tokens": 100_000,
    "inject_max_tokens": 5,
    "steady_tokens": 6,
    "metrics_every_s": 0.05,
}


def _fake_capture(tmp_path: Path, name: str, plan_kw: dict[str, object]) -> tuple[Path, int]:
    """A capture of the fake server, whose trace is written on its clock as planted; the
    capture folder and the true offset."""
    httpx = pytest.importorskip("httpx")
    del httpx
    from openai_fake import Plan, fake_server, true_offset

    from traceview.capture.probe import ProbeConfig, run_probe

    plan = Plan(profile_dir=str(tmp_path / f"{name}-profiles"), **plan_kw)  # type: ignore[arg-type]
    with fake_server(plan) as (url, state):
        cfg = ProbeConfig(
            url=url,
            out=str(tmp_path / name),
            profile_dir=plan.profile_dir,
            **PROBE,  # type: ignore[arg-type]
        )
        asyncio.run(run_probe(cfg))
        return tmp_path / name, true_offset(plan, state)


@pytest.mark.parametrize(
    ("plan", "method"),
    [
        ({"skew_ns": 1_500_000, "start_delay_s": 0.02, "stop_delay_s": 0.02}, "wall clock"),
        ({"skew_ns": 5 * S, "start_delay_s": 0.01, "stop_delay_s": 0.01}, "bracket"),
        ({"skew_ns": 3 * S, "span": False}, "bracket"),
    ],
    ids=["server-1.5ms-off", "server-5s-off", "no-span-3s-off"],
)
def test_the_stated_bound_holds_the_true_error(
    tmp_path: Path, plan: dict[str, object], method: str
) -> None:
    """A server whose clock is set apart (1.5 ms: within the calls, taken as the wall
    clock; 5 s; 3 s with no profiler span in its trace): the offset's error, against the
    truth the fake planted, is within the uncertainty the capture states."""
    folder, truth = _fake_capture(tmp_path, "c", plan)
    entry = itl(folder)["clock"]
    assert entry["method"] == method
    assert abs(entry["offset_ns"] - truth) <= entry["uncertainty_ns"], (entry, truth)


@pytest.mark.slow
def test_another_captures_trace_gets_one_line_and_no_window(tmp_path: Path) -> None:
    """Two captures of one server whose /stop_profile answers 0.3 s late (a flush): B's
    capture laid on A's trace is refused in one line, where the stop call's width once
    let a bracket fit B's calls to A's span."""
    plan = {"stop_delay_s": 0.3}
    a, _ = _fake_capture(tmp_path, "a", plan)
    b, _ = _fake_capture(tmp_path, "b", plan)
    (trace_a,) = a.glob("fake_*.pt.trace.json.gz")
    done = CliRunner().invoke(
        cli, ["heartbeat", str(trace_a), "--probe", str(b), "--itl", "-o", str(tmp_path / "x.png")]
    )
    assert done.exit_code == 2, done.output
    # the summary's warnings on a CPU-only trace come first; then the one error line
    *_warnings, error = done.stderr.splitlines()
    assert error.startswith(f"Error: {trace_a.name}: not a trace this capture recorded")
    assert all(w.startswith("Warning: ") for w in _warnings)
    own = CliRunner().invoke(
        cli, ["heartbeat", str(trace_a), "--probe", str(a), "-o", str(tmp_path / "a.png")]
    )
    assert own.exit_code == 0, own.output


def test_a_trace_begun_before_the_capture_has_no_window_and_says_why(tmp_path: Path) -> None:
    """The engine was profiling 5 s before the capture sent /start_profile: the capture
    records no offset and says why; the window is refused on that trace."""
    folder, _ = _fake_capture(tmp_path, "c", {"span_lead_ns": 5 * S})
    run = json.loads((folder / "run.json").read_text())
    (note,) = run["notes"]
    # 5 s before the profiler's start in the server, less the call's way there
    said = re.search(r"no clock offset \(the trace's profiler span began ([\d.]+) s before", note)
    assert said is not None and 4.0 < float(said.group(1)) <= 5.0, note
    doc = itl(folder)
    assert doc["window_on_trace_ns"] is None and doc["clock"]["offset_ns"] is None
    (trace,) = folder.glob("fake_*.pt.trace.json.gz")
    with pytest.raises(CaptureError, match="the capture found no clock offset for it"):
        on_trace(folder, tv.load(trace))
