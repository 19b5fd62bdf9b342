"""Figures no generated fixture pinned down, against plans of their own (tests/planned.py):
a trace holding two devices, the API figures on a trace that records CUDA-graph capture
before serving (and over a window), an unbounded prefill growth, each verdict's
thresholds, and a planted ``other`` idle cause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import DOC_REL, GENERATED, truth
from planned import (
    CAUSES,
    GROWTH_FROM_NOTHING,
    breakdown_trace,
    growth_from_nothing,
    line_ends,
    two_devices,
    two_prompts,
)
from test_analysis import check_against_truth

import traceview as tv
from fixtures.engine import SCENARIOS, build
from fixtures.truth import union_length
from traceview.analysis.documents.figures import trace_figures
from traceview.cli import cli

CAPTURE = GENERATED / "vllm_capture_then_serve.json.gz"


# --- two devices --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> tuple[tv.Trace, dict, dict]:
    path = tmp_path_factory.mktemp("two") / "two_devices.json.gz"
    first, second = two_devices(path)
    return tv.load(path), first, second


def _steps_as_planned(table: Any, t: dict) -> None:
    for col in ("start_ns", "anchor_ns", "end_ns", "kind", "kernels"):
        assert table[col].to_list() == [s[col] for s in t["steps"]], col


def _busy_row_as_planned(row: dict, t: dict, device: int) -> None:
    b = t["busy"]
    assert row["device"] == device
    assert (row["window_start_ns"], row["window_end_ns"], row["busy_ns"]) == (
        b["window_start_ns"],
        b["window_end_ns"],
        b["busy_ns"],
    )
    assert row["fraction"] == pytest.approx(b["fraction"], rel=DOC_REL)


@pytest.mark.slow
def test_the_default_device_is_the_one_with_the_most_kernel_time(
    two: tuple[tv.Trace, dict, dict],
) -> None:
    """Device 0 runs hybrid_chunked's plan, device 1 a shorter one: by default every
    figure is device 0's, as its plan says, and none of device 1's work leaks in."""
    trace, first, second = two
    assert sum(f["total_ns"] for f in first["families"].values()) > sum(
        f["total_ns"] for f in second["families"].values()
    )
    assert trace.devices == [0, 1]
    doc = tv.summarize(trace).to_dict()
    assert doc["busy"]["device"] == 0
    check_against_truth(doc, first)
    _steps_as_planned(tv.steps(trace), first)
    gaps = tv.decode_gaps(trace)
    assert gaps.height == next(g["n"] for g in first["decode_gaps"] if g["population"] == "all")


@pytest.mark.slow
def test_device_1_gives_the_second_plans_figures(two: tuple[tv.Trace, dict, dict]) -> None:
    """``device=1`` on every surface: the summary, steps (found from its kernels: it has
    no annotations), decode gaps, busy and families are the second plan's."""
    trace, _, second = two
    doc = tv.summarize(trace, tv.AnalysisConfig(device=1)).to_dict()
    assert doc["busy"]["device"] == 1
    check_against_truth(doc, second)
    assert doc["steps"]["method"] == "bursts"
    _steps_as_planned(tv.steps(trace, tv.AnalysisConfig(device=1)), second)
    gaps = tv.decode_gaps(trace, tv.AnalysisConfig(device=1))
    assert gaps.height == next(g["n"] for g in second["decode_gaps"] if g["population"] == "all")
    (row,) = tv.busy(trace, config=tv.AnalysisConfig(device=1)).to_dicts()
    _busy_row_as_planned(row, second, 1)
    fams = tv.families(trace, tv.AnalysisConfig(device=1))
    assert {
        r["family"]: {"count": r["count"], "total_ns": r["total_ns"]} for r in fams.to_dicts()
    } == second["families"]
    result = CliRunner().invoke(cli, ["summarize", str(trace.meta.path), "--device", "1", "--json"])
    assert result.exit_code == 0, result.stderr
    import orjson

    assert orjson.loads(result.stdout)["steps"]["count"] == second["step_count"]


