"""Real engines' own record of their steps is the truth: on every shared trace that carries
vLLM or SGLang step annotations, traceview's steps and kinds must equal what the engine wrote.

The expectations are read here from the raw JSON with Python's json module and this file's
own regular expressions; no traceview code takes part in deriving them.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import real_traces, trace_params

import traceview as tv
from traceview.errors import CaptureOnlyError

TRACES = real_traces()
pytestmark = pytest.mark.skipif(not TRACES, reason="../shared/traces is not present")

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver"}
ENGINE_STEP = re.compile(r"^execute_(\d+_)?context_\d+\(|^execute_new_\d+_cached_\d+$|^step\[")


def _kind(names: list[str]) -> str | None:
    """The kind the engine's record states (docs/metrics.md): prompt work only is prefill,
    prompt and decode work mixed, no prompt work decode; None where it does not say."""
    for name in names:
        if m := re.match(r"^execute_(?:\d+_)?context_(\d+)\((.*)\)_generation_(\d+)\(", name):
            prompt = int(m.group(1)) > 0
            decode = int(m.group(3)) > 0
            return ("mixed" if decode else "prefill") if prompt else "decode"
        if m := re.match(r"^step\[(\w+)", name):
            mode = m.group(1)
            if mode in ("EXTEND", "PREFILL"):
                return "prefill"
            if mode == "MIXED":
                return "mixed"
            if mode in ("DECODE", "IDLE"):
                return "decode"
        if (m := re.match(r"^execute_new_(\d+)_cached_(\d+)$", name)) and int(m.group(1)) > 0:
            return "prefill" if int(m.group(2)) == 0 else "mixed"
    return None


def _only_capture(path: Path) -> bool:
    """The trace holds CUDA-graph capture annotations and no engine step."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {str(e.get("name", "")) for e in events if e.get("ph") == "X"}
    capture = any(re.match(r"^capture_\d+", n) for n in names)
    return capture and not any(ENGINE_STEP.search(n) for n in names)


def _merge(spans: list[tuple[float, float, str]]) -> list[list[str]]:
    """Overlapping ranges as one step: each step's names, in time order."""
    steps: list[list[Any]] = []
    for t0, t1, name in sorted(spans, key=lambda s: (s[0], -s[1])):
        if steps and t0 < steps[-1][1]:
            steps[-1][1] = max(steps[-1][1], t1)
            steps[-1][2].append(name)
        else:
            steps.append([t0, t1, [name]])
    return [s[2] for s in steps]


def engine_steps(path: Path, device: int) -> list[list[str]] | None:
    """The annotated steps with GPU work on ``device``, each as its annotation names; None
    when the trace carries no vLLM/SGLang step annotations."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    complete = [e for e in events if e.get("ph") == "X"]
    ann = [e for e in complete if ENGINE_STEP.search(str(e.get("name", "")))]
    if not ann:
        return None
    kernels = [
        e
        for e in complete
        if str(e.get("cat", "")).lower() in DEVICE_CATS
        and e.get("args", {}).get("device", e.get("pid")) == device
    ]
    on_gpu = [
        (e["ts"], e["ts"] + e["dur"], e["name"])
        for e in ann
        if e.get("cat") == "gpu_user_annotation" and e.get("pid") == device
    ]
    if on_gpu:
        steps = _merge(on_gpu)
        return steps
    # CPU annotations: a step has GPU work when a launch inside it has a kernel
    corr = {e["args"].get("correlation") for e in kernels}
    launches = [
        e
        for e in complete
        if str(e.get("cat", "")).lower() in RUNTIME_CATS
        and e.get("args", {}).get("correlation") in corr
    ]
    by_thread: dict[tuple[Any, Any], list[tuple[float, float, str]]] = {}
    for e in ann:
        if e.get("cat") == "user_annotation":
            by_thread.setdefault((e["pid"], e["tid"]), []).append(
                (e["ts"], e["ts"] + e["dur"], e["name"])
            )
    steps_with_time = []
    for (pid, tid), spans in by_thread.items():
        for names in _merge(spans):
            lo = min(s[0] for s in spans if s[2] in names)
            hi = max(s[1] for s in spans if s[2] in names)
            if any((la["pid"], la["tid"]) == (pid, tid) and lo <= la["ts"] < hi for la in launches):
                steps_with_time.append((lo, names))
    return [names for _, names in sorted(steps_with_time, key=lambda s: s[0])]


@pytest.mark.parametrize("path", trace_params(TRACES))
def test_steps_and_kinds_equal_the_engines_record(path: Path) -> None:
    try:
        summary = tv.summarize(tv.load(path))
    except CaptureOnlyError:
        assert _only_capture(path)  # engine start-up only: no step is invented
        return
    expected = engine_steps(path, summary.to_dict()["trace"]["device"])
    if expected is None:
        pytest.skip("no vLLM/SGLang step annotations in this trace")
    table = summary.steps
    assert table.height == len(expected), (
        f"{path.name}: {table.height} steps, the engine annotated {len(expected)}"
    )
    for row, names in zip(table.iter_rows(named=True), expected, strict=True):
        tokens = [re.match(r"^execute_(?:\d+_)?context_\d+\((?:sq)?(\d+)", n) for n in names]
        found = [int(m.group(1)) for m in tokens if m]
        assert row["context_tokens"] == (found[0] if found else None), names
        stated = _kind(names)
        if stated is not None:
            assert row["kind"] == stated, (row["index"], names)
            assert row["kind_source"] == "annotation"


@pytest.mark.parametrize("path", trace_params(TRACES))
def test_tokens_from_record_shapes_equal_the_engines_count(path: Path) -> None:
    """Where a step's attention ops were recorded with their shapes and the engine's
    annotation states its tokens, the two agree: query tokens = context + generation."""
    if _only_capture(path):
        pytest.skip("engine start-up only: no steps")
    table = tv.summarize(tv.load(path)).steps
    both = table.filter(
        table["shape_tokens"].is_not_null()
        & table["context_tokens"].is_not_null()
        & table["generation_tokens"].is_not_null()
    )
    if both.height == 0:
        pytest.skip("no step with both recorded shapes and annotated token counts")
    for row in both.iter_rows(named=True):
        assert row["shape_tokens"] == row["context_tokens"] + row["generation_tokens"]
    # and straight from the JSON: the first dim of vLLM's attention op's query
    doc = json.loads(gzip.decompress(path.read_bytes()))
    firsts = {
        e["args"]["Input Dims"][0][0]
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("name") == "vllm::unified_attention_with_output"
    }
    assert set(both["shape_tokens"].to_list()) <= firsts
