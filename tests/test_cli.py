"""The CLI through click's CliRunner, plus one entry-point smoke test."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GENERATED, truth

from traceview.cli import cli


def test_info_json_matches_truth(scenario: str) -> None:
    t = truth(scenario)
    result = CliRunner().invoke(cli, ["info", str(GENERATED / f"{scenario}.json.gz"), "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    held = t["in_trace"]  # info reports what the file holds, start-up included
    assert doc["kernels"] == held["kernels"]
    assert doc["events"] == t["events"]
    assert doc["start_ns"] == held["start_ns"] and doc["end_ns"] == held["end_ns"]
    assert doc["span_ns"] == held["end_ns"] - held["start_ns"]
    assert [d["device"] for d in doc["devices"]] == [0]
    assert doc["devices"][0]["streams"] == t["streams"]
    assert doc["gpu"] == "NVIDIA H200"
    assert doc["skipped_events"] == 0
    copies = held["families"].get("memory", {"count": 0})["count"]  # memcpy and memset
    by_kind = doc["kernels_by_event_kind"]
    assert by_kind.get("kernel") == held["kernels"] - copies
    assert sum(n for k, n in by_kind.items() if k != "kernel") == copies
    assert doc["kernels_by_kind"] == by_kind  # its deprecated name, for one release


def test_info_table() -> None:
    result = CliRunner().invoke(cli, ["info", str(GENERATED / "hybrid_chunked.json.gz")])
    assert result.exit_code == 0
    assert "NVIDIA H200" in result.stdout
    assert "4,890" in result.stdout  # device activity count
    assert "events by category" in result.stdout
    assert "kineto (schemaVersion 1)" in result.stdout


def test_info_says_no_version_where_the_trace_has_none(tmp_path: Path) -> None:
    """A Chrome JSON trace has no schemaVersion: the format alone, never "None"."""
    path = tmp_path / "bare.json"
    event = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2}
    path.write_text(json.dumps([event]))
    result = CliRunner().invoke(cli, ["info", str(path)])
    assert result.exit_code == 0, result.output
    assert "None" not in result.stdout
    assert [line.split() for line in result.stdout.splitlines() if " format " in line] == [
        ["format", "chrome"]
    ]


def test_every_command_has_help() -> None:
    for name in cli.commands:
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.stdout


def test_usage_error_exits_2() -> None:
    result = CliRunner().invoke(cli, ["info"])
    assert result.exit_code == 2


def test_entry_point_smoke() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "traceview",
            "info",
            str(GENERATED / "dense_sglang.json.gz"),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["kernels"] == truth("dense_sglang")["kernels"]
    proc = subprocess.run(
        [sys.executable, "-m", "traceview", "info", "/no/such/trace.json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == "Error: /no/such/trace.json: no such file\n"


def test_summarize_json_is_the_summary_document(scenario: str) -> None:
    import traceview as tv

    path = str(GENERATED / f"{scenario}.json.gz")
    result = CliRunner().invoke(cli, ["summarize", path, "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc == json.loads(tv.summarize(tv.load(path)).to_json())
    assert doc["steps"]["count"] == truth(scenario)["step_count"]
    for key in ("schema", "trace", "families", "steps", "decode_gaps", "busy"):
        assert key in doc
    assert set(doc["trace"]) >= {
        "path",
        "format",
        "events",
        "kernels",
        "skipped_events",
        "devices",
        "streams",
        "start_ns",
        "end_ns",
        "span_ns",
        "activity",
    }
    if any(0 < g["n"] < 100 for g in doc["decode_gaps"]):  # a p99 on few gaps is flagged
        assert "p99 rests on fewer than 100" in result.stderr


def test_summarize_table_shows_phases_and_gaps() -> None:
    result = CliRunner().invoke(cli, ["summarize", str(GENERATED / "hybrid_chunked.json.gz")])
    assert result.exit_code == 0
    out = result.stdout
    for text in (
        "layer families",
        "steps and cadence by phase",
        "decode gaps",
        "mixed",
        "linear_attention.prefill",
        "GPU busy",
    ):
        assert text in out


@pytest.mark.slow
def test_summarize_options(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(GENERATED / "hybrid_tight.json.gz")
    t = truth("hybrid_tight")
    for extra in (
        ["--layers", str(t["full_attention_layers"])],
        ["--steps", "bursts"],
        ["--device", "0"],
    ):
        result = CliRunner().invoke(cli, ["summarize", path, "--json", *extra])
        assert result.exit_code == 0, (extra, result.stderr)
        assert json.loads(result.stdout)["steps"]["count"] == t["step_count"]
    result = CliRunner().invoke(cli, ["summarize", path, "--device", "3"])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: {path}: device 3 has no kernels (devices: 0)"
    result = CliRunner().invoke(cli, ["summarize", path, "--step-gap", "soon"])
    assert result.exit_code == 2 and "--step-gap: 'soon' is not a duration" in result.stderr
    result = CliRunner().invoke(cli, ["summarize", path, "--steps", "annotations"])
    assert result.exit_code == 2 and "no per-step annotations" in result.stderr


@pytest.mark.slow
def test_steps_export_formats(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import polars as pl

    path = str(GENERATED / "dense_sglang.json.gz")
    t = truth("dense_sglang")
    anchors = [s["anchor_ns"] for s in t["steps"]]
    for fmt in ("csv", "json", "parquet"):
        out = tmp_path / f"steps.{fmt}"
        result = CliRunner().invoke(cli, ["steps", path, "-o", str(out)])
        assert result.exit_code == 0, result.stderr
        assert result.stderr.endswith(f"wrote {out} ({len(anchors)} steps)\n")  # as a chart
        df = {"csv": pl.read_csv, "json": pl.read_json, "parquet": pl.read_parquet}[fmt](out)
        assert df["anchor_ns"].to_list() == anchors
        assert df["annotation"].to_list() == [s["annotation"] for s in t["steps"]]
    again = CliRunner().invoke(cli, ["steps", path, "-o", str(tmp_path / "steps.csv")])
    assert again.exit_code == 2 and "already exists (use --force" in again.stderr
    forced = CliRunner().invoke(cli, ["steps", path, "-o", str(tmp_path / "steps.csv"), "--force"])
    assert forced.exit_code == 0
    # on the screen: ms from the first step's start, names cut; a file keeps ns and all
    table = CliRunner().invoke(cli, ["steps", path])
    assert table.exit_code == 0 and "anchor_ms" in table.stdout and "anchor_ns" not in table.stdout
    header = table.stdout.splitlines()[1].split()
    assert header[:4] == ["index", "start_ms", "interval_ms", "kind"]
    first_row = table.stdout.splitlines()[3].split()
    assert first_row[:2] == ["0", "0.0000"]
    second = table.stdout.splitlines()[4].split()
    interval = t["steps"][1]["interval_ns"] / 1e6
    assert float(second[2]) == pytest.approx(interval, abs=5e-4)
    longest = max(len(x) for x in table.stdout.splitlines()[3:])
    assert longest < 600  # annotations cut at 48 characters
    binary = CliRunner().invoke(cli, ["steps", path, "--format", "parquet"])
    assert binary.exit_code == 2 and "binary" in binary.stderr


# Every command that reads a file, given one it cannot use: one "Error:" line naming it,
# exit 2 (and check's failed bound: exit 1), never a traceback.
BAD_FILE_COMMANDS = [
    ["info", "{bad}"],
    ["summarize", "{bad}"],
    ["steps", "{bad}"],
    ["heartbeat", "{bad}", "-o", "{out}/h.png"],
    ["gaps", "{bad}", "-o", "{out}/g.png"],
    ["sql", "select 1", "{bad}"],
    ["diff", "{bad}", "{bad}"],
    ["check", "{bad}", "--max", "busy.fraction=1"],
    ["itl", "{bad}"],
    ["scan", "{bad}", "-o", "{out}/ds"],
]


@pytest.mark.parametrize("args", BAD_FILE_COMMANDS, ids=[a[0] for a in BAD_FILE_COMMANDS])
def test_every_command_meets_a_bad_file_with_one_line(tmp_path: Path, args: list[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"this is not a trace")
    argv = [a.format(bad=bad, out=tmp_path) for a in args]
    result = CliRunner().invoke(cli, argv)
    assert "Traceback" not in result.output + result.stderr
    if args[0] == "scan":  # a trace that fails is a row in errors/; every trace failed: 2
        assert result.exit_code == 2 and "bad.json" in result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith("Error: ")
        assert len(list((tmp_path / "ds" / "errors").glob("*.parquet"))) == 1
        return
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert str(bad) in lines[0] or "bad.json" in lines[0]


@pytest.mark.parametrize(
    "args",
    [["summarize", "--steps", "sideways", "x"], ["check", "x"], ["heartbeat", "a", "-o"]],
    ids=["bad-choice", "nothing-to-check", "missing-value"],
)
def test_bad_arguments_exit_2_with_an_error_line(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "Error:" in result.stderr and "Traceback" not in result.stderr


def test_a_failed_bound_exits_1_with_one_line() -> None:
    path = str(GENERATED / "hybrid_chunked.json.gz")
    result = CliRunner().invoke(cli, ["check", path, "--min", "busy.fraction=1.01"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == "Error: 1 of 1 check(s) failed"


def test_a_terminal_table_shows_the_columns_that_fit_and_cuts_long_cells() -> None:
    import io

    import polars as pl

    from traceview.render.base import TableRenderer

    df = pl.DataFrame({"a": [1, 2], "name": ["x" * 300, "short"], "b": [3, 4], "c": [5, 6]})
    out = io.BytesIO()
    TableRenderer(max_cell=48, width=54).render(df, out)
    lines = out.getvalue().decode().splitlines()
    assert lines[1].split() == ["a", "name"]
    assert "x" * 47 + "…" in out.getvalue().decode() and "x" * 49 not in out.getvalue().decode()
    assert lines[-1].startswith("2 more column(s) not shown: b, c (-o FILE")
    full = io.BytesIO()
    TableRenderer().render(df, full)  # a file: every column, every character
    assert "x" * 300 in full.getvalue().decode() and " c" in full.getvalue().decode()


def test_each_warning_prints_once_per_command_and_names_its_file() -> None:
    path = str(GENERATED / "hybrid_chunked.json.gz")
    for argv in (["summarize", path], ["diff", path, path]):  # one input, and one twice
        result = CliRunner().invoke(cli, argv)
        warned = [x for x in result.stderr.splitlines() if x.startswith("Warning:")]
        assert warned, argv
        assert len(warned) == len(set(warned))  # no line twice
        assert all(path in x for x in warned)  # each names its file
        small_n = [x for x in warned if "p99 rests on" in x]
        assert len(small_n) == 1  # one file, one warning, however many roles it plays


def test_repr_of_a_trace_and_a_summary_fit_a_screen() -> None:
    import traceview as tv

    trace = tv.load(GENERATED / "hybrid_chunked.json.gz")
    summary = tv.summarize(trace)
    for text in (repr(trace), repr(summary)):
        assert len(text.splitlines()) <= 15 and len(text) < 1500
    assert "token cadence   p50" in repr(summary)
    html = trace._repr_html_()
    assert html.startswith("<b>Trace</b>") and "<table>" in html and "NVIDIA H200" in html


@pytest.mark.slow  # every command on one odd trace (about 3 s): CI runs it
def test_device_activity_that_lasts_no_time_reads_and_draws(tmp_path: Path) -> None:
    """A hostile probe's finding: one 0 ns memset (a single-step trace whose device events
    all last 0 ns) was a ValueError traceback in every analysing command, and stopped a
    scan of its folder part way. It is one step of no time: busy has no fraction (a 0 ns
    window), and the charts say there is nothing to draw."""
    import polars as pl

    event = {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7}
    event |= {"ts": 1, "dur": 0, "args": {"device": 0, "stream": 7}}
    trace = tmp_path / "runs" / "z.json"
    trace.parent.mkdir()
    trace.write_text(json.dumps({"traceEvents": [event]}))
    done = CliRunner().invoke(cli, ["summarize", str(trace), "--json"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert (doc["trace"]["kernels"], doc["trace"]["span_ns"], doc["steps"]["count"]) == (1, 0, 1)
    assert doc["busy"]["busy_ns"] == 0 and doc["busy"]["fraction"] is None
    for args in (["heartbeat", "-o", "h.png"], ["report", "-o", "r.html"]):
        drawn = CliRunner().invoke(
            cli, [args[0], str(trace), *args[1:-1], str(tmp_path / args[-1])]
        )
        assert drawn.exit_code == 0, drawn.output
        assert "UserWarning" not in drawn.stderr and "Traceback" not in drawn.stderr
    shutil.copy(GENERATED / "dense_sglang.json.gz", trace.parent)
    scanned = CliRunner().invoke(cli, ["scan", str(trace.parent), "-o", str(tmp_path / "ds")])
    assert scanned.exit_code == 0 and "scanned 2" in scanned.stderr, scanned.output
    rows = pl.read_parquet(tmp_path / "ds" / "traces" / "*.parquet")
    assert sorted(rows["kernels"].to_list()) == [1, truth("dense_sglang")["kernels"]]
