"""``traceview demo``: the chunked-prefill experiment on the lab engine, on CPU."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traceview.capture.itl import compare, itl
from traceview.capture.lab import LabConfig
from traceview.capture.probe import ProbeConfig, ProbeResult, run_probe
from traceview.capture.server import LabServer


def experiment(
    out: Path,
    *,
    chunked: bool,
    prompt_tokens: int = 480,
    victims: int = 4,
    inject: int = 2,
    budget: int = 48,
    profile: bool = True,
) -> tuple[ProbeResult, list[Any]]:
    """One run: serve the lab engine, probe it, return the capture and the engine's own
    log of the profiled steps (``profile=False``: the unprofiled control, no steps)."""
    name = ("chunked-on" if chunked else "chunked-off") + ("" if profile else "-unprofiled")
    folder = out / name
    profiles = str((folder / "profiles").resolve())  # absolute: server and probe agree on it
    cfg = LabConfig(layers="LLLF", token_budget=budget, chunked_prefill=chunked, max_waiting=64)
    victim_tokens = 100_000  # long enough to outlive the injection (they are cancelled)
    with LabServer(cfg, profiles, max_tokens_cap=victim_tokens) as server:
        result = asyncio.run(
            run_probe(
                ProbeConfig(
                    url=server.url,
                    engine="lab",
                    victims=victims,
                    inject=inject,
                    prompt_tokens=prompt_tokens,
                    victim_prompt_tokens=8,
                    max_tokens=victim_tokens,
                    steady_tokens=6,
                    profile_dir=profiles,
                    profile=profile,
                    metrics_every_s=0.25,
                    out=str(folder),
                    vocab=cfg.vocab,
                )
            )
        )
        steps = [s for s in server.engine.steps if s.profiled]
    return result, steps


def run_demo(out: Path, *, prompt_tokens: int, echo: Callable[[str], None], err: Any) -> None:
    """Chunked prefill off, then on: each run's trace summary, then both runs' client
    view (ITL, TTFT, the engine's counters) and their comparison with verdicts."""
    from traceview.analysis.analyze import analyze
    from traceview.capture import lab, probe, server
    from traceview.render.itl_table import render_itl, render_itl_diff
    from traceview.render.table import render_summary

    lab._torch(), server._deps(), probe._httpx()  # a missing extra, said before anything starts
    rows = []
    for chunked in (False, True):
        label = "chunked prefill " + ("on" if chunked else "off")
        err.print(f"{label}: serving the lab engine and probing it ...")
        result, steps = experiment(out, chunked=chunked, prompt_tokens=prompt_tokens)
        summary = analyze(result.traces[0]).summary
        echo(f"\n=== {label}: {result.traces[0]} ({len(steps)} engine steps logged) ===")
        render_summary(summary.to_dict())
        rows.append((label, itl(result.probe)))
    echo("\n=== what the clients saw ===")
    render_itl(rows)
    echo("\n=== chunked prefill off (A) against on (B) ===")
    render_itl_diff(compare(rows[0][1], rows[1][1]))
