"""The analyses against the planted truth of the generated fixtures."""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import DOC_REL, GENERATED, truth

import traceview as tv
from fixtures.engine import RECORD_COLUMNS, SCENARIOS, Scenario, build
from fixtures.truth import truth as plan_truth
from traceview.analysis.base.intervals import union
from traceview.analysis.steps.candidates import StepOptions
from traceview.analysis.steps.find import find_steps
from traceview.cli import cli
from traceview.render.format import fmt_ns

PHASE_KEYS = ("kind", "first_step", "last_step", "steps", "start_ns", "end_ns", "cadence_p50_ns")


def check_against_truth(doc: dict, t: dict, *, tokens: bool = True) -> None:
    s = doc["steps"]
    assert s["count"] == t["step_count"]
    assert s["cadence"] == t["cadence"]
    assert s["token_cadence"] == t["token_cadence"]
    assert s["cadence_by_kind"] == t["cadence_by_kind"]
    assert [{k: p[k] for k in PHASE_KEYS} for p in s["phases"]] == [
        {k: p[k] for k in PHASE_KEYS} for p in t["phases"]
    ]
    assert [p["cadence"] for p in s["phases"]] == [p["cadence"] for p in t["phases"]]
    gaps = {g["population"]: g for g in doc["decode_gaps"]}
    for g in t["decode_gaps"]:  # what filled the widest: tests/test_idle.py
        assert {
            k: v for k, v in gaps[g["population"]].items() if k not in ("filled", "widest")
        } == g
    fams = {f["family"]: {"count": f["count"], "total_ns": f["total_ns"]} for f in doc["families"]}
    assert fams == t["families"]
    assert doc["decode_marker_source"] == t["decode_marker_source"]
    if tokens:
        assert doc["work"]["prompt_tokens"] == t["prompt_tokens"]
        assert doc["work"]["decode_tokens"] == t["decode_tokens"]
        assert doc["work"]["shape_tokens"] == t["shape_tokens"]
    busy, tb = doc["busy"], t["busy"]
    assert (busy["window_start_ns"], busy["window_end_ns"]) == (
        tb["window_start_ns"],
        tb["window_end_ns"],
    )
    assert busy["busy_ns"] == tb["busy_ns"]
    # the analysed device, and the window's length: the serving steps' spans
    assert (busy["device"], busy["window_ns"]) == (tb["device"], tb["window_ns"])
    for key in ("fraction", "in_gaps", "in_widest_gaps"):
        assert busy[key] == pytest.approx(tb[key], rel=DOC_REL)


def test_summary_equals_planted_truth(scenario: str) -> None:
    t = truth(scenario)
    summary = tv.summarize(tv.load(GENERATED / f"{scenario}.json.gz"))
    doc = summary.to_dict()
    assert doc["schema"] == "traceview.summary/1"
    check_against_truth(doc, t)
    expected_method = "bursts" if t["annotations"] == "none" else "annotations"
    assert doc["steps"]["method"] == expected_method
    if t["annotations"] != "none":
        assert doc["steps"]["disagreements"] == 0
        assert summary.steps["annotation"].to_list() == [s["annotation"] for s in t["steps"]]
    # the engine's own record of each step, and the evidence that decided its kind
    for col in ("kind", "kind_source", *RECORD_COLUMNS, "shape_tokens"):
        assert summary.steps[col].to_list() == [s[col] for s in t["steps"]], col
    markers = summary.kernel_table.filter(pl.col("name") == t["decode_marker_kernel"])
    assert markers["count"].sum() == t["decode_markers"]
    if not t["warmup"]["steps"]:  # every pair of consecutive markers is a gap
        assert t["decode_markers"] == t["decode_gaps"][0]["n"] + 1
    assert doc["warmup"] == t["warmup"]
    assert summary.steps["warmup"].to_list() == [s["warmup"] for s in t["steps"]]
    assert summary.steps["phase"].to_list() == [s["phase"] for s in t["steps"]]


