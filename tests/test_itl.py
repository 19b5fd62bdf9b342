"""``traceview itl``: victims' inter-token latency from a probe file, against planted gaps;
a malformed probe file is one line naming its line, and a malformed run.json one line
naming its key, exit 2; two captures compared with a latency of 0 as a figure."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT

from traceview.capture.itl import compare, itl
from traceview.cli import cli


def _probe(tmp_path: Path, rows: list[object]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "probe.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_gaps_are_the_planted_ones(tmp_path: Path) -> None:
    # victim 0: tokens at 0, 100, 300, 600 ns; victim 1: 50, 450 (out of order in the file)
    rows: list[object] = [
        {"event": "inject_start", "t_ns": 250},
        {"event": "inject_end", "t_ns": 500},
        {"victim": 1, "token": 1, "t_ns": 450},
        *({"victim": 0, "token": k, "t_ns": t} for k, t in enumerate((0, 100, 300, 600))),
        {"victim": 1, "token": 0, "t_ns": 50},
        {"note": "a record of another kind (a later probe's): not read"},
    ]
    done = CliRunner().invoke(cli, ["itl", str(_probe(tmp_path, rows)), "--json"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert (doc["victims"], doc["window_ns"]) == (2, 250)
    assert doc["all"]["n"] == 4 and doc["all"]["max_ns"] == 400  # 100, 200, 300, 400
    assert doc["injection"]["n"] == 2  # the tokens at 300 and 450 arrived inside it
    assert doc["all"]["p50_ns"] == 250  # the middle of 200 and 300
    assert doc["injection"]["max_ns"] == 400 and doc["injection"]["p50_ns"] == 300


WINDOW = [{"event": "inject_start", "t_ns": 100}, {"event": "inject_end", "t_ns": 1000}]


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        (
            [*WINDOW, *({"victim": 0, "token": k, "t_ns": t} for k, t in enumerate((500, 200)))],
            "victim 0's token 1 arrived at 200 ns, before its token 0 (500 ns)",
        ),
        (
            [{"event": "inject_start", "t_ns": 900}, {"event": "inject_end", "t_ns": 100}],
            "the injection ends (100 ns) before it starts (900 ns)",
        ),
        ([*WINDOW, 5], "line 3: not a probe record"),
        (
            [*WINDOW, {"victim": 0, "token": 0}],
            "line 3: 't_ns' must be a whole number (it is missing)",
        ),
        ([*WINDOW, {"victim": 0, "token": 0, "t_ns": "abc"}], "line 3: 't_ns' must be a whole"),
        ([*WINDOW, {"victim": "a", "token": 0, "t_ns": 1}], "line 3: 'victim' must be a whole"),
        ([{"event": "inject_start"}], "line 1: 't_ns' must be a whole number (it is missing)"),
        ([*WINDOW, {"victim": 0, "token": 0, "t_ns": 1e30}], "line 3: 't_ns' must be a whole"),
        (
            [*WINDOW, {"victim": 0, "token": 0, "t_ns": 2**70}],
            "line 3: 't_ns' must be a whole number (it is float 1.18",
        ),
        ([*WINDOW, {"victim": 0, "token": 0, "t_ns": True}], "line 3: 't_ns' must be a whole"),
        ([*WINDOW, {"victim": 0, "token": 0, "t_ns": -5}], "line 3: 't_ns' -5 is out of range"),
        ([*WINDOW, {"event": "inject_start", "t_ns": 5}], "line 3: a second inject_start"),
        (
            [*WINDOW, *({"victim": 0, "token": 0, "t_ns": t} for t in (1, 2))],
            "line 4: victim 0's token 0 is given twice",
        ),
    ],
    ids=[
        "backwards",
        "window-reversed",
        "bare-number",
        "no-time",
        "text-time",
        "text-victim",
        "event-no-time",
        "float-time",
        "huge-time",
        "bool-time",
        "negative-time",
        "second-start",
        "token-twice",
    ],
)
def test_a_malformed_probe_is_one_line_naming_it(
    tmp_path: Path, rows: list[object], said: str
) -> None:
    path = _probe(tmp_path, rows)
    for args in ([], ["--json"]):
        done = CliRunner().invoke(cli, ["itl", str(path), *args])
        assert done.exit_code == 2, done.output
        assert done.stderr.startswith(f"Error: {path}: "), done.stderr
        assert said in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def _victims(gaps_ms: list[float], victims: int = 2, start: int = 1_000_000_000) -> list[object]:
    rows: list[object] = []
    for v in range(victims):
        t = start + v * 1000
        for k, g in enumerate([0.0, *gaps_ms]):
            t += int(g * 1e6)
            rows.append({"victim": v, "token": k, "t_ns": t})
    return rows


def _request(i: int, role: str, prompt: int) -> dict[str, object]:
    return {
        "request": i,
        "role": role,
        "index": i,
        "prompt_tokens": prompt,
        "sent_ns": 900_000_000,
        "first_token_ns": 1_000_000_000,
        "end_ns": None,
        "tokens": 1,
        "chunks": 1,
        "usage": None,
    }


def _snapshot(label: str, prompt: int) -> dict[str, object]:
    values = {"prompt_tokens": prompt, "generation_tokens": 0, "preemptions": 0}
    return {"metrics": label, "t_ns": 1, "values": {**values, "running": 0, "waiting": 0}}


RUN: dict[str, object] = {
    "schema": "traceview.capture/1",
    "config": {"engine": "vllm"},
    "profiled": True,
    "traces": ["t.pt.trace.json.gz"],
    "clock": {
        "wall_minus_monotonic_ns": 0,
        "read_width_ns": 100,
        "traces": [
            {
                "trace": "t.pt.trace.json.gz",
                "offset_ns": 5,
                "method": "wall clock",
                "uncertainty_ns": 3,
                "profiler_start_ns": 0,
            }
        ],
    },
    "metrics": {"engine": "vllm", "notes": []},
    "errors": [],
}


def _folder(
    tmp_path: Path, run: dict[str, object] | None, rows: list[object] | None = None
) -> Path:
    folder = tmp_path / "capture"
    folder.mkdir(parents=True, exist_ok=True)
    body = rows or [
        *WINDOW,
        *_victims([10.0] * 5),
        _request(0, "victim", 32),
        _snapshot("before", 0),
        _snapshot("after", 32),
    ]
    _probe(folder, body)
    if run is not None:
        (folder / "run.json").write_text(json.dumps(run))
    return folder


def _with(path: str, value: object) -> dict[str, object]:
    """RUN with the value at a dotted path (``clock.traces.0.method``) replaced; a value
    of ``...`` removes the key."""
    run = json.loads(json.dumps(RUN))
    *parents, last = path.split(".")
    node = run
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is ...:
        del node[last]
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return run


BAD_RUNS = {
    "metrics-list": (_with("metrics", [1, 2]), "'metrics' must be an object or null (it is list"),
    "traces-int": (_with("clock.traces", 5), "'clock.traces' must be a list or null (it is int 5)"),
    "traces-text": (_with("clock.traces", "abc"), "'clock.traces' must be a list or null"),
    "entry-no-method": (
        _with("clock.traces.0.method", ...),
        "'clock.traces[0].method' must be a string beside an offset",
    ),
    "uncertainty-text": (
        _with("clock.traces.0.uncertainty_ns", "big"),
        "'clock.traces[0].uncertainty_ns' must be a whole number ≥ 0 or null (it is str 'big')",
    ),
    "offset-bool": (
        _with("clock.traces.0.offset_ns", True),
        "'clock.traces[0].offset_ns' must be a whole number or null (it is bool True)",
    ),
    "profiled-text": (_with("profiled", "false"), "'profiled' must be true or false (it is str"),
    "clock-text": (
        _with("clock.wall_minus_monotonic_ns", "abc"),
        "'clock.wall_minus_monotonic_ns' must be a whole number or null (it is str 'abc')",
    ),
    "clock-huge": (
        _with("clock.wall_minus_monotonic_ns", 1e30),
        "'clock.wall_minus_monotonic_ns' must be a whole number or null (it is float 1e+30)",
    ),
    "clock-list": (_with("clock.profile_start", [1]), "'clock.profile_start' must be an object"),
    "run-traces-int": (_with("traces", 5), "'traces' must be a list or null (it is int 5)"),
    "run-traces-text": (_with("traces", "abc"), "'traces' must be a list or null (it is str"),
    "run-trace-path": (
        _with("traces", ["/etc/passwd"]),
        "'traces[0]' must be a file name in the capture folder (it is str '/etc/passwd')",
    ),
    "run-trace-climbs": (
        _with("traces", ["../x.json.gz"]),
        "'traces[0]' must be a file name in the capture folder",
    ),
    "notes-dict": (_with("metrics.notes", {"a": 1}), "'metrics.notes' must be a list or null"),
    "errors-int": (_with("errors", 5), "'errors' must be a list or null (it is int 5)"),
}


@pytest.mark.parametrize(("run", "said"), BAD_RUNS.values(), ids=BAD_RUNS.keys())
def test_a_malformed_run_document_is_one_line_naming_its_key(
    tmp_path: Path, run: dict[str, object], said: str
) -> None:
    folder = _folder(tmp_path, run)
    for args in ([], ["--json"]):
        done = CliRunner().invoke(cli, ["itl", str(folder), *args])
        assert done.exit_code == 2, done.output
        assert done.stderr.startswith(f"Error: {folder / 'run.json'}: {said}"), done.stderr
        assert len(done.stderr.splitlines()) == 1


def test_heartbeat_and_report_read_the_run_document_through_one_check(tmp_path: Path) -> None:
    folder = _folder(tmp_path, _with("clock.traces.0.offset_ns", "12"))
    trace = ROOT / "fixtures" / "generated" / "hybrid_chunked.json.gz"
    shutil.copy(trace, folder / "t.pt.trace.json.gz")
    said = "'clock.traces[0].offset_ns' must be a whole number or null (it is str '12')"
    for args in (
        ["heartbeat", str(trace), "--probe", str(folder), "-o", str(tmp_path / "h.png")],
        ["report", str(folder), "-o", str(tmp_path / "r.html")],
    ):
        done = CliRunner().invoke(cli, args)
        assert done.exit_code == 2, done.output
        assert done.stderr.splitlines()[-1] == f"Error: {folder / 'run.json'}: {said}"


def test_report_reads_a_trace_only_from_inside_the_capture_folder(tmp_path: Path) -> None:
    """A trace named by a link in the capture folder that leads out of it is refused,
    never read."""
    outside = tmp_path / "outside.json.gz"
    shutil.copy(ROOT / "fixtures" / "generated" / "hybrid_chunked.json.gz", outside)
    folder = _folder(tmp_path, RUN)
    (folder / "t.pt.trace.json.gz").symlink_to(outside)
    done = CliRunner().invoke(cli, ["report", str(folder), "-o", str(tmp_path / "r.html")])
    assert done.exit_code == 2, done.output
    assert done.stderr == (
        f"Error: {folder}: its trace 't.pt.trace.json.gz' is not a file inside the capture folder\n"
    )


def test_a_check_with_nothing_sent_has_no_ratio(tmp_path: Path) -> None:
    """No prompt token sent, 10 counted: the excess is shown, no ratio of 10 to 0."""
    rows = [
        *WINDOW,
        *_victims([10.0] * 5),
        _request(0, "victim", 0),
        _snapshot("before", 0),
        _snapshot("after", 10),
    ]
    folder = _folder(tmp_path, _with("metrics.engine", "lab"), rows)
    done = CliRunner().invoke(cli, ["itl", str(folder)], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert "re-prefill (+10)" in done.stdout
    assert itl(folder)["prefill_check"]["ratio"] is None


def test_a_latency_of_0_is_a_figure_in_a_comparison(tmp_path: Path) -> None:
    """A's victims stream bursts of 3 tokens (a gap of 10 ms, then two of 0: p50 0), B's
    one token every 10 ms: B's p50 is worse, A's better; never "new" or "gone"."""
    burst = [10.0, 0.0, 0.0] * 4
    a = _folder(tmp_path / "a", None, [*WINDOW, *_victims(burst)])
    b = _folder(tmp_path / "b", None, [*WINDOW, *_victims([10.0] * 12)])
    assert itl(a)["all"]["p50_ns"] == 0 and itl(b)["all"]["p50_ns"] == 10_000_000
    rows = {r["field"]: r for r in compare(itl(a), itl(b))["rows"]}
    assert rows["all.p50_ns"]["verdict"] == "worse"
    back = {r["field"]: r for r in compare(itl(b), itl(a))["rows"]}
    assert back["all.p50_ns"]["verdict"] == "better"
    same = {r["field"]: r for r in compare(itl(a), itl(a))["rows"]}
    assert same["all.p50_ns"]["verdict"] == "same"