def test_busy_is_the_analysed_devices(two: tuple[tv.Trace, dict, dict]) -> None:
    """tv.busy gives the analysed device's row: the default device's by default (one row,
    not one per device), device 1's with ``device=1``, each as its plan says."""
    trace, first, second = two
    (row,) = tv.busy(trace).to_dicts()
    _busy_row_as_planned(row, first, 0)
    (row,) = tv.busy(trace, config=tv.AnalysisConfig(device=1)).to_dicts()
    _busy_row_as_planned(row, second, 1)


# --- capture then serve: the API figures leave the start-up out -----------------------------


@pytest.fixture(scope="module")
def capture() -> tuple[tv.Trace, dict]:
    t = truth("vllm_capture_then_serve")
    assert t["capture"]["kernels"] > 0  # the start-up the figures must leave out
    return tv.load(CAPTURE), t


def _served_kernels() -> list[Any]:
    sc = next(s for s in SCENARIOS if s.name == "vllm_capture_then_serve")
    _, steps = build(sc)
    return [k for s in steps if s.kind != "warmup" for k in s.kernels]


def test_the_summary_on_capture_then_serve_is_the_serving_plans(
    capture: tuple[tv.Trace, dict],
) -> None:
    trace, t = capture
    doc = tv.summarize(trace).to_dict()
    check_against_truth(doc, t)
    assert doc["capture"] == t["capture"]


def test_steps_on_capture_then_serve_are_the_serving_steps(
    capture: tuple[tv.Trace, dict],
) -> None:
    trace, t = capture
    _steps_as_planned(tv.steps(trace), t)


def test_decode_gaps_on_capture_then_serve_are_the_serving_gaps(
    capture: tuple[tv.Trace, dict],
) -> None:
    trace, t = capture
    gaps = tv.decode_gaps(trace)
    for g in t["decode_gaps"]:
        sel = gaps if g["population"] == "all" else gaps.filter(population=g["population"])
        assert sel.height == g["n"], g["population"]
        assert int(sel["gap_ns"].max()) == g["max_ns"]
        assert int(sel["overlap"].sum()) == g["overlaps"]


def test_busy_on_capture_then_serve_leaves_the_capture_out(
    capture: tuple[tv.Trace, dict],
) -> None:
    """tv.busy's window and busy time are the serving plan's (the summary's), not the
    capture's kernels' too (before issue 33's fix: 0.674 over a window from the first
    capture kernel)."""
    trace, t = capture
    (row,) = tv.busy(trace).to_dicts()
    _busy_row_as_planned(row, t, 0)


def test_families_on_capture_then_serve_leave_the_capture_out(
    capture: tuple[tv.Trace, dict],
) -> None:
    trace, t = capture
    fams = tv.families(trace)
    assert {
        r["family"]: {"count": r["count"], "total_ns": r["total_ns"]} for r in fams.to_dicts()
    } == t["families"]


def test_kernels_on_capture_then_serve_leave_the_capture_out(
    capture: tuple[tv.Trace, dict],
) -> None:
    trace, _ = capture
    want: dict[str, tuple[int, int]] = {}
    for k in _served_kernels():
        n, ns = want.get(k.name, (0, 0))
        want[k.name] = (n + 1, ns + k.dur_ns)
    got = {r["name"]: (r["count"], r["total_ns"]) for r in tv.kernels(trace).to_dicts()}
    assert got == want


def test_busy_over_the_serving_window_is_the_plans(capture: tuple[tv.Trace, dict]) -> None:
    """A window given explicitly: the serving span, and its middle half (the capture lies
    before both): the plan's union of kernels inside it."""
    trace, t = capture
    served = [(k.ts_ns, k.end_ns) for k in _served_kernels()]
    lo, hi = t["busy"]["window_start_ns"], t["busy"]["window_end_ns"]
    quarter = (hi - lo) // 4
    for a, b in ((lo, hi), (lo + quarter, hi - quarter)):
        (row,) = tv.busy(trace, a, b).to_dicts()
        want = union_length(served, a, b)
        assert (row["window_start_ns"], row["window_end_ns"], row["busy_ns"]) == (a, b, want)
        # the fraction at the summary's precision (9 significant digits)
        assert row["fraction"] == pytest.approx(want / (b - a), rel=1e-8)


