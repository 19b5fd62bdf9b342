"""The tree shows the flow: no folder holds more than 15 modules, and no module imports,
through any chain, a module that imports it back, counting imports inside functions and the
package ``__init__`` every import runs (the layers themselves are import-linter's contracts
in pyproject.toml, run by CI)."""

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


def dependencies(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """Each module's dependencies: every module it names in an import, at the top or inside
    a function (grimp reads both), and the packages Python runs on the way to one (importing
    ``a.b.c`` runs ``a/b/__init__.py``) but the importer's own (they ran before it)."""
    out: dict[str, set[str]] = {}
    for module in graph.modules:
        own = {module.rsplit(".", k)[0] for k in range(1, module.count(".") + 1)}
        named = set(graph.find_modules_directly_imported_by(module))
        on_the_way = {
            ".".join(parts[:k])
            for parts in (m.split(".") for m in named)
            for k in range(1, len(parts))
        }
        out[module] = (named | on_the_way - own) - {module}
    return out


def cycles(deps: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    without recursion): each is a set of modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(deps):
        if root in index:
            continue
        work = [(root, iter(sorted(deps[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in deps), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(deps[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_cycles_through_packages_and_functions() -> None:
    """The finder itself, on hand-made graphs: a cycle through a package's ``__init__`` (a
    module imports ``p.m`` inside a function, and ``p`` imports it back) and a package that
    imports its own module which imports the package back."""
    through_package = {"t._io": {"t.load.remote", "t.load"}, "t.load": {"t._io"}}
    through_package["t.load.remote"] = set()
    assert cycles(through_package) == [["t._io", "t.load"]]
    own = {"t.sql": {"t.sql.engine"}, "t.sql.engine": {"t.sql"}}
    assert cycles(own) == [["t.sql", "t.sql.engine"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycle(graph: grimp.ImportGraph) -> None:
    """No module reaches itself through its imports: an import inside a function counts
    (it is still a dependency), and so does the package ``__init__`` an import runs."""
    deps = dependencies(graph)
    assert "traceview.loader" in deps["traceview.cli._options"]  # the package on the way
    found = cycles(deps)
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_the_analysis_packages_say_what_they_own() -> None:
    for init in (ROOT / "traceview" / "analysis").glob("*/__init__.py"):
        text = init.read_text()
        assert text.startswith('"""') and len(text) > 80, init
    assert Path(ROOT / "traceview" / "analysis" / "__init__.py").read_text().count(":mod:") >= 7
