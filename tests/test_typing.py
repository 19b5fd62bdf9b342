"""Typed all the way: no public function outside capture/ (where torch is untyped) returns
``Any``, and the count of ``Any`` outside capture/ may only fall. When it falls, lower
``ANY_BUDGET`` to the new count so it cannot creep back."""

from __future__ import annotations

import ast
import re

import pytest
from conftest import ROOT

PACKAGE = ROOT / "traceview"
ANY_BUDGET = 92  # uses of Any outside capture/, as counted below


def _modules() -> list[tuple[str, ast.Module, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("traceview/capture/"):
            continue
        text = path.read_text()
        out.append((rel, ast.parse(text), text))
    return out


def _public_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    """Module-level functions and public classes' methods whose names do not start with _."""
    found: list[ast.FunctionDef] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            found.append(node)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            found += [
                f
                for f in node.body
                if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")
            ]
    return found


@pytest.mark.slow
def test_no_public_function_returns_any() -> None:
    offenders = [
        f"{rel}:{f.name} -> {ast.unparse(f.returns)}"
        for rel, tree, _ in _modules()
        for f in _public_functions(tree)
        if f.returns is not None and re.search(r"\bAny\b", ast.unparse(f.returns))
    ]
    assert not offenders, "public functions returning Any:\n" + "\n".join(offenders)


@pytest.mark.slow
def test_the_count_of_any_outside_capture_does_not_grow() -> None:
    uses = sum(
        len(re.findall(r"\bAny\b", line))
        for _, _, text in _modules()
        for line in text.splitlines()
        if not line.lstrip().startswith(("from ", "import ", "#"))
    )
    print(f"Any outside capture/: {uses} (budget {ANY_BUDGET})")
    assert uses <= ANY_BUDGET, f"{uses} uses of Any outside capture/ (budget {ANY_BUDGET})"


def test_no_module_is_over_600_lines() -> None:
    """One job per module (docs/design.md): a module past ~600 lines is doing two."""
    long = [
        f"{p.relative_to(ROOT)}: {n}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > 600
    ]
    assert not long, f"modules over 600 lines: {long}"
