"""Small traces planned in the tests, and what their plans say, for figures the generated
fixtures do not cover (a prompt whose chunks grow from nearly nothing, a second device).
Everything here is computed from the plan (fixtures/engine.py, fixtures/truth.py), never
from traceview."""

from __future__ import annotations

import bisect
import dataclasses
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from fixtures.build import Event, TraceBuilder
from fixtures.engine import (
    CATEGORY,
    DRIVER_LAUNCHED,
    SCENARIOS,
    PlannedKernel,
    PlannedStep,
    Scenario,
    build,
    plan_steps,
)
from fixtures.truth import planned_gaps, truth, union_length

HYBRID_CHUNKED = next(sc for sc in SCENARIOS if sc.name == "hybrid_chunked")

# a prompt prefilled in three chunks that grow from 64 tokens to 8,192: the least-squares
# line through them starts below zero, so its growth is unbounded
GROWTH_FROM_NOTHING = [64, 2_048, 8_192]


def growth_from_nothing(out: Path) -> tuple[Path, dict[str, Any]]:
    """A vLLM trace (CPU annotations that state each step's context tokens) whose one
    mixed phase prefills :data:`GROWTH_FROM_NOTHING`; its path and the plan's truth."""
    sc = dataclasses.replace(HYBRID_CHUNKED, name="growth_from_nothing")
    kinds = [("decode", 0, -1)] * 6
    kinds += [("mixed", tokens, c) for c, tokens in enumerate(GROWTH_FROM_NOTHING)]
    kinds += [("decode", 0, -1)] * 6
    return write(sc, plan_steps(sc, kinds), out)


# two prompts, each prefilled in chunks interleaved with decode: phases decode, mixed,
# decode, mixed, decode, so each kind's cadence pools more than one phase
TWO_PROMPTS: list[tuple[str, int, int]] = [
    *[("decode", 0, -1)] * 4,
    *[("mixed", 2_048, c) for c in range(3)],
    *[("decode", 0, -1)] * 3,
    *[("mixed", 2_048, c) for c in range(4)],
    *[("decode", 0, -1)] * 5,
]


def two_prompts(out: Path) -> tuple[Path, dict[str, Any]]:
    """A vLLM trace (CPU annotations that state each step's work) of :data:`TWO_PROMPTS`;
    its path and the plan's truth."""
    sc = dataclasses.replace(HYBRID_CHUNKED, name="two_prompts")
    return write(sc, plan_steps(sc, TWO_PROMPTS), out)


def write(sc: Scenario, steps: list[PlannedStep], out: Path) -> tuple[Path, dict[str, Any]]:
    tb, planned = build(sc, steps)
    path = out / f"{sc.name}.json.gz"
    tb.write(path)
    return path, truth(sc, planned, path.name, tb.event_count)


