"""One rule for every writer (traceview._io.check_output): no command writes over one of its
inputs, an existing output needs --force, an unknown suffix names the known ones, a folder
where a file is expected is one line; and annotate replaces its own overlay."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GENERATED

from traceview.cli import cli

SRC = GENERATED / "dense_sglang.json.gz"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    copy = tmp_path / "t.json.gz"
    shutil.copyfile(SRC, copy)
    return copy


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(argv))
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, result.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "{t}", "-o", "{t}"],
        ["report", "{t}", "-o", "{t}", "--force"],
        ["heartbeat", "{t}", "-o", "{t}", "--force"],
        ["annotate", "{t}", "-o", "{t}", "--force"],
        ["steps", "{t}", "-o", "{t}", "--format", "csv", "--force"],
        ["sql", "-e", "select 1 as x", "{t}", "-o", "{t}", "--format", "csv", "--force"],
        ["report", "{dir}", "-o", "{t}", "--force"],  # a run's rank trace is an input too
        ["report", "{t}", "-o", "{link}", "--force"],  # a hard link is the same file
    ],
    ids=["report", "report-force", "heartbeat", "annotate", "steps", "sql", "run", "link"],
)
def test_no_command_writes_over_an_input(trace: Path, argv: list[str]) -> None:
    link = trace.parent / "link.html"
    os.link(trace, link)
    before = _digest(trace)
    subs = {"{t}": str(trace), "{dir}": str(trace.parent), "{link}": str(link)}
    code, err = _run(*(subs.get(a, a) for a in argv))
    assert code == 2
    assert "is one of this command's inputs" in err and err.count("\n") == 1
    assert _digest(trace) == before


@pytest.mark.parametrize(
    ("command", "suffix"),
    [
        pytest.param("report", ".html", marks=pytest.mark.slow),
        ("heartbeat", ".png"),
        ("gaps", ".svg"),
        ("annotate", ".json"),
        ("steps", ".csv"),
        ("sql", ".csv"),
    ],
)
def test_an_existing_output_needs_force(trace: Path, command: str, suffix: str) -> None:
    out = trace.parent / f"out{suffix}"
    out.write_text("keep me")
    argv = ["sql", "-e", "select 1 as x", str(trace)] if command == "sql" else [command, str(trace)]
    code, err = _run(*argv, "-o", str(out))
    assert code == 2 and "already exists (use --force to overwrite)" in err
    assert out.read_text() == "keep me"
    code, err = _run(*argv, "-o", str(out), "--force")
    assert code == 0, err
    assert out.read_bytes() != b"keep me"


@pytest.mark.parametrize(
    ("command", "name", "known"),
    [
        ("steps", "steps.xlsx", ".txt, .csv, .json, .parquet"),
        ("sql", "rows.xlsx", ".txt, .csv, .json, .parquet"),
        ("report", "page.pdf", ".html, .htm"),
        ("heartbeat", "chart.jpg", ".png, .svg, .pdf"),
        ("annotate", "t.txt", ".json, .json.gz"),
    ],
)
def test_an_unknown_suffix_names_the_known_ones(
    trace: Path, command: str, name: str, known: str
) -> None:
    out = trace.parent / name
    argv = ["sql", "-e", "select 1 as x", str(trace)] if command == "sql" else [command, str(trace)]
    code, err = _run(*argv, "-o", str(out))
    assert code == 2 and "unknown output suffix" in err and known in err
    assert not out.exists()


@pytest.mark.parametrize("command", ["report", "heartbeat", "annotate", "steps"])
def test_a_folder_where_a_file_is_expected_is_one_line(trace: Path, command: str) -> None:
    folder = trace.parent / {"report": "x.html", "heartbeat": "x.png"}.get(command, "x.json")
    folder.mkdir()
    code, err = _run(command, str(trace), "-o", str(folder), "--force")
    assert code == 2 and err.count("\n") == 1
    assert "is a folder" in err or "is a directory" in err
    assert folder.is_dir() and not any(folder.iterdir())


def _overlay_processes(path: Path) -> tuple[int, int]:
    """(traceview process_name events, traceview events) in an annotated trace."""
    doc = json.loads(
        gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    )
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    mine = [e for e in events if str(e.get("cat", "")).startswith("traceview")]
    names = [e for e in mine if e.get("name") == "process_name"]
    return len(names), len(mine)


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_annotate_replaces_its_own_overlay(trace: Path, suffix: str) -> None:
    once, twice = trace.parent / f"once{suffix}", trace.parent / f"twice{suffix}"
    assert _run("annotate", str(trace), "-o", str(once))[0] == 0
    assert _run("annotate", str(once), "-o", str(twice))[0] == 0
    first, second = _overlay_processes(once), _overlay_processes(twice)
    assert first[0] == 1 and second == first
    original = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    doc = json.loads(
        twice.read_bytes() if suffix == ".json" else gzip.decompress(twice.read_bytes())
    )
    kept = [e for e in doc["traceEvents"] if not str(e.get("cat", "")).startswith("traceview")]
    assert kept == original
    s1 = CliRunner().invoke(cli, ["summarize", "--json", str(once)]).stdout
    s2 = CliRunner().invoke(cli, ["summarize", "--json", str(twice)]).stdout
    strip = lambda s: {k: v for k, v in json.loads(s).items() if k != "trace"}  # noqa: E731
    assert strip(s1) == strip(s2)


@pytest.mark.parametrize(
    "before_close",
    [None, b"}]", b"}\n\n\t ]", b"}\r\n]"],
    ids=["as-written", "tight", "blanks", "crlf"],
)
def test_annotate_twice_keeps_the_original_text_byte_for_byte(
    tmp_path: Path, before_close: bytes | None
) -> None:
    """docs/perfetto.md: the original text is kept byte for byte, the overlay inserted
    just before the ``]`` that closes traceEvents; annotating the annotated trace replaces
    the overlay and keeps the original's own blanks before that ``]`` (it once lost 3)."""
    text = gzip.decompress(SRC.read_bytes())
    close = text.index(b'],\n  "traceName"')  # the fixture's traceEvents closes here
    head, tail = text[:close], text[close:]
    assert head.rstrip().endswith(b"}")
    if before_close is not None:  # the same events, other blanks before the ]
        head = head.rstrip()[:-1] + before_close[:-1]
    original = tmp_path / "t.json"
    original.write_bytes(head + tail)
    once, twice = tmp_path / "once.json", tmp_path / "twice.json"
    assert _run("annotate", str(original), "-o", str(once))[0] == 0
    assert _run("annotate", str(once), "-o", str(twice))[0] == 0
    for annotated in (once, twice):
        data = annotated.read_bytes()
        # the original's text before the ] and from the ] on, each as it was
        assert data.startswith(head) and data.endswith(tail)
        overlay = data[len(head) : len(data) - len(tail)]
        assert overlay.startswith(b",\n{") and overlay.endswith(b"}\n")
    assert twice.read_bytes() == once.read_bytes()


def test_annotate_a_run_into_a_file_is_one_line(tmp_path: Path) -> None:
    from fixtures.ranks import RankRun, build

    run = tmp_path / "run"
    build(RankRun(ranks=2, slow_rank=1, steps=6), run)
    target = tmp_path / "file.json"
    target.write_text("keep")
    code, err = _run("annotate", str(run), "-o", str(target), "-j", "1")
    assert code == 2 and "not a folder" in err and target.read_text() == "keep"
    folder = tmp_path / "out"
    assert _run("annotate", str(run), "-o", str(folder), "-j", "1")[0] == 0
    code, err = _run("annotate", str(run), "-o", str(folder), "-j", "1")
    assert code == 2 and "already exists" in err
    assert _run("annotate", str(run), "-o", str(folder), "-j", "1", "--force")[0] == 0
