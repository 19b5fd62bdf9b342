"""The server probe: drive a serving engine through an interference workload, and record
what the clients saw and what the engine counted.

Victim requests stream tokens while long prompts are injected. The probe records, on its
monotonic clock: every victim token's arrival, each request's send and first token (time
to first token, with the prompt's token count; the injected prompts stream too), and the
injection window. It reads the engine's ``/metrics`` before, during (every
``metrics_every_s``) and after the workload, and brackets each profiler call on its clock
so the trace's clock can be laid on it (:mod:`traceview.capture.clock`). ``probe.jsonl``
holds the records, the engine's trace(s) are collected from its profile dir, and
``run.json`` (schema ``traceview.capture/1``) says what was run. Every network call has a
timeout, and the files are written at the end, atomically: an interrupted capture leaves
complete files or none. With ``profile=False`` the same workload runs unprofiled (the
control).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from traceview.analysis.base.capture_document import (
    CAPTURE_SCHEMA,
    CaptureRunDocument,
    ProbeClock,
    ProfileCall,
)
from traceview.capture.clock import wall_minus_monotonic
from traceview.capture.collect import clock_notes, collect, offsets, trusted
from traceview.capture.scrape import MAX_PAGE_BYTES, Reader
from traceview.errors import CaptureError, MissingDependencyError

SETTLE_S = 5.0  # the after snapshot waits this long at most for the engine to go idle


@dataclass
class ProbeConfig:
    url: str
    engine: str = "lab"  # vllm | sglang | lab
    victims: int = 6
    inject: int = 12
    prompt_tokens: int = 6000
    victim_prompt_tokens: int = 32
    max_tokens: int = 4096  # per victim: long enough to outlive the injection
    inject_max_tokens: int = 1  # each injected prompt streams this many tokens (>= 1)
    steady_tokens: int = 8  # tokens each victim must have before and after the injection
    model: str | None = None
    profile_dir: str | None = None
    profile: bool = True  # False: the unprofiled control (no /start_profile, no trace)
    metrics_every_s: float = 1.0  # /metrics while the workload runs; 0: before and after only
    metrics_max_bytes: int = MAX_PAGE_BYTES  # a larger /metrics page is not read
    out: str = "capture"
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 120.0
    stop_profile_timeout_s: float = 900.0  # engines flush large traces for minutes
    seed: int = 0
    vocab: int = 1000


@dataclass
class ProbeResult:
    out: Path
    traces: list[Path]
    probe: Path
    run: Path
    inject_start_ns: int
    inject_end_ns: int
    tokens: int = 0
    notes: list[str] = field(default_factory=list)


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise MissingDependencyError(
            "the server probe needs httpx: pip install 'traceview[capture]'"
        ) from None
    return httpx


@dataclass
class _Request:
    """One request as the client saw it (monotonic ns)."""

    role: str  # victim | injected
    index: int
    prompt: list[int]
    sent_ns: int | None = None
    first_token_ns: int | None = None
    end_ns: int | None = None
    arrivals: list[int] = field(default_factory=list)  # one per token
    chunks: int = 0
    usage: dict[str, Any] | None = None
    finish: str | None = None  # the finish_reason the stream gave, if any
    done: bool = False  # the stream ended with [DONE]

    def ending(self) -> str:
        """How a stream that ended said it ended."""
        if self.finish is not None:
            return f"finish_reason {self.finish!r}"
        if self.done:
            return "[DONE] with no finish_reason"
        return "the connection closed without [DONE]"

    def record(self, number: int) -> dict[str, Any]:
        return {
            "request": number,
            "role": self.role,
            "index": self.index,
            "prompt_tokens": len(self.prompt),
            "sent_ns": self.sent_ns,
            "first_token_ns": self.first_token_ns,
            "end_ns": self.end_ns,
            "tokens": len(self.arrivals),
            "chunks": self.chunks,
            "usage": self.usage,
        }


class _Store:
    def __init__(self) -> None:
        self.victims: list[_Request] = []
        self.injected: list[_Request] = []
        self.errors: list[str] = []
        self.snapshots: list[dict[str, Any]] = []
        self.metric_names: dict[str, str | None] | None = None
        self.metrics_missing: str | None = None  # the names the page lacks (a wrong --engine?)
        self.metrics_stopped: str | None = None  # why reading /metrics again cannot help
        self.metrics_reads = 0
        self.metrics_failures: list[str] = []  # reads that failed; the next one may not

    @property
    def arrivals(self) -> list[list[int]]:
        return [v.arrivals for v in self.victims]

    def metrics_notes(self, url: str) -> list[str]:
        """What the capture's /metrics reads came to, one sentence a kind."""
        notes = []
        if self.metrics_stopped is not None:
            after = f" after {len(self.snapshots)} snapshot(s)" if self.snapshots else ""
            notes.append(f"{url}/metrics: {self.metrics_stopped}; reading it stopped{after}")
        if self.metrics_failures:
            notes.append(
                f"{url}/metrics: {len(self.metrics_failures)} of {self.metrics_reads} reads "
                f"failed (first: {self.metrics_failures[0]}); the other snapshots were kept"
            )
        if self.metrics_missing is not None:
            notes.append(f"{url}/metrics: {self.metrics_missing}")
        return notes