def test_busy_over_a_window_that_holds_the_capture_leaves_it_out(
    capture: tuple[tv.Trace, dict],
) -> None:
    """A window from the trace's first kernel (a capture kernel) to its last: only the
    serving kernels are busy time."""
    trace, t = capture
    served = [(k.ts_ns, k.end_ns) for k in _served_kernels()]
    a, b = t["in_trace"]["start_ns"], t["in_trace"]["end_ns"]
    (row,) = tv.busy(trace, a, b).to_dicts()
    assert row["busy_ns"] == union_length(served, a, b)


# --- prefill growth: the unbounded branch ------------------------------------------------------


def test_a_prompt_that_grows_from_nothing_has_unbounded_growth(tmp_path: Path) -> None:
    """Chunks of 64, 2,048 and 8,192 tokens: the least-squares line through them starts
    below zero, so the growth is unbounded (math.inf; null in JSON), and any
    --prefill-growth bound fails."""
    path, t = growth_from_nothing(tmp_path)
    first, last = line_ends(GROWTH_FROM_NOTHING)
    assert first <= 0 < last
    mixed = [s for s in t["steps"] if s["kind"] == "mixed"]
    doc = tv.summarize(tv.load(path)).to_dict()
    (growth,) = doc["work"]["prefill_growth"]
    assert growth == {
        "first_step": mixed[0]["index"],
        "last_step": mixed[-1]["index"],
        "steps": 3,
        "measure": "prompt_tokens",
        "measured_first": GROWTH_FROM_NOTHING[0],
        "measured_last": GROWTH_FROM_NOTHING[-1],
        "prefill_ns_first": mixed[0]["prefill_ns"],
        "prefill_ns_last": mixed[-1]["prefill_ns"],
        "growth": float("inf"),
        "first": GROWTH_FROM_NOTHING[0],  # the deprecated names, for one release
        "last": GROWTH_FROM_NOTHING[-1],
    }
    result = CliRunner().invoke(cli, ["check", str(path), "--prefill-growth", "1000000"])
    assert result.exit_code == 1, result.output


# --- each kind's cadence, pooled over its phases -----------------------------------------------


def test_each_kind_s_cadence_pools_the_intervals_inside_every_phase_of_it(
    tmp_path: Path,
) -> None:
    """``steps.cadence_by_kind`` (a run's and a dataset's ``decode_cadence_*`` and
    ``mixed_cadence_*``) on a plan with two mixed phases and three decode phases: each
    kind's percentiles are over the intervals inside every phase of the kind, pooled, and
    never over an interval that crosses into a phase (the plan's truth,
    fixtures/truth.py)."""
    path, t = two_prompts(tmp_path)
    assert [p["kind"] for p in t["phases"]] == ["decode", "mixed", "decode", "mixed", "decode"]
    summary = tv.summarize(tv.load(path))
    by_kind = summary.to_dict()["steps"]["cadence_by_kind"]
    assert by_kind == t["cadence_by_kind"]
    for kind, planted in (("decode", [4, 3, 5]), ("mixed", [3, 4])):
        phases = [p for p in t["phases"] if p["kind"] == kind]
        assert [p["steps"] for p in phases] == planted
        assert by_kind[kind]["n"] == sum(n - 1 for n in planted)  # no crossing interval
        assert by_kind[kind]["max_ns"] == max(p["cadence"]["max_ns"] for p in phases)
        inside = [
            s["interval_ns"]
            for p in phases
            for s in t["steps"][p["first_step"] + 1 : p["last_step"] + 1]
        ]
        assert by_kind[kind]["p50_ns"] == round(float(np.percentile(inside, 50)))
    assert by_kind["prefill"]["n"] == 0
    # every surface reads the same pooled figure: a run's and a dataset's flat fields
    figures = trace_figures(summary.document)
    assert figures["mixed_cadence_n"] == by_kind["mixed"]["n"] == 5
    assert figures["mixed_cadence_p50_ns"] == by_kind["mixed"]["p50_ns"]
    assert figures["decode_cadence_p99_ns"] == by_kind["decode"]["p99_ns"]


