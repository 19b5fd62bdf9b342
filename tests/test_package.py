"""The package's names (traceview/__init__.py): each is imported when first used, so
``import traceview`` is cheap, and each is the same object, whichever order a program
imports things in. Every check runs in a fresh interpreter: this one has imported all."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import GENERATED, ROOT

import traceview as tv


def _python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_traceview_imports_neither_polars_nor_the_analysis() -> None:
    said = _python(
        "import sys, traceview\n"
        "print(sorted(m for m in ('polars', 'numpy', 'traceview.load', 'traceview.analysis')"
        " if m in sys.modules))"
    )
    assert said.strip() == "[]"


def test_load_only_imports_no_analysis() -> None:
    path = GENERATED / "dense_sglang.json.gz"
    said = _python(
        f"import sys, traceview as tv\ntv.load({str(path)!r})\n"
        "print('traceview.analysis' in sys.modules, 'matplotlib' in sys.modules)"
    )
    assert said.split() == ["False", "False"]


@pytest.mark.parametrize(
    "first",
    [
        "import traceview.load.json, traceview.sql.embedded",  # the subpackages before the names
        "from traceview.analysis.analyze import analyze",  # which imports the loader
        "import traceview; traceview.summarize",  # an analysis name first
        "from traceview import *",
    ],
)
def test_load_and_sql_are_the_functions_whatever_was_imported_first(first: str) -> None:
    said = _python(
        f"{first}\nimport traceview as tv\nfrom traceview import load, sql\n"
        "print(callable(tv.load), tv.load is load, tv.sql is sql, tv.sql is tv.run_sql,"
        " type(tv.load).__name__)"
    )
    assert said.split() == ["True", "True", "True", "True", "function"]


def test_an_analysis_name_brings_its_drawings() -> None:
    """A summary shows as its HTML table in a notebook, and an analysis draws its chart,
    once any analysis name was used (nothing else imported by hand)."""
    path = GENERATED / "dense_sglang.json.gz"
    said = _python(
        f"import traceview as tv\ns = tv.summarize({str(path)!r})\n"
        "print(s._repr_html_().startswith('<div>'))\n"
        "from traceview.analysis.documents import display\n"
        "print(bool(display._heartbeat), bool(display._diff_markdown))"
    )
    assert said.split() == ["True", "True", "True"]


def test_diff_markdown_on_the_command_line_is_markdown() -> None:
    a, b = (str(GENERATED / f"{n}.json.gz") for n in ("dense_sglang", "dense_vllm_detailed"))
    done = subprocess.run(
        [sys.executable, "-m", "traceview", "diff", a, b, "--format", "markdown"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "| section | metric | A | B | B/A | verdict |" in done.stdout
    assert "```json" not in done.stdout


def test_every_public_name_resolves_and_is_listed() -> None:
    assert sorted(dir(tv)) == sorted({*dir(tv), *tv.__all__})
    for name in tv.__all__:
        assert getattr(tv, name) is not None, name
    assert isinstance(tv.__version__, str) and tv.__version__
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        _ = tv.nonesuch  # type: ignore[attr-defined]


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["summarize", "--help"]])
def test_the_command_s_help_imports_neither_polars_nor_the_analysis(args: list[str]) -> None:
    """``traceview --help`` answers without the loader or the analysis (STYLE: the heavy
    imports happen inside the command that needs them)."""
    said = _python(
        "import sys\nfrom traceview.cli import cli\n"
        f"try:\n    cli.main({args!r}, prog_name='traceview')\n"
        "except SystemExit as done:\n    assert done.code in (0, None), done.code\n"
        "print(sorted(m for m in ('polars', 'numpy', 'matplotlib', 'traceview.load',"
        " 'traceview.analysis', 'traceview.render.charts') if m in sys.modules))"
    )
    assert said.splitlines()[-1] == "[]"
