"""Issue 21, items 3 and 4: CUDA-graph capture is not serving, and a step's kind never
contradicts the evidence. Against the planted fixtures (fixtures/engine.py knows which
kernels ran under capture and what each step's batch held) and the shared capture trace."""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner
from conftest import CAPTURE_ONLY_NAMES, GENERATED, SHARED_TRACES, truth

import traceview as tv
from traceview.analysis.steps.capture import capture_regions
from traceview.analysis.steps.kinds import step_kinds
from traceview.analysis.steps.records import record
from traceview.cli import cli
from traceview.errors import CaptureOnlyError


def _said(t: dict) -> str:  # type: ignore[type-arg]
    """How a capture-only trace's line counts its planted regions and kernels."""
    return f"({t['capture']['regions']} region(s), {t['capture']['kernels']} kernel(s))"


def test_capture_regions_and_their_kernels_are_the_planted_ones() -> None:
    t = truth("vllm_capture_then_serve")
    trace = tv.load(GENERATED / "vllm_capture_then_serve.json.gz")
    capture = capture_regions(trace)
    assert (capture.regions, capture.kernels) == (t["capture"]["regions"], t["capture"]["kernels"])
    assert [{"start_ns": a, "end_ns": b, "span_ns": b - a} for a, b in capture.spans] == t[
        "capture"
    ]["spans"]
    # what is left is the serving: the planted steps, none of them 8,192 tokens wide
    summary = tv.summarize(trace)
    assert summary.steps.height == t["step_count"]
    assert summary.to_dict()["trace"]["kernels"] == t["kernels"]
    assert summary.to_dict()["capture"] == t["capture"]
    assert max(summary.steps["shape_tokens"].drop_nulls().to_list()) < 8192
    said = [w for w in summary.warnings if w.startswith("CUDA-graph capture / warm-up")]
    assert said == [
        f"CUDA-graph capture / warm-up: {t['capture']['regions']} region(s), "
        f"{t['capture']['kernels']} kernel(s) left out (engine start-up, not serving)"
    ]


@pytest.mark.parametrize("name", CAPTURE_ONLY_NAMES)
def test_a_capture_only_trace_says_so_in_one_line_and_exits_0(name: str) -> None:
    t = truth(name)
    path = str(GENERATED / f"{name}.json.gz")
    analysis = tv.analyze(path)
    with pytest.raises(CaptureOnlyError):
        analysis.serving()  # what the commands that draw or judge steps read
    assert analysis.summary.to_dict()["steps"]["count"] == 0  # the document all the same
    result = CliRunner().invoke(cli, ["summarize", path])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"{path}: CUDA-graph capture / warm-up only")
    assert _said(t) in result.stderr


@pytest.mark.parametrize("name", CAPTURE_ONLY_NAMES)
def test_a_capture_only_trace_has_a_document_with_0_steps_and_its_capture(name: str) -> None:
    """Issue 32, item 10: ``summarize --json`` exits 0, so it prints one document: 0 steps,
    and the capture section (regions, kernels, each region's span) as planted."""
    t = truth(name)
    path = str(GENERATED / f"{name}.json.gz")
    result = CliRunner().invoke(cli, ["summarize", "--json", path])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "traceview.summary/1"
    assert doc["capture"] == t["capture"]  # regions, kernels, spans: the planted ones
    assert len(doc["capture"]["spans"]) == t["capture"]["regions"] >= 1
    assert doc["steps"]["count"] == 0 and doc["steps"]["phases"] == []
    assert doc["steps"]["cadence"]["n"] == 0 and doc["steps"]["cadence"]["p50_ns"] is None
    assert all(g["n"] == 0 for g in doc["decode_gaps"]) and doc["families"] == []
    assert doc["busy"]["fraction"] is None
    facts = doc["trace"]
    assert facts["kernels"] == t["in_trace"]["kernels"] == t["capture"]["kernels"]
    assert (facts["start_ns"], facts["end_ns"]) == (
        t["in_trace"]["start_ns"],
        t["in_trace"]["end_ns"],
    )
    assert doc["warnings"][0].startswith("CUDA-graph capture / warm-up only")
    assert _said(t) in doc["warnings"][0]
    # the API gives the same document
    api = tv.summarize(tv.load(path))
    assert api.to_dict()["capture"] == t["capture"] and api.steps.height == 0