def chunk_tokens(chunk: dict[str, Any], counted: int) -> int:
    """How many tokens one streamed chunk carries, ``counted`` being the tokens counted
    so far in its stream. Counted, first that the chunk gives: its ``token_ids``; else,
    where it states the running ``usage.completion_tokens`` (``continuous_usage_stats``,
    or a last chunk that closes the stream with the total), that count less the tokens
    already counted; else its ``logprobs.tokens``; else one token for a chunk with text.
    A chunk with none of these (no text: a keep-alive, a role-only or closing chunk) and
    a chunk with no choices (the usage alone) carry none."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices:
        return 0
    first = [c for c in choices if isinstance(c, dict)]
    choice = next((c for c in first if c.get("index") == 0), first[0] if first else None)
    if choice is None:
        return 0
    ids = choice.get("token_ids")
    if isinstance(ids, list) and ids:
        return len(ids)
    usage = chunk.get("usage")
    count = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(count, float) and count.is_integer():
        count = int(count)
    if isinstance(count, int) and not isinstance(count, bool):
        return max(count - counted, 0)
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(logprobs.get("tokens"), list):
        return len(logprobs["tokens"])
    return 1 if isinstance(choice.get("text"), str) and choice["text"] else 0


def _server_error(chunk: dict[str, Any]) -> str | None:
    """The message of an error the server streamed in place of a chunk (OpenAI's and
    vLLM's ``{"error": {"message": …}}``, an older ``{"object": "error", "message": …}``),
    else None."""
    error = chunk.get("error")
    if error is None and chunk.get("object") != "error":
        return None
    if isinstance(error, dict):
        error = error.get("message", error)
    elif error is None:
        error = chunk.get("message", "")
    return str(error)[:300] or "(no message)"


def _body(cfg: ProbeConfig, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0,
        "ignore_eos": True,
        # tokens, not chunks: the ids of each chunk's tokens (vLLM, SGLang, the lab
        # engine), and the running usage where ids are not given
        "return_token_ids": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if cfg.model:
        body["model"] = cfg.model
    return body


async def _stream(client: Any, cfg: ProbeConfig, req: _Request, max_tokens: int) -> None:
    """Send ``req`` and read its stream to the end; raises CaptureError on an HTTP error."""
    req.sent_ns = time.monotonic_ns()
    async with client.stream(
        "POST", "/v1/completions", json=_body(cfg, req.prompt, max_tokens)
    ) as r:
        if r.status_code != 200:
            text = (await r.aread()).decode("utf-8", "replace")[:200]
            raise CaptureError(f"{req.role} {req.index}: HTTP {r.status_code}: {text}")
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                req.done = True
                break
            now = time.monotonic_ns()
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if not isinstance(chunk, dict):
                continue
            error = _server_error(chunk)
            if error is not None:
                req.end_ns = now
                raise CaptureError(
                    f"{req.role} {req.index}: the server sent an error after "
                    f"{len(req.arrivals)} token(s): {error}"
                )
            if isinstance(chunk.get("usage"), dict):
                req.usage = {
                    k: v
                    for k, v in chunk["usage"].items()
                    if k in ("prompt_tokens", "completion_tokens") and isinstance(v, int)
                }
            n = chunk_tokens(chunk, len(req.arrivals))
            if n:
                req.chunks += 1
                if req.first_token_ns is None:
                    req.first_token_ns = now
                req.arrivals.extend([now] * n)
            choices = chunk.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                reason = choices[0].get("finish_reason")
                req.finish = str(reason)[:40] if reason is not None else req.finish
    req.end_ns = time.monotonic_ns()


async def _victim(client: Any, cfg: ProbeConfig, req: _Request, store: _Store) -> None:
    try:
        await _stream(client, cfg, req, cfg.max_tokens)
    except asyncio.CancelledError:
        raise
    except CaptureError as exc:
        store.errors.append(str(exc))
    except Exception as exc:  # reported in run.json, the probe goes on
        store.errors.append(f"victim {req.index}: {type(exc).__name__}: {exc}")


async def _wait_tokens(store: _Store, at_least: list[int], timeout_s: float, what: str) -> None:
    """Wait until each victim has its count of tokens; a victim stream that failed, or
    ended short of its count, ends the capture, and so does the timeout."""
    deadline = time.monotonic() + timeout_s
    while any(len(v.arrivals) < n for v, n in zip(store.victims, at_least, strict=True)):
        if store.errors:
            raise CaptureError(f"victim stream failed while {what}: {store.errors[0]}")
        for v, n in zip(store.victims, at_least, strict=True):
            if v.end_ns is not None and len(v.arrivals) < n:
                raise CaptureError(
                    f"victim {v.index}'s stream ended after {len(v.arrivals)} token(s) while "
                    f"{what} ({v.ending()}): a victim must stream until the capture ends"
                    + (" (raise --max-tokens)" if v.finish == "length" else "")
                )
        if time.monotonic() > deadline:
            have = min(len(t) for t in store.arrivals)
            raise CaptureError(
                f"timed out after {timeout_s:g} s {what} (slowest victim has {have} tokens)"
            )
        await asyncio.sleep(0.01)


async def _scrape(reader: Reader, store: _Store, label: str) -> dict[str, Any] | None:
    """One ``/metrics`` snapshot, read and parsed in the reader's process (the token loop
    is never held by it), or None. A read that failed is counted and the next one goes
    on; a failure no read can mend (no /metrics, a page that is not Prometheus text or is
    too large) stops the reading."""
    if store.metrics_stopped is not None:
        return None
    store.metrics_reads += 1
    reply = await reader.read()
    if "failure" in reply:
        if reply.get("permanent"):
            store.metrics_stopped = str(reply["failure"])
        else:
            store.metrics_failures.append(str(reply["failure"]))
        return None
    if store.metric_names is None:
        store.metric_names = reply["names"]
        store.metrics_missing = reply.get("missing")
    return {"metrics": label, "t_ns": reply["t_ns"], "values": reply["values"]}


async def _sample(reader: Reader, cfg: ProbeConfig, store: _Store) -> None:
    while True:
        await asyncio.sleep(cfg.metrics_every_s)
        snapshot = await _scrape(reader, store, "during")
        if snapshot is not None:
            store.snapshots.append(snapshot)


async def _settle(reader: Reader, store: _Store) -> None:
    """The after snapshot, once the engine reports nothing running or waiting (every
    request's counts in), or the last one read within :data:`SETTLE_S`."""
    deadline = time.monotonic() + SETTLE_S
    last = None
    while store.metrics_stopped is None:
        snapshot = await _scrape(reader, store, "after")
        if snapshot is not None:
            last = snapshot
            values = snapshot["values"]
            if values.get("running") in (0, None) and values.get("waiting") in (0, None):
                break
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    if last is not None:
        store.snapshots.append(last)


async def _profile(client: Any, cfg: ProbeConfig, action: str) -> tuple[Any, ProfileCall]:
    body = None
    if cfg.engine == "sglang" and action == "start" and cfg.profile_dir:
        body = {
            "output_dir": cfg.profile_dir,
            "activities": ["CPU", "GPU"],
            "with_stack": False,
            "record_shapes": False,
        }
    timeout = cfg.stop_profile_timeout_s if action == "stop" else 60.0
    sent = time.monotonic_ns()
    resp = await client.post(f"/{action}_profile", json=body, timeout=timeout)
    answered = time.monotonic_ns()
    if resp.status_code >= 400:
        hint = (
            " (vLLM needs --profiler-config with torch_profiler_dir, SGLang "
            "SGLANG_TORCH_PROFILER_DIR)"
            if resp.status_code == 404
            else ""
        )
        raise CaptureError(
            f"{cfg.url}/{action}_profile answered HTTP {resp.status_code}{hint}: {resp.text[:200]}"
        )
    return resp, {"sent_ns": sent, "answered_ns": answered}


async def _stop_after_failure(client: Any, cfg: ProbeConfig) -> str:
    """Stop the profiler a failed capture started, and say so (a clause to add to the
    failure's message)."""
    httpx = _httpx()
    try:
        await _profile(client, cfg, "stop")
    except (CaptureError, httpx.HTTPError) as exc:
        return f"; stopping the profiler failed too ({exc}): the engine may still be profiling"
    return "; the profiler it had started was stopped (/stop_profile)"


async def run_probe(cfg: ProbeConfig) -> ProbeResult:
    """Run the workload against ``cfg.url`` and write the capture to ``cfg.out``. Once
    ``/start_profile`` was answered, every way out (a failure, a timeout, a cancel) sends
    ``/stop_profile``, so a failed capture leaves no engine profiling.

    Raises:
        CaptureError: the server cannot be reached, refuses, or a stream fails.
    """
    httpx = _httpx()
    if cfg.inject_max_tokens < 1:
        raise CaptureError("inject_max_tokens must be at least 1: an injected prompt is timed")
    if cfg.profile_dir:  # absolute on both sides: the server's names and ours compare as paths
        cfg = replace(cfg, profile_dir=str(Path(cfg.profile_dir).resolve()))
    rng = random.Random(cfg.seed)
    timeout = httpx.Timeout(
        connect=cfg.connect_timeout_s,
        read=cfg.read_timeout_s,
        write=cfg.read_timeout_s,
        pool=cfg.connect_timeout_s,
    )
    limits = httpx.Limits(max_connections=cfg.victims + cfg.inject + 4)
    started = time.time()
    store = _Store()
    store.victims = [
        _Request(
            "victim", i, [rng.randrange(1, cfg.vocab) for _ in range(cfg.victim_prompt_tokens)]
        )
        for i in range(cfg.victims)
    ]
    store.injected = [
        _Request("injected", k, [rng.randrange(1, cfg.vocab) for _ in range(cfg.prompt_tokens)])
        for k in range(cfg.inject)
    ]
    reader = Reader(f"{cfg.url}/metrics", cfg.engine, cfg.connect_timeout_s, cfg.metrics_max_bytes)
    async with httpx.AsyncClient(base_url=cfg.url, timeout=timeout, limits=limits) as client:
        try:
            health = await client.get("/health", timeout=cfg.connect_timeout_s)
        except httpx.HTTPError as exc:
            raise CaptureError(
                f"{cfg.url}: cannot reach the server ({type(exc).__name__}: {exc})"
            ) from None
        if health.status_code != 200:
            raise CaptureError(f"{cfg.url}/health answered HTTP {health.status_code}")
        try:
            await reader.start()
            before = await _scrape(reader, store, "before")
            store.snapshots += [before] if before is not None else []
            wall, width = wall_minus_monotonic()
            clock: ProbeClock = {
                "client": "time.monotonic_ns",
                "wall_minus_monotonic_ns": wall,
                "read_width_ns": width,
            }
            stop = None
            if cfg.profile:
                _resp, clock["profile_start"] = await _profile(client, cfg, "start")
            try:
                inject_start, inject_end = await _workload(client, cfg, store, reader)
                if cfg.profile:
                    stop, clock["profile_stop"] = await _profile(client, cfg, "stop")
            except CaptureError as exc:
                if not cfg.profile or "profile_stop" in clock:
                    raise
                raise CaptureError(f"{exc}{await _stop_after_failure(client, cfg)}") from None
            except BaseException:  # a cancel, an interrupt, a bug: stop, then go
                if cfg.profile and "profile_stop" not in clock:
                    await _stop_after_failure(client, cfg)
                raise
            await _settle(reader, store)
        finally:
            await reader.close()
    traces: list[Path] = []
    if cfg.profile:
        traces = collect(cfg, started)
        if cfg.engine == "lab" and not traces and stop is not None:
            try:
                named = stop.json()["trace"]
            except (ValueError, KeyError, TypeError):
                named = None
            traces = [Path(str(named))] if named else []
        traces = trusted(cfg, traces)
    return _write(cfg, store, inject_start, inject_end, traces, started, clock)


async def _workload(
    client: Any, cfg: ProbeConfig, store: _Store, reader: Reader
) -> tuple[int, int]:
    """The victims, then the injected prompts, then more victim tokens; the injection
    window's start and end (monotonic ns)."""
    httpx = _httpx()
    tasks = [asyncio.create_task(_victim(client, cfg, v, store)) for v in store.victims]
    if cfg.metrics_every_s > 0:
        tasks.append(asyncio.create_task(_sample(reader, cfg, store)))
    try:
        await _wait_tokens(
            store,
            [cfg.steady_tokens] * cfg.victims,
            cfg.read_timeout_s,
            "waiting for steady decode",
        )
        inject_start = time.monotonic_ns()
        injected = [
            asyncio.create_task(_stream(client, cfg, r, cfg.inject_max_tokens))
            for r in store.injected
        ]
        tasks += injected
        try:
            await asyncio.gather(*injected)
        except httpx.HTTPError as exc:
            raise CaptureError(f"injecting prompts: {type(exc).__name__}: {exc}") from None
        inject_end = time.monotonic_ns()
        missing = [r for r in store.injected if r.first_token_ns is None]
        if missing:
            raise CaptureError(
                f"injected prompt {missing[0].index}: the stream ended without a token "
                f"({missing[0].ending()})"
            )
        after = [len(t) + cfg.steady_tokens for t in store.arrivals]
        await _wait_tokens(store, after, cfg.read_timeout_s, "waiting after the injection")
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return inject_start, inject_end


def _write(
    cfg: ProbeConfig,
    store: _Store,
    inject_start: int,
    inject_end: int,
    traces: list[Path],
    started: float,
    clock: ProbeClock,
) -> ProbeResult:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    lines: list[dict[str, Any]] = [
        {"event": "inject_start", "t_ns": inject_start},
        {"event": "inject_end", "t_ns": inject_end},
    ]
    requests = [*store.victims, *store.injected]
    lines += [r.record(number) for number, r in enumerate(requests)]
    for v in store.victims:
        lines += [{"victim": v.index, "token": k, "t_ns": t} for k, t in enumerate(v.arrivals)]
    lines += store.snapshots
    staged: list[tuple[Path, Path]] = []
    tmpdir = Path(tempfile.mkdtemp(dir=out, prefix=".capture."))
    try:
        probe_tmp = tmpdir / "probe.jsonl"
        probe_tmp.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
        staged.append((probe_tmp, out / "probe.jsonl"))
        copied = []
        for t in traces:
            dest = out / t.name
            if t.resolve() != dest.resolve():
                shutil.copy2(t, tmpdir / t.name)
                staged.append((tmpdir / t.name, dest))
            copied.append(dest)
        entries = offsets(clock, traces)
        notes = clock_notes(cfg, entries)
        metrics_notes = store.metrics_notes(cfg.url)
        run: CaptureRunDocument = {
            "schema": CAPTURE_SCHEMA,
            "config": asdict(cfg),
            "profiled": cfg.profile,
            "started_unix_s": started,
            "inject_start_ns": inject_start,
            "inject_end_ns": inject_end,
            "clock": {**clock, "traces": entries},
            "traces": [p.name for p in copied],
            "victim_tokens": [len(t) for t in store.arrivals],
            "sent_prompt_tokens": sum(len(r.prompt) for r in requests),
            "metrics": {
                "engine": cfg.engine,
                "names": store.metric_names,
                "snapshots": len(store.snapshots),
                "reads": store.metrics_reads,
                "failed_reads": len(store.metrics_failures),
                "notes": metrics_notes,
            },
            "errors": store.errors,
            "notes": notes,
        }
        run_tmp = tmpdir / "run.json"
        run_tmp.write_bytes(orjson.dumps(run, option=orjson.OPT_INDENT_2))
        staged.append((run_tmp, out / "run.json"))
        for src, dest in staged:  # probe and traces first, run.json (the index) last
            os.replace(src, dest)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return ProbeResult(
        out,
        copied,
        out / "probe.jsonl",
        out / "run.json",
        inject_start,
        inject_end,
        sum(len(t) for t in store.arrivals),
        [*notes, *metrics_notes],
    )
