"""The package's names (traceview/__init__.py): each is imported when first used, so
``import traceview`` is cheap, and each is the same object, whichever order a program
imports things in. Every check runs in a fresh interpreter: this one has imported all."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

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
        "print(sorted(m for m in ('polars', 'numpy', 'traceview.loader',"
        " 'traceview.analysis.analyze', 'traceview.render.markup') if m in sys.modules))"
    )
    assert said.strip() == "[]"


def test_load_only_imports_no_analysis() -> None:
    path = GENERATED / "dense_sglang.json.gz"
    said = _python(
        f"import sys, traceview as tv\ntv.load({str(path)!r})\n"
        "print('traceview.analysis.analyze' in sys.modules, 'matplotlib' in sys.modules)"
    )
    assert said.split() == ["False", "False"]


@pytest.mark.parametrize(
    "first",
    [
        "import traceview.loader.json, traceview.sqlengine.embedded",  # subpackages first
        "from traceview.analysis.analyze import analyze",  # which imports the loader
        "import traceview; traceview.summarize",  # an analysis name first
        "from traceview import *",
    ],
)
def test_load_and_run_sql_are_the_functions_whatever_was_imported_first(first: str) -> None:
    """No public function is named like a subpackage, so no import rebinds one, and the
    package is a plain module (no class swapped in to guard its attributes)."""
    said = _python(
        f"{first}\nimport types, traceview as tv\nfrom traceview import load, run_sql\n"
        "print(callable(tv.load), tv.load is load, tv.run_sql is run_sql,"
        " type(tv.load).__name__, type(tv) is types.ModuleType)"
    )
    assert said.split() == ["True", "True", "True", "function", "True"]


def test_no_public_function_is_named_like_a_module() -> None:
    """A public function named like a subpackage or module would be rebound to it by its
    import (Python binds a submodule to its parent's attribute)."""
    subpackages = {p.name for p in (ROOT / "traceview").iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem for p in (ROOT / "traceview").glob("*.py")}
    functions = {n for n in tv.__all__ if isinstance(getattr(tv, n), types.FunctionType)}
    assert {"load", "run_sql", "analyze"} <= functions
    assert not functions & (subpackages | modules)


@pytest.mark.parametrize(
    ("old", "new"),
    [("sql", "run_sql"), ("device_spec", "load_gpu"), ("DeviceSpec", "GpuSpec")],
)
def test_a_deprecated_name_still_works_and_warns(old: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"traceview.{old} is deprecated.*traceview.{new}"):
        assert getattr(tv, old) is getattr(tv, new)
    assert old not in tv.__all__ and new in tv.__all__


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


@pytest.mark.parametrize(
    "made",
    [
        pytest.param(
            "from traceview.analysis.shortcuts import summarize\ns = summarize(PATH)",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "from traceview.analysis.analyze import analyze\ns = analyze(PATH).summary",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "import pickle, traceview as tv\ns = pickle.loads(pickle.dumps(tv.summarize(PATH)))",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_what_a_submodule_made_draws_itself(made: str) -> None:
    """A summary, a diff and an analysis made through a module imported directly (no
    ``tv.`` name read) draw as through the package: HTML, markdown, a chart."""
    path = GENERATED / "dense_sglang.json.gz"
    said = _python(
        f"PATH = {str(path)!r}\n{made}\n"
        "print(s._repr_html_().startswith('<div>'))\n"
        "from traceview.analysis.documents.compare import diff\n"
        "print(diff(s, s).to_markdown().startswith('**traceview diff**'))\n"
        "from traceview.analysis.analyze import analyze\n"
        "from traceview.loader import load\n"
        "print(type(analyze(load(PATH)).heartbeat()).__name__)"
    )
    assert said.split() == ["True", "True", "Figure"]


def test_subpackages_are_attributes_of_the_package() -> None:
    said = _python(
        "import traceview\n"
        "print(traceview.batch.__name__, traceview.units.__name__,"
        " traceview.model.Trace.__name__, callable(traceview.load))\n"
        "import traceview.batch.dataset\nprint(traceview.batch.dataset.committed.__name__)"
    )
    assert said.split() == ["traceview.batch", "traceview.units", "Trace", "True", "committed"]


@pytest.mark.slow  # mypy over the package: about 3 s (35 s with polars' own types read)
def test_a_misspelt_name_is_a_type_error(tmp_path: Path) -> None:
    """The package is typed (py.typed): a type checker knows its names, and no others.
    Third-party packages are left out (``--no-site-packages``: polars and numpy are Any);
    the names checked here are traceview's own."""
    user = tmp_path / "user.py"
    user.write_text(
        "from traceview import summarise\nimport traceview as tv\n"
        "tv.analyse(1)\nreveal_type(tv.summarize)\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-incremental",
            "--follow-imports=silent",
            "--no-site-packages",
            str(user),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 2, done.stdout
    assert 'has no attribute "summarise"' in errors[0] or "summarise" in errors[0], errors
    assert "analyse" in errors[1], errors
    assert "def (" in done.stdout  # summarize's own signature, not Any


@pytest.mark.slow  # a whole interpreter; the in-process diff markdown: tests/test_compare.py
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
    listed = {name for name in dir(tv) if not name.startswith("__")}
    assert listed == {name for name in tv.__all__ if not name.startswith("__")}
    assert "__version__" in dir(tv)
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
        "print(sorted(m for m in ('polars', 'numpy', 'matplotlib', 'traceview.loader',"
        " 'traceview.analysis.analyze', 'traceview.render.charts') if m in sys.modules))"
    )
    assert said.splitlines()[-1] == "[]"
