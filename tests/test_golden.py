"""Every fixture's and shared trace's summary JSON equals its file in tests/golden/, byte for
byte: a change that means to move no figure (a refactor, a faster loader) shows that it did
not. Regenerate with ``python -m tests.golden --write`` only when a figure changes on
purpose, and say which and why in the commit."""

from __future__ import annotations

import pytest

from tests.golden import GOLDEN, cases, render

CASES = cases()


@pytest.mark.parametrize("name,paths", CASES, ids=[c[0] for c in CASES])
def test_summary_json_is_unchanged(name: str, paths: list) -> None:
    golden = GOLDEN / f"{name}.json"
    assert golden.is_file(), f"no golden file for {name}: run python -m tests.golden --write"
    got = render(paths)
    if got != golden.read_bytes():
        import difflib

        diff = difflib.unified_diff(
            golden.read_text().splitlines(),
            got.decode().splitlines(),
            "golden",
            "now",
            n=1,
            lineterm="",
        )
        pytest.fail(f"{name}: summary JSON changed:\n" + "\n".join(list(diff)[:40]))


def test_every_golden_file_has_a_case() -> None:
    """A golden file whose input is gone would otherwise go unchecked forever."""
    names = {c[0] for c in CASES}
    stale = [
        p.stem
        for p in GOLDEN.glob("*.json")
        if p.stem not in names and p.stem.startswith("fixture-")
    ]
    assert not stale