@pytest.mark.parametrize("method", ["bursts", "annotations"])
def test_each_step_method_alone_finds_the_planted_steps(scenario: str, method: str) -> None:
    t = truth(scenario)
    trace = tv.load(GENERATED / f"{scenario}.json.gz")
    if method == "annotations" and t["annotations"] == "none":
        with pytest.raises(tv.UnsupportedTraceError, match="no per-step annotations"):
            find_steps(trace, options=StepOptions(method=method))
        return
    table = find_steps(trace, options=StepOptions(method=method)).table
    for col in ("start_ns", "anchor_ns", "end_ns", "kind", "kernels", "interval_ns"):
        assert table[col].to_list() == [s[col] for s in t["steps"]], col


def test_layers_option_gives_the_same_steps() -> None:
    t = truth("hybrid_tight")
    trace = tv.load(GENERATED / "hybrid_tight.json.gz")
    layers = t["full_attention_layers"]
    r = find_steps(trace, options=StepOptions(method="bursts", layers=layers))
    assert r.layers == layers
    assert r.table["anchor_ns"].to_list() == [s["anchor_ns"] for s in t["steps"]]


def test_step_gap_option_cuts_at_idle_gaps() -> None:
    t = truth("hybrid_chunked")  # pauses of 1.8-2.6 ms, in-step gaps of a few µs
    trace = tv.load(GENERATED / "hybrid_chunked.json.gz")
    r = find_steps(trace, options=StepOptions(method="bursts", step_gap_ns=500_000))
    assert r.table["start_ns"].to_list() == [s["start_ns"] for s in t["steps"]]


def _random_scenario(seed: int) -> Scenario:
    rng = random.Random(seed)
    group = rng.choice(["LLLF", "LF", "F", "LLLLLLF", "FF", "LLF"])
    gap_hi = rng.choice([4_000, 6_000, 9_000])
    pause_lo = rng.choice([int(gap_hi * 1.5), 40_000, 1_500_000])
    return dataclasses.replace(
        SCENARIOS[0],
        name=f"random_{seed}",
        seed=seed,
        layers=group * rng.randint(1, 3),
        decode_before=rng.randint(8, 14),
        chunks=rng.randint(2, 5),
        decode_after=rng.randint(6, 10),
        pause_ns=(pause_lo, pause_lo * 2),
        launch_gap_ns=(1_000, gap_hi),
        kernel_scale=rng.choice([0.1, 0.5, 1.0]),
        attention=rng.choice(["fa", "fi", "fi-tc"]),
        annotations=rng.choice(
            ["none", "vllm-cpu", "vllm-gpu", "vllm-detailed-gpu", "vllm-old-cpu", "sglang-cpu"]
        ),
        linear_decode=rng.choice(["gdn_decode", "gla_decode"]),
        record_shapes=rng.random() < 0.3,
        shuffle=rng.random() < 0.3,
        side_stream=rng.random() < 0.7,
        comm_stream=rng.random() < 0.3,
    )


@pytest.mark.parametrize(
    "seed", [pytest.param(s, marks=[pytest.mark.slow] if s >= 108 else []) for s in range(100, 124)]
)
def test_random_engines_match_their_truth(tmp_path: Path, seed: int) -> None:
    """Engines the definitions were not tuned on: other layer patterns, pauses, speeds."""
    sc = _random_scenario(seed)
    tb, plan = build(sc)
    path = tb.write(tmp_path / "t.json.gz", shuffle_seed=seed if sc.shuffle else None)
    t = plan_truth(sc, plan, path.name, tb.event_count)
    summary = tv.summarize(tv.load(path))
    check_against_truth(summary.to_dict(), t)
    check_breakdown(summary.steps, t)


BREAKDOWN = [
    "busy_ns",
    *(f"idle_{c}_ns" for c in ("host_late", "launch", "sync", "dependency", "other")),
    "host_step_ns",
    "host_before_gpu_ns",
]


def check_breakdown(steps: pl.DataFrame, t: dict) -> None:
    """Issue 22: each step's busy and idle by cause, and its host side, equal the plan's,
    and busy plus idle tile each step's span."""
    assert steps.select(BREAKDOWN).to_dicts() == [{c: s[c] for c in BREAKDOWN} for s in t["steps"]]
    spans = (steps["end_ns"] - steps["start_ns"]).to_list()
    parts = steps.select(pl.sum_horizontal(BREAKDOWN[:6])).to_series().to_list()
    assert parts == spans