def line_ends(y: list[int]) -> tuple[Fraction, Fraction]:
    """The least-squares line through (i, y[i]) at its first and last point, by the normal
    equations solved directly (a 2x2 system), in fractions."""
    n = len(y)
    xs = range(n)
    mx, my = Fraction(sum(xs), n), Fraction(sum(y), n)
    slope = sum((x - mx) * (v - my) for x, v in zip(xs, y, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - slope * mx, my + slope * (n - 1 - mx)


# --- what each shipped SQL query returns on a generated fixture, by the plan ---------------


def _pcts(values: list[int]) -> dict[str, float]:
    """p50/p90/p99 by linear interpolation between closest ranks (the queries' method)."""
    a = np.sort(np.asarray(values, dtype=np.float64))
    return {f"p{q}_ns": float(np.percentile(a, q)) for q in (50, 90, 99)}


def planned_query_rows(name: str) -> dict[str, list[dict[str, Any]]]:
    """Each shipped query's rows on the generated fixture ``name``, from its plan: the
    planned kernels (their names, families, streams, durations, launches) and the step
    annotations the plan wrote. Device 0, one launching thread; no copy records bytes."""
    sc = next(s for s in SCENARIOS if s.name == name)
    tb, steps = build(sc)
    kernels = sorted((k for s in steps for k in s.kernels), key=lambda k: (k.ts_ns, k.end_ns))
    total = sum(k.dur_ns for k in kernels)
    out: dict[str, list[dict[str, Any]]] = {}

    def grouped(key: Any) -> dict[Any, list[PlannedKernel]]:
        groups: dict[Any, list[PlannedKernel]] = {}
        for k in kernels:
            groups.setdefault(key(k), []).append(k)
        return groups

    def by_total(rows: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
        return sorted(rows, key=lambda r: (-r["total_ns"], r[label]))

    out["kernel_families"] = by_total(
        [
            {
                "family": family,
                "kernels": len(ks),
                "total_ns": sum(k.dur_ns for k in ks),
                "mean_ns": sum(k.dur_ns for k in ks) / len(ks),
                "share": sum(k.dur_ns for k in ks) / total,
            }
            for family, ks in grouped(lambda k: k.family).items()
        ],
        "family",
    )
    out["top_kernels"] = by_total(
        [
            {
                "name": kname,
                "kernels": len(ks),
                "total_ns": sum(k.dur_ns for k in ks),
                "mean_ns": sum(k.dur_ns for k in ks) / len(ks),
                "max_ns": max(k.dur_ns for k in ks),
                "share": sum(k.dur_ns for k in ks) / total,
            }
            for kname, ks in grouped(lambda k: k.name).items()
        ],
        "name",
    )[:25]
    out["memcpy_summary"] = by_total(
        [
            {
                "name": kname,
                "count": len(ks),
                "total_ns": sum(k.dur_ns for k in ks),
                "mean_ns": sum(k.dur_ns for k in ks) / len(ks),
                "bytes": None,
                "gb_per_s": None,
            }
            for kname, ks in grouped(lambda k: k.name).items()
            if k_is_copy(ks[0])
        ],
        "name",
    )
    streams = []
    for stream, ks in sorted(grouped(lambda k: k.stream).items()):
        lo, hi = min(k.ts_ns for k in ks), max(k.end_ns for k in ks)
        busy = union_length([(k.ts_ns, k.end_ns) for k in ks], lo, hi)
        streams.append(
            {
                "device": 0,
                "stream": stream,
                "kernels": len(ks),
                "kernel_ns": sum(k.dur_ns for k in ks),
                "busy_ns": busy,
                "first_ts": lo,
                "last_end": hi,
                "busy_fraction": busy / (hi - lo),
            }
        )
    out["stream_busy"] = streams
    # decode gaps: every recurrent decode kernel of the trace (a model without linear
    # attention has none: the query's population is empty)
    markers = [k for k in kernels if k.key == sc.linear_decode] if "L" in sc.layers else []
    raw = [b.ts_ns - a.end_ns for a, b in zip(markers, markers[1:], strict=False)]
    gaps = [max(g, 0) for g in raw]
    out["decode_gaps"] = (
        [
            {
                "device": 0,
                "n": len(gaps),
                "overlaps": sum(g < 0 for g in raw),
                **_pcts(gaps),
                "max_ns": max(gaps),
            }
        ]
        if gaps
        else []
    )
    # kernels per step annotation: every kernel of the step is launched inside its CPU
    # annotation, or starts inside its GPU-projected one; the plan writes one annotation
    # per step, in step order
    cpu = sc.annotations.endswith("cpu")
    category = "user_annotation" if cpu else "gpu_user_annotation"
    written = iter(e for e in tb.events if e.cat == category)
    rows = []
    for s in steps:
        if s.annotation is None:
            continue
        e = next(written)
        assert e.name == s.annotation and e.ts_ns is not None
        rows.append(
            {
                "source": "cpu" if cpu else "gpu",
                "step": s.annotation,
                "ts": e.ts_ns,
                "dur": e.dur_ns,
                "kernels": len(s.kernels),
                "kernel_ns": sum(k.dur_ns for k in s.kernels),
            }
        )
    out["step_kernels"] = sorted(rows, key=lambda r: r["ts"])
    # launch latency: kernel start less its runtime call's start (driver launches, such as
    # record_shapes' cuLaunchKernel of the down projection, are not runtime calls)
    lat = [
        k.ts_ns - k.launch[0]
        for k in kernels
        if k.launch is not None and not (sc.record_shapes and k.key in DRIVER_LAUNCHED)
    ]
    out["launch_latency"] = (
        [{"launch": "cudaLaunchKernel", "kernels": len(lat), **_pcts(lat), "max_ns": max(lat)}]
        if lat
        else []
    )
    return out


def k_is_copy(k: PlannedKernel) -> bool:
    return k.key in CATEGORY


# --- what filled the decode gaps, by the plan ---------------------------------------------

CAUSES = ("host_late", "launch", "sync", "dependency", "other")


def _merge(windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(windows):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _clipped(a: int, b: int, windows: list[tuple[int, int]]) -> int:
    """The length of [a, b) inside the disjoint, ordered ``windows``."""
    first = max(bisect.bisect_right(windows, (a, a)) - 1, 0)
    last = bisect.bisect_left(windows, (b, b))
    return sum(max(0, min(b, hi) - max(a, lo)) for lo, hi in windows[first:last])


def busy_shares(
    device: list[PlannedKernel], windows: list[tuple[int, int]]
) -> tuple[int, dict[str, Fraction]]:
    """The planned kernels' busy time inside the disjoint ``windows``, and that time by
    family: each instant shared equally among the families running then, in exact
    fractions (``device``: every planned kernel of the device, ordered by start)."""
    starts = [k.ts_ns for k in device]
    longest = max(k.dur_ns for k in device)
    by_family: dict[str, Fraction] = {}
    busy = 0
    for lo, hi in windows:
        near = device[bisect.bisect_left(starts, lo - longest) : bisect.bisect_left(starts, hi)]
        # a sweep over the window: each kernel's start and end clipped to it, and per
        # family how many of its kernels run
        marks = sorted(
            mark
            for k in near
            if k.end_ns > lo
            for mark in ((max(k.ts_ns, lo), 1, k.family), (min(k.end_ns, hi), -1, k.family))
        )
        running: dict[str, int] = {}
        at = lo
        for t, step, family in marks:
            on = [f for f, n in running.items() if n > 0]
            if t > at and on:
                busy += t - at
                for f in on:
                    by_family[f] = by_family.get(f, Fraction(0)) + Fraction(t - at, len(on))
            at = max(at, t)
            running[family] = running.get(family, 0) + step
    return busy, by_family


def planned_gap_fill(name: str) -> dict[str, dict[str, dict[str, Any] | None]]:
    """Per decode-gap population, what filled all its gaps (``filled``) and its gaps at or
    above its p99 (``widest``), overlaps aside, by docs/metrics.md's definitions applied to
    the plan of fixture ``name``: the gaps' merged windows, their span, the planned kernels'
    busy time in them, that busy time by family (each instant shared equally among the
    families running then; exact fractions) and the device's idle time in them by cause
    (the plan's launches: an idle interval ended by a kernel launched after the device went
    idle is host_late up to the launch's end, then launch; by one launched before it,
    dependency; by one with no launch, other; the engine never synchronises)."""
    sc = next(s for s in SCENARIOS if s.name == name)
    tb, steps = build(sc)
    t = truth(sc, steps, name, tb.event_count)
    served = sorted(
        (k for s in steps if s.kind != "warmup" for k in s.kernels), key=lambda k: k.ts_ns
    )
    device = sorted((k for s in steps for k in s.kernels), key=lambda k: k.ts_ns)
    gaps = planned_gaps(sc, served, t["phases"])
    # the device's idle intervals, each split by cause
    idle: list[tuple[int, int, str]] = []
    reach = device[0].end_ns
    for k in device[1:]:
        i0, i1 = reach, k.ts_ns
        reach = max(reach, k.end_ns)
        if i1 <= i0:
            continue
        if k.launch is None:
            idle.append((i0, i1, "other"))
        elif k.launch[1] > i0:
            cut = min(k.launch[1], i1)
            idle += [(i0, cut, "host_late"), (cut, i1, "launch")]
        else:
            idle.append((i0, i1, "dependency"))

    def fill(windows: list[tuple[int, int]], count: int) -> dict[str, Any]:
        busy, by_family = busy_shares(device, windows)
        idle_ns = dict.fromkeys(CAUSES, 0)
        for a, b, cause in idle:
            idle_ns[cause] += _clipped(a, b, windows)
        return {
            "gaps": count,
            "span_ns": sum(hi - lo for lo, hi in windows),
            "busy_ns": busy,
            "busy_by_family": by_family,
            "idle_ns": idle_ns,
        }

    out: dict[str, dict[str, dict[str, Any] | None]] = {}
    for entry in t["decode_gaps"]:
        pop, p99 = entry["population"], entry["p99_ns"]
        mine = [g for g in gaps if not g["overlap"] and pop in ("all", g["population"])]
        widest = [g for g in mine if p99 is not None and g["gap_ns"] >= p99]
        out[pop] = {
            part: fill(_merge([(g["start_ns"], g["end_ns"]) for g in sel]), len(sel))
            if sel
            else None
            for part, sel in (("filled", mine), ("widest", widest))
        }
    return out


# --- a phase whose verdict is planted: where the step time went -----------------------------

STEP_KERNELS = ("attention", "gemm", "norm", "gemm")  # a step's kernels, back to back
KERNEL_NS = 200_000
STEP_BUSY_NS = KERNEL_NS * len(STEP_KERNELS)
LAUNCH_CALL_NS = 3_000


def breakdown_trace(
    path: Path,
    *,
    steps: int,
    pause_ns: int,
    host_late_ns: int,
    other_ns: int = 0,
    dependency_ns: int = 0,
) -> dict[str, Any]:
    """A decode phase of ``steps`` steps, each four 200 µs kernels back to back (launched
    from inside a vLLM CPU step annotation), a device-idle pause of ``pause_ns`` before
    each step but the first: of it, the first ``host_late_ns`` pass before the step's first
    launch call ends (host_late), the rest between that call and its kernel (launch).
    ``other_ns``: in the second step, its third kernel waits that long after the second
    and has no submitting call at all (other); ``dependency_ns``: in the third step, its
    fourth kernel waits that long, though launched long before (dependency). Writes the
    trace to ``path``; returns the plan's steps (span, busy, idle by cause) and their sum."""
    from fixtures.idle import ATTENTION, GEMM, NORM

    names = {"attention": ATTENTION, "gemm": GEMM, "norm": NORM}
    assert 0 <= host_late_ns <= pause_ns
    tb = TraceBuilder(base_time_ns=1_767_189_500_000_000_000)
    t = 1_767_189_500_000_000_000 // 1_000 + 5_000_000  # the first kernel's start
    rows: list[dict[str, Any]] = []
    for i in range(steps):
        idle = dict.fromkeys(CAUSES, 0)
        if i:
            t += pause_ns  # the device idles before this step
            # the pause lies in the previous step: steps tile the phase
            rows[-1]["idle"]["host_late"] += host_late_ns
            rows[-1]["idle"]["launch"] += pause_ns - host_late_ns
            rows[-1]["end_ns"] = t
        start = t
        first_call_end = start - pause_ns + host_late_ns if i else start - 50_000
        calls = first_call_end - LAUNCH_CALL_NS
        annotation = "execute_context_0(0)_generation_4(4)"
        tb.cpu_op(annotation, calls - 10_000, 4 * LAUNCH_CALL_NS + 20_000, cat="user_annotation")
        for j, key in enumerate(STEP_KERNELS):
            if i == 1 and j == 2 and other_ns:
                t += other_ns
                idle["other"] += other_ns
                tb.kernel(names[key], t, KERNEL_NS)  # no submitting call links to it
            else:
                if i == 2 and j == 3 and dependency_ns:
                    t += dependency_ns
                    idle["dependency"] += dependency_ns
                corr = tb.next_correlation()
                tb.launch(names[key], calls + j * LAUNCH_CALL_NS, corr, t, dur_ns=LAUNCH_CALL_NS)
                tb.kernel(names[key], t, KERNEL_NS, correlation=corr)
            t += KERNEL_NS
        rows.append({"start_ns": start, "end_ns": t, "busy_ns": STEP_BUSY_NS, "idle": idle})
    tb.write(path)
    span = rows[-1]["end_ns"] - rows[0]["start_ns"]
    return {
        "steps": rows,
        "span_ns": span,
        "busy_ns": steps * STEP_BUSY_NS,
        "idle_ns": {c: sum(r["idle"][c] for r in rows) for c in CAUSES},
    }


# --- two devices in one trace -----------------------------------------------------------------

# the second device runs a shorter workload with no annotations (its steps are found from
# its kernels): less kernel time than the first, so the first is the default
SECOND_DEVICE = dataclasses.replace(
    HYBRID_CHUNKED,
    name="second_device",
    seed=21,
    decode_before=8,
    chunks=3,
    decode_after=6,
    annotations="none",
)


def two_devices(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """hybrid_chunked's plan on device 0 and :data:`SECOND_DEVICE`'s on device 1, side by
    side in one trace (the second's kernels moved to process 1, their correlation ids
    past the first's); each device's truth from its own plan."""
    tb, steps0 = build(HYBRID_CHUNKED)
    other, steps1 = build(SECOND_DEVICE)
    offset = 1_000_000
    for e in other.events:
        assert e.pid == 0, "the second plan writes device work only"
        e.pid = 1
        if e.args is not None:
            e.args = {**e.args, "device": 1}
            for key in ("External id", "correlation"):
                if key in e.args:
                    e.args[key] += offset
        if "id" in e.extra:
            e.extra = {**e.extra, "id": e.extra["id"] + offset}
        tb.events.append(e)
    for name, value in (
        ("process_name", {"name": "python"}),
        ("process_labels", {"labels": "GPU 1"}),
    ):
        tb.events.append(Event("M", name, None, 1, 0, 0, args=value))
    tb.events.append(Event("M", "thread_name", None, 1, 7, 0, args={"name": "stream 7 "}))
    tb.write(path)
    second = truth(SECOND_DEVICE, steps1, path.name, tb.event_count)
    second["device"] = second["busy"]["device"] = 1  # its plan runs on device 1
    return truth(HYBRID_CHUNKED, steps0, path.name, tb.event_count), second
