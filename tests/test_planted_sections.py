"""The summary's figures that no other test held to planted truth, section by section:
the ``trace`` facts, the families' means, shares and roll-up, how the steps were found,
the ``work`` section, each phase's time breakdown, the decode marker, the efficiency
section's peaks, model and rates, and the cost fits' r² and residual.

Every expected value is computed here from the plan (fixtures/engine.py, fixtures/truth.py,
tests/planned.py) or from a trace the test writes, never from traceview. docs/metrics.md's
figure index names these tests (tests/test_figure_index.py keeps it true).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import DOC_REL, GENERATED, truth
from planned import CAUSES, busy_shares, line_ends
from test_cost import PLANTED, _decode_rows, _prompt_rows, _timed
from test_efficiency import CONFIGS, H200_BF16, H200_BYTES, dense_truth, hybrid_moe_truth

import traceview as tv
from fixtures.build import TraceBuilder
from fixtures.engine import SCENARIOS, build


@functools.cache
def _summary(name: str) -> dict[str, Any]:
    """The summary document of fixture ``name``, made once per test process."""
    return dict(tv.summarize(tv.load(GENERATED / f"{name}.json.gz")).to_dict())


def _serving(t: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's steps that serve (a step that holds warm-up counts in no figure)."""
    return [s for s in t["steps"] if s["warmup"] is None]


def _sum_or_none(values: list[int | None]) -> int | None:
    """A count the engine states: the sum of the steps that state it, None where none does."""
    stated = [v for v in values if v is not None]
    return sum(stated) if stated else None


# --- trace ---------------------------------------------------------------------------------


def test_the_trace_section_is_the_plans(scenario: str) -> None:
    """The file's facts (the builder's events and GPU name) and the analysed device's
    activity: its kernels, streams and span, as planned (capture start-up left out)."""
    t = truth(scenario)
    facts = _summary(scenario)["trace"]
    assert facts == {
        "path": str(GENERATED / f"{scenario}.json.gz"),
        "format": "kineto",
        "gpu": "NVIDIA H200",  # fixtures/build.py's deviceProperties
        "events": t["events"],
        "kernels": t["kernels"],
        "skipped_events": 0,
        "devices": [t["device"]],
        "device": t["device"],
        "streams": t["streams"],
        "start_ns": t["start_ns"],
        "end_ns": t["end_ns"],
        "span_ns": t["end_ns"] - t["start_ns"],
        "activity": "kernel",
    }


def test_the_trace_section_counts_the_events_it_could_not_read(tmp_path: Path) -> None:
    """Two kernels and three planted events that cannot be read (a CPU op of negative
    duration, an unknown ``ph``, a flow without ``ts``): ``skipped_events`` is 3."""
    tb = TraceBuilder()
    tb.kernel("flash_fwd_kernel", 1_000_000, 20_000)
    tb.kernel("flash_fwd_kernel", 1_100_000, 20_000)
    path = tb.write(tmp_path / "t.json")
    text = path.read_text()
    bad = [
        '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 5, "dur": -1}',
        '{"ph": "Z", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 5, "dur": 1}',
        '{"ph": "s", "id": 1, "pid": 1, "tid": 1, "cat": "ac2g"}',
    ]
    head, events = text.split('"traceEvents": [', 1)
    path.write_text(f'{head}"traceEvents": [{", ".join(bad)}, {events}')
    with pytest.warns(tv.TraceviewWarning):
        trace = tv.load(path)
    facts = tv.summarize(trace).to_dict()["trace"]
    assert (facts["skipped_events"], facts["kernels"]) == (3, 2)


def test_the_classification_names_the_rules(tmp_path: Path) -> None:
    """The preset's name, and with a rules file the preset and the file."""
    path = GENERATED / "hybrid_tight.json.gz"
    assert _summary("hybrid_tight")["classification"] == "default"
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nfamily = "gemm.mine"\npatterns = ["^nvjet_"]\n')
    doc = tv.summarize(tv.load(path), tv.AnalysisConfig(rules=str(rules))).to_dict()
    assert doc["classification"] == f"default + {rules}"


# --- families --------------------------------------------------------------------------------


