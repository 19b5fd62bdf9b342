"""The tree shows the flow (issue 33): no folder holds more than 15 modules, and no module
imports, through any chain, a module that imports it back (the layers themselves are
import-linter's contracts in pyproject.toml, run by CI)."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest
from conftest import ROOT

MAX_MODULES = 15


def test_no_folder_holds_more_than_15_modules() -> None:
    crowded = {
        str(folder.relative_to(ROOT)): n
        for folder in (ROOT / "traceview").rglob("*")
        if folder.is_dir()
        and (n := len([p for p in folder.glob("*.py") if p.name != "__init__.py"])) > MAX_MODULES
    }
    assert not crowded, crowded


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("traceview", exclude_type_checking_imports=True)


def test_no_import_cycle(graph: grimp.ImportGraph) -> None:
    """Every pair of modules that reach each other is a cycle; there are none (an import
    inside a function counts too: it is still a dependency)."""
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if imported == module or imported.startswith(module + "."):
                continue
            if module.startswith(imported + "."):
                continue  # a package's __init__ importing its own module
            if graph.chain_exists(importer=imported, imported=module):
                cycles.append(f"{module} -> {imported} -> … -> {module}")
    assert not cycles, "\n".join(cycles[:20])


def test_the_analysis_packages_say_what_they_own() -> None:
    for init in (ROOT / "traceview" / "analysis").glob("*/__init__.py"):
        text = init.read_text()
        assert text.startswith('"""') and len(text) > 80, init
    assert Path(ROOT / "traceview" / "analysis" / "__init__.py").read_text().count(":mod:") >= 7
