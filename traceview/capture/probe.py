"""The server probe: drive a serving engine through an interference workload while it
profiles, and record what the clients saw.

Victim requests stream tokens while long prompts are injected; every victim token's arrival
time (monotonic ns) and the injection window go to ``probe.jsonl``; the engine's trace(s)
are collected from its profile dir; ``run.json`` says what was run. Every network call has a
timeout, and the files are written at the end, atomically: an interrupted capture leaves
complete files or none.
"""

from __future__ import annotations

import asyncio
import glob
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

from traceview.errors import CaptureError, MissingDependencyError

TRACE_GLOBS = {
    "vllm": ["*.pt.trace.json.gz", "*.pt.trace.json"],
    "sglang": ["*.trace.json.gz", "*.trace.json"],
    "lab": ["*.pt.trace.json.gz"],
}


@dataclass
class ProbeConfig:
    url: str
    engine: str = "lab"  # vllm | sglang | lab
    victims: int = 6
    inject: int = 12
    prompt_tokens: int = 6000
    victim_prompt_tokens: int = 32
    max_tokens: int = 4096  # per victim: long enough to outlive the injection
    steady_tokens: int = 8  # tokens each victim must have before and after the injection
    model: str | None = None
    profile_dir: str | None = None
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


class _Victims:
    def __init__(self) -> None:
        self.arrivals: list[list[int]] = []
        self.errors: list[str] = []


