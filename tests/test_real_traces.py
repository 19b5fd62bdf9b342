"""Every real trace in ../shared/traces loads, and its counts match an independent count."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import real_traces, trace_params

import traceview as tv
from traceview.cli import cli

TRACES = real_traces()
pytestmark = pytest.mark.skipif(not TRACES, reason="../shared/traces is not present")

DEVICE = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}


def raw_counts(path: Path) -> dict[str, int]:
    """Counts straight from the JSON with Python's own json module (no traceview code)."""
    # numbers as their decimal digits: a time from the Unix epoch (1.7e15 µs) is 250 ns
    # coarse as a float, and the loader reads such times exactly (docs/loading.md)
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    c: Counter[str] = Counter()
    for e in events:
        ph, cat = e.get("ph"), str(e.get("cat", "")).lower()
        if ph == "X" and cat in DEVICE:
            c["kernels"] += 1
            c["kernel_dur_ns"] += _ns(e["dur"])
            c[f"stream:{e['args'].get('stream', e['tid'])}"] += 1
        elif ph in ("X", "i", "I"):
            c["events"] += 1
        elif ph in ("s", "t", "f"):
            c["flows"] += 1
        elif ph == "M":
            c["metadata"] += 1
    c["total"] = len(events)
    first = min(
        (e["ts"] for e in events if e.get("ph") == "X" and str(e.get("cat", "")).lower() in DEVICE),
        default=None,
    )
    c["first_kernel_ns"] = _ns(first) if first is not None else -1
    return c


def _ns(us: Decimal | int) -> int:
    """Microseconds as whole nanoseconds, half up, from the exact decimal."""
    return int((Decimal(us) * 1000).to_integral_value(ROUND_HALF_UP))


@pytest.mark.parametrize("path", trace_params(TRACES))
def test_real_trace_loads_with_exact_counts(path: Path) -> None:
    raw = raw_counts(path)
    trace = tv.load(path)
    assert trace.meta.events == raw["total"]
    assert trace.meta.skipped_events == 0
    assert trace.kernels.height == raw["kernels"]
    assert trace.events.height == raw["events"]
    assert trace.flows.height == raw["flows"]
    assert trace.metadata.height == raw["metadata"]
    assert trace.kernels["dur_ns"].sum() == raw["kernel_dur_ns"]
    streams = trace.kernels.group_by("stream").len()
    assert {f"stream:{s}": n for s, n in streams.iter_rows()} == {
        k: v for k, v in raw.items() if k.startswith("stream:")
    }
    if trace.kernels.height:
        assert trace.kernels["ts_ns"].min() == raw["first_kernel_ns"]
        assert trace.kernels.filter(pl.col("dur_ns") < 0).height == 0


@pytest.mark.parametrize("path", trace_params(TRACES))
def test_real_trace_info_command(path: Path) -> None:
    result = CliRunner().invoke(cli, ["info", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["events"] == sum(row["count"] for row in doc["categories"])


def test_cuda_sync_events_are_not_device_activity() -> None:
    path = next((p for p in TRACES if p.name == "a100_alexnet_benchmark.json.gz"), None)
    if path is None:
        pytest.skip("alexnet trace absent")
    trace = tv.load(path)
    sync = trace.events.filter(pl.col("event_kind") == "sync")
    assert sync.height == 41
    assert 4294967295 not in trace.kernels["stream"].to_list()


def test_rocm_trace_device_and_stream() -> None:
    path = next((p for p in TRACES if p.name == "rocm-mi-sglang-qwen3-8b-decode.json.gz"), None)
    if path is None:
        pytest.skip("ROCm trace absent")
    trace = tv.load(path)
    assert trace.devices == [9]
    assert trace.meta.gpu_name == "AMD Instinct MI300X"


def test_decode_marker_fallback_is_one_kernel_per_layer() -> None:
    """Qwen3-8B has 36 layers: one decode step under paged attention (ll4mi QKV plus its
    reduce kernel per layer) gives 36 decode-marker kernels, so 35 gaps."""
    path = next((p for p in TRACES if p.name == "rocm-mi-sglang-qwen3-8b-decode.json.gz"), None)
    if path is None:
        pytest.skip("ROCm trace absent")
    doc = tv.summarize(tv.load(path)).to_dict()
    assert doc["steps"]["count"] == 1
    assert doc["decode_gaps"][0]["n"] == 35


@pytest.mark.slow
@pytest.mark.parametrize("path", trace_params(TRACES))
def test_every_command_on_every_real_trace(path: Path, tmp_path: Path) -> None:
    """Issue 21: on every shared trace, every command gives an answer a user can act on: no
    empty chart, no step invented from start-up, no verdict on a total."""
    from traceview.analysis.documents.compare import diff
    from traceview.analysis.steps.capture import capture_regions
    from traceview.errors import CaptureOnlyError
    from traceview.render.charts import heartbeat_data

    trace = tv.load(path)
    try:
        summary = tv.analyze(trace).serving()
    except CaptureOnlyError:
        capture = capture_regions(trace)
        assert capture.regions >= 1 and capture.kernels == trace.kernels.height
        result = CliRunner().invoke(cli, ["heartbeat", str(path), "-o", str(tmp_path / "h.png")])
        assert result.exit_code == 0 and "capture / warm-up only" in result.stderr
        assert not (tmp_path / "h.png").exists()
        return
    data = heartbeat_data(summary)
    if summary.steps.height < 2:  # its timeline by family, with every family drawn
        assert data.timeline is not None
        assert {f for f, _s, _l in data.timeline} == {
            f["family"] for f in summary.document["families"]
        }
    else:
        assert data.timeline is None and int((~np.isnan(data.interval_ms)).sum()) >= 1
    d = diff(summary, summary)
    assert d.unchanged
    workload = d.rows.filter(pl.col("role") == "workload")
    assert workload["verdict"].null_count() == workload.height
    for argv in (
        ["summarize", str(path)],
        ["steps", str(path)],
        ["heartbeat", str(path), "-o", str(tmp_path / "h.png")],
        ["report", str(path), "-o", str(tmp_path / "r.html")],
        ["diff", str(path), str(path)],
    ):
        result = CliRunner().invoke(cli, argv, terminal_width=120)
        assert result.exit_code == 0, (argv, result.stderr)
    assert (tmp_path / "h.png").stat().st_size > 10_000