# --- the verdict at each threshold ----------------------------------------------------------

STEPS = 5  # four pauses; busy 5 x 800 µs = 4 ms


def _planned_verdict(plan: dict) -> str:
    """docs/metrics.md, in integers: host-bound when host_late + sync >= 20% of the span;
    device-bound when busy >= 80% of it and not host-bound; balanced otherwise."""
    host = plan["idle_ns"]["host_late"] + plan["idle_ns"]["sync"]
    if 5 * host >= plan["span_ns"]:
        return "host-bound"
    if 5 * plan["busy_ns"] >= 4 * plan["span_ns"]:
        return "device-bound"
    return "balanced"


@pytest.mark.parametrize(
    ("pause_ns", "host_late_ns", "verdict"),
    [
        # span 6 ms: host_late 4 x 300 µs is 20% exactly; busy 67%
        (500_000, 299_999, "balanced"),
        (500_000, 300_000, "host-bound"),
        (500_000, 300_001, "host-bound"),
        # busy 4 ms of a 5 ms span is 80% exactly; host_late 8%
        (250_001, 100_000, "balanced"),
        (250_000, 100_000, "device-bound"),
        (249_999, 100_000, "device-bound"),
        # both at once (20% host_late, 80% busy): host-bound comes first
        (250_000, 250_000, "host-bound"),
    ],
)
def test_the_verdict_at_its_thresholds(
    tmp_path: Path, pause_ns: int, host_late_ns: int, verdict: str
) -> None:
    path = tmp_path / "phase.json.gz"
    plan = breakdown_trace(path, steps=STEPS, pause_ns=pause_ns, host_late_ns=host_late_ns)
    assert _planned_verdict(plan) == verdict  # the case sits where it says it does
    (phase,) = tv.summarize(tv.load(path)).to_dict()["time_breakdown"]
    assert (phase["span_ns"], phase["busy_ns"], phase["idle_ns"]) == (
        plan["span_ns"],
        plan["busy_ns"],
        plan["idle_ns"],
    )
    assert phase["verdict"] == verdict


# --- a planted "other" idle cause -----------------------------------------------------------


def test_a_kernel_with_no_submitting_call_leaves_other_idle(tmp_path: Path) -> None:
    """In one step a kernel no launch call links to starts 20 µs after the one before it:
    that idle is ``other``, next to planted host_late, launch and dependency idle, per step
    and per phase, to the ns."""
    path = tmp_path / "other.json.gz"
    plan = breakdown_trace(
        path,
        steps=STEPS,
        pause_ns=500_000,
        host_late_ns=300_000,
        other_ns=20_000,
        dependency_ns=30_000,
    )
    summary = tv.summarize(tv.load(path))
    columns = ["start_ns", "end_ns", "busy_ns", *(f"idle_{c}_ns" for c in CAUSES)]
    want = [
        {
            "start_ns": s["start_ns"],
            "end_ns": s["end_ns"],
            "busy_ns": s["busy_ns"],
            **{f"idle_{c}_ns": s["idle"][c] for c in CAUSES},
        }
        for s in plan["steps"]
    ]
    assert summary.steps.select(columns).to_dicts() == want
    assert plan["idle_ns"]["other"] == 20_000 and want[1]["idle_other_ns"] == 20_000
    (phase,) = summary.to_dict()["time_breakdown"]
    assert phase["idle_ns"] == plan["idle_ns"]
    assert phase["busy_ns"] == plan["busy_ns"] and phase["span_ns"] == plan["span_ns"]
    # the busy window is the phase: first kernel to last
    assert summary.to_dict()["busy"]["fraction"] == pytest.approx(
        plan["busy_ns"] / plan["span_ns"], rel=DOC_REL
    )