async def _victim(
    client: Any, cfg: ProbeConfig, i: int, store: _Victims, prompt: list[int]
) -> None:
    body = {
        "prompt": prompt,
        "max_tokens": cfg.max_tokens,
        "stream": True,
        "temperature": 0,
        "ignore_eos": True,
    }
    if cfg.model:
        body["model"] = cfg.model
    times = store.arrivals[i]
    try:
        async with client.stream("POST", "/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode("utf-8", "replace")[:200]
                store.errors.append(f"victim {i}: HTTP {resp.status_code}: {text}")
                return
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                now = time.monotonic_ns()
                try:
                    chunk = json.loads(data)
                    choice = chunk["choices"][0]
                    n = len(choice.get("token_ids") or []) or 1
                except (ValueError, KeyError, IndexError):
                    continue
                times.extend([now] * n)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # reported in run.json, the probe goes on
        store.errors.append(f"victim {i}: {type(exc).__name__}: {exc}")


async def _wait_tokens(store: _Victims, at_least: list[int], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while any(len(t) < n for t, n in zip(store.arrivals, at_least, strict=True)):
        if store.errors:
            raise CaptureError(f"victim stream failed while {what}: {store.errors[0]}")
        if time.monotonic() > deadline:
            have = min(len(t) for t in store.arrivals)
            raise CaptureError(
                f"timed out after {timeout_s:g} s {what} (slowest victim has {have} tokens)"
            )
        await asyncio.sleep(0.01)


async def _profile(client: Any, cfg: ProbeConfig, action: str) -> Any:
    body = None
    if cfg.engine == "sglang" and action == "start" and cfg.profile_dir:
        body = {
            "output_dir": cfg.profile_dir,
            "activities": ["CPU", "GPU"],
            "with_stack": False,
            "record_shapes": False,
        }
    timeout = cfg.stop_profile_timeout_s if action == "stop" else 60.0
    resp = await client.post(f"/{action}_profile", json=body, timeout=timeout)
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
    return resp


def _collect(cfg: ProbeConfig, started: float) -> list[Path]:
    if not cfg.profile_dir:
        return []
    found: list[Path] = []
    for pattern in TRACE_GLOBS[cfg.engine]:
        for name in glob.glob(os.path.join(cfg.profile_dir, "**", pattern), recursive=True):
            p = Path(name)
            if "async_llm" in p.name or "capture_traces" in p.parts:
                continue  # vLLM's CPU-only frontend trace and graph-capture traces
            if p.stat().st_mtime >= started - 1 and p not in found:
                found.append(p)
    return sorted(found)


async def run_probe(cfg: ProbeConfig) -> ProbeResult:
    """Run the workload against ``cfg.url`` and write the capture to ``cfg.out``.

    Raises:
        CaptureError: the server cannot be reached, refuses, or a stream fails.
    """
    httpx = _httpx()
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
    async with httpx.AsyncClient(base_url=cfg.url, timeout=timeout, limits=limits) as client:
        try:
            health = await client.get("/health", timeout=cfg.connect_timeout_s)
        except httpx.HTTPError as exc:
            raise CaptureError(
                f"{cfg.url}: cannot reach the server ({type(exc).__name__}: {exc})"
            ) from None
        if health.status_code != 200:
            raise CaptureError(f"{cfg.url}/health answered HTTP {health.status_code}")
        await _profile(client, cfg, "start")
        store = _Victims()
        store.arrivals = [[] for _ in range(cfg.victims)]
        tasks = [
            asyncio.create_task(
                _victim(
                    client,
                    cfg,
                    i,
                    store,
                    [rng.randrange(1, cfg.vocab) for _ in range(cfg.victim_prompt_tokens)],
                )
            )
            for i in range(cfg.victims)
        ]
        try:
            await _wait_tokens(
                store,
                [cfg.steady_tokens] * cfg.victims,
                cfg.read_timeout_s,
                "waiting for steady decode",
            )
            inject_start = time.monotonic_ns()

            async def inject(k: int) -> None:
                body = {
                    "prompt": [rng.randrange(1, cfg.vocab) for _ in range(cfg.prompt_tokens)],
                    "max_tokens": 1,
                    "temperature": 0,
                }
                if cfg.model:
                    body["model"] = cfg.model
                resp = await client.post("/v1/completions", json=body)
                if resp.status_code != 200:
                    raise CaptureError(
                        f"injected prompt {k}: HTTP {resp.status_code}: {resp.text[:200]}"
                    )

            try:
                await asyncio.gather(*(inject(k) for k in range(cfg.inject)))
            except httpx.HTTPError as exc:
                raise CaptureError(f"injecting prompts: {type(exc).__name__}: {exc}") from None
            inject_end = time.monotonic_ns()
            after = [len(t) + cfg.steady_tokens for t in store.arrivals]
            await _wait_tokens(store, after, cfg.read_timeout_s, "after the injection")
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        stop = await _profile(client, cfg, "stop")
    traces = _collect(cfg, started)
    if cfg.engine == "lab" and not traces:
        try:
            named = stop.json()["trace"]
        except (ValueError, KeyError, TypeError):
            named = None
        traces = [Path(str(named))] if named else []
    return _write(cfg, store, inject_start, inject_end, _trusted(cfg, traces), started)


def _trusted(cfg: ProbeConfig, traces: list[Path]) -> list[Path]:
    """The traces to copy, each checked to be a file under the profile folder the user
    gave: a path a server names is never trusted (it could name any file on this machine).
    Both sides are compared as absolute, resolved paths; a relative name is read against
    the profile folder, then against the working directory (a server started here names
    its traces relative to it), and either must land in the folder.

    Raises:
        CaptureError: a trace outside the profile folder, or no profile folder given.
    """
    if not traces:
        return []
    if not cfg.profile_dir:
        raise CaptureError(
            f"{traces[0]}: the server named this trace, but no --profile-dir was given; "
            "traceview copies only files under the profile folder you name"
        )
    root = Path(cfg.profile_dir).resolve()
    checked = []
    for t in traces:
        candidates = [t] if t.is_absolute() else [root / t, Path.cwd() / t]
        inside = [
            real
            for real in (c.resolve() for c in candidates)
            if real.is_relative_to(root) and real.is_file()
        ]
        if not inside:
            raise CaptureError(
                f"{t}: not a file under the profile folder {root}; refusing to copy it"
            )
        checked.append(inside[0])
    return checked


def _write(
    cfg: ProbeConfig,
    store: _Victims,
    inject_start: int,
    inject_end: int,
    traces: list[Path],
    started: float,
) -> ProbeResult:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        {"event": "inject_start", "t_ns": inject_start},
        {"event": "inject_end", "t_ns": inject_end},
    ]
    for v, times in enumerate(store.arrivals):
        lines += [{"victim": v, "token": k, "t_ns": t} for k, t in enumerate(times)]
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
        run = {
            "schema": "traceview.run/1",
            "config": asdict(cfg),
            "started_unix_s": started,
            "inject_start_ns": inject_start,
            "inject_end_ns": inject_end,
            "clock": "time.monotonic_ns",
            "traces": [p.name for p in copied],
            "victim_tokens": [len(t) for t in store.arrivals],
            "errors": store.errors,
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
    )


# --- inter-token latency -----------------------------------------------------------------------


_INT64_MAX = 2**63 - 1


def _probe_int(row: dict[str, Any], key: str, where: str) -> int:
    """``row[key]``: an integer from 0 to Int64's largest (a time in ns, a victim, a
    token's number); anything else is the probe file's fault, named by its line."""
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        shown = "missing" if key not in row else f"{type(value).__name__} {value!r}"[:80]
        raise CaptureError(f"{where}: '{key}' must be a whole number (it is {shown})")
    if not 0 <= value <= _INT64_MAX:
        raise CaptureError(f"{where}: '{key}' {value} is out of range (0 to 2^63-1)")
    return value


def itl(probe_path: str | os.PathLike[str]) -> dict[str, Any]:
    """Victims' inter-token latency over all tokens and within the injection window.

    A gap is the time between a victim's consecutive tokens (the first token, which waited
    for its prompt, is not a gap); it is inside the window when the later token arrived
    between the injection's start and end. Each population comes with its n.

    Raises:
        CaptureError: the probe file is missing or malformed.
    """
    import numpy as np

    from traceview.analysis.base.stats import percentiles

    path = Path(probe_path)
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read: {exc.strerror}") from None
    events: dict[str, int] = {}
    per: dict[int, dict[int, int]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}: line {number}"
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise CaptureError(f"{where}: not a probe file (bad JSON: {exc})") from None
        if not isinstance(row, dict):
            raise CaptureError(f"{where}: not a probe record (a JSON object)")
        if "event" in row:
            event = str(row["event"])
            if event in events and event in ("inject_start", "inject_end"):
                raise CaptureError(f"{where}: a second {event}")
            events[event] = _probe_int(row, "t_ns", where)
        elif "victim" in row:
            t_ns = _probe_int(row, "t_ns", where)
            victim, token = _probe_int(row, "victim", where), _probe_int(row, "token", where)
            tokens = per.setdefault(victim, {})
            if token in tokens:
                raise CaptureError(f"{where}: victim {victim}'s token {token} is given twice")
            tokens[token] = t_ns
    if "inject_start" not in events or "inject_end" not in events:
        raise CaptureError(f"{path}: not a probe file (no injection window)")
    lo, hi = events["inject_start"], events["inject_end"]
    if hi < lo:
        raise CaptureError(f"{path}: the injection ends ({hi} ns) before it starts ({lo} ns)")
    gaps, inside = [], []
    for victim, tokens in per.items():
        order = sorted(tokens)
        for prev, cur in zip(order, order[1:], strict=False):
            gap = tokens[cur] - tokens[prev]
            if gap < 0:
                raise CaptureError(
                    f"{path}: victim {victim}'s token {cur} arrived at {tokens[cur]} ns, "
                    f"before its token {prev} ({tokens[prev]} ns): time runs backwards"
                )
            gaps.append(gap)
            if lo <= tokens[cur] <= hi:
                inside.append(gap)
    return {
        "schema": "traceview.itl/1",
        "probe": str(path),
        "victims": len(per),
        "window_ns": hi - lo,
        "all": percentiles(np.asarray(gaps)),
        "injection": percentiles(np.asarray(inside)),
    }