def test_each_fixtures_breakdown_is_the_plans(scenario: str) -> None:
    check_breakdown(tv.steps(tv.load(GENERATED / f"{scenario}.json.gz")), truth(scenario))


def test_disagreeing_annotations_fall_back_to_bursts(tmp_path: Path) -> None:
    """Annotations that miss steps (as under CUDA graphs) are checked, not trusted."""
    t = truth("hybrid_chunked")
    doc = json.loads(gzip.decompress((GENERATED / "hybrid_chunked.json.gz").read_bytes()))
    kept, dropped = [], 0
    for e in doc["traceEvents"]:
        if e.get("cat") == "user_annotation" and dropped < 5 and "context_0" in e["name"]:
            dropped += 1
            continue
        kept.append(e)
    doc["traceEvents"] = kept
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    summary = tv.summarize(tv.load(path))
    d = summary.to_dict()
    assert d["steps"]["method"] == "bursts"
    # the five steps whose annotation was dropped: anchors the bursts alone propose
    assert d["steps"]["disagreements"] == dropped == 5
    assert d["steps"]["annotation_steps"] == t["step_count"] - 5
    assert any("disagree" in w for w in summary.warnings)
    check_against_truth(d, t, tokens=False)
    # the steps still annotated keep their record: 5 decode steps (6 tokens each) lost it
    assert d["work"]["prompt_tokens"] == t["prompt_tokens"]
    assert d["work"]["decode_tokens"] == t["decode_tokens"] - 5 * 6
    assert d["work"]["token_steps"] == t["step_count"] - 5


def test_annotations_that_keep_the_layer_count_beat_bursts_a_copy_misled(
    tmp_path: Path,
) -> None:
    """An unseen-trace probe's finding: a host-to-device copy on another stream over every
    other between-step pause hides those pauses from the device's idle time, and the bursts
    find the steps two at a time (every 2L bursts, "strong"); they were used over
    annotations that held every kernel. Each annotated step holds the model's L bursts and
    every burst lies in one: the annotations are used, and the steps are the planted ones."""
    t = truth("hybrid_chunked")
    source = GENERATED / "hybrid_chunked.json.gz"
    doc = json.loads(gzip.decompress(source.read_bytes()))
    steps = tv.steps(tv.load(source))
    assert steps.height == t["step_count"]
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    starts, anchors = steps["start_ns"].to_list(), steps["anchor_ns"].to_list()
    for k in range(1, len(starts), 2):  # over the pause before every other step
        begin = (starts[k] + anchors[k - 1]) // 2
        doc["traceEvents"].append(
            {
                **kernel,
                "cat": "gpu_memcpy",
                "name": "Memcpy HtoD (Pageable -> Device)",
                "ts": begin / 1000,
                "dur": (starts[k] + 1000 - begin) / 1000,
                "args": {**kernel["args"], "stream": 99, "correlation": None},
            }
        )
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    summary = tv.summarize(tv.load(path))
    d = summary.to_dict()["steps"]
    assert (d["method"], d["count"]) == ("annotations", t["step_count"])
    assert d["disagreements"] > 0  # the bursts alone took them two at a time
    assert (d["cadence"], d["token_cadence"]) == (t["cadence"], t["token_cadence"])
    assert [{k: p[k] for k in PHASE_KEYS} for p in d["phases"]] == [
        {k: p[k] for k in PHASE_KEYS} for p in t["phases"]
    ]
    said = [w for w in summary.warnings if "disagree" in w]
    assert len(said) == 1 and "step-marker bursts, as a model's fixed layer count does" in said[0]


