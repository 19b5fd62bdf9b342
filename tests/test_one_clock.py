"""One clock: the probe's monotonic times laid on a trace's, against planted offsets; a
capture folder on the heartbeat and in the report; two captures compared; the old
run.json schema still read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import ROOT

import traceview as tv
from traceview.capture.clock import trace_offset
from traceview.capture.itl import compare, itl, on_trace, supports
from traceview.cli import cli
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
        (8_990_000_000 + 5 * S, 5 * S, 8_990_000_000, "wall clock", 80),
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
    entry = {"trace": TRACE.name, "offset_ns": off, "method": "wall clock", "uncertainty_ns": 0}
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
