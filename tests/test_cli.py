"""The CLI through click's CliRunner, plus one entry-point smoke test."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner
from conftest import GENERATED, truth

from traceview.cli import cli


def test_info_json_matches_truth(scenario: str) -> None:
    t = truth(scenario)
    result = CliRunner().invoke(cli, ["info", str(GENERATED / f"{scenario}.json.gz"), "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["kernels"] == t["kernels"]
    assert doc["events"] == t["events"]
    assert doc["start_ns"] == t["start_ns"] and doc["end_ns"] == t["end_ns"]
    assert doc["span_ns"] == t["end_ns"] - t["start_ns"]
    assert [d["device"] for d in doc["devices"]] == [0]
    assert doc["devices"][0]["streams"] == t["streams"]
    assert doc["gpu"] == "NVIDIA H200"
    assert doc["skipped_events"] == 0


def test_info_table() -> None:
    result = CliRunner().invoke(cli, ["info", str(GENERATED / "hybrid_chunked.json.gz")])
    assert result.exit_code == 0
    assert "NVIDIA H200" in result.stdout
    assert "4,890" in result.stdout  # device activity count
    assert "events by category" in result.stdout


def test_every_command_has_help() -> None:
    for name in cli.commands:
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.stdout


def test_usage_error_exits_2() -> None:
    result = CliRunner().invoke(cli, ["info"])
    assert result.exit_code == 2


def test_entry_point_smoke() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "traceview",
            "info",
            str(GENERATED / "dense_sglang.json.gz"),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["kernels"] == truth("dense_sglang")["kernels"]
    proc = subprocess.run(
        [sys.executable, "-m", "traceview", "info", "/no/such/trace.json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == "Error: /no/such/trace.json: no such file\n"