def test_a_trace_merged_from_two_processes_says_its_launch_links_are_shared(
    tmp_path: Path,
) -> None:
    """An unseen-trace probe's finding: two processes merged into one file (SGLang's
    ``merged-*`` traces) number their launches' correlation ids from 1 each, and a Kineto
    kernel does not say which process launched it: one process's step annotations were
    linked to the other device's kernels, silently. The summary now says so."""
    doc = json.loads(gzip.decompress((GENERATED / "hybrid_chunked.json.gz").read_bytes()))
    copy = []
    for e in json.loads(json.dumps(doc["traceEvents"])):
        if e.get("pid") == 0:  # the device's: now device 1
            e["pid"] = 1
            if isinstance(e.get("args"), dict) and "device" in e["args"]:
                e["args"]["device"] = 1
        elif isinstance(e.get("pid"), int):
            e["pid"] += 1000
        copy.append(e)
    path = tmp_path / "merged.json"
    path.write_text(json.dumps({**doc, "traceEvents": doc["traceEvents"] + copy}))
    said = [
        w
        for w in tv.summarize(tv.load(path), tv.AnalysisConfig(device=1)).warnings
        if "correlation id" in w
    ]
    assert len(said) == 1 and "launched inside the steps of more than one process" in said[0]
    # the file alone says nothing of the kind: its golden summary (tests/golden) holds it


def test_steps_table_columns(scenario: str) -> None:
    t = truth(scenario)
    table = tv.steps(tv.load(GENERATED / f"{scenario}.json.gz"))
    assert table.columns[:23] == [
        "index",
        "start_ns",
        "anchor_ns",
        "end_ns",
        "interval_ns",
        "kind",
        "kind_source",
        "phase",
        "kernels",
        "busy_fraction",
        "prefill_ns",
        "prefill_kernels",
        "annotation",
        *RECORD_COLUMNS,
        "shape_tokens",
    ]
    assert table["interval_ns"][0] is None
    assert table["prefill_ns"].to_list() == [s["prefill_ns"] for s in t["steps"]]
    assert table["prefill_kernels"].to_list() == [s["prefill_kernels"] for s in t["steps"]]
    fam_cols = [c for c in table.columns if c.startswith("ns_")]
    total = table.select(pl.sum_horizontal(fam_cols)).to_series().sum()
    assert total == t["steps_kernel_ns"]  # every step's, warm-up steps' too
    assert table.columns[-1] == "warmup"
    assert table["warmup"].to_list() == [s["warmup"] for s in t["steps"]]
    assert table["phase"].to_list() == [s["phase"] for s in t["steps"]]
    # each step's busy share of its span, as the plan lays its kernels out
    want = [s["busy_ns"] / (s["end_ns"] - s["start_ns"]) for s in t["steps"]]
    assert table["busy_fraction"].to_list() == pytest.approx(want, rel=1e-12, abs=0)


def test_union_matches_a_plain_sweep() -> None:
    rng = np.random.default_rng(7)
    starts = rng.integers(0, 1_000_000, 5_000)
    ends = starts + rng.integers(0, 3_000, 5_000)
    u = union(starts, ends)
    events = sorted(zip(starts.tolist(), ends.tolist(), strict=True))
    total, cur = 0, None
    for a, b in events:
        if cur is None or a > cur[1]:
            if cur:
                total += cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    total += cur[1] - cur[0]
    assert u.length() == total
    lo, hi = np.array([0, 250_000, 999_000]), np.array([100_000, 600_000, 1_010_000])
    for i in range(3):
        expect = sum(
            max(0, min(b, hi[i]) - max(a, lo[i]))
            for a, b in zip(u.starts.tolist(), u.ends.tolist(), strict=True)
        )
        assert u.clipped_lengths(lo, hi)[i] == expect


def test_busy_table() -> None:
    t = truth("dense_sglang")
    b = tv.busy(tv.load(GENERATED / "dense_sglang.json.gz"))
    assert b.row(0, named=True)["busy_ns"] == t["busy"]["busy_ns"]
    assert b.row(0, named=True)["fraction"] == pytest.approx(t["busy"]["fraction"], rel=DOC_REL)