def test_a_capture_only_summary_s_facts_are_the_analysed_device_s(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The summary's ``trace`` section is built by one function for every summary: its
    ``kernels``, ``streams`` and span are the analysed device's, capture-only or not. Here
    device 0 (the most kernel time) runs 3 kernels on stream 7 and device 1 runs 2 on
    stream 9, each device's under a GPU-projected ``capture_32_DECODE`` range (a capture
    -only summary counted both devices' 5 kernels, beside device 0's span and streams)."""
    from fixtures.build import Event, TraceBuilder

    tb = TraceBuilder()
    planted = {0: (3, 10_000, 7), 1: (2, 1_000, 9)}  # device: kernels, each one's ns, stream
    for device, (n, dur, stream) in planted.items():
        t0 = 5_000_000 + 1_000 * device
        for i in range(n):
            tb.kernel(f"k{device}", t0 + 20_000 * i, dur, device=device, stream=stream)
        span = 20_000 * (n - 1) + dur + 2_000
        tb.events.append(
            Event(
                "X",
                "capture_32_DECODE",
                "gpu_user_annotation",
                device,
                stream,
                t0 - 1_000,
                span,
                {"External id": 0},
            )
        )
    trace = tv.load(tb.write(tmp_path / "two_devices_capture.json"))
    assert capture_regions(trace).kernels == 5  # every kernel: capture alone
    facts = tv.summarize(trace).to_dict()["trace"]
    assert (facts["device"], facts["kernels"], facts["streams"]) == (0, 3, [7])
    assert (facts["start_ns"], facts["end_ns"]) == (5_000_000, 5_000_000 + 40_000 + 10_000)
    assert facts["devices"] == [0, 1]


@pytest.mark.parametrize("name", CAPTURE_ONLY_NAMES)
def test_a_capture_only_trace_has_a_step_table_with_no_rows(name: str) -> None:
    """``steps --format csv`` prints its header; json an empty array; both exit 0 and say
    what the trace holds on stderr. The columns are a step table's own (those of a served
    trace, less the per-family ones)."""
    path = str(GENERATED / f"{name}.json.gz")
    served = tv.summarize(tv.load(GENERATED / "hybrid_chunked.json.gz")).steps.columns
    header = ",".join(c for c in served if not c.startswith("ns_"))
    csv = CliRunner().invoke(cli, ["steps", "--format", "csv", path])
    assert csv.exit_code == 0, csv.output
    assert csv.stdout == header + "\n"
    assert _said(truth(name)) in csv.stderr and csv.stderr.count("\n") == 1
    out = CliRunner().invoke(cli, ["steps", "--format", "json", path])
    assert out.exit_code == 0 and json.loads(out.stdout) == []


@pytest.mark.slow
def test_the_shared_capture_trace_has_no_invented_steps() -> None:
    path = SHARED_TRACES / "tracelens" / "rocm-mi-vllm-graph-capture-rank0.pt.trace.json.gz"
    if not path.exists():
        pytest.skip("../shared/traces is not present")
    result = CliRunner().invoke(cli, ["summarize", str(path)])
    assert result.exit_code == 0 and result.stdout == ""
    assert "CUDA-graph capture / warm-up only (1 region(s)" in result.stderr


def test_prefill_alone_steps_are_prefill_and_hold_no_decode_gaps() -> None:
    """SGLang's default scheduling: prompt chunks as prefill-only EXTEND steps between decode
    steps. They are prefill; no decode gap is measured inside them; the cadence a decoding
    request experiences spans them."""
    t = truth("dense_sglang_extend")
    summary = tv.summarize(tv.load(GENERATED / "dense_sglang_extend.json.gz"))
    kinds = summary.steps["kind"].to_list()
    assert kinds == [s["kind"] for s in t["steps"]] and kinds.count("prefill") == 5
    gaps = summary.decode_gaps
    prefill = summary.steps.filter(summary.steps["kind"] == "prefill")
    for lo, hi in prefill.select("start_ns", "end_ns").iter_rows():
        assert gaps.filter((gaps["start_ns"] >= lo) & (gaps["start_ns"] < hi)).height == 0
    doc = summary.to_dict()
    assert doc["steps"]["token_cadence"] == t["token_cadence"]
    assert doc["steps"]["token_cadence"]["n"] == kinds.count("decode") - 1
    assert doc["steps"]["cadence_by_kind"]["prefill"]["n"] == 0  # each prefill step alone


@pytest.mark.slow
def test_a_trace_of_prefill_steps_only_says_no_decode_steps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = SHARED_TRACES / "tracelens" / "b200-vllm-eager.json.gz"
    if not path.exists():
        pytest.skip("../shared/traces is not present")
    doc = tv.summarize(tv.load(path)).to_dict()
    assert [p["kind"] for p in doc["steps"]["phases"]] == ["prefill"]
    assert all(g["n"] == 0 and g["p99_ns"] is None for g in doc["decode_gaps"])
    assert (
        "no decode steps (every step is prefill): decode gaps are not measured" in (doc["warnings"])
    )
    result = CliRunner().invoke(cli, ["summarize", str(path)], terminal_width=200)
    assert "decode gaps: no decode steps" in result.stdout
    out = CliRunner().invoke(cli, ["gaps", str(path), "-o", str(tmp_path / "g.png")])
    assert out.exit_code == 2 and "no decode gaps to chart (no decode steps)" in out.stderr


@pytest.mark.parametrize(
    ("names", "kind"),
    [
        (["execute_context_1(888_788544)_generation_0(0)"], "prefill"),
        (["execute_context_2(900)_generation_6(6)"], "mixed"),
        (["execute_context_0(0)_generation_6(6)"], "decode"),
        (["execute_new_2_cached_0"], "prefill"),
        (["execute_new_1_cached_6"], "mixed"),
        (["step[EXTEND bs=15 toks=15360]"], "prefill"),
        (["step[MIXED bs=7 toks=2054]"], "mixed"),
        (["step[DECODE bs=16]"], "decode"),
    ],
)
def test_the_annotation_decides_the_kind(names: list[str], kind: str) -> None:
    kinds = step_kinds([False], [record(names)], [None], [None])
    assert (kinds.kind, kinds.source, kinds.disagreements) == ([kind], ["annotation"], {})


def test_shapes_rule_out_decode_and_disagreements_are_counted() -> None:
    cached = record(["execute_new_0_cached_7"])  # states nothing about prompt work
    decode = record(["execute_context_0(0)_generation_6(6)"])
    # 2054 query tokens for 7 requests: prompt work; 7 tokens for 7: no evidence
    k = step_kinds([False, False], [cached, cached], [2054, 7], [None, None])
    assert (k.kind, k.source) == (["mixed", "decode"], ["shapes", "kernels"])
    # the layout's own batch (SDPA [B, heads, S, dim]): 1 request, 512 tokens
    k = step_kinds([False], [record([])], [512], [1])
    assert (k.kind, k.source) == (["mixed"], ["shapes"])
    # no request count anywhere: shapes cannot decide
    assert step_kinds([False], [record([])], [8192], [None]).source == ["kernels"]
    # an annotation stating decode-only wins over kernels and shapes, and that is counted
    k = step_kinds([True, False, False], [decode] * 3, [None, 4096, 6], [None] * 3)
    assert k.kind == ["decode"] * 3 and k.source == ["annotation"] * 3
    assert k.disagreements == {"kernels": 1, "shapes": 1}


def test_the_disagreement_is_a_warning(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A decode-only annotation around a step that ran prefill-only kernels: the annotation
    decides, and the summary says on how many steps the evidence disagreed."""
    raw = json.loads(gzip.decompress((GENERATED / "hybrid_chunked.json.gz").read_bytes()))
    for e in raw["traceEvents"]:
        name = str(e.get("name", ""))
        if name.startswith("execute_context_1("):
            e["name"] = "execute_context_0(0)_generation_6(6)"
    path = tmp_path / "lying.json"
    path.write_text(json.dumps(raw))
    summary = tv.summarize(tv.load(path))
    chunks = sum(1 for s in truth("hybrid_chunked")["steps"] if s["kind"] == "mixed")
    assert set(summary.steps["kind"].to_list()) == {"decode"}
    assert (
        "step kinds: the annotations state decode-only batches, but the kernels show prompt "
        f"work in {chunks} step(s); the annotations decide (kind_source)"
    ) in summary.warnings
