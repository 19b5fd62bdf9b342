"""``traceview itl``: victims' inter-token latency from a probe file, against planted gaps;
a malformed probe file is one line naming its line, exit 2 (a hostile probe's findings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceview.cli import cli


def _probe(tmp_path: Path, rows: list[object]) -> Path:
    path = tmp_path / "probe.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_gaps_are_the_planted_ones(tmp_path: Path) -> None:
    # victim 0: tokens at 0, 100, 300, 600 ns; victim 1: 50, 450 (out of order in the file)
    rows: list[object] = [
        {"event": "inject_start", "t_ns": 250},
        {"event": "inject_end", "t_ns": 500},
        {"victim": 1, "token": 1, "t_ns": 450},
        *({"victim": 0, "token": k, "t_ns": t} for k, t in enumerate((0, 100, 300, 600))),
        {"victim": 1, "token": 0, "t_ns": 50},
        {"note": "a record of another kind (a later probe's): not read"},
    ]
    done = CliRunner().invoke(cli, ["itl", str(_probe(tmp_path, rows)), "--json"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert (doc["victims"], doc["window_ns"]) == (2, 250)
    assert doc["all"]["n"] == 4 and doc["all"]["max_ns"] == 400  # 100, 200, 300, 400
    assert doc["injection"]["n"] == 2  # the tokens at 300 and 450 arrived inside it
    assert doc["all"]["p50_ns"] == 250  # the middle of 200 and 300
    assert doc["injection"]["max_ns"] == 400 and doc["injection"]["p50_ns"] == 300


WINDOW = [{"event": "inject_start", "t_ns": 100}, {"event": "inject_end", "t_ns": 1000}]


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        (
            [*WINDOW, *({"victim": 0, "token": k, "t_ns": t} for k, t in enumerate((500, 200)))],
            "victim 0's token 1 arrived at 200 ns, before its token 0 (500 ns)",
        ),
        (
            [{"event": "inject_start", "t_ns": 900}, {"event": "inject_end", "t_ns": 100}],
            "the injection ends (100 ns) before it starts (900 ns)",
        ),
        ([*WINDOW, 5], "line 3: not a probe record"),
        (
            [*WINDOW, {"victim": 0, "token": 0}],
            "line 3: 't_ns' must be a whole number (it is missing)",
        ),
        ([*WINDOW, {"victim": 0, "token": 0, "t_ns": "abc"}], "line 3: 't_ns' must be a whole"),
        ([*WINDOW, {"victim": "a", "token": 0, "t_ns": 1}], "line 3: 'victim' must be a whole"),
        ([{"event": "inject_start"}], "line 1: 't_ns' must be a whole number (it is missing)"),
        ([*WINDOW, {"victim": 0, "token": 0, "t_ns": 1e30}], "line 3: 't_ns' must be a whole"),
        (
            [*WINDOW, {"victim": 0, "token": 0, "t_ns": 2**70}],
            "line 3: 't_ns' must be a whole number (it is float 1.18",
        ),
        ([*WINDOW, {"victim": 0, "token": 0, "t_ns": True}], "line 3: 't_ns' must be a whole"),
        ([*WINDOW, {"victim": 0, "token": 0, "t_ns": -5}], "line 3: 't_ns' -5 is out of range"),
        ([*WINDOW, {"event": "inject_start", "t_ns": 5}], "line 3: a second inject_start"),
        (
            [*WINDOW, *({"victim": 0, "token": 0, "t_ns": t} for t in (1, 2))],
            "line 4: victim 0's token 0 is given twice",
        ),
    ],
    ids=[
        "backwards",
        "window-reversed",
        "bare-number",
        "no-time",
        "text-time",
        "text-victim",
        "event-no-time",
        "float-time",
        "huge-time",
        "bool-time",
        "negative-time",
        "second-start",
        "token-twice",
    ],
)
def test_a_malformed_probe_is_one_line_naming_it(
    tmp_path: Path, rows: list[object], said: str
) -> None:
    path = _probe(tmp_path, rows)
    for args in ([], ["--json"]):
        done = CliRunner().invoke(cli, ["itl", str(path), *args])
        assert done.exit_code == 2, done.output
        assert done.stderr.startswith(f"Error: {path}: "), done.stderr
        assert said in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