def test_decode_gaps_table() -> None:
    t = truth("hybrid_wide_spacing")
    g = tv.decode_gaps(tv.load(GENERATED / "hybrid_wide_spacing.json.gz"))
    all_ = next(x for x in t["decode_gaps"] if x["population"] == "all")
    assert g.height == all_["n"]
    assert int(g["gap_ns"].max()) == all_["max_ns"]
    assert g["population"].value_counts().sort("population").rows() == [
        ("decode", next(x for x in t["decode_gaps"] if x["population"] == "decode")["n"]),
        ("mixed", next(x for x in t["decode_gaps"] if x["population"] == "mixed")["n"]),
    ]


def test_no_step_marker_says_what_was_done(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "void at::native::vectorized_elementwise_kernel<4>()",
            "pid": 0,
            "tid": 7,
            "ts": 100 + 1000 * s + 10 * i,
            "dur": 5,
        }
        for s in range(6)
        for i in range(5)
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    summary = tv.summarize(tv.load(path))
    d = summary.to_dict()
    assert d["steps"]["method"] == "idle" and d["steps"]["count"] == 6
    assert d["steps"]["cadence"]["p50_ns"] == 1_000_000
    said = [w for w in summary.warnings if "no step-marker kernels" in w]
    assert len(said) == 1 and said[0].count("no step-marker kernels") == 1, said
    assert d["decode_gaps"][0]["n"] == 0 and d["decode_gaps"][0]["p50_ns"] is None


def test_cpu_only_trace_uses_leaf_cpu_ops(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "leaf_a", "pid": 1, "tid": 1, "ts": 10, "dur": 20},
        {"ph": "X", "cat": "cpu_op", "name": "leaf_b", "pid": 1, "tid": 1, "ts": 40, "dur": 30},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    summary = tv.summarize(tv.load(path))
    d = summary.to_dict()
    assert d["trace"]["activity"] == "cpu_op"
    assert d["trace"]["kernels"] == 2
    assert d["busy"]["busy_ns"] == 50_000
    assert any("cpu_op" in w for w in summary.warnings)
    # the screen says what stands in: threads, not streams; CPU busy, not GPU busy
    shown = CliRunner().invoke(cli, ["summarize", str(path)], terminal_width=120).stdout
    assert "a CPU capture (process 1)" in shown and "2 CPU ranges on threads 1" in shown
    assert "CPU busy" in shown and "GPU" not in shown and "streams" not in shown


def _html_rows(text: str) -> list[list[str]]:
    """The text of every table row's cells."""
    from html.parser import HTMLParser

    rows: list[list[str]] = []

    class Rows(HTMLParser):
        def handle_starttag(self, tag: str, attrs: object) -> None:
            if tag == "tr":
                rows.append([])
            elif tag == "td":
                rows[-1].append("")

        def handle_data(self, data: str) -> None:
            if rows and rows[-1] and self.get_starttag_text() == "<td>":
                rows[-1][-1] += data

    Rows().feed(text)
    return rows


def test_summary_renders_as_html() -> None:
    summary = tv.summarize(tv.load(GENERATED / "hybrid_chunked.json.gz"))
    html = summary._repr_html_()
    d = summary.to_dict()
    rows = _html_rows(html)
    fam = d["families"][0]
    assert [
        fam["family"],
        f"{fam['count']:,}",
        fmt_ns(fam["total_ns"]),
        f"{fam['share']:.1%}",
    ] in rows
    for p in d["steps"]["phases"]:
        assert [p["kind"], str(p["steps"]), fmt_ns(p["cadence_p50_ns"])] in rows
    for g in d["decode_gaps"]:
        assert [
            g["population"],
            str(g["n"]),
            *(fmt_ns(g[q]) for q in ("p50_ns", "p90_ns", "p99_ns")),
        ] in rows
    assert json.loads(summary.to_json()) == summary.to_dict()


