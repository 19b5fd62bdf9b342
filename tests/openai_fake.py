"""A small OpenAI-compatible server for the probe's tests: it streams multi-token chunks
and serves vLLM-named or SGLang-named /metrics, every figure planted.

``/v1/completions`` streams ``max_tokens`` tokens in chunks whose sizes cycle through
``chunks`` (the last one cut to fit), one chunk every ``every_s`` seconds after a first
wait of ``first_s`` (victims) or ``inject_first_s`` (prompts longer than
``long_prompt``). How a chunk tells its size is ``tell``: ``token_ids`` (the ids, as vLLM
and SGLang with ``return_token_ids``), ``usage`` (the running ``completion_tokens``, as
``continuous_usage_stats``) or ``text`` (neither: the probe can only count the chunk).
``final`` is how a stream closes: ``usage`` (a last chunk with the usage and no choices,
OpenAI's ``include_usage``) or ``finish`` (a last chunk with no text, its
``finish_reason`` and the usage: TGI, llama.cpp). ``prelude`` empty-text chunks come
before the first token, ``keepalive`` adds one after every chunk. A victim's stream can
end early (``victim_end`` after ``victim_end_after`` tokens: an SSE ``error`` event, a
closed connection, or a ``finish_reason``); an injected prompt can be refused
(``inject_status``) or answered by an error event first (``inject_error``).

The counters count what the server did: prompt tokens × ``reprefill`` (a re-prefill
planted) plus ``prompt_offset``, tokens it streamed, ``preemptions`` planted, requests
running and waiting. ``metrics_pad`` unrelated lines make a large page; the reads numbered
in ``metrics_fail`` answer HTTP 503; right after read ``metrics_reset_after`` the server
restarts: its counters start again from 0 (``prompt_offset``, what it had counted before
the capture, gone too).

``/start_profile`` and ``/stop_profile`` are logged; with ``profile_dir`` the stop writes a
Kineto-shaped trace there: the profiler's span (``span``; beginning ``span_lead_ns`` before
the start call, as when the engine was profiling already) and one engine step per chunk
streamed while profiling, on the server's wall clock moved by ``skew_ns``. The start
answers ``start_delay_s`` after the profiler started, the stop ``stop_delay_s`` after it
stopped (a flush). ``State.truth`` holds what a trace's true offset
needs: the profiler's start on the server's wall and monotonic clocks, its skew and base.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Plan:
    flavor: str = "vllm"  # vllm | sglang: the metric names served
    chunks: tuple[int, ...] = (1, 3, 2)
    tell: str = "token_ids"  # token_ids | usage | text
    final: str = "usage"  # usage | finish
    prelude: int = 0
    prelude_every_s: float = 0.05
    keepalive: bool = False
    every_s: float = 0.004
    first_s: float = 0.01
    inject_first_s: float = 0.15
    long_prompt: int = 100
    reprefill: int = 1
    preemptions: int = 0
    labels: str = '{model_name="fake",engine="0"}'
    victim_end: str | None = None  # error | close | finish
    victim_end_after: int = 20
    inject_status: int = 200
    inject_error: bool = False
    prompt_offset: float = 0.0
    metrics_pad: int = 0
    metrics_fail: tuple[int, ...] = ()
    metrics_reset_after: int | None = None
    profile_dir: str | None = None
    span: bool = True
    span_lead_ns: int = 0
    skew_ns: int = 0
    start_delay_s: float = 0.0
    stop_delay_s: float = 0.0


@dataclass
class State:
    prompt_tokens: int = 0
    generated: int = 0
    running: int = 0
    metrics_reads: int = 0
    reset_at: tuple[int, int] | None = None  # the counters when the server restarted
    profile_calls: list[str] = field(default_factory=list)
    chunk_sizes: dict[int, list[int]] = field(default_factory=dict)  # request -> sizes sent
    chunk_times: dict[int, list[int]] = field(default_factory=dict)  # request -> monotonic ns
    steps: list[tuple[int, int, str]] = field(default_factory=list)  # wall ns, while profiling
    profiling: bool = False
    truth: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def metrics_text(plan: Plan, state: State) -> str:
    """The /metrics page, as prometheus_client writes it (counters with ``_total`` and
    ``_created``), under the flavor's names."""
    lab = plan.labels
    if plan.flavor == "vllm":
        names = (
            "vllm:prompt_tokens",
            "vllm:generation_tokens",
            "vllm:num_preemptions",
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
        )
    else:
        names = (
            "sglang:prompt_tokens",
            "sglang:generation_tokens",
            "sglang:num_retracted_requests",
            "sglang:num_running_reqs",
            "sglang:num_queue_reqs",
        )
    prompt, gen, pre, running, waiting = names
    counted_prompt = state.prompt_tokens * plan.reprefill + plan.prompt_offset
    counted_gen = state.generated
    if state.reset_at is not None:
        counted_prompt = state.prompt_tokens * plan.reprefill - state.reset_at[0]
        counted_gen -= state.reset_at[1]
    elif state.metrics_reads == plan.metrics_reset_after:  # restarts once this is served
        state.reset_at = (state.prompt_tokens * plan.reprefill, state.generated)
    lines = []
    for name, value in (
        (prompt, counted_prompt),
        (gen, counted_gen),
        (pre, plan.preemptions if state.generated else 0),
    ):
        lines += [
            f"# HELP {name}_total counted",
            f"# TYPE {name}_total counter",
            f"{name}_total{lab} {float(value)}",
            f"{name}_created{lab} 1.7e9",
        ]
    for name, value in ((running, state.running), (waiting, 0)):
        lines += [f"# TYPE {name} gauge", f"{name}{lab} {float(value)}"]
    lines.append('unrelated_histogram_bucket{le="+Inf"} 3.0')
    pad = "x" * 200
    lines += [f'unrelated_padding{{i="{i}",pad="{pad}"}} {i}' for i in range(plan.metrics_pad)]
    return "\n".join(lines) + "\n"


