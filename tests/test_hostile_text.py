"""Trace text is data: names that hold rich markup, ESC sequences, an OSC window title and
bidi overrides reach the terminal as visible characters, never as commands, and never stop
a command with a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import html5lib
import pytest
from click.testing import CliRunner

from fixtures.build import TraceBuilder
from traceview.cli import cli
from traceview.render.safe import terminal

HOSTILE = (
    "[/x] [link=https://example.invalid]click[/link] \x1b[2J\x1b]0;pwned\x07 \u202eevil"
    " row\u2028break zero\u200bwidth"
)
UNSEEN = ("\x1b", "\x07", "\u202e", "\u2028", "\u200b")  # never printed as themselves


def _hostile_trace(path: Path, text: str = HOSTILE, steps: int = 30) -> Path:
    """A dense decode trace whose GPU and kernel names hold ``text``."""
    tb = TraceBuilder(gpu_name=f"GPU {text}")
    t = 1_000_000
    for _step in range(steps):
        for layer in range(4):
            tb.kernel(f"flash_fwd_kernel {text}", t, 20_000)
            tb.kernel(f"gemm {text}" if layer % 2 else "sm90_xmma_gemm", t + 25_000, 50_000)
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
        ["diff", "{other}"],  # against a longer run of it: its kernels are listed
        ["check", "--max", "busy.fraction=1"],
    ],
    ids=lambda a: a[0],
)
def test_hostile_names_are_shown_not_obeyed(hostile: Path, args: list[str]) -> None:
    other = hostile.parent / "longer.json.gz"
    if not other.exists():
        _hostile_trace(other, steps=45)
    argv = [args[0], str(hostile), *[a.replace("{other}", str(other)) for a in args[1:]]]
    result = CliRunner().invoke(cli, argv, terminal_width=200)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 0, result.output
    for stream in (result.stdout, result.stderr):
        assert not [c for c in UNSEEN if c in stream], stream
    if args[0] in ("summarize", "info", "diff"):
        assert "[/x]" in result.stdout  # shown as the characters it is
        assert "\\x1b[2J" in result.stdout and "\\u202e" in result.stdout


def test_terminal_makes_every_control_visible() -> None:
    assert terminal("a\x1b[31mb") == "a\\x1b[31mb"
    assert terminal("\x9b\x07\x00") == "\\x9b\\x07\\x00"
    assert terminal("x\u202ey\u2066z") == "x\\u202ey\\u2066z"
    assert (
        terminal("a\u2028b\u2029c\u200bd\ufeffe\xadf") == "a\\u2028b\\u2029c\\u200bd\\ufeffe\\xadf"
    )
    assert terminal("gemm\U000e0041") == "gemm\\U000e0041"  # a tag: it looks like "gemm"
    assert terminal("a\u200db") == "a\u200db"  # a joiner: scripts and emoji need it
    assert terminal("tab\tand newline\n[b]µs·") == "tab\tand newline\n[b]µs·"


@pytest.mark.slow
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


MARKUP = "`a|b` <!--<script>alert(1)</script></div> & [l](https://x.invalid) *b* $x$"


def _markup_trace(path: Path, steps: int) -> Path:
    return _hostile_trace(path, MARKUP, steps)


def test_markdown_diff_keeps_its_table_shape(tmp_path: Path) -> None:
    """A backtick or pipe in a kernel name once broke ``diff --format markdown``'s table."""
    from markdown_it import MarkdownIt

    a, b = _markup_trace(tmp_path / "a`|.json.gz", 30), _markup_trace(tmp_path / "b.json.gz", 34)
    result = CliRunner().invoke(cli, ["diff", str(a), str(b), "--format", "markdown"])
    assert result.exit_code == 0, result.output
    page = html5lib.parse(
        MarkdownIt("commonmark").enable("table").render(result.stdout),
        namespaceHTMLElements=False,
    )
    tables = page.findall(".//table")
    assert [len(t.find("thead/tr")) for t in tables] == [6, 5]
    for table in tables:
        widths = {len(tr) for tr in table.findall("tbody/tr")}
        assert widths == {len(table.find("thead/tr"))}
    assert page.find(".//script") is None and page.find(".//a") is None
    names = ["".join(c.itertext()) for c in tables[1].findall("tbody/tr/td[1]")]
    assert f"gemm {MARKUP}"[:67] + "..." in names
    header = "".join(page.find(".//p").itertext())
    assert "a`|.json.gz" in header


