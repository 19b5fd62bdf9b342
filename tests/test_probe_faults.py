"""The probe when the server misbehaves, against planted truth (tests/openai_fake.py): a
stream that ends early or an error event ends the capture at once with the server's
words, and a capture that fails after /start_profile stops the profiler."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest
from openai_fake import Plan, fake_server

httpx = pytest.importorskip("httpx")
pytest.importorskip("prometheus_client")

from traceview.capture.probe import ProbeConfig, run_probe  # noqa: E402
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