def true_offset(plan: Plan, state: State) -> int:
    """The offset that puts this machine's monotonic times on the written trace's clock:
    the server shares the machine's clocks, moved by ``skew_ns``, on the trace's base."""
    t = state.truth
    return t["start_wall_ns"] - t["start_mono_ns"] + plan.skew_ns - t["base_time_ns"]


def write_trace(plan: Plan, state: State, start_wall: int, stop_wall: int) -> Path:
    """A Kineto-shaped trace of the profiled session, on the server's clock (its wall
    clock moved by ``skew_ns``): the profiler's span, and per chunk streamed one engine
    step with one op inside it."""
    assert plan.profile_dir is not None
    base = start_wall // 10**9 * 10**9 - 10**9
    state.truth["base_time_ns"] = base

    def us(wall: int) -> float:
        return (wall + plan.skew_ns - base) / 1000

    events: list[dict[str, Any]] = []
    if plan.span:
        events.append(
            {
                "ph": "X",
                "cat": "Trace",
                "name": "PyTorch Profiler (0)",
                "pid": "Spans",
                "tid": "PyTorch Profiler",
                "ts": us(start_wall - plan.span_lead_ns),
                "dur": (stop_wall - start_wall + plan.span_lead_ns) / 1000,
            }
        )
    for t0, t1, name in state.steps:
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": us(t0),
                "dur": (t1 - t0) / 1000,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "nvjet_tst_fake_gemm",
                "pid": 1,
                "tid": 1,
                "ts": us(t0) + 1,
                "dur": max((t1 - t0) / 1000 - 2, 0.5),
            }
        )
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": base, "traceEvents": events}
    folder = Path(plan.profile_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"fake_{time.time_ns()}.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


def _handler(plan: Plan, state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _event(self, data: dict[str, Any]) -> None:
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, b"ok\n", "text/plain")
            elif self.path == "/metrics":
                with state.lock:
                    state.metrics_reads += 1
                    failed = state.metrics_reads in plan.metrics_fail
                    text = metrics_text(plan, state)
                if failed:
                    self._send(503, b"busy", "text/plain")
                else:
                    self._send(200, text.encode(), "text/plain; version=0.0.4")
            else:
                self._send(404, b"{}")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path == "/start_profile":
                state.profile_calls.append(self.path)
                with state.lock:
                    state.steps.clear()
                    state.profiling = True
                    state.truth.update(
                        start_wall_ns=time.time_ns(), start_mono_ns=time.monotonic_ns()
                    )
                time.sleep(plan.start_delay_s)
                self._send(200, b"{}")
                return
            if self.path == "/stop_profile":
                state.profile_calls.append(self.path)
                with state.lock:
                    state.profiling = False
                    stop = time.time_ns()
                path = None
                if plan.profile_dir is not None:
                    path = write_trace(plan, state, state.truth["start_wall_ns"], stop)
                time.sleep(plan.stop_delay_s)
                self._send(200, json.dumps({"trace": str(path)}).encode())
                return
            if self.path != "/v1/completions":
                self._send(404, b"{}")
                return
            body = json.loads(raw)
            self._stream(body)

        def _stream(self, body: dict[str, Any]) -> None:
            prompt = body["prompt"]
            want = int(body["max_tokens"])
            injected = len(prompt) > plan.long_prompt
            if injected and plan.inject_status != 200:
                message = {"error": {"message": "planted refusal", "code": plan.inject_status}}
                self._send(plan.inject_status, json.dumps(message).encode())
                return
            with state.lock:
                rid = len(state.chunk_sizes)
                state.chunk_sizes[rid] = []
                state.chunk_times[rid] = []
                state.prompt_tokens += len(prompt)
                state.running += 1
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            wait = plan.inject_first_s if injected else plan.first_s
            empty = {"choices": [{"index": 0, "text": "", "finish_reason": None}]}
            sent = 0
            try:
                for _ in range(plan.prelude):
                    self._event(empty)
                    time.sleep(plan.prelude_every_s)
                step_start = time.time_ns()
                time.sleep(wait)
                if injected and plan.inject_error:
                    self._event({"error": {"message": "planted failure", "code": 500}})
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                k = 0
                while sent < want:
                    if not injected and plan.victim_end and sent >= plan.victim_end_after:
                        if plan.victim_end == "error":
                            self._event({"error": {"message": "planted mid-stream failure"}})
                            self.wfile.write(b"data: [DONE]\n\n")
                        elif plan.victim_end == "finish":
                            self._event(
                                {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}
                            )
                            self.wfile.write(b"data: [DONE]\n\n")
                        return  # "close": the connection closes, no [DONE]
                    size = min(plan.chunks[k % len(plan.chunks)], want - sent)
                    k += 1
                    choice: dict[str, Any] = {"index": 0, "text": "x" * size}
                    last = sent + size == want
                    choice["finish_reason"] = "length" if last and plan.final == "usage" else None
                    chunk: dict[str, Any] = {"id": f"c{rid}", "choices": [choice]}
                    if plan.tell == "token_ids":
                        choice["token_ids"] = list(range(sent, sent + size))
                    elif plan.tell == "usage":
                        chunk["usage"] = {
                            "prompt_tokens": len(prompt),
                            "completion_tokens": sent + size,
                        }
                    self._event(chunk)
                    now = time.time_ns()
                    sent += size
                    with state.lock:
                        state.generated += size
                        state.chunk_sizes[rid].append(size)
                        state.chunk_times[rid].append(time.monotonic_ns())
                        if state.profiling:
                            ctx = (
                                f"1({len(prompt)})_generation_0(0)"
                                if k == 1 and injected
                                else "0(0)_generation_1(1)"
                            )
                            state.steps.append((step_start, now, f"execute_context_{ctx}"))
                    step_start = now
                    if plan.keepalive:
                        self._event(empty)
                    time.sleep(plan.every_s)
                usage = {"prompt_tokens": len(prompt), "completion_tokens": sent}
                if plan.final == "finish":
                    closing = {"index": 0, "text": "", "finish_reason": "length"}
                    last_chunk = {"id": f"c{rid}", "choices": [closing], "usage": usage}
                else:
                    last_chunk = {"id": f"c{rid}", "choices": [], "usage": usage}
                self._event(last_chunk)
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client left (a victim, cancelled)
            finally:
                with state.lock:
                    state.running -= 1

    return Handler


@contextmanager
def fake_server(plan: Plan) -> Iterator[tuple[str, State]]:
    """The server on a free port of 127.0.0.1; yields its URL and its state."""
    state = State()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(plan, state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
