"""The lab engine's HTTP server: an ASGI app (starlette) served by uvicorn.

Endpoints, as vLLM and SGLang expose them:
- ``POST /v1/completions``: OpenAI-compatible; ``prompt`` as text or token ids,
  ``max_tokens`` or ``max_completion_tokens``, ``stream`` (SSE). Greedy decoding only:
  sampling parameters it does not support get 400, never silent acceptance. A full queue
  answers 429 at once.
- ``POST /start_profile``, ``POST /stop_profile``: torch.profiler on the engine thread; the
  trace lands in the profile dir as ``lab_<time>.pt.trace.json.gz``.
- ``GET /health``; ``GET /metrics``: Prometheus text (steps, batch size, prefilled and
  generated tokens, requests, rejections, preemptions, requests running and waiting) -
  count the work, not only the answer.

It trusts no client (docs/capture.md, the threat model): a request must be addressed to a
localhost name (the ``Host`` header; DNS rebinding) and, when it carries an ``Origin``, come
from a localhost page (a cross-site form or ``text/plain`` POST); else 403. ``max_tokens``
is capped (:data:`MAX_TOKENS_CAP`, ``--max-tokens-cap``). A request whose client goes away
is cancelled at once, streaming or not, and the server exits within seconds of SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from traceview.capture.lab import LabConfig, LabEngine
from traceview.errors import CaptureError, MissingDependencyError

SUPPORTED = {
    "model",
    "prompt",
    "max_tokens",
    "max_completion_tokens",
    "stream",
    "temperature",
    "ignore_eos",
    "stream_options",
    "return_token_ids",  # the lab engine always returns them
    "user",
}
MAX_PROMPT = 65_536
MAX_TOKENS_CAP = 8192  # the default cap on max_tokens (--max-tokens-cap)
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
GRACEFUL_S = 2  # SIGTERM: open requests get this long, then are cancelled
_DISCONNECT_POLL_S = 0.2

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def host_name(value: str) -> str:
    """The host of a ``Host`` header value (``[::1]:8123`` -> ``::1``), lower case."""
    return (urlsplit(f"//{value}").hostname or "") if value else ""


class LocalOnly:
    """ASGI middleware: 403 for a request not addressed to one of ``hosts`` (its ``Host``
    header: a DNS-rebinding page reaches 127.0.0.1 under its own name) or sent from a page
    whose ``Origin`` is not one of them (a cross-site POST, which needs no preflight when its
    body is ``text/plain``)."""

    def __init__(self, app: Any, hosts: frozenset[str] = LOCAL_HOSTS) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]
            }
            host = host_name(headers.get("host", ""))
            origin = headers.get("origin")
            problem = None
            if host not in self.hosts:
                problem = f"Host {host or '(none)'!r} is not served here (localhost only)"
            elif origin is not None and (urlsplit(origin).hostname or "") not in self.hosts:
                problem = f"requests from the page at Origin {origin!r} are refused"
            if problem is not None:
                body = json.dumps({"error": {"message": problem, "type": "forbidden", "code": 403}})
                await send(
                    {
                        "type": "http.response.start",
                        "status": 403,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body.encode()})
                return
        await self.app(scope, receive, send)


def allowed_hosts(bound: str) -> frozenset[str]:
    """The Host names a server bound to ``bound`` answers: localhost, and the address it
    was bound to when that is a specific one."""
    extra = {bound.strip("[]").lower()} - {"0.0.0.0", "::", ""}
    return LOCAL_HOSTS | extra


def _deps() -> Any:
    try:
        import starlette.applications
        import starlette.responses
        import starlette.routing
        import uvicorn
    except ImportError:
        raise MissingDependencyError(
            "the lab server needs starlette and uvicorn: pip install 'traceview[capture]'"
        ) from None
    return starlette, uvicorn


def tokenize(prompt: Any, vocab: int) -> list[int] | None:
    """Token ids as given, or text as bytes folded into the vocabulary (no tokenizer);
    None for anything else (the request is answered 400)."""
    if isinstance(prompt, str):
        return [b % vocab for b in prompt.encode()] or [0]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return [t % vocab for t in prompt]
    if isinstance(prompt, list) and len(prompt) == 1:
        return tokenize(prompt[0], vocab)
    return None


def create_app(
    engine: LabEngine,
    profile_dir: str,
    *,
    max_tokens_cap: int = MAX_TOKENS_CAP,
    hosts: frozenset[str] = LOCAL_HOSTS,
) -> Any:
    starlette, _uvicorn = _deps()
    # the traces are named by absolute path: a client in another folder finds them
    profile_dir = str(Path(profile_dir).resolve())
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from starlette.routing import Route

    def error(status: int, message: str, kind: str) -> Any:
        return JSONResponse(
            {"error": {"message": message, "type": kind, "code": status}}, status_code=status
        )

    async def completions(request: Request) -> Any:
        try:
            body = await asyncio.wait_for(request.json(), timeout=30)
        except TimeoutError:
            return error(408, "request body not received in time", "timeout")
        except (ValueError, json.JSONDecodeError):
            return error(400, "body is not JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return error(400, "body must be a JSON object", "invalid_request_error")
        unknown = sorted(set(body) - SUPPORTED)
        if unknown:
            return error(
                400,
                f"unsupported parameter(s): {', '.join(unknown)} (the lab engine decodes greedily)",
                "invalid_request_error",
            )
        if body.get("temperature") not in (None, 0, 0.0):
            return error(400, "only temperature 0 (greedy) is supported", "invalid_request_error")
        limit = body.get("max_completion_tokens", body.get("max_tokens", 16))
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            return error(
                400,
                "max_tokens / max_completion_tokens must be a positive integer",
                "invalid_request_error",
            )
        if limit > max_tokens_cap:
            return error(
                400,
                f"max_tokens {limit} is above this server's cap of {max_tokens_cap} "
                "(--max-tokens-cap)",
                "invalid_request_error",
            )
        prompt = tokenize(body.get("prompt"), engine.cfg.vocab)
        if prompt is None:
            return error(
                400,
                "prompt must be a string or a non-empty list of token ids",
                "invalid_request_error",
            )
        if len(prompt) > MAX_PROMPT:
            return error(400, f"prompt longer than {MAX_PROMPT} tokens", "invalid_request_error")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[int | None] = asyncio.Queue()

        def emit(token: int | None) -> None:
            if loop.is_closed():  # the server is gone: nobody is left to read it
                return
            with contextlib.suppress(RuntimeError):  # closed between the check and the call
                loop.call_soon_threadsafe(queue.put_nowait, token)

        seq = engine.submit(prompt, limit, emit)
        if seq is None:
            return error(429, "the engine's queue is full; retry later", "rate_limit")
        created = int(time.time())
        rid = f"cmpl-lab-{seq.rid}"

        async def tokens() -> Any:
            try:
                while True:
                    token = await queue.get()
                    if token is None:
                        return
                    yield token
            finally:
                engine.cancel(seq)  # the client went away, or we are done

        if body.get("stream"):
            options = body.get("stream_options")
            options = options if isinstance(options, dict) else {}
            # OpenAI's include_usage: a last chunk with the usage and no choices; vLLM's
            # continuous_usage_stats: the running usage on every chunk
            final_usage = bool(options.get("include_usage"))
            running_usage = final_usage and bool(options.get("continuous_usage_stats"))

            def usage(done: int) -> dict[str, int]:
                return {
                    "prompt_tokens": len(prompt),
                    "completion_tokens": done,
                    "total_tokens": len(prompt) + done,
                }

            async def sse() -> Any:
                done = 0
                async for token in tokens():
                    done += 1
                    chunk: dict[str, Any] = {
                        "id": rid,
                        "object": "text_completion",
                        "created": created,
                        "model": "lab",
                        "choices": [
                            {
                                "index": 0,
                                "text": f" t{token}",
                                "token_ids": [token],
                                "finish_reason": None,
                            }
                        ],
                    }
                    if running_usage:
                        chunk["usage"] = usage(done)
                    yield f"data: {json.dumps(chunk)}\n\n"
                    # one loop turn between writes: a client that left is seen (uvicorn
                    # learns it a turn after the socket closes) before the next write
                    await asyncio.sleep(0)
                if final_usage:
                    last = {"id": rid, "object": "text_completion", "created": created}
                    last.update(model="lab", choices=[], usage=usage(done))
                    yield f"data: {json.dumps(last)}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(sse(), media_type="text/event-stream")

        async def collect() -> list[int]:
            return [t async for t in tokens()]

        task = asyncio.ensure_future(collect())
        while not task.done():  # a non-streaming client that leaves cancels its request
            await asyncio.wait({task}, timeout=_DISCONNECT_POLL_S)
            if not task.done() and await request.is_disconnected():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                return error(499, "the client went away", "cancelled")
        out = task.result()
        return JSONResponse(
            {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": "lab",
                "choices": [
                    {
                        "index": 0,
                        "text": "".join(f" t{t}" for t in out),
                        "token_ids": out,
                        "finish_reason": "length",
                    }
                ],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(out)},
            }
        )

    async def start_profile(_request: Request) -> Any:
        name = f"lab_{int(time.time() * 1000)}"
        await asyncio.to_thread(engine.start_profile, profile_dir, name)
        return PlainTextResponse("profiling started\n")

    async def stop_profile(_request: Request) -> Any:
        try:
            path = await asyncio.to_thread(engine.stop_profile)
        except RuntimeError as exc:
            return error(400, str(exc), "invalid_request_error")
        return JSONResponse({"trace": path})

    async def health(_request: Request) -> Any:
        return PlainTextResponse("ok\n")

    async def metrics(_request: Request) -> Any:
        m = engine.metrics
        lines = []
        for key, kind, help_text in (
            ("steps", "counter", "engine steps run"),
            ("prefilled_tokens", "counter", "prompt tokens fed through the model"),
            ("generated_tokens", "counter", "tokens generated"),
            ("requests", "counter", "requests accepted"),
            ("rejected", "counter", "requests refused with 429"),
            ("batch_size", "gauge", "sequences in the last step"),
        ):
            name = f"lab_{key}" + ("_total" if kind == "counter" else "")
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {m[key]}"]
        running = sum(not seq.cancelled for seq in list(engine.running))
        waiting = sum(not seq.cancelled for seq in list(engine.waiting))
        lines += [
            "# HELP lab_preemptions_total requests preempted (the lab scheduler never preempts)",
            "# TYPE lab_preemptions_total counter",
            "lab_preemptions_total 0",
            "# HELP lab_running requests running (admitted, not finished or cancelled)",
            "# TYPE lab_running gauge",
            f"lab_running {running}",
            "# HELP lab_waiting requests queued, not yet admitted",
            "# TYPE lab_waiting gauge",
            f"lab_waiting {waiting}",
        ]
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    routes = [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/start_profile", start_profile, methods=["POST"]),
        Route("/stop_profile", stop_profile, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    return LocalOnly(starlette.applications.Starlette(routes=routes), hosts)


class LabServer:
    """The lab engine served on a local port in a background thread (tests, demo)."""

    def __init__(
        self,
        cfg: LabConfig,
        profile_dir: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_tokens_cap: int = MAX_TOKENS_CAP,
    ) -> None:
        _starlette, uvicorn = _deps()
        self.engine = LabEngine(cfg)
        app = create_app(
            self.engine, profile_dir, max_tokens_cap=max_tokens_cap, hosts=allowed_hosts(host)
        )
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            timeout_keep_alive=5,
            timeout_graceful_shutdown=GRACEFUL_S,
            lifespan="off",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="lab-http", daemon=True)

    def __enter__(self) -> LabServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise CaptureError("the lab server did not start within 30 s")
            time.sleep(0.02)
        return self

    @property
    def url(self) -> str:
        sock = self.server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.engine.shutdown()


def serve(
    cfg: LabConfig, profile_dir: str, host: str, port: int, max_tokens_cap: int = MAX_TOKENS_CAP
) -> None:
    """Serve in the foreground until interrupted (SIGINT or SIGTERM: open requests get
    :data:`GRACEFUL_S` seconds, then are cancelled)."""
    _starlette, uvicorn = _deps()
    engine = LabEngine(cfg)
    try:
        uvicorn.run(
            create_app(
                engine, profile_dir, max_tokens_cap=max_tokens_cap, hosts=allowed_hosts(host)
            ),
            host=host,
            port=port,
            log_level="info",
            timeout_keep_alive=5,
            timeout_graceful_shutdown=GRACEFUL_S,
            lifespan="off",
        )
    finally:
        engine.shutdown()
