"""Every fixture's and shared trace's summary JSON equals its file in tests/golden/: integers,
strings and nulls exactly, floats within ``REL_TOL`` (a float's last digit may move with the
CPU's kernels; a figure may not). A change that means to move no figure (a refactor, a faster
loader) shows that it did not. When a figure changes on purpose, ``python -m tests.golden``
shows what moved and ``--accept`` writes it; say which and why in the commit."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from tests.golden import GOLDEN, REL_TOL, cases, differences, main, render

CASES = cases()
# the shared traces this large (gzipped) are summarized with the long tests (CI runs them),
# as is the 8-rank run; every smaller one, and every fixture, in the default run
LARGE_BYTES = 1_300_000


def _large(paths: list[Path]) -> bool:
    return any(p.is_dir() or p.stat().st_size > LARGE_BYTES for p in paths)


@pytest.mark.parametrize(
    "name,paths",
    [pytest.param(*c, marks=[pytest.mark.slow] if _large(c[1]) else [], id=c[0]) for c in CASES],
)
def test_summary_json_is_unchanged(name: str, paths: list[Path]) -> None:
    golden = GOLDEN / f"{name}.json"
    assert golden.is_file(), f"no golden file for {name}: run python -m tests.golden --accept"
    diff = differences(orjson.loads(golden.read_bytes()), orjson.loads(render(paths)))
    assert not diff, f"{name}: {len(diff)} figures changed:\n" + "\n".join(diff[:40])


def test_every_golden_file_has_a_case() -> None:
    """A golden file whose input is gone would otherwise go unchecked forever."""
    names = {c[0] for c in CASES}
    stale = [
        p.stem
        for p in GOLDEN.glob("*.json")
        if p.stem not in names and p.stem.startswith("fixture-")
    ]
    assert not stale


def test_differences_name_each_path_and_tolerate_only_float_noise() -> None:
    old = {"a": {"b": [1, 2.5, "x"]}, "f": 0.1, "n": None, "i": 3, "gone": 1}
    noise = {"a": {"b": [1, 2.5 * (1 + REL_TOL / 10), "x"]}, "f": 0.1, "n": None, "i": 3, "gone": 1}
    assert differences(old, noise) == []
    new = {"a": {"b": [1, 2.6, "y"]}, "f": 0.1, "n": 0, "i": 3.0, "new": 2}
    assert differences(old, new) == [
        "$.a.b[1]: 2.5 -> 2.6",
        '$.a.b[2]: "x" -> "y"',
        "$.gone: removed (was 1)",
        "$.i: 3 -> 3.0",
        "$.n: null -> 0",
        "$.new: added (2)",
    ]
    assert differences([1, 2], [1]) == ["$: 2 items -> 1"]
    assert differences({"t": True}, {"t": 1}) == ["$.t: true -> 1"]


@pytest.mark.slow
def test_the_golden_tool_shows_the_diff_and_writes_only_with_accept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "fixture-hybrid_chunked"
    shutil.copy(GOLDEN / f"{name}.json", tmp_path / f"{name}.json")
    doc = orjson.loads((tmp_path / f"{name}.json").read_bytes())
    true_count, true_fraction = doc["steps"]["count"], doc["busy"]["fraction"]
    doc["steps"]["count"] += 1
    doc["busy"]["fraction"] /= 2
    tampered = orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"
    (tmp_path / f"{name}.json").write_bytes(tampered)

    assert main(["--golden", str(tmp_path), "--only", name]) == 1
    out = capsys.readouterr().out
    assert f"$.steps.count: {true_count + 1} -> {true_count}" in out
    assert f"$.busy.fraction: {true_fraction / 2} -> {true_fraction}" in out
    assert "nothing written" in out
    assert (tmp_path / f"{name}.json").read_bytes() == tampered

    assert main(["--golden", str(tmp_path), "--only", name, "--accept"]) == 0
    assert (tmp_path / f"{name}.json").read_bytes() == (GOLDEN / f"{name}.json").read_bytes()
    assert main(["--golden", str(tmp_path), "--only", name]) == 0
    assert "no figure would change" in capsys.readouterr().out
