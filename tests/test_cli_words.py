"""The command line's words: a usage error is one line; an option is named as typed; a
window is quoted as written; a file name's line break is escaped on every surface."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GENERATED, truth

from traceview.cli import cli
from traceview.errors import UsageError

TRACE = str(GENERATED / "hybrid_chunked.json.gz")


def _invoke(args: list[str]) -> tuple[int, str]:
    r = CliRunner().invoke(cli, args, prog_name="traceview")
    return r.exit_code, r.stderr


# (arguments, what click says, the command whose help the line points to)
USAGE_ERRORS = [
    (["summarize", TRACE, "--sumary"], "No such option '--sumary'", "traceview summarize"),
    (["summarize", TRACE, "--layers", "0"], "Error: --layers: 0 is not", "traceview summarize"),
    # a value click refuses is named as traceview's own checks name one (a hostile probe:
    # "Invalid value for '--device'" beside "--device: -1 is not ...")
    (
        ["summarize", TRACE, "--device", "abc"],
        "Error: --device: 'abc' is not",
        "traceview summarize",
    ),
    (["summarize", TRACE, "--workers", "0"], "Error: --workers: 0 is not", "traceview summarize"),
    (
        ["heartbeat", TRACE, "-o", "x.png", "--style", "pink"],
        "Error: --style: 'pink' is not one of",
        "traceview heartbeat",
    ),
    (["check", TRACE], "nothing to check", "traceview check"),
    (["sumarize", TRACE], "No such command 'sumarize'. Did you mean 'summarize'?", "traceview"),
    (
        ["summarize", TRACE, "--jsn"],
        "Did you mean one of: '--jobs', '--json'?",
        "traceview summarize",
    ),
    (["cache", "clr"], "No such command 'clr'", "traceview cache"),
    (["report", TRACE], "Missing option '-o' / '--output'.", "traceview report"),
    (["summarize"], "Missing argument 'TRACES...'.", "traceview summarize"),
    (["--bogus"], "No such option '--bogus'", "traceview"),
]


@pytest.mark.parametrize(("args", "said", "where"), USAGE_ERRORS)
def test_a_usage_error_is_one_line(args: list[str], said: str, where: str) -> None:
    code, err = _invoke(args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("Error: "), err
    assert said in err
    assert err.endswith(f" (see '{where} --help')\n")
    assert "Usage:" not in err and "Try '" not in err


def test_a_usage_error_is_one_line_in_a_real_run() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "traceview", "sumarize", TRACE],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        "Error: No such command 'sumarize'. Did you mean 'summarize'? (see 'traceview --help')\n"
    )


def test_no_arguments_still_show_the_help() -> None:
    r = CliRunner().invoke(cli, ["cache"], prog_name="traceview")
    assert "Usage: traceview cache" in r.output and "Error" not in r.output


# (option and value as typed, the planted bounds of the problem); the config's field name
# (device, layers, step_gap_ns) must not show
OPTION_ERRORS = [
    (["--device", "-1"], "--device: -1 is not an integer from 0 to 9223372036854775807"),
    (["--device", "99999999999999999999"], "--device: 99999999999999999999 is not an integer"),
    (["--layers", "257"], "--layers: 257 is not an integer from 1 to 256"),
]


@pytest.mark.parametrize(("typed", "said"), OPTION_ERRORS)
def test_an_analysis_option_is_named_as_typed(typed: list[str], said: str) -> None:
    code, err = _invoke(["summarize", TRACE, *typed])
    assert code == 2
    assert err.startswith(f"Error: {said}") and err.count("\n") == 1, err


def test_every_config_field_error_is_named_by_its_option() -> None:
    """Below click's own checks (``--layers`` is an IntRange from 1), the config's errors
    are named by their option too."""
    from traceview.cli._options import analysis_config

    given: dict[str, object] = {"preset": "default", "rules": None, "steps_method": "auto"}
    given |= {"layers": None, "step_gap": None, "device": None, "gpu": None, "model": None}
    for change, option in (({"device": -1}, "--device"), ({"layers": 0}, "--layers")):
        with pytest.raises(UsageError) as err:
            analysis_config(**(given | change))  # type: ignore[arg-type]
        assert str(err.value).startswith(f"{option}: ")


def test_a_window_outside_the_trace_is_quoted_as_written(tmp_path: Path) -> None:
    out = tmp_path / "h.png"
    code, err = _invoke(["heartbeat", TRACE, "-o", str(out), "--window", "10s:20s"])
    assert code == 2 and not out.exists()
    planted = truth("hybrid_chunked")
    span_ms = (planted["end_ns"] - planted["start_ns"]) / 1e6  # 726.901862 ms
    error = err.splitlines()[-1]
    assert error.startswith(f"Error: {TRACE}: --window '10s:20s' is outside the trace, ")
    assert f"which spans 0-{span_ms:.3f} ms from its first kernel" in error


def test_a_window_outside_the_trace_from_the_api_names_window_ms() -> None:
    """The library's own words name its argument, not the command line's option."""
    import traceview as tv
    from traceview.errors import TraceviewError
    from traceview.render.charts import heartbeat_data

    summary = tv.analyze(TRACE).summary
    with pytest.raises(TraceviewError) as err:
        heartbeat_data(summary, window_ms=(10000.0, 20000.0))
    assert "window_ms=(10000, 20000) is outside the trace" in str(err.value)
    assert "--window" not in str(err.value)


# a file, a GPU and a kernel whose names hold a line break; each is shown with it escaped as
# \x0a (as the Warning: and Error: lines show it), never as a break that starts a new row
NAME = "new\nline.json.gz"
GPU = "GPU one\ntwo"
KERNEL = "gemm kern\nel"


def _named_trace(path: Path, steps: int) -> Path:
    from fixtures.build import TraceBuilder

    tb = TraceBuilder(gpu_name=GPU)
    t = 1_000_000
    for _step in range(steps):
        for layer in range(4):
            tb.kernel("flash_fwd_kernel", t, 20_000)
            tb.kernel(KERNEL if layer % 2 else "sm90_xmma_gemm", t + 25_000, 50_000)
            t += 100_000
        t += 400_000
    return tb.write(path)


@pytest.fixture
def named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    monkeypatch.chdir(tmp_path)
    _named_trace(tmp_path / NAME, 30)
    _named_trace(tmp_path / "b.json.gz", 45)
    return NAME, "b.json.gz"


def _rows(stdout: str) -> list[list[str]]:
    return [row.split() for row in stdout.splitlines()]


@pytest.mark.parametrize("command", ["summarize", "info"])
def test_a_line_break_in_the_path_and_gpu_rows_is_escaped(
    named: tuple[str, str], command: str
) -> None:
    r = CliRunner().invoke(cli, [command, named[0]], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    rows = _rows(r.stdout)
    assert ["path", "new\\x0aline.json.gz"] in rows
    gpu = next(row for row in rows if row[:1] == ["GPU"])
    assert gpu[1:3] == ["GPU", "one\\x0atwo"]
    assert not any(row[:1] in (["line.json.gz"], ["two"]) for row in rows)


def test_a_line_break_in_the_diff_tables_is_escaped(named: tuple[str, str]) -> None:
    r = CliRunner().invoke(cli, ["diff", *named], env={"COLUMNS": "200"})
    assert r.exit_code in (0, 1), r.output
    rows = _rows(r.stdout)
    assert ["A", "=", "new\\x0aline.json.gz"] in rows
    assert any(row[:4] == ["│", "gemm", "kern\\x0ael", "│"] for row in rows), r.stdout
    assert not any(row[:1] in (["line.json.gz"], ["el"]) for row in rows)
    assert not any(row[:2] == ["│", "el"] for row in rows)


def test_a_line_break_in_the_markdown_diff_is_escaped(named: tuple[str, str]) -> None:
    r = CliRunner().invoke(cli, ["diff", *named, "--format", "markdown"])
    assert r.exit_code in (0, 1), r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("**traceview diff**: A = `new\\x0aline.json.gz`, B = ")
    assert any(row.startswith("| `gemm kern\\x0ael` | ") for row in lines), r.stdout


def test_a_line_break_in_a_query_table_is_escaped() -> None:
    """The steps and sql tables: a cell, and a column's name, stay on their row."""
    import io

    import polars as pl

    from traceview.render.base import TableRenderer

    out = io.BytesIO()
    TableRenderer().render(pl.DataFrame({"col\numn": ["kern\nel"]}), out)
    rows = [row for row in _rows(out.getvalue().decode()) if row]
    assert len(rows) == 3  # header, rule, one row
    assert rows[0] == ["col\\x0aumn"] and rows[2] == ["kern\\x0ael"]