@pytest.mark.slow
def test_report_sections_survive_script_text_in_names(tmp_path: Path) -> None:
    """``<!--<script>`` in a GPU name once made a browser's parser swallow the second summary
    and the diff, and the embedded JSON became invalid. html5lib parses as browsers do."""
    a, b = _markup_trace(tmp_path / "a.json.gz", 30), _markup_trace(tmp_path / "b.json.gz", 34)
    out = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["report", str(a), str(b), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = html5lib.parse(out.read_text(encoding="utf-8"), namespaceHTMLElements=False)
    body = page.find("body")
    assert [e.tag for e in body if e.tag == "script"] == ["script"] * 3
    headings = ["".join(h.itertext()) for h in body.findall("h2")]
    assert headings[:2] == ["Heartbeat", "What changed (B against A)"]
    assert headings[2].startswith("A — ") and headings[3].startswith("B — ")
    docs = {s.get("id"): json.loads(s.text) for s in body.findall("script")}
    for i, path in enumerate((a, b)):
        assert docs[f"traceview-summary-{i}"]["trace"]["gpu"] == f"GPU {MARKUP}"
        assert docs[f"traceview-summary-{i}"]["trace"]["path"] == str(path)
    assert docs["traceview-diff"]["rows"]
    gpu_cells = [
        "".join(tr[1].itertext())
        for t in body.findall(".//table[@class='facts']")
        for tr in t.iter("tr")
        if "".join(tr[0].itertext()) == "GPU"
    ]
    assert gpu_cells == [f"GPU {MARKUP} (device 0)"] * 2
    assert not [e for e in page.iter() if e.tag == "a"]


@pytest.mark.slow
def test_hostile_names_through_the_writing_commands(hostile: Path, tmp_path: Path) -> None:
    """The commands that write files and the dataset scan take the hostile trace too: no
    traceback, no raw control byte on the terminal, and their files read back."""
    out = tmp_path
    for argv in (
        ["heartbeat", str(hostile), "-o", str(out / "h.svg")],
        ["gaps", str(hostile), "-o", str(out / "g.svg")],
        ["report", str(hostile), "-o", str(out / "r.html")],
        ["annotate", str(hostile), "-o", str(out / "a.json")],
        ["steps", str(hostile), "-o", str(out / "s.csv")],
        ["sql", "-e", "select name from slice limit 5", str(hostile)],
        ["scan", str(hostile), "-o", str(out / "ds"), "-j", "1"],
    ):
        result = CliRunner().invoke(cli, argv, terminal_width=200)
        assert result.exit_code == 0, (argv[0], result.output, result.exception)
        for stream in (result.stdout, result.stderr):
            assert not [c for c in UNSEEN if c in stream], stream
    assert json.loads((out / "a.json").read_bytes())["traceEvents"]
    import polars as pl

    names = pl.read_parquet(out / "ds" / "families" / "*.parquet")
    assert names.height > 0


@pytest.mark.slow  # two traces of 3,000-character names: about 2 s
def test_a_long_kernel_name_takes_two_rows_of_diffs_table(tmp_path: Path) -> None:
    """A hostile probe's finding: each full CK template name wrapped over about 65 rows of
    diff's kernel table (233 lines for one diff); it is cut at 140 characters, with an
    ellipsis."""
    name = "TT<" + ", ".join(f"ck::Sequence<{i}, {i + 1}>" for i in range(120)) + ">"
    a = _hostile_trace(tmp_path / "a.json.gz", text=name, steps=30)
    b = _hostile_trace(tmp_path / "b.json.gz", text=name, steps=45)
    done = CliRunner().invoke(cli, ["diff", str(a), str(b)], terminal_width=120)
    assert done.exit_code == 0, done.output
    table = done.stdout[done.stdout.index("kernels that changed most") :]
    rows = [line for line in table.splitlines() if "ck::Sequence" in line]
    # two kernels carry the name: 140 characters each, a few rows at 80 columns (it was 60)
    assert rows and len(rows) <= 2 * 6, len(rows)
    assert "…" in done.stdout
