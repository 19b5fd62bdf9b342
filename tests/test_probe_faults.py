"""The probe when the server misbehaves, against planted truth (tests/openai_fake.py): a
slow or huge /metrics page never holds the victims' tokens, a failed read loses only
itself, a counter reset is summed as Prometheus sums it, a stream that ends early or an
error event ends the capture at once with the server's words, and a capture that fails
after /start_profile stops the profiler."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from openai_fake import Plan, State, fake_server, metrics_text

httpx = pytest.importorskip("httpx")
pytest.importorskip("prometheus_client")

from traceview.capture import engine_metrics  # noqa: E402
from traceview.capture.itl import itl  # noqa: E402
from traceview.capture.probe import ProbeConfig, run_probe  # noqa: E402
from traceview.capture.scrape import MAX_PAGE_BYTES  # noqa: E402
from traceview.cli import cli  # noqa: E402
from traceview.errors import CaptureError  # noqa: E402

VICTIM_PROMPT, INJECT_PROMPT = 8, 120
SENT = 2 * VICTIM_PROMPT + 2 * INJECT_PROMPT


def _cfg(url: str, out: Path, **kw: object) -> ProbeConfig:
    base: dict[str, object] = {
        "url": url,
        "engine": "vllm",
        "victims": 2,
        "inject": 2,
        "prompt_tokens": INJECT_PROMPT,
        "victim_prompt_tokens": VICTIM_PROMPT,
        "max_tokens": 100_000,
        "inject_max_tokens": 5,
        "steady_tokens": 6,
        "metrics_every_s": 0.05,
        "read_timeout_s": 30,
        "out": str(out),
    }
    return ProbeConfig(**{**base, **kw})  # type: ignore[arg-type]


def _capture(url: str, out: Path, **kw: object) -> Path:
    return asyncio.run(run_probe(_cfg(url, out, **kw))).out


@pytest.mark.slow
def test_a_slow_metrics_page_never_holds_the_victims_tokens(tmp_path: Path) -> None:
    """The server writes a victim's chunk every 20 ms while its /metrics page (20,000
    lines, under the size bound) takes ten chunks' time or more to parse. The page is
    parsed in another process: every gap between two arrivals stays below half a parse,
    where a parse on the token loop held every token for its whole length."""
    plan = Plan(chunks=(1,), every_s=0.02, inject_first_s=2.0, metrics_pad=20_000)
    assert len(metrics_text(plan, State()).encode()) < MAX_PAGE_BYTES
    page = metrics_text(plan, State())
    t = time.perf_counter()
    engine_metrics.parse(page, "vllm", "page")
    parse_s = time.perf_counter() - t
    # the claim needs a page that would cost the loop a visible freeze (ten chunks' time
    # or more); a machine that parses it faster cannot show one
    if parse_s <= 10 * plan.every_s:
        pytest.skip(f"this machine parses the page in {parse_s:.3f} s: no freeze to show")
    with fake_server(plan) as (url, state):
        out = _capture(url, tmp_path / "c", metrics_every_s=0.1, inject_max_tokens=1)
        written = state.chunk_times
    doc = itl(out)
    assert doc["metrics"]["snapshots"] >= 3  # pages were read while the victims streamed
    rows = [json.loads(x) for x in (out / "probe.jsonl").read_text().splitlines()]
    for victim in (0, 1):
        arrivals = np.array([r["t_ns"] for r in rows if r.get("victim") == victim])
        assert np.diff(arrivals).max() < parse_s * 1e9 / 2, (victim, np.diff(arrivals).max())
    served = max(np.diff(np.array(t)).max() for t in written.values() if len(t) > 1)
    assert doc["all"]["max_ns"] < served + parse_s * 1e9 / 2


def test_a_page_over_the_bound_is_not_read(tmp_path: Path) -> None:
    """A page larger than the bound is left unread: the probe says so once, stops
    reading it, and the capture goes on."""
    plan = Plan(metrics_pad=600)  # about 140 kB
    with fake_server(plan) as (url, _state):
        out = _capture(url, tmp_path / "c", metrics_max_bytes=50_000)
    run = json.loads((out / "run.json").read_text())
    assert run["metrics"]["snapshots"] == 0 and run["metrics"]["reads"] == 1
    assert run["metrics"]["notes"] == [
        f"{run['config']['url']}/metrics: the page is larger than 50,000 bytes: not read; "
        "reading it stopped"
    ]
    assert itl(out)["all"]["n"] > 0


def test_one_failed_read_loses_only_itself(tmp_path: Path) -> None:
    """The third /metrics read answers 503: the reads before and after it, the after
    snapshot too, are kept, the deltas are the planted ones, and a note counts it."""
    with fake_server(Plan(metrics_fail=(3,))) as (url, state):
        out = _capture(url, tmp_path / "c")
        generated = state.generated
    doc = itl(out)
    assert doc["metrics"]["delta"] == {
        "prompt_tokens": SENT,
        "generation_tokens": generated,
        "preemptions": 0,
    }
    run = json.loads((out / "run.json").read_text())
    reads = run["metrics"]["reads"]
    # before, the reads during the workload, after (the settle's earlier reads are dropped)
    assert run["metrics"]["failed_reads"] == 1 and run["metrics"]["snapshots"] >= 3
    assert doc["metrics"]["notes"] == [
        f"{run['config']['url']}/metrics: 1 of {reads} reads failed (first: HTTP 503); "
        "the other snapshots were kept"
    ]


def test_a_counter_reset_is_summed_and_said(tmp_path: Path) -> None:
    """The server had counted 10^6 prompt tokens before the capture and restarts right
    after the third read: its counters start again from 0. The increase over the
    snapshots sums each rise, the value after the reset counted as its rise, so the
    prompt tokens are the ones sent; the reset is counted and said."""
    plan = Plan(prompt_offset=1e6, metrics_reset_after=3)
    with fake_server(plan) as (url, state):
        out = _capture(url, tmp_path / "c")
        generated = state.generated
    doc = itl(out)
    m = doc["metrics"]
    assert m["delta"]["prompt_tokens"] == SENT and m["delta"]["generation_tokens"] == generated
    assert m["resets"] == {"prompt_tokens": 1, "generation_tokens": 1, "preemptions": 0}
    assert doc["prefill_check"]["verdict"] == "match"
    assert any("reset 1 time(s)" in c for c in doc["prefill_check"]["caveats"])
    assert any("prompt_tokens counter went down 1 time(s)" in n for n in m["notes"])


def test_counters_increase_over_snapshots() -> None:
    """Prometheus's increase(): the rises summed, a fall read as a reset to 0."""
    series = [{"prompt_tokens": p} for p in (100, 150, 30, 80, 80)]
    delta, resets = engine_metrics.increase(series)  # type: ignore[arg-type]
    assert delta["prompt_tokens"] == 50 + 30 + 50 and resets["prompt_tokens"] == 1
    assert engine_metrics.increase([{"prompt_tokens": None}, {"prompt_tokens": 5}])[0] == {
        "prompt_tokens": None,
        "generation_tokens": None,
        "preemptions": None,
    }