def _planted_rows(families: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """A family table from the plan's counts and kernel time: the mean and share in exact
    fractions, by total time descending."""
    total = sum(f["total_ns"] for f in families.values())
    rows = [
        {
            "family": name,
            "count": f["count"],
            "total_ns": f["total_ns"],
            "mean_ns": Fraction(f["total_ns"], f["count"]),
            "share": Fraction(f["total_ns"], total),
        }
        for name, f in families.items()
    ]
    return sorted(rows, key=lambda r: -r["total_ns"])


def _same_rows(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert sorted(g["family"] for g in got) == sorted(w["family"] for w in want)
    assert [g["total_ns"] for g in got] == [w["total_ns"] for w in want]  # the order
    by = {w["family"]: w for w in want}
    for g in got:
        w = by[g["family"]]
        assert (g["count"], g["total_ns"]) == (w["count"], w["total_ns"])
        assert g["mean_ns"] == pytest.approx(float(w["mean_ns"]), rel=DOC_REL)
        assert g["share"] == pytest.approx(float(w["share"]), rel=DOC_REL)


def test_family_means_shares_and_roll_up_are_the_plans(scenario: str) -> None:
    """``families``: each family's mean kernel time and its share of all kernel time, as
    the plan's kernels give them; ``families_rollup``: the same with dotted families
    rolled up to their first part (``linear_attention.decode`` -> ``linear_attention``)."""
    t = truth(scenario)
    doc = _summary(scenario)
    _same_rows(doc["families"], _planted_rows(t["families"]))
    rolled: dict[str, dict[str, int]] = {}
    for name, f in t["families"].items():
        top = rolled.setdefault(name.split(".")[0], {"count": 0, "total_ns": 0})
        top["count"] += f["count"]
        top["total_ns"] += f["total_ns"]
    _same_rows(doc["families_rollup"], _planted_rows(rolled))


# --- how the steps were found ----------------------------------------------------------------


def test_how_the_steps_were_found_is_the_plans(scenario: str) -> None:
    """The engine's annotations where the plan wrote them (every planted step annotated,
    none in disagreement), else bursts of the plan's full-attention layers; the step
    marker is the full-attention family, as the plan's anchors are; and the kinds'
    sources count the plan's serving steps."""
    t = truth(scenario)
    s = _summary(scenario)["steps"]
    annotated = sum(step["annotation"] is not None for step in t["steps"])
    if t["annotations"] == "none":
        layers = t["full_attention_layers"]
        assert (s["method"], s["layers"], s["disagreements"]) == ("bursts", layers, None)
        assert s["annotation_steps"] == annotated == 0
        assert s["detail"].startswith(f"every {layers} step-marker bursts: ")
    else:
        assert (s["method"], s["layers"], s["disagreements"]) == ("annotations", None, 0)
        assert s["annotation_steps"] == annotated == len(t["steps"])
        assert s["detail"] == "the engine's per-step annotations"
    assert s["marker"] == "full_attention"
    assert s["kind_sources"] == dict(Counter(r["kind_source"] for r in _serving(t)))


# --- work ------------------------------------------------------------------------------------


def _planted_growth(t: dict[str, Any]) -> list[dict[str, Any]]:
    """Per mixed phase of 3 steps or more: the plan's prompt work per step (its context
    tokens where every step states them, else its prefill-only kernel time), and the
    least-squares line's last value over its first (tests/planned.py, in fractions)."""
    out = []
    for phase in t["phases"]:
        if phase["kind"] != "mixed" or phase["steps"] < 3:
            continue
        steps = t["steps"][phase["first_step"] : phase["last_step"] + 1]
        tokens = [s["context_tokens"] for s in steps]
        if None not in tokens and sum(tokens) > 0:
            measure, y = "prompt_tokens", tokens
        elif sum(s["prefill_ns"] for s in steps) > 0:
            measure, y = "prefill_ns", [s["prefill_ns"] for s in steps]
        else:
            continue
        first, last = line_ends(y)
        out.append(
            {
                "first_step": phase["first_step"],
                "last_step": phase["last_step"],
                "steps": len(steps),
                "measure": measure,
                "measured_first": y[0],
                "measured_last": y[-1],
                "prefill_ns_first": steps[0]["prefill_ns"],
                "prefill_ns_last": steps[-1]["prefill_ns"],
                "growth": last / first if first > 0 else math.inf,
            }
        )
    return out


def test_the_work_section_is_the_plans(scenario: str) -> None:
    """Kernels per step, the prefill-only kernels' time and count, the tokens the engine's
    record states (null where no step states them) and those record_shapes gives, over the
    plan's serving steps and per phase; and each mixed phase's prompt growth."""
    t = truth(scenario)
    w = _summary(scenario)["work"]
    served = _serving(t)
    assert w["kernels_per_step"] == pytest.approx(
        float(Fraction(sum(s["kernels"] for s in served), len(served))), rel=DOC_REL
    )
    assert w["prefill_ns"] == sum(s["prefill_ns"] for s in served)
    assert w["prefill_kernels"] == sum(s["prefill_kernels"] for s in served)
    assert w["prompt_tokens"] == _sum_or_none([s["context_tokens"] for s in served])
    assert w["decode_tokens"] == _sum_or_none([s["generation_tokens"] for s in served])
    assert w["token_steps"] == sum(s["context_tokens"] is not None for s in served)
    assert w["shape_tokens"] == _sum_or_none([s["shape_tokens"] for s in served])
    assert w["shape_token_steps"] == sum(s["shape_tokens"] is not None for s in served)
    phases = []
    for p in t["phases"]:
        steps = t["steps"][p["first_step"] : p["last_step"] + 1]
        phases.append(
            {
                "kind": p["kind"],
                "first_step": p["first_step"],
                "last_step": p["last_step"],
                "prompt_tokens": _sum_or_none([s["context_tokens"] for s in steps]),
                "decode_tokens": _sum_or_none([s["generation_tokens"] for s in steps]),
                "prefill_ns": sum(s["prefill_ns"] for s in steps),
            }
        )
    assert w["phases"] == phases
    planted = _planted_growth(t)
    got = [{k: v for k, v in g.items() if k not in ("first", "last")} for g in w["prefill_growth"]]
    assert [{**g, "growth": None} for g in got] == [{**p, "growth": None} for p in planted]
    for g, p in zip(got, planted, strict=True):
        assert g["growth"] == pytest.approx(float(p["growth"]), rel=DOC_REL)


# --- the time breakdown per phase -------------------------------------------------------------


def _verdict(span: int, busy: int, idle: dict[str, int]) -> str:
    """docs/metrics.md, in integers: host-bound when host_late + sync is at least 20% of
    the span; device-bound when busy is at least 80% of it and not host-bound."""
    if 5 * (idle["host_late"] + idle["sync"]) >= span:
        return "host-bound"
    return "device-bound" if 5 * busy >= 4 * span else "balanced"


@pytest.mark.parametrize("name", ["hybrid_chunked", "dense_sglang", "hybrid_tight"])
def test_each_phases_time_breakdown_is_the_plans(name: str) -> None:
    """Per phase: its steps, span, busy time and idle time by cause summed over the plan's
    steps, its busy time by family (each instant shared equally among the families running
    then: within a ns of the plan's exact shares, the rounding remainder with the largest)
    and the verdict by its thresholds."""
    t = truth(name)
    sc = next(s for s in SCENARIOS if s.name == name)
    _, planned = build(sc)
    device = sorted((k for s in planned for k in s.kernels), key=lambda k: k.ts_ns)
    got = _summary(name)["time_breakdown"]
    assert [g["kind"] for g in got] == [p["kind"] for p in t["phases"]]
    for g, p in zip(got, t["phases"], strict=True):
        steps = t["steps"][p["first_step"] : p["last_step"] + 1]
        span = sum(s["end_ns"] - s["start_ns"] for s in steps)
        busy = sum(s["busy_ns"] for s in steps)
        idle = {c: sum(s[f"idle_{c}_ns"] for s in steps) for c in CAUSES}
        assert {k: g[k] for k in ("first_step", "last_step", "steps")} == {
            "first_step": p["first_step"],
            "last_step": p["last_step"],
            "steps": len(steps),
        }
        assert (g["span_ns"], g["busy_ns"], g["idle_ns"]) == (span, busy, idle)
        assert g["verdict"] == _verdict(span, busy, idle)
        planted_busy, shares = busy_shares(device, [(p["start_ns"], p["end_ns"])])
        assert planted_busy == busy == sum(g["busy_by_family"].values())
        assert set(g["busy_by_family"]) == set(shares)
        top = max(shares, key=lambda f: shares[f])
        for family, share in shares.items():
            slack = len(shares) if family == top else 1
            assert abs(g["busy_by_family"][family] - share) <= slack, family


# --- the decode marker -----------------------------------------------------------------------


def test_the_decode_marker_is_the_plans(scenario: str) -> None:
    """The kernels chosen are the plan's decode marker, and the pattern (or name) the
    summary gives selects it and no other kernel the plan launched."""
    t = truth(scenario)
    doc = _summary(scenario)
    marker = t["decode_marker_kernel"]
    assert doc["decode_marker_kernels"] == [marker]
    assert doc["decode_marker_source"] == t["decode_marker_source"]
    used = doc["decode_marker"]
    sc = next(s for s in SCENARIOS if s.name == scenario)
    _, planned = build(sc)
    names = {k.name for s in planned if s.warmup is None for k in s.kernels}
    if t["decode_marker_source"].endswith("inferred"):
        assert used == marker
    else:
        patterns = used.split(" | ")
        chosen = {n for n in names if any(re.search(p, n, re.IGNORECASE) for p in patterns)}
        assert chosen == {marker}


# --- efficiency ------------------------------------------------------------------------------


def test_the_gpu_peaks_are_the_parts_or_the_ones_given(tmp_path: Path) -> None:
    """The trace's "NVIDIA H200" is the H200 SXM of its datasheet; a spec file given with
    ``gpu`` is read as written."""
    gpu = _summary("hybrid_tight")["efficiency"]["gpu"]
    assert (gpu["name"], gpu["peak_bytes_per_s"]) == ("NVIDIA H200 SXM", H200_BYTES)
    assert gpu["peak_flops"]["bf16"] == H200_BF16 and gpu["source"]
    spec = tmp_path / "lab.toml"
    spec.write_text(
        'name = "lab part"\npeak_bytes_per_s = 2.5e12\nsource = "planted"\n'
        "[peak_flops]\nbf16 = 4.5e14\nfp8 = 9e14\n"
    )
    trace = tv.load(GENERATED / "hybrid_tight.json.gz")
    doc = tv.summarize(trace, tv.AnalysisConfig(gpu=str(spec))).to_dict()
    assert doc["efficiency"]["gpu"] == {
        "name": "lab part",
        "peak_flops": {"bf16": 4.5e14, "fp8": 9e14},
        "peak_bytes_per_s": 2.5e12,
        "source": "planted",
    }


def test_the_model_facts_are_the_config_counted_by_hand() -> None:
    """engine-dense.json (tests/test_efficiency.py's ``dense_truth``): 8 blocks of
    45,092,864 parameters, and the tied embedding and final norm."""
    h, vocab, layers = 2048, 32000, 8
    block = h * 16 * 128 + 2 * h * 4 * 128 + 16 * 128 * h + 3 * h * 5632 + 2 * h
    config = tv.AnalysisConfig(model=tv.load_model(CONFIGS / "engine-dense.json"))
    doc = tv.summarize(tv.load(GENERATED / "dense_vllm_detailed.json.gz"), config).to_dict()
    params = layers * block + vocab * h + h
    assert doc["efficiency"]["model"] == {
        "name": "llama",
        "params": params,
        "active_params": params,  # dense: every parameter runs for every token
        "layers": layers,
    }


def _pct(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, written out."""
    v = sorted(values)
    pos = (len(v) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


@pytest.mark.parametrize(
    ("scenario", "config", "by_hand"),
    [
        ("dense_vllm_detailed", "engine-dense", dense_truth),
        ("hybrid_chunked", "engine-hybrid-moe", hybrid_moe_truth),
    ],
)
def test_each_kinds_efficiency_is_the_plans(scenario: str, config: str, by_hand: Any) -> None:
    """Per kind of step: the steps with a rate, and the p50 and p90 of MFU and MBU and the
    p50 of TFLOP/s and GB/s, over each planted step's FLOPs and bytes counted by hand
    (tests/test_efficiency.py) and its planted busy time."""
    t = truth(scenario)
    model = tv.AnalysisConfig(model=tv.load_model(CONFIGS / f"{config}.json"))
    doc = tv.summarize(tv.load(GENERATED / f"{scenario}.json.gz"), model).to_dict()
    got = {p["kind"]: p for p in doc["efficiency"]["phases"] or []}
    kinds = [k for k in ("decode", "mixed", "prefill") if any(s["kind"] == k for s in t["steps"])]
    assert list(got) == kinds
    for kind in kinds:
        mine = [s for s in _serving(t) if s["kind"] == kind and s["busy_ns"] > 0]
        rates = []
        for s in mine:
            flops, nbytes = by_hand(s)
            seconds = s["busy_ns"] / 1e9
            rates.append((flops / seconds, nbytes / seconds))
        want = {
            "kind": kind,
            "steps": len(mine),
            "mfu_p50": _pct([f / H200_BF16 for f, _ in rates], 50),
            "mfu_p90": _pct([f / H200_BF16 for f, _ in rates], 90),
            "mbu_p50": _pct([b / H200_BYTES for _, b in rates], 50),
            "mbu_p90": _pct([b / H200_BYTES for _, b in rates], 90),
            "tflops_p50": _pct([f / 1e12 for f, _ in rates], 50),
            "gbps_p50": _pct([b / 1e9 for _, b in rates], 50),
        }
        assert got[kind]["kind"] == kind and got[kind]["steps"] == want["steps"]
        for key in ("mfu_p50", "mfu_p90", "mbu_p50", "mbu_p90", "tflops_p50", "gbps_p50"):
            assert got[kind][key] == pytest.approx(want[key], rel=1e-8), (kind, key)


@pytest.mark.parametrize("scenario", ["hybrid_vllm_old", "vllm_capture_then_serve"])
def test_each_familys_rates_are_the_plans(scenario: str) -> None:
    """Per family whose kernels carry the planted GEMM ops' work: the rates over those
    kernels' planted time, and the bound by the H200's roofline ridge."""
    planted = truth(scenario)["op_work"]["by_family"]
    got = {f["family"]: f for f in _summary(scenario)["efficiency"]["families"] or []}
    assert set(got) == set(planted)
    for family, want in planted.items():
        seconds = want["ns"] / 1e9
        f = got[family]
        assert (f["flops"], f["bytes"]) == (want["flops"], want["bytes"])
        assert f["tflops"] == pytest.approx(want["flops"] / seconds / 1e12, rel=DOC_REL)
        assert f["gbps"] == pytest.approx(want["bytes"] / seconds / 1e9, rel=DOC_REL)
        ridge = H200_BF16 / H200_BYTES
        assert f["bound"] == ("compute" if want["flops"] / want["bytes"] >= ridge else "memory")


# --- cost ------------------------------------------------------------------------------------


def _fit_quality(rows: list[dict[str, Any]], terms: list[str]) -> tuple[float, float]:
    """r² and the residuals' standard deviation of the least-squares fit of the planted
    times on the planted counts, in fractions from numpy's coefficients' exact residuals."""
    column = {
        "fixed": lambda r: 1,
        "per_sequence": lambda r: int(r["sequences"]),
        "per_prompt_token": lambda r: int(r["prompt_tokens"]),
        "per_prompt_token_squared": lambda r: int(r["prompt_tokens"]) ** 2,
    }
    x = np.array([[float(column[t](r)) for t in terms] for r in rows])
    y = [int(r["time_ns"]) for r in rows]
    beta, *_ = np.linalg.lstsq(x, np.array(y, dtype=float), rcond=None)
    fitted = x @ beta
    rss = sum((v - f) ** 2 for v, f in zip(y, fitted.tolist(), strict=True))
    mean = sum(y) / len(y)
    tss = sum((v - mean) ** 2 for v in y)
    return 1 - rss / tss, math.sqrt(rss / (len(y) - len(terms)))


@pytest.mark.parametrize(("name", "terms"), PLANTED, ids=[n for n, _ in PLANTED])
def test_the_cost_fits_r2_and_residual_are_the_plans(name: str, terms: list[str]) -> None:
    """``r2`` is 1 − RSS/TSS and ``residual_ns`` √(RSS / (n − p)) of numpy's least squares
    on the plan's step times and counts (tests/test_cost.py's rows)."""
    cost = tv.analyze(GENERATED / f"{name}.json.gz").summary.document["cost"]
    rows = _timed(name)
    decode = _decode_rows(rows)
    if cost["decode"]["r2"] is not None:
        r2, residual = _fit_quality(decode, ["fixed", "per_sequence"])
        assert cost["decode"]["r2"] == pytest.approx(r2, rel=1e-6)
        assert cost["decode"]["residual_ns"] == pytest.approx(residual, rel=1e-6)
    r2, residual = _fit_quality(_prompt_rows(rows), terms)
    assert cost["prompt"]["r2"] == pytest.approx(r2, rel=1e-6)
    assert cost["prompt"]["residual_ns"] == pytest.approx(residual, rel=1e-6)


def test_the_cost_weights_name_the_model_and_the_part() -> None:
    """With Llama-3.1-8B and ``gpu="H100 SXM"``: the config's model type, the part the
    table names and its datasheet bandwidth (3.35 TB/s)."""
    model = tv.load_model(CONFIGS / "llama-3.1-8b.json")
    config = tv.AnalysisConfig(model=model, gpu="H100 SXM")
    weights = tv.analyze(GENERATED / "cost_wandering.json.gz", config).summary.document["cost"][
        "weights"
    ]
    assert weights is not None
    assert (weights["model"], weights["device"], weights["peak_bytes_per_s"]) == (
        "llama",
        "NVIDIA H100 SXM",
        3.35e12,
    )
