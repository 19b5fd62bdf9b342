"""The engine's own counters: ``/metrics`` read with a Prometheus text-format parser.

Five quantities, each under its name in vLLM, SGLang and the lab engine (:data:`NAMES`):
prompt tokens and generation tokens (counters), preemptions (a counter), and the requests
running and waiting (gauges). A snapshot sums each one over its label sets (the engines of
a data-parallel server add up); a quantity the server does not serve is None, never 0.

The probe takes a snapshot before the workload, one every ``--metrics-every`` seconds while
it runs, and one after it (once the engine has nothing running or waiting), each read and
parsed in a process of its own (:mod:`traceview.capture.scrape`). :func:`increase` says how
much work the engine counted over the snapshots (a counter that goes down was reset: a
restart), and :func:`prefill_check` compares the prompt tokens it counted with the tokens
the probe sent, so a re-prefill (a preempted request's prompt fed again) is named from the
client side too, on an engine that counts every token it feeds (:data:`COUNTS_ONCE`).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from traceview.analysis.base.capture_document import (
    Counter,
    CounterDelta,
    CounterResets,
    EngineCounts,
    PrefillCheck,
    Quantity,
)
from traceview.errors import CaptureError, MissingDependencyError

QUANTITIES: tuple[Quantity, ...] = (
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "running",
    "waiting",
)
COUNTERS: tuple[Counter, ...] = ("prompt_tokens", "generation_tokens", "preemptions")

# Each quantity's metric names, first served wins; a counter's samples are read under the
# name and the name + "_total" (prometheus_client writes the latter). vLLM:
# vllm/v1/metrics/loggers.py; SGLang: python/sglang/srt/metrics/collector.py (a preemption
# is a "retraction"; the counter replaced the older cumulative gauge).
NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "prompt_tokens": ("vllm:prompt_tokens",),
        "generation_tokens": ("vllm:generation_tokens",),
        "preemptions": ("vllm:num_preemptions",),
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
    },
    "sglang": {
        "prompt_tokens": ("sglang:prompt_tokens",),
        "generation_tokens": ("sglang:generation_tokens",),
        "preemptions": ("sglang:num_retracted_requests", "sglang:total_retracted_reqs"),
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
    },
    "lab": {
        "prompt_tokens": ("lab_prefilled_tokens",),
        "generation_tokens": ("lab_generated_tokens",),
        "preemptions": ("lab_preemptions",),
        "running": ("lab_running",),
        "waiting": ("lab_waiting",),
    },
}

# engines that count a request's prompt once (vLLM at its first token,
# vllm/v1/metrics/stats.py; SGLang when it ends, observe_one_finished_request): a prompt
# fed again after a preemption is not counted again
COUNTS_ONCE = {"vllm": "vLLM", "sglang": "SGLang"}
EXACT = 2**53  # a larger value is kept as a float: JSON readers take integers up to here


def counts() -> EngineCounts:
    """A snapshot in which the server serves nothing yet: every quantity None."""
    return {
        "prompt_tokens": None,
        "generation_tokens": None,
        "preemptions": None,
        "running": None,
        "waiting": None,
    }


def _parser() -> Any:
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        raise MissingDependencyError(
            "reading /metrics needs prometheus_client: pip install 'traceview[capture]'"
        ) from None
    return text_string_to_metric_families


def _number(value: float) -> int | float | None:
    """A sample's value: None where it is not finite, an int where it is whole and exact
    (at most 2^53 in size), else the float."""
    if not math.isfinite(value):
        return None
    return int(value) if value == int(value) and abs(value) <= EXACT else value


def parse(
    text: str, engine: str, where: str
) -> tuple[EngineCounts, dict[str, str | None], str | None]:
    """The five quantities of one ``/metrics`` page, the metric name each was read from
    (None: not served), and :func:`missing`'s sentence on the names the page lacks.

    Raises:
        CaptureError: the page is not Prometheus text (named by ``where``).
    """
    names = NAMES[engine]
    sums: dict[str, float] = {}
    try:
        for family in _parser()(text):
            for sample in family.samples:
                sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise CaptureError(f"{where}: not Prometheus text ({reason})") from None
    values, used = _find(sums, names)
    return values, used, missing(sums, engine, used)


def _find(
    sums: dict[str, float], names: dict[str, tuple[str, ...]]
) -> tuple[EngineCounts, dict[str, str | None]]:
    values = counts()
    used: dict[str, str | None] = {}
    for quantity in QUANTITIES:
        used[quantity] = None
        for name in names[quantity]:
            hit = next((n for n in (f"{name}_total", name) if n in sums), None)
            if hit is not None:
                values[quantity], used[quantity] = _number(sums[hit]), hit
                break
    return values, used


def missing(sums: dict[str, float], engine: str, used: dict[str, str | None]) -> str | None:
    """One sentence naming the quantities whose names the page does not hold, and the
    engine whose names it holds instead (a wrong ``--engine``); None when none is
    missing."""
    absent = [q for q in QUANTITIES if used.get(q) is None]
    if not absent:
        return None
    looked = ", ".join(NAMES[engine][q][0] for q in absent)
    said = f"the page holds none of {engine}'s names for {', '.join(absent)} ({looked})"
    others = [
        other
        for other in NAMES
        if other != engine and any(v is not None for v in _find(sums, NAMES[other])[1].values())
    ]
    if others:
        said += f"; it holds {others[0]}'s names: is --engine {others[0]} the server's?"
    return said


def increase(series: list[EngineCounts]) -> tuple[CounterDelta, CounterResets]:
    """Each counter's increase over ``series`` (snapshots in time order, the first before
    the workload, the last after it), and how many times it was reset. A counter only
    goes up; one that goes down was reset (the server restarted) and counts from 0 again,
    so the increase sums each step's rise, taking the value after a reset as its rise,
    as Prometheus's ``increase()`` does. A counter absent from the first or the last
    snapshot has no increase (None); snapshots between that lack it are skipped."""
    out: CounterDelta = {"prompt_tokens": None, "generation_tokens": None, "preemptions": None}
    resets: CounterResets = {"prompt_tokens": 0, "generation_tokens": 0, "preemptions": 0}
    for key in COUNTERS:
        if not series or series[0].get(key) is None or series[-1].get(key) is None:
            out[key], resets[key] = None, 0
            continue
        values = [float(v) for s in series if (v := s.get(key)) is not None]
        total, count = 0.0, 0
        for a, b in zip(values, values[1:], strict=False):
            if b < a:
                total, count = total + b, count + 1
            else:
                total += b - a
        out[key], resets[key] = _number(total), count
    return out, resets


def prefill_check(
    sent: int,
    counted: int | float | None,
    *,
    engine: str | None = None,
    preemptions: int | float | None = None,
    resets: int = 0,
) -> PrefillCheck:
    """The engine's counted prompt tokens against the ``sent`` ones: ``excess_tokens``
    (counted − sent), ``ratio`` (counted / sent; None when nothing was sent) and a
    ``verdict``: ``match`` when equal, ``re-prefill`` when the engine counted more prompt
    work than was sent (a prompt fed again), ``fewer`` when it counted less (prefix-cache
    hits on an engine that leaves them out, or requests it had not counted yet), None
    when the engine serves no count. ``caveats``: what the verdict cannot see, one
    sentence each: an engine of :data:`COUNTS_ONCE` never counts a re-fed prompt (and
    its ``preemptions`` say whether one may have been), and a counter ``resets`` (a
    restart) makes the count a lower bound."""
    caveats = []
    if engine in COUNTS_ONCE:
        said = (
            f"{COUNTS_ONCE[engine]} counts each prompt once, so a prompt fed again is not "
            "in this count"
        )
        if preemptions:
            said += f"; it preempted {preemptions:,} time(s), so one may have happened"
        caveats.append(said)
    if resets:
        caveats.append(
            f"the prompt-token counter was reset {resets} time(s) (a restart?): "
            "the count is a lower bound"
        )
    if counted is None:
        return {
            "sent_prompt_tokens": sent,
            "engine_prompt_tokens": None,
            "excess_tokens": None,
            "ratio": None,
            "verdict": None,
            "caveats": caveats,
        }
    excess = _number(float(counted) - sent)
    assert excess is not None
    verdict: Literal["match", "re-prefill", "fewer"] = (
        "match" if excess == 0 else ("re-prefill" if excess > 0 else "fewer")
    )
    return {
        "sent_prompt_tokens": sent,
        "engine_prompt_tokens": counted,
        "excess_tokens": excess,
        "ratio": None if sent == 0 else float(f"{float(counted) / sent:.9g}"),
        "verdict": verdict,
        "caveats": caveats,
    }