def test_a_line_break_in_a_family_name_stays_on_its_line() -> None:
    """The gap lines under the summary ("in the gaps …", "widest … gaps …") printed a family
    name (from a rules file) with its line break, so its tail read as a line of its own."""
    import copy
    import io

    from rich.console import Console

    import traceview as tv
    from traceview.render.table import render_summary

    doc = copy.deepcopy(tv.summarize(str(GENERATED / "hybrid_chunked.json.gz")).to_dict())
    forged = "gemm\nError: forged"
    for g in doc["decode_gaps"]:
        for fill in (g.get("filled"), g.get("widest")):
            if fill:
                fill["busy_by_family"] = {forged: fill["busy_ns"]}
    buf = io.StringIO()
    render_summary(doc, Console(file=buf, width=400, highlight=False))  # type: ignore[arg-type]
    lines = buf.getvalue().splitlines()
    assert any("gemm\\x0aError: forged" in ln for ln in lines)
    assert not any(ln.lstrip().startswith("Error: forged") for ln in lines)


def test_a_line_break_in_the_marker_kernels_name_stays_in_the_gap_tables_title() -> None:
    """The decode-gap table's title names the marker kernel; its line break started a
    line of its own (found by a review)."""
    import copy
    import io

    from rich.console import Console

    import traceview as tv
    from traceview.render.table import render_summary

    doc = copy.deepcopy(tv.summarize(str(GENERATED / "hybrid_chunked.json.gz")).to_dict())
    doc["decode_marker_kernels"] = ["BatchDecode\nFAKE ROW kernel"]
    buf = io.StringIO()
    render_summary(doc, Console(file=buf, width=400, highlight=False))  # type: ignore[arg-type]
    lines = buf.getvalue().splitlines()
    assert any("BatchDecode\\x0aFAKE" in ln for ln in lines), lines  # the title may wrap
    assert not any(ln.lstrip().startswith("FAKE ROW") for ln in lines)


def test_a_negative_window_end_is_said_to_be_negative() -> None:
    """A hostile probe's finding: ``--window=-5ms:10ms`` said "'-5ms' is not a duration; a
    duration needs a unit", though it has one."""
    code, err = _invoke(["heartbeat", TRACE, "-o", "w.png", "--window=-5ms:10ms"])
    assert code == 2 and err == "Error: --window: '-5ms' is negative; a duration is 0 or more\n"