def test_cpu_captures_analyse_the_same_through_every_entry_point(tmp_path: Path) -> None:
    """A CPU-only capture (no kernels): tv.steps and tv.decode_gaps take its CPU ranges as
    tv.summarize does, and its steps are the engine's annotations."""
    from fixtures.build import TraceBuilder

    tb = TraceBuilder()
    t0, names, ann = 1_000_000_000, [], "user_annotation"
    for i in range(6):
        mixed = i in (2, 3)
        name = f"execute_context_{int(mixed)}({512 if mixed else 0})_generation_3(3)"
        names.append(name)
        tb.cpu_op(name, t0, 900_000, cat="user_annotation")
        t = t0 + 10_000
        for layer in range(2):
            if mixed:
                tb.cpu_op("chunk_gated_delta_rule_fwd_kernel_h", t, 50_000, cat=ann)
                t += 60_000
            tb.cpu_op(
                "fused_recurrent_gated_delta_rule_fwd_kernel", t, 20_000, cat="user_annotation"
            )
            t += 30_000
            tb.cpu_op("flash_fwd_splitkv_kernel", t, 40_000, cat=ann)
            t += 50_000 + layer
        t0 += 1_000_000 + i * 1_000
    path = tb.write(tmp_path / "cpu.json.gz")
    trace = tv.load(path)
    assert trace.kernels.height == 0
    summary = tv.summarize(trace)
    table = tv.steps(trace)
    assert table.equals(summary.steps)
    assert table["annotation"].to_list() == names
    assert table["kind"].to_list() == ["decode", "decode", "mixed", "mixed", "decode", "decode"]
    assert set(table["kind_source"].to_list()) == {"annotation"}
    assert tv.decode_gaps(trace).equals(summary.decode_gaps)
    assert summary.decode_gaps.height == 6 * 2 - 1
    assert summary.to_dict()["trace"]["activity"] == "cpu_op"
    # a scan analyses it as summarize does (it refused CPU-only traces: issue 33)
    report = tv.scan([str(path)], tmp_path / "ds")
    assert report.scanned == [str(path)] and report.failed == []
    rows = pl.read_parquet(tmp_path / "ds" / "steps" / "*.parquet").sort("index")
    assert rows["annotation"].to_list() == names and rows["kind"].equals(table["kind"])


def test_a_trailing_cpu_annotation_without_gpu_work_is_no_step(tmp_path: Path) -> None:
    """vLLM's annotation list can end with an empty step: a CPU range that launched nothing."""
    t = truth("hybrid_chunked")
    doc = json.loads(gzip.decompress((GENERATED / "hybrid_chunked.json.gz").read_bytes()))
    last = max(e["ts"] + e.get("dur", 0) for e in doc["traceEvents"] if "ts" in e)
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "execute_context_0(0)_generation_6(6)",
            "pid": 4242,
            "tid": 4242,
            "ts": last + 100.0,
            "dur": 50.0,
        }
    )
    path = tmp_path / "trailing.json"
    path.write_text(json.dumps(doc))
    d = tv.summarize(tv.load(path)).to_dict()
    assert d["steps"]["count"] == t["step_count"] and d["steps"]["method"] == "annotations"
    assert d["steps"]["annotation_steps"] == t["step_count"]
    check_against_truth(d, t)


def test_step_ranges_on_two_streams_are_one_step_but_neighbours_stay_apart(tmp_path: Path) -> None:
    """A step's range projected once per stream is one step; a projection that runs a
    little into the next step (a slow stream, asynchronous scheduling) does not merge the
    two steps."""
    t = truth("hybrid_monolithic")  # vLLM ranges on the GPU
    doc = json.loads(gzip.decompress((GENERATED / "hybrid_monolithic.json.gz").read_bytes()))
    extra = []
    for e in doc["traceEvents"]:
        if e.get("cat") == "gpu_user_annotation":
            # the same range on a side stream, ending 2.7 ms later: past the next step's start
            extra.append({**e, "tid": 20, "ts": e["ts"] + 5.0, "dur": e["dur"] + 2_700.0})
    doc["traceEvents"] += extra
    path = tmp_path / "two_streams.json"
    path.write_text(json.dumps(doc))
    d = tv.summarize(tv.load(path)).to_dict()
    assert d["steps"]["method"] == "annotations" and d["steps"]["annotation_steps"] == len(
        t["steps"]
    )
    check_against_truth(d, t)


