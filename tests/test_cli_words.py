"""The command line's words: a usage error is one line; an option is named as typed; a
window is quoted as written; a file name's line break is escaped on every surface."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import GENERATED

from traceview.cli import cli

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