def test_a_wrong_engine_names_the_engine_the_page_serves(tmp_path: Path) -> None:
    with fake_server(Plan(flavor="vllm")) as (url, _state):
        out = _capture(url, tmp_path / "c", engine="sglang")
    doc = itl(out)
    assert doc["metrics"]["delta"]["prompt_tokens"] is None
    (note,) = doc["metrics"]["notes"]
    assert "the page holds none of sglang's names for prompt_tokens" in note
    assert "(sglang:prompt_tokens, " in note and "is --engine vllm the server's?" in note


def test_a_counter_past_2_to_the_53_is_kept_as_a_float(tmp_path: Path) -> None:
    """A counter of 10^20 (legal Prometheus, beyond a 64-bit integer) is written and read
    back as a number, never an error at the end of the capture."""
    with fake_server(Plan(prompt_offset=1e20)) as (url, _state):
        out = _capture(url, tmp_path / "c")
    doc = itl(out)
    assert doc["metrics"]["before"]["prompt_tokens"] == pytest.approx(1e20)


@pytest.mark.parametrize(
    ("end", "said"),
    [
        ("error", "the server sent an error after 20 token(s): planted mid-stream failure"),
        (
            "close",
            "ended after 20 token(s) while waiting after the injection (the connection closed",
        ),
        (
            "finish",
            "ended after 20 token(s) while waiting after the injection (finish_reason 'stop')",
        ),
    ],
)
def test_a_victim_stream_that_ends_early_ends_the_capture_at_once(
    tmp_path: Path, end: str, said: str
) -> None:
    """Each victim stream stops after 20 tokens, by an SSE error event, a closed
    connection, or a finish: the capture ends within seconds, naming the victim and the
    server's words, never by waiting out its timeout."""
    plan = Plan(chunks=(1,), victim_end=end, victim_end_after=20, inject_first_s=0.05)
    with fake_server(plan) as (url, state), pytest.raises(CaptureError) as err:
        t = time.monotonic()
        _capture(url, tmp_path / "c", steady_tokens=15, read_timeout_s=60)
    assert time.monotonic() - t < 20
    assert said in str(err.value), err.value
    assert "victim" in str(err.value)


@pytest.mark.parametrize(
    ("plan", "said"),
    [
        (Plan(inject_status=429), r"injected [01]: HTTP 429: "),  # the first answered
        (Plan(inject_error=True), r"after 0 token\(s\): planted failure"),
    ],
    ids=["refused", "error-first"],
)
def test_a_failed_capture_stops_the_profiler_it_started(
    tmp_path: Path, plan: Plan, said: str
) -> None:
    with fake_server(plan) as (url, state):
        with pytest.raises(CaptureError) as err:
            _capture(url, tmp_path / "c")
        calls = list(state.profile_calls)
    assert calls == ["/start_profile", "/stop_profile"]
    assert re.search(said, str(err.value)), err.value
    assert str(err.value).endswith("; the profiler it had started was stopped (/stop_profile)")


def test_a_profiled_capture_without_a_trace_says_so(tmp_path: Path) -> None:
    """The engine writes no trace where --profile-dir points: the capture still writes
    the clients' view, and says on stderr and in run.json that no trace was found."""
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    with fake_server(Plan()) as (url, _state):
        done = CliRunner().invoke(
            cli,
            [
                "capture",
                "server",
                "--url",
                url,
                "--engine",
                "vllm",
                "--victims",
                "2",
                "--inject",
                "1",
                "--prompt-tokens",
                "120",
                "--metrics-every",
                "0.05",
                "--profile-dir",
                str(empty),
                "-o",
                str(tmp_path / "c"),
            ],
        )
    assert done.exit_code == 0, done.output
    said = (
        f"profiled, but no trace written during the capture was found under {empty} "
        "(is it the folder the engine writes its traces to?)"
    )
    assert json.loads((tmp_path / "c" / "run.json").read_text())["notes"] == [said]
    assert f"note: {said}" in " ".join(done.stderr.split())
    shown = CliRunner().invoke(cli, ["itl", str(tmp_path / "c")], env={"COLUMNS": "300"})
    assert said in shown.stdout
    report = CliRunner().invoke(
        cli, ["report", str(tmp_path / "c"), "-o", str(tmp_path / "r.html")]
    )
    assert report.exit_code == 2
    assert "a profiled capture whose trace was not collected" in report.stderr