def test_an_engines_steps_win_over_a_profiler_step_around_them(tmp_path: Path) -> None:
    """torch.profiler's ProfilerStep may hold many engine steps: the engine's own ranges
    decide."""
    t = truth("hybrid_chunked")  # vLLM ranges on the CPU thread
    doc = json.loads(gzip.decompress((GENERATED / "hybrid_chunked.json.gz").read_bytes()))
    cpu = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation"]
    first = min(e["ts"] for e in cpu)
    last = max(e["ts"] + e["dur"] for e in cpu)
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#0",
            "pid": 4242,
            "tid": 4242,
            "ts": first - 10.0,
            "dur": last - first + 20.0,
        }
    )
    path = tmp_path / "profiler_step.json"
    path.write_text(json.dumps(doc))
    d = tv.summarize(tv.load(path)).to_dict()
    assert d["steps"]["method"] == "annotations"
    check_against_truth(d, t)


def test_profiler_steps_around_whole_generate_calls_do_not_override_the_bursts(
    tmp_path: Path,
) -> None:
    """An unseen-trace probe's finding: torch.profiler's recipe calls ``prof.step()`` once
    per loop iteration, and for inference that iteration is often a whole ``generate()``
    of many forward passes. Each ``ProfilerStep#N`` then holds the same number of
    step-marker bursts (k steps of L layers), which the fixed-layer-count rule took for a
    model's layer count: 5 steps with a 46x cadence instead of 160. Planted: the fixture's
    engine annotations replaced by ten ProfilerStep ranges of five engine steps each; the
    steps are the fixture's, by the bursts."""
    t = truth("hybrid_chunked")
    source = GENERATED / "hybrid_chunked.json.gz"
    doc = json.loads(gzip.decompress(source.read_bytes()))
    engine = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation"]
    assert len(engine) == t["step_count"] == 50
    kept = [e for e in doc["traceEvents"] if e.get("cat") != "user_annotation"]
    engine.sort(key=lambda e: e["ts"])
    for n in range(10):
        first, last = engine[5 * n], engine[5 * n + 4]
        end = max(e["ts"] + e["dur"] for e in engine[5 * n : 5 * n + 5])
        kept.append(first | {"name": f"ProfilerStep#{n}", "dur": end - first["ts"]})
        assert last["ts"] >= first["ts"]
    doc["traceEvents"] = kept
    path = tmp_path / "profiler_steps.json"
    path.write_text(json.dumps(doc))
    summary = tv.summarize(tv.load(path))
    d = summary.to_dict()["steps"]
    assert (d["method"], d["count"]) == ("bursts", t["step_count"])
    assert d["cadence"] == t["cadence"]
    assert any("using the bursts" in w for w in summary.warnings)


