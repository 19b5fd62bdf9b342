"""A trace file whose name is not UTF-8 (issue 32): Python reads its bytes as lone
surrogates, which no parquet column, JSON document, font or terminal takes. Shown, each
such byte is the visible escape ``\\xff``; stored (a dataset's ``path`` and ``run``, a
document's ``trace.path``), the name round-trips through :func:`traceview.paths.local`."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import GENERATED

from traceview.cli import cli
from traceview.paths import local, stored
from traceview.render.safe import chart, terminal

NAME = b"latin1-\xff.json.gz"
SHOWN = "latin1-\\xff.json.gz"


@pytest.mark.parametrize(
    "name",
    [
        NAME,
        b"\xff\xfe\x80",
        b"a\\xff",  # the escape's own text, in a UTF-8 name
        b"a\\\xff",  # a backslash before a byte that is not UTF-8
        b"a\\\\xff\\",
        b"a\\\\\\x80",
        b"a\\xFF\\x7f\\b",
        b"caf\xc3\xa9 \\ plain.json.gz",
        b"\xc3",  # half a UTF-8 character
    ],
)
def test_a_stored_name_is_utf8_and_gives_the_name_back(name: bytes) -> None:
    text = os.fsdecode(name)
    kept = stored(text)
    kept.encode("utf-8")  # parquet, JSON and fonts take it
    assert os.fsencode(local(kept)) == name


def test_a_utf8_name_is_its_own_stored_text() -> None:
    for name in ("plain.json.gz", "a\\b", "x\\x41", "café/ü \\xFF"):
        assert stored(name) == name == local(name)


def test_no_two_names_store_the_same() -> None:
    names = [b"a\\xff", b"a\xff", b"a\\\xff", b"a\\\\xff", b"a\\x", b"a\\"]
    kept = {stored(os.fsdecode(n)) for n in names}
    assert len(kept) == len(names)


def test_shown_the_byte_is_a_visible_escape() -> None:
    text = os.fsdecode(NAME)
    assert terminal(text) == chart(text) == SHOWN
    assert terminal("\ud800x") == "\\ud800x"  # a lone surrogate of any other kind


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """tmp_path/traces holding dense_sglang under a name that is not UTF-8, and a file
    that is not a trace under another."""
    where = tmp_path / "traces"
    where.mkdir()
    try:
        shutil.copyfile(GENERATED / "dense_sglang.json.gz", os.fsdecode(bytes(where) + b"/" + NAME))
        (where / os.fsdecode(b"bad-\xfe.json")).write_bytes(b"garbage")
    except (OSError, UnicodeError):
        pytest.skip("this file system takes UTF-8 names only")
    return where


def _run(*argv: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(argv))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.stdout, result.stderr


def test_scan_stores_the_name_and_a_rescan_knows_it(folder: Path, tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    trace = os.fsdecode(bytes(folder) + b"/" + NAME)
    for jobs, said in (("1", "scanned 1, skipped 0"), ("2", "scanned 0, skipped 1")):
        code, out, err = _run("scan", str(folder), "-o", str(ds), "-j", jobs)
        assert code == 0, err
        assert said in out + err and "failed 1" in out + err
        assert "\udcfe" not in err and "bad-\\xfe.json" in err
    (row,) = pl.read_parquet(ds / "traces" / "*.parquet").select("path", "run").rows()
    assert row == (stored(trace), SHOWN)
    assert local(row[0]) == trace and Path(local(row[0])).is_file()
    (err_row,) = pl.read_parquet(ds / "errors" / "*.parquet").select("path", "run").rows()
    bad = os.fsdecode(bytes(folder) + b"/bad-\xfe.json")
    assert local(err_row[0]) == bad and err_row[1] == "bad-\\xfe.json"
    steps = pl.read_parquet(ds / "steps" / "*.parquet")
    assert steps["run"].unique().to_list() == [SHOWN] and steps.height > 0


def test_the_documents_name_it_escaped(folder: Path) -> None:
    trace = os.fsdecode(bytes(folder) + b"/" + NAME)
    for argv in (["summarize", "--json"], ["info", "--json"]):
        code, out, err = _run(*argv, trace)
        assert code == 0, err
        doc = json.loads(out)
        assert local(doc["trace"]["path"] if argv[0] == "summarize" else doc["path"]) == trace
    shown = CliRunner().invoke(cli, ["summarize", trace], env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    assert SHOWN in shown.stdout and "\udcff" not in shown.output


@pytest.mark.parametrize(
    ("command", "suffix"),
    [("heartbeat", "png"), ("gaps", "png"), pytest.param("report", "html", marks=pytest.mark.slow)],
)
def test_the_charts_and_the_report_title_it_escaped(
    folder: Path, tmp_path: Path, command: str, suffix: str
) -> None:
    trace = os.fsdecode(bytes(folder) + b"/" + NAME)
    target = tmp_path / f"out.{suffix}"
    code, _out, err = _run(command, trace, "-o", str(target))
    assert code == 0, err
    assert target.stat().st_size > 0 and "\udcff" not in err
    if suffix == "html":
        assert SHOWN in target.read_text(encoding="utf-8")
