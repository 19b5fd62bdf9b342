"""A small OpenAI-compatible server for the probe's tests: it streams multi-token chunks
and serves vLLM-named or SGLang-named /metrics, every figure planted.

``/v1/completions`` streams ``max_tokens`` tokens in chunks whose sizes cycle through
``chunks`` (the last one cut to fit), one chunk every ``every_s`` seconds after a first
wait of ``first_s`` (victims) or ``inject_first_s`` (prompts longer than
``long_prompt``). How a chunk tells its size is ``tell``: ``token_ids`` (the ids, as vLLM
and SGLang with ``return_token_ids``), ``usage`` (the running ``completion_tokens``, as
``continuous_usage_stats``) or ``text`` (neither: the probe can only count the chunk).
The counters count what the server did: prompt tokens × ``reprefill`` (a re-prefill
planted), tokens it streamed, ``preemptions`` planted, requests running and waiting.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Plan:
    flavor: str = "vllm"  # vllm | sglang: the metric names served
    chunks: tuple[int, ...] = (1, 3, 2)
    tell: str = "token_ids"  # token_ids | usage | text
    every_s: float = 0.004
    first_s: float = 0.01
    inject_first_s: float = 0.15
    long_prompt: int = 100
    reprefill: int = 1
    preemptions: int = 0
    labels: str = '{model_name="fake",engine="0"}'


@dataclass
class State:
    prompt_tokens: int = 0
    generated: int = 0
    running: int = 0
    profile_calls: list[str] = field(default_factory=list)
    chunk_sizes: dict[int, list[int]] = field(default_factory=dict)  # request -> sizes sent
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
    lines = []
    for name, value in (
        (prompt, state.prompt_tokens * plan.reprefill),
        (gen, state.generated),
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
    return "\n".join(lines) + "\n"


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

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, b"ok\n", "text/plain")
            elif self.path == "/metrics":
                with state.lock:
                    text = metrics_text(plan, state)
                self._send(200, text.encode(), "text/plain; version=0.0.4")
            else:
                self._send(404, b"{}")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path in ("/start_profile", "/stop_profile"):
                state.profile_calls.append(self.path)
                self._send(200, b"{}")
                return
            if self.path != "/v1/completions":
                self._send(404, b"{}")
                return
            body = json.loads(raw)
            self._stream(body)

        def _stream(self, body: dict[str, Any]) -> None:
            prompt = body["prompt"]
            want = int(body["max_tokens"])
            with state.lock:
                rid = len(state.chunk_sizes)
                state.chunk_sizes[rid] = []
                state.prompt_tokens += len(prompt)
                state.running += 1
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            wait = plan.inject_first_s if len(prompt) > plan.long_prompt else plan.first_s
            sent = 0
            try:
                time.sleep(wait)
                k = 0
                while sent < want:
                    size = min(plan.chunks[k % len(plan.chunks)], want - sent)
                    k += 1
                    choice: dict[str, Any] = {"index": 0, "text": "x" * size}
                    choice["finish_reason"] = "length" if sent + size == want else None
                    chunk: dict[str, Any] = {"id": f"c{rid}", "choices": [choice]}
                    if plan.tell == "token_ids":
                        choice["token_ids"] = list(range(sent, sent + size))
                    elif plan.tell == "usage":
                        chunk["usage"] = {
                            "prompt_tokens": len(prompt),
                            "completion_tokens": sent + size,
                        }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    sent += size
                    with state.lock:
                        state.generated += size
                        state.chunk_sizes[rid].append(size)
                    time.sleep(plan.every_s)
                usage = {"prompt_tokens": len(prompt), "completion_tokens": sent}
                last = {"id": f"c{rid}", "choices": [], "usage": usage}
                self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
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