def test_steps_with_a_varying_number_of_drafter_bursts_are_found_by_the_pause(
    tmp_path: Path,
) -> None:
    """An unseen-trace probe's finding: speculative decoding runs a one-layer drafter a
    varying number of times a step, so the steps hold different numbers of step-marker
    bursts and no period or burst count stands out; without annotations the whole trace
    was one step, though the between-step pause stood out 13x. Planted: the fixture's
    annotations removed and 0 or 1 drafter layer (a GEMM, then attention) appended to
    each step at random, inside its pause; the steps and their cadence are the fixture's."""
    t = truth("dense_sglang")
    source = GENERATED / "dense_sglang.json.gz"
    doc = json.loads(gzip.decompress(source.read_bytes()))
    events = [e for e in doc["traceEvents"] if e.get("cat") != "user_annotation"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    gemm = next(e for e in kernels if tv.load_rules().family_of(e["name"]) == "gemm")
    attention = next(e for e in kernels if tv.load_rules().family_of(e["name"]) == "full_attention")
    starts = [s["start_ns"] for s in t["steps"]]
    drafts = random.Random(7)  # not periodic: a cycle of counts would be a period itself
    for i, start in enumerate(starts):
        end = max(
            round((e["ts"] + e["dur"]) * 1000)
            for e in kernels
            if start <= round(e["ts"] * 1000) < (starts[i + 1] if i + 1 < len(starts) else 1 << 62)
        )
        at = end + 2_000
        for _ in range(drafts.choice((0, 1))):  # 6 or 7 bursts a step
            for kernel in (gemm, attention):
                events.append(kernel | {"ts": at / 1000, "dur": 3.0})
                at += 4_000
        if i + 1 < len(starts):
            assert starts[i + 1] - at > 100_000  # the pause still stands out
    doc["traceEvents"] = events
    path = tmp_path / "drafter.json"
    path.write_text(json.dumps(doc))
    d = tv.summarize(tv.load(path)).to_dict()["steps"]
    assert (d["method"], d["count"]) == ("bursts", t["step_count"])
    assert d["cadence"] == t["cadence"]


def test_engine_annotations_keep_their_steps_when_the_bursts_lock_onto_a_divisor(
    tmp_path: Path,
) -> None:
    """A review's finding: an engine's own step annotations were overruled wherever the
    bursts found a strong period dividing the layer count. Planted: 30 SGLang steps of 8
    layers; every other layer waits 40 µs on the host (an MoE layer), the pause between
    steps is 45 µs (an overlap scheduler), so the bursts see a period of 2; the
    annotations hold 8 bursts a step and are the steps."""
    from fixtures.build import TraceBuilder

    tb = TraceBuilder()
    t, starts = 1_000_000_000, []
    for _ in range(30):
        starts.append(t)
        for layer in range(8):
            tb.kernel("flash_fwd_kernel", t, 20_000)
            t += 22_000
            tb.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", t, 30_000)
            t += 30_000 + (0 if layer == 7 else 40_000 if layer % 2 else 5_000)
        tb.gpu_annotation("step[DECODE bs=8]", starts[-1], t - starts[-1])
        t += 45_000
    path = tmp_path / "pairs.json"
    tb.write(str(path))
    steps = tv.steps(tv.load(path))
    assert steps["start_ns"].to_list() == starts


def test_host_stalls_at_random_in_a_trace_without_pauses_are_no_steps(tmp_path: Path) -> None:
    """A review's finding: in a trace with no pause between steps (CUDA graphs, an overlap
    scheduler), a host stall every 20-28 bursts made a sharp break whose stretches the
    drafter rule took for steps (40 of them, a plausible but wrong cadence). Planted: 120
    steps of 8 layers, no pause between them, and 0.5 ms stalls at random: no step
    structure is claimed, and the warning says what to set."""
    from fixtures.build import TraceBuilder

    tb, stalls = TraceBuilder(), random.Random(3)
    t, next_stall = 1_000_000_000, stalls.randint(20, 28)
    for burst in range(120 * 8):
        tb.kernel("flash_fwd_kernel", t, 20_000)
        t += 22_000
        tb.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", t, 30_000)
        t += 32_000
        if burst == next_stall:
            t += 500_000
            next_stall += stalls.randint(20, 28)
    path = tmp_path / "stalls.json"
    tb.write(str(path))
    summary = tv.summarize(tv.load(path))
    assert summary.to_dict()["steps"]["count"] == 1
    said = [w for w in summary.warnings if w.startswith("no step structure found")]
    # the stalls' sharp break is named, with the options that cut at it or set L
    assert len(said) == 1 and "stand out" in said[0] and "set --step-gap" in said[0], said
    assert "--layers" in said[0]


def test_the_period_is_the_gap_and_the_previous_markers_run() -> None:
    """``period_ns`` = next start - previous start = the gap + the previous marker's
    duration (where they do not overlap); its percentiles beside each population's."""
    a = tv.analyze(GENERATED / "hybrid_chunked.json.gz")
    t = truth("hybrid_chunked")
    gaps = a.decode_gaps.filter(~pl.col("overlap"))
    marker = a.summary.document["decode_marker_kernels"][0]
    k = a.trace.kernels.filter(pl.col("name").cast(pl.String) == marker).sort("ts_ns")
    ends = dict(zip((k["ts_ns"] + k["dur_ns"]).to_list(), k["dur_ns"].to_list(), strict=True))
    prev_dur = np.array([ends[s] for s in gaps["start_ns"].to_list()])
    assert (gaps["period_ns"].to_numpy() == gaps["gap_ns"].to_numpy() + prev_dur).all()
    for g, planted in zip(a.summary.document["decode_gaps"], t["decode_gaps"], strict=True):
        assert g["period"] == planted["period"]
