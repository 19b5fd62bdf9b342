"""``traceview capture run|lab|server``, ``traceview itl`` and ``traceview demo``."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import orjson

from traceview.cli._console import stderr
from traceview.cli._options import say
from traceview.errors import CaptureError


@click.group()
def capture() -> None:
    """Record traces: a step function in-process, the lab engine, or a live server."""


@capture.command(name="run")
@click.argument("target", metavar="MODULE:FUNCTION")
@click.option("--steps", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--wait", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "-o", "--output", "--out", "out", default="traces", show_default=True, help="Output folder."
)
@click.option("--name", help="File name stem (default: host_pid.time).")
@click.option("--record-shapes", is_flag=True)
@click.option("--with-stack", is_flag=True)
def run(
    target: str,
    steps: int,
    warmup: int,
    wait: int,
    out: str,
    name: str | None,
    record_shapes: bool,
    with_stack: bool,
) -> None:
    """Profile MODULE:FUNCTION (called once per step, no arguments) with torch.profiler and
    write NAME.pt.trace.json.gz and NAME.meta.json."""
    from traceview.capture.recorder import record

    module_name, _, func_name = target.partition(":")
    if not module_name or not func_name:
        raise CaptureError(f"{target}: expected MODULE:FUNCTION, e.g. mypkg.bench:step")
    sys.path.insert(0, str(Path.cwd()))
    try:
        func = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as exc:
        raise CaptureError(f"{target}: cannot import: {exc}") from None
    rec = record(
        func,
        steps=steps,
        warmup=warmup,
        wait=wait,
        out=out,
        name=name,
        record_shapes=record_shapes,
        with_stack=with_stack,
        workload={"target": target},
    )
    click.echo(f"{rec.trace}\n{rec.meta}")


def _lab_options(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option(
        "--budget",
        type=click.IntRange(min=2),
        default=64,
        show_default=True,
        help="Tokens per engine step.",
    )(func)
    func = click.option("--chunked-prefill/--no-chunked-prefill", default=True, show_default=True)(
        func
    )
    func = click.option(
        "--layers",
        default="LLLF" * 2,
        show_default=True,
        help="L: linear attention, F: full attention, one letter a layer.",
    )(func)
    return func


@capture.command(name="lab")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8123, show_default=True)
@click.option("--profile-dir", default="lab-profiles", show_default=True)
@click.option(
    "--max-tokens-cap",
    type=click.IntRange(min=1),
    default=8192,
    show_default=True,
    help="Refuse requests asking for more tokens than this.",
)
@_lab_options
def lab(
    host: str,
    port: int,
    profile_dir: str,
    max_tokens_cap: int,
    budget: int,
    chunked_prefill: bool,
    layers: str,
) -> None:
    """Serve the lab engine (a small hybrid model in plain torch) with an OpenAI-compatible
    /v1/completions, /start_profile, /stop_profile, /health and /metrics. Only requests
    addressed to localhost (or --host) and from no foreign page are answered (a 403
    otherwise); a request whose client leaves is cancelled; SIGTERM exits within seconds."""
    from traceview.capture.lab import LabConfig
    from traceview.capture.server import serve

    serve(
        LabConfig(layers=layers, token_budget=budget, chunked_prefill=chunked_prefill),
        profile_dir,
        host,
        port,
        max_tokens_cap,
    )


@capture.command(name="server")
@click.option("--url", required=True, help="The engine's base URL.")
@click.option("--engine", type=click.Choice(["vllm", "sglang", "lab"]), required=True)
@click.option("--victims", type=click.IntRange(min=1), default=6, show_default=True)
@click.option("--inject", type=click.IntRange(min=1), default=12, show_default=True)
@click.option("--prompt-tokens", type=click.IntRange(min=1), default=6000, show_default=True)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=4096,
    show_default=True,
    help="Victims' max_tokens (long enough to outlive the injection).",
)
@click.option(
    "--inject-max-tokens",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Tokens each injected prompt streams (its first is timed: TTFT).",
)
@click.option("--model", help="Model name to send (vLLM/SGLang).")
@click.option("--profile-dir", help="Where the engine writes its traces.")
@click.option(
    "--profile/--no-profile",
    default=True,
    show_default=True,
    help="--no-profile: the same workload with the profiler off (the control).",
)
@click.option(
    "--metrics-every",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds between /metrics snapshots while the workload runs (0: before and after only).",
)
@click.option(
    "--stop-timeout",
    type=float,
    default=900,
    show_default=True,
    help="Seconds to wait for /stop_profile (large traces flush slowly).",
)
@click.option("-o", "--output", "--out", "out", required=True, help="Output folder.")
def server(
    url: str,
    engine: str,
    victims: int,
    inject: int,
    prompt_tokens: int,
    max_tokens: int,
    inject_max_tokens: int,
    model: str | None,
    profile_dir: str | None,
    profile: bool,
    metrics_every: float,
    stop_timeout: float,
    out: str,
) -> None:
    """Profile a running server through an interference workload: victim streams, then
    long injected prompts; write the engine trace(s), probe.jsonl (every victim token,
    each request's time to first token, /metrics snapshots) and run.json to OUT."""
    import asyncio

    from traceview.capture.probe import ProbeConfig, run_probe

    cfg = ProbeConfig(
        url=url.rstrip("/"),
        engine=engine,
        victims=victims,
        inject=inject,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        inject_max_tokens=inject_max_tokens,
        model=model,
        profile_dir=profile_dir,
        profile=profile,
        metrics_every_s=metrics_every,
        out=out,
        stop_profile_timeout_s=stop_timeout,
    )
    result = asyncio.run(run_probe(cfg))
    for p in [*result.traces, result.probe, result.run]:
        click.echo(str(p))
    for note in result.notes:
        say(f"note: {note}")


@click.command()
@click.argument("captures", nargs=-1, required=True, type=click.Path(), metavar="CAPTURE [B]")
@click.option("--json", "as_json", is_flag=True)
def itl(captures: tuple[str, ...], as_json: bool) -> None:
    """What the clients saw in a capture (its folder, or its probe.jsonl). It gives the
    victims' inter-token latency, over all tokens and within the injection window. It gives
    the time to first token of the victims and of the injected prompts, each with its n. It
    gives the engine's /metrics deltas, the re-prefill check, and the injection window on
    the trace's clock. Give two captures (off/on chunked prefill, profiled/unprofiled) to
    compare them as diff compares traces."""
    from traceview.capture.itl import compare
    from traceview.capture.itl import itl as compute
    from traceview.render.itl_table import render_itl, render_itl_diff

    if len(captures) > 2:
        raise click.UsageError("itl takes one capture, or two to compare")
    docs = [compute(c) for c in captures]
    if len(docs) == 1:
        if as_json:
            click.echo(orjson.dumps(docs[0], option=orjson.OPT_INDENT_2).decode())
        else:
            render_itl([("", docs[0])])
        return
    diff = compare(*docs)
    if as_json:
        click.echo(orjson.dumps(diff, option=orjson.OPT_INDENT_2).decode())
    else:
        render_itl([("A", docs[0]), ("B", docs[1])])
        render_itl_diff(diff)


@click.command()
@click.option(
    "-o",
    "--output",
    "--out",
    "out",
    default="traceview-demo",
    show_default=True,
    help="Output folder.",
)
@click.option("--prompt-tokens", type=click.IntRange(min=8), default=480, show_default=True)
def demo(out: str, prompt_tokens: int) -> None:
    """Run the chunked-prefill experiment on the lab engine (CPU, under a minute): chunked
    prefill off, then on. Print each run's trace summary, both runs' client view (ITL,
    TTFT, the engine's /metrics deltas), and off against on with verdicts."""
    from traceview.capture.demo import run_demo

    run_demo(Path(out), prompt_tokens=prompt_tokens, echo=click.echo, err=stderr)
