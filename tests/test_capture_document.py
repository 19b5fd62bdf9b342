"""A capture's documents match their types (traceview/analysis/base/capture_document.py) key
for key: ``traceview.itl/1`` and ``traceview.itl-diff/1`` as ``traceview itl --json`` prints
them, and ``run.json`` (``traceview.capture/1``) as the probe writes it, from live captures
of the fake OpenAI-compatible server (tests/openai_fake.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from openai_fake import Plan, fake_server

from tests.test_document import mismatches
from traceview.analysis.base.capture_document import (
    CaptureRunDocument,
    ItlDiffDocument,
    ItlDocument,
    TraceClock,
)
from traceview.cli import cli

pytest.importorskip("httpx")
pytest.importorskip("prometheus_client")

PROBE: dict[str, object] = {
    "victims": 2,
    "inject": 2,
    "prompt_tokens": 120,
    "victim_prompt_tokens": 8,
    "max_tokens": 100_000,
    "inject_max_tokens": 3,
    "steady_tokens": 6,
    "metrics_every_s": 0.05,
}


def _capture(tmp_path: Path, name: str, plan: Plan, **kw: object) -> Path:
    from traceview.capture.probe import ProbeConfig, run_probe

    with fake_server(plan) as (url, _state):
        cfg = ProbeConfig(url=url, out=str(tmp_path / name), **{**PROBE, **kw})  # type: ignore[arg-type]
        return asyncio.run(run_probe(cfg)).out


def _itl_json(*folders: Path) -> dict[str, object]:
    done = CliRunner().invoke(cli, ["itl", *map(str, folders), "--json"])
    assert done.exit_code == 0, done.output
    parsed: dict[str, object] = json.loads(done.stdout)
    return parsed


def test_a_profiled_capture_s_documents_match_their_types(tmp_path: Path) -> None:
    """Profiled, with a trace whose clock was found, and /metrics read throughout: every
    key of run.json, of the itl document and of two captures' diff is declared, and has
    its declared type."""
    profiles = tmp_path / "profiles"
    folder = _capture(tmp_path, "c", Plan(profile_dir=str(profiles)), profile_dir=str(profiles))
    run = json.loads((folder / "run.json").read_text())
    assert run["clock"]["traces"] and run["clock"]["traces"][0]["offset_ns"] is not None
    assert "profile_start" in run["clock"]
    assert mismatches(run, CaptureRunDocument) == []
    doc = _itl_json(folder)
    assert doc["clock"] is not None and doc["prefill_check"] is not None
    assert mismatches(doc, ItlDocument) == []
    assert mismatches(_itl_json(folder, folder), ItlDiffDocument) == []


def test_an_unprofiled_capture_without_metrics_matches_its_types(tmp_path: Path) -> None:
    """The control, on a server whose first /metrics read fails: no profiler calls, no
    trace clock, and the metrics section holds only its notes."""
    folder = _capture(tmp_path, "c", Plan(metrics_fail=(1,)), profile=False)
    run = json.loads((folder / "run.json").read_text())
    assert "profile_start" not in run["clock"] and run["clock"]["traces"] == []
    assert mismatches(run, CaptureRunDocument) == []
    doc = _itl_json(folder)
    assert doc["clock"] is None and doc["prefill_check"] is None
    assert doc["metrics"] is not None and list(doc["metrics"]) == ["notes"]  # type: ignore[call-overload]
    assert mismatches(doc, ItlDocument) == []


def test_an_unreadable_trace_s_clock_entry_matches_its_type(tmp_path: Path) -> None:
    """A trace the capture cannot read gets its name, why, and a null offset."""
    from traceview.capture.collect import offsets

    bad = tmp_path / "x.pt.trace.json"
    bad.write_text("{not json")
    clock = {"client": "time.monotonic_ns", "wall_minus_monotonic_ns": 0, "read_width_ns": 0}
    entries = offsets(clock, [bad])  # type: ignore[arg-type]
    assert entries[0]["offset_ns"] is None and entries[0]["why"]
    assert mismatches(json.loads(json.dumps(entries)), list[TraceClock]) == []
