"""Trace text is data: names that hold rich markup, ESC sequences, an OSC window title and
bidi overrides reach the terminal as visible characters, never as commands, and never stop
a command with a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fixtures.build import TraceBuilder
from traceview.cli import cli
from traceview.render.safe import terminal

HOSTILE = "[/x] [link=https://example.invalid]click[/link] \x1b[2J\x1b]0;pwned\x07 \u202eevil"


def _hostile_trace(path: Path) -> Path:
    tb = TraceBuilder(gpu_name=f"GPU {HOSTILE}")
    t = 1_000_000
    for _step in range(30):
        for layer in range(4):
            tb.kernel(f"flash_fwd_kernel {HOSTILE}", t, 20_000)
            tb.kernel(f"gemm {HOSTILE}" if layer % 2 else "sm90_xmma_gemm", t + 25_000, 50_000)
            t += 100_000
        t += 400_000
    return tb.write(path)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _hostile_trace(tmp_path_factory.mktemp("hostile") / "h.json.gz")


@pytest.mark.parametrize(
    "args",
    [
        ["summarize"],
        ["info"],
        ["steps"],
        ["diff", "{trace}"],
        ["check", "--max", "busy.fraction=1"],
    ],
    ids=lambda a: a[0],
)
def test_hostile_names_are_shown_not_obeyed(hostile: Path, args: list[str]) -> None:
    argv = [args[0], str(hostile), *[a.replace("{trace}", str(hostile)) for a in args[1:]]]
    result = CliRunner().invoke(cli, argv, terminal_width=200)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 0, result.output
    for stream in (result.stdout, result.stderr):
        assert "\x1b" not in stream and "\x07" not in stream and "\u202e" not in stream
    if args[0] in ("summarize", "info", "diff"):
        assert "[/x]" in result.stdout  # shown as the characters it is
        assert "\\x1b[2J" in result.stdout and "\\u202e" in result.stdout


def test_terminal_makes_every_control_visible() -> None:
    assert terminal("a\x1b[31mb") == "a\\x1b[31mb"
    assert terminal("\x9b\x07\x00") == "\\x9b\\x07\\x00"
    assert terminal("x\u202ey\u2066z") == "x\\u202ey\\u2066z"
    assert terminal("tab\tand newline\n[b]µs·") == "tab\tand newline\n[b]µs·"


def test_dollar_signs_in_names_and_titles_are_text_not_math(tmp_path: Path) -> None:
    """A ``$`` in a file name or --title once ended the chart commands in a mathtext
    traceback."""
    src = tmp_path / "run_$5_$6.json.gz"
    _hostile_trace(src)
    for argv in (
        ["heartbeat", str(src), "-o", str(tmp_path / "h.png"), "--title", "cost $5 $\\frac"],
        ["gaps", str(src), "-o", str(tmp_path / "g.png"), "--title", "$x^2$ and $"],
        ["report", str(src), "-o", str(tmp_path / "r.html")],
    ):
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code == 0, (argv[0], result.output, result.exception)
