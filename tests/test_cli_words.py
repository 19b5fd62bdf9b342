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
    (["summarize", TRACE, "--layers", "0"], "Invalid value for '--layers'", "traceview summarize"),
    (["check", TRACE], "nothing to check", "traceview check"),
    (["sumarize", TRACE], "No such command 'sumarize'. Did you mean 'summarize'?", "traceview"),
    (
        ["summarize", TRACE, "--jsn"],
        "Did you mean one of: '--jobs', '--json'?",
        "traceview summarize",
    ),
    (["cache", "clr"], "No such command 'clr'", "traceview cache"),
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
