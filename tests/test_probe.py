"""The probe against a small OpenAI-compatible server (tests/openai_fake.py) whose chunks,
waits and /metrics are planted: tokens counted per chunk, time to first token of every
request, the engine's counters under vLLM's and SGLang's names, the re-prefill check, and
the unprofiled control."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from openai_fake import Plan, fake_server

httpx = pytest.importorskip("httpx")
pytest.importorskip("prometheus_client")

from traceview.capture.itl import itl  # noqa: E402
from traceview.capture.probe import ProbeConfig, chunk_tokens, run_probe  # noqa: E402
from traceview.cli import cli  # noqa: E402

VICTIM_PROMPT, INJECT_PROMPT = 8, 120


def _capture(url: str, out: Path, engine: str = "vllm", **kw: object) -> Path:
    cfg = ProbeConfig(
        url=url,
        engine=engine,
        victims=2,
        inject=2,
        prompt_tokens=INJECT_PROMPT,
        victim_prompt_tokens=VICTIM_PROMPT,
        max_tokens=100_000,
        inject_max_tokens=5,
        steady_tokens=6,
        metrics_every_s=0.05,
        out=str(out),
        **kw,  # type: ignore[arg-type]
    )
    return asyncio.run(run_probe(cfg)).out


def _records(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "probe.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("tell", ["token_ids", "usage"])
def test_a_multi_token_chunk_counts_as_its_tokens(tmp_path: Path, tell: str) -> None:
    """Chunks of 1, 3 and 2 tokens: each request's tokens are the tokens the server sent
    (an injected prompt's 5 in chunks 1, 3 and 1), and each victim's tokens of one chunk
    share one arrival."""
    with fake_server(Plan(tell=tell)) as (url, state):
        out = _capture(url, tmp_path / "c")
    rows = _records(out)
    injected = [r for r in rows if r.get("role") == "injected"]
    assert [(r["tokens"], r["chunks"]) for r in injected] == [(5, 3), (5, 3)]
    assert all(
        r["usage"] == {"prompt_tokens": INJECT_PROMPT, "completion_tokens": 5} for r in injected
    )
    for victim in (0, 1):
        times = [r["t_ns"] for r in rows if r.get("victim") == victim]
        sizes = [times.count(t) for t in dict.fromkeys(times)]  # tokens per arrival
        cycle = [1, 3, 2] * (len(sizes) // 3 + 1)
        assert sizes == cycle[: len(sizes)] and len(sizes) >= 3
    doc = itl(out)
    victim_rows = [r for r in rows if r.get("role") == "victim"]
    assert doc["tokens"]["victims"] == sum(r["tokens"] for r in victim_rows)
    assert doc["tokens"]["chunks"] == sum(r["chunks"] for r in victim_rows)


def _text(t: str = "a", finish: str | None = None, **more: object) -> dict:
    return {"choices": [{"index": 0, "text": t, "finish_reason": finish, **more}]}


STREAMS = {  # chunks as servers stream them, and the tokens they carry, planted
    "text only": ([_text()] * 3, 3),
    "TGI: a closing chunk with the usage and no text": (
        [_text()] * 5 + [{**_text("", "length"), "usage": {"completion_tokens": 5}}],
        5,
    ),
    "the last token beside the closing usage": (
        [_text()] * 4 + [{**_text("a", "length"), "usage": {"completion_tokens": 5}}],
        5,
    ),
    "empty keep-alive chunks": ([_text("")] * 3 + [_text()] * 2, 2),
    "a role-only chunk first": ([_text("", logprobs=None)] + [_text()] * 2, 2),
    "logprobs of two tokens a chunk": ([_text("ab", logprobs={"tokens": ["a", "b"]})] * 3, 6),
    "running usage from the first chunk": (
        [
            {**_text("abc"), "usage": {"completion_tokens": 3}},
            {**_text("d"), "usage": {"completion_tokens": 4}},
            {**_text("e", "length"), "usage": {"completion_tokens": 5}},
            {"choices": [], "usage": {"completion_tokens": 5}},
        ],
        5,
    ),
    "running usage from the third chunk": (
        [_text(), _text(), {**_text("c"), "usage": {"completion_tokens": 3}}],
        3,
    ),
    "ids beside the running usage": (
        [
            {**_text("ab", token_ids=[1, 2]), "usage": {"completion_tokens": 2}},
            {**_text("c", token_ids=[3]), "usage": {"completion_tokens": 3}},
        ],
        3,
    ),
    "ids whose text is held back": ([_text("", token_ids=[7]), _text("ab", token_ids=[8])], 2),
    "an empty id list": ([_text("", token_ids=[]), _text("ab", token_ids=[1, 2])], 2),
    "usage as whole floats": (
        [
            {**_text(), "usage": {"completion_tokens": 1.0}},
            {**_text(), "usage": {"completion_tokens": 2.0}},
        ],
        2,
    ),
    "choice 0 given second": (
        [
            {
                "choices": [
                    {"index": 1, "text": "a", "token_ids": [1, 2]},
                    {"index": 0, "text": "b", "token_ids": [3]},
                ]
            }
        ],
        1,
    ),
}


@pytest.mark.parametrize(("chunks", "tokens"), STREAMS.values(), ids=STREAMS.keys())
def test_each_stream_counts_the_tokens_planted(chunks: list[dict], tokens: int) -> None:
    """Counted as each chunk arrives, from what the chunks tell: ids, else the running
    usage less what was counted, else logprobs, else one token for a chunk with text; a
    chunk without text, and a usage-only chunk, carry none."""
    counted = 0
    for chunk in chunks:
        counted += chunk_tokens(chunk, counted)
    assert counted == tokens


@pytest.mark.parametrize(
    "plan",
    [
        Plan(tell="text", chunks=(1,), final="finish"),
        Plan(chunks=(1, 3, 2), keepalive=True),
        Plan(chunks=(1, 3, 2), prelude=3, prelude_every_s=0.05),
    ],
    ids=["closing-usage", "keep-alive", "empty-prelude"],
)
def test_chunks_without_tokens_add_none(tmp_path: Path, plan: Plan) -> None:
    """A server's closing chunk with the usage (TGI, llama.cpp), its keep-alive chunks and
    its empty chunks before the first token carry no token: each injected prompt has the
    5 tokens the server sent, each victim's arrivals carry 1, 3, 2, 1, ... tokens as
    planted, and a victim's first token comes after its empty prelude (3 × 50 ms)."""
    with fake_server(plan) as (url, _state):
        out = _capture(url, tmp_path / "c")
    rows = _records(out)
    injected = [r for r in rows if r.get("role") == "injected"]
    assert [(r["tokens"], r["usage"]["completion_tokens"]) for r in injected] == [(5, 5)] * 2
    for victim in (0, 1):
        times = [r["t_ns"] for r in rows if r.get("victim") == victim]
        sizes = [times.count(t) for t in dict.fromkeys(times)]  # tokens per arrival
        cycle = list(plan.chunks) * (len(sizes) // len(plan.chunks) + 1)
        assert sizes == cycle[: len(sizes)] and len(sizes) >= 3
    victims = [r for r in rows if r.get("role") == "victim"]
    floor = plan.prelude * plan.prelude_every_s + plan.first_s
    assert all(r["first_token_ns"] - r["sent_ns"] >= floor * 1e9 for r in victims)


def test_every_request_has_its_time_to_first_token(tmp_path: Path) -> None:
    """The server waits 150 ms before an injected prompt's first chunk and 10 ms before a
    victim's: every request is timed, with its prompt's token count, and no TTFT is
    shorter than the wait planted (wall clock: the upper bound is loose)."""
    plan = Plan()
    with fake_server(plan) as (url, _state):
        out = _capture(url, tmp_path / "c")
    doc = itl(out)
    requests = doc["requests"]
    assert [(r["role"], r["prompt_tokens"]) for r in requests] == [
        ("victim", VICTIM_PROMPT),
        ("victim", VICTIM_PROMPT),
        ("injected", INJECT_PROMPT),
        ("injected", INJECT_PROMPT),
    ]
    for r in requests:
        floor = plan.inject_first_s if r["role"] == "injected" else plan.first_s
        assert floor * 1e9 <= r["ttft_ns"] < floor * 1e9 + 2e9, r
    assert doc["ttft"]["victims"]["n"] == 2 and doc["ttft"]["injected"]["n"] == 2
    assert doc["ttft"]["injected"]["prompt_tokens"] == 2 * INJECT_PROMPT
    injected = sorted(r["ttft_ns"] for r in requests if r["role"] == "injected")
    assert doc["ttft"]["injected"]["max_ns"] == injected[-1]
    assert doc["ttft"]["injected"]["p50_ns"] == round((injected[0] + injected[1]) / 2)


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
@pytest.mark.parametrize("reprefill", [1, 3], ids=["fed-once", "re-prefilled"])
def test_the_engines_counters_and_the_re_prefill_check(
    tmp_path: Path, flavor: str, reprefill: int
) -> None:
    """Under vLLM's and SGLang's names: the prompt tokens the engine counted against the
    tokens sent (2 × 8 + 2 × 120 = 256), the tokens it streamed, the preemptions planted.
    A server that counts each prompt 3 times is a re-prefill of 512 tokens more."""
    plan = Plan(flavor=flavor, reprefill=reprefill, preemptions=4)
    with fake_server(plan) as (url, state):
        out = _capture(url, tmp_path / "c", engine=flavor)
        generated = state.generated
    doc = itl(out)
    m, check = doc["metrics"], doc["prefill_check"]
    sent = 2 * VICTIM_PROMPT + 2 * INJECT_PROMPT
    assert m["delta"] == {
        "prompt_tokens": sent * reprefill,
        "generation_tokens": generated,
        "preemptions": 4,
    }
    assert m["before"]["running"] == 0 and m["after"]["running"] == 0
    assert m["running_max"] >= 2 and m["snapshots"] >= 3  # before, during, after
    assert check["sent_prompt_tokens"] == sent
    assert check["excess_tokens"] == sent * (reprefill - 1)
    assert check["verdict"] == ("match" if reprefill == 1 else "re-prefill")
    run = json.loads((out / "run.json").read_text())
    assert run["schema"] == "traceview.capture/1"
    assert run["metrics"]["names"]["prompt_tokens"] == f"{flavor}:prompt_tokens_total"
    shown = CliRunner().invoke(cli, ["itl", str(out)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert ("re-prefill* (+512, 3.00×)" if reprefill == 3 else "match*") in shown.stdout
    assert f"{'vLLM' if flavor == 'vllm' else 'SGLang'} counts each prompt once" in shown.stdout
    assert "it preempted 4 time(s)" in shown.stdout


def test_the_unprofiled_control_never_calls_the_profiler(tmp_path: Path) -> None:
    with fake_server(Plan()) as (url, state):
        done = CliRunner().invoke(
            cli,
            [
                "capture",
                "server",
                "--url",
                url,
                "--engine",
                "vllm",
                "--no-profile",
                "--victims",
                "2",
                "--inject",
                "1",
                "--prompt-tokens",
                "120",
                "--metrics-every",
                "0.05",
                "-o",
                str(tmp_path / "control"),
            ],
        )
        calls = list(state.profile_calls)
    assert done.exit_code == 0, done.output
    assert calls == []
    run = json.loads((tmp_path / "control" / "run.json").read_text())
    assert run["profiled"] is False and run["traces"] == [] and run["clock"]["traces"] == []
    doc = itl(tmp_path / "control")
    assert doc["profiled"] is False and doc["window_on_trace_ns"] is None
    assert doc["ttft"]["injected"]["n"] == 1
    with fake_server(Plan()) as (url, state):
        _capture(url, tmp_path / "profiled")
        assert state.profile_calls == ["/start_profile", "/stop_profile"]


def test_a_server_without_metrics_is_noted_not_fatal(tmp_path: Path) -> None:
    plan = Plan(flavor="vllm")
    with fake_server(plan) as (url, _state):
        out = _capture(url, tmp_path / "c", engine="sglang")  # names it does not serve
    doc = itl(out)
    assert doc["metrics"]["delta"] == {
        "prompt_tokens": None,
        "generation_tokens": None,
        "preemptions": None,
    }
    assert doc["prefill_check"]["verdict"] is None
