"""The generated fixtures are up to date and their plans are what they claim."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import GENERATED, ROOT, truth

from fixtures.engine import SCENARIOS


@pytest.mark.slow  # CI's check of the generated fixtures
def test_committed_fixtures_are_up_to_date() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fixtures.generate", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_fixtures_are_small() -> None:
    for path in GENERATED.glob("*.json.gz"):
        assert path.stat().st_size < 1_000_000, path


def test_truth_is_self_consistent(scenario: str) -> None:
    t = truth(scenario)
    steps = t["steps"]
    # the steps that hold warm-up keep their rows; the figures are the others'
    serving = [s for s in steps if s["warmup"] is None]
    assert t["step_count"] == len(serving)
    assert sum(p["steps"] for p in t["phases"]) == len(serving)
    pairs = sum(
        a["warmup"] is None and b["warmup"] is None for a, b in zip(steps, steps[1:], strict=False)
    )
    assert t["cadence"]["n"] == pairs
    for a, b in zip(steps, steps[1:], strict=False):
        assert a["end_ns"] == b["start_ns"] < b["anchor_ns"]
        assert b["interval_ns"] == b["anchor_ns"] - a["anchor_ns"]
    held = sum(s["kernels"] for s in steps if s["warmup"] is not None)
    assert sum(f["count"] for f in t["families"].values()) == t["kernels"] - held
    kinds = [p["kind"] for p in t["phases"]]
    sc = next(s for s in SCENARIOS if s.name == scenario)
    # every plan prompts but the pure-decode captures of Part 1's batch sweep (cost_batch*)
    planned = any(kind != "decode" for kind, *_ in sc.steps_plan)
    prompts = bool(sc.monolithic or sc.chunks or sc.chunk_sizes or planned)
    assert kinds[0] == "decode" and bool({"mixed", "prefill"} & set(kinds)) == prompts
    for p, q in zip(t["phases"], t["phases"][1:], strict=False):  # a phase ends where
        assert p["kind"] != q["kind"] or q["first_step"] > p["last_step"] + 1  # or warm-up
    gaps = {d["population"]: d for d in t["decode_gaps"]}
    assert gaps["all"]["n"] == gaps["decode"]["n"] + gaps["mixed"]["n"]
    assert 0 < t["busy"]["fraction"] < 1


def test_scenarios_cover_what_issue_asks() -> None:
    by = {s.name: s for s in SCENARIOS}
    assert any(s.chunks for s in SCENARIOS) and any(s.monolithic for s in SCENARIOS)
    assert {s.annotations for s in SCENARIOS} >= {"none", "vllm-cpu", "vllm-gpu", "sglang-cpu"}
    assert any(s.shuffle for s in SCENARIOS) and any(s.old_categories for s in SCENARIOS)
    assert len({s.layers for s in SCENARIOS}) >= 3
    assert by["hybrid_tight"].pause_ns[0] < 2 * by["hybrid_tight"].launch_gap_ns[1]
