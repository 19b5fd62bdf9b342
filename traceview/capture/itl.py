"""What the clients saw, from a capture: ``traceview itl``.

A capture folder holds ``probe.jsonl`` (the probe's records, on its monotonic clock) and
``run.json`` (what was run, and the clock facts). :func:`itl` reads them into the
``traceview.itl/1`` document: the victims' inter-token latency (all tokens; the injection
window), time to first token per population (victims; injected prompts), the engine's
``/metrics`` deltas and the re-prefill check, and the injection window on the trace's clock.
:func:`compare` sets two captures side by side, as ``diff`` sets two traces.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import orjson

from traceview.analysis.base.capture_document import (
    ITL_DIFF_SCHEMA,
    ITL_SCHEMA,
    Count,
    EngineCounts,
    ItlClock,
    ItlDiffDocument,
    ItlDiffRow,
    ItlDocument,
    ItlMetrics,
    ItlRequest,
    PrefillCheck,
    Role,
    Snapshot,
    Ttft,
    TtftStats,
)
from traceview.analysis.base.stats import percentiles
from traceview.capture import engine_metrics
from traceview.capture.rundoc import CaptureRun
from traceview.capture.rundoc import read as read_run
from traceview.errors import CaptureError

if TYPE_CHECKING:
    from traceview.model import Trace

ROLES: tuple[Role, ...] = ("victim", "injected")
_INT64_MAX = 2**63 - 1


def _probe_int(row: dict[str, Any], key: str, where: str, *, null: bool = False) -> int | None:
    """``row[key]``: an integer from 0 to Int64's largest (a time in ns, a victim, a
    token's number; None where ``null`` allows it); anything else is the probe file's
    fault, named by its line."""
    value = row.get(key)
    if value is None and null and key in row:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        shown = "missing" if key not in row else f"{type(value).__name__} {value!r}"[:80]
        raise CaptureError(f"{where}: '{key}' must be a whole number (it is {shown})")
    if not 0 <= value <= _INT64_MAX:
        raise CaptureError(f"{where}: '{key}' {value} is out of range (0 to 2^63-1)")
    return value


@dataclass
class Probe:
    """A capture as read: the probe file's records and the run document (None beside a
    bare probe file)."""

    path: Path
    window: tuple[int, int]
    tokens: dict[int, dict[int, int]]  # victim -> token number -> arrival (ns)
    requests: list[ItlRequest] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    run: CaptureRun | None = None


def _paths(source: str | os.PathLike[str]) -> tuple[Path, Path | None]:
    """The probe file and the run document of a capture folder, or of a probe file (its
    folder's ``run.json`` when there is one)."""
    path = Path(source)
    if path.is_dir():
        probe = path / "probe.jsonl"
        if not probe.is_file():
            raise CaptureError(f"{path}: not a capture folder (no probe.jsonl)")
        return probe, path / "run.json" if (path / "run.json").is_file() else None
    run = path.parent / "run.json"
    return path, run if run.is_file() else None


def read(source: str | os.PathLike[str]) -> Probe:
    """Read a capture folder, or a probe file.

    Raises:
        CaptureError: the probe file is missing or malformed, or the run.json beside it
            is not a capture's (:func:`traceview.capture.rundoc.read`).
    """
    path, run_path = _paths(source)
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read: {exc.strerror}") from None
    events: dict[str, int] = {}
    per: dict[int, dict[int, int]] = {}
    requests: list[ItlRequest] = []
    snapshots: list[Snapshot] = []
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
            t_ns = _probe_int(row, "t_ns", where)
            assert t_ns is not None
            events[event] = t_ns
        elif "victim" in row:
            t_ns = _probe_int(row, "t_ns", where)
            victim, token = _probe_int(row, "victim", where), _probe_int(row, "token", where)
            assert t_ns is not None and victim is not None and token is not None
            tokens = per.setdefault(victim, {})
            if token in tokens:
                raise CaptureError(f"{where}: victim {victim}'s token {token} is given twice")
            tokens[token] = t_ns
        elif "request" in row:
            requests.append(_request(row, where))
        elif "metrics" in row:
            values = row.get("values")
            if not isinstance(values, dict):
                raise CaptureError(f"{where}: a metrics snapshot without its values")
            snapshots.append({"label": str(row["metrics"]), "values": _values(values, where)})
    if "inject_start" not in events or "inject_end" not in events:
        raise CaptureError(f"{path}: not a probe file (no injection window)")
    lo, hi = events["inject_start"], events["inject_end"]
    if hi < lo:
        raise CaptureError(f"{path}: the injection ends ({hi} ns) before it starts ({lo} ns)")
    run = read_run(run_path) if run_path is not None else None
    return Probe(path, (lo, hi), per, requests, snapshots, run)


def _request(row: dict[str, Any], where: str) -> ItlRequest:
    role = next((r for r in ROLES if r == row.get("role")), None)
    if role is None:
        said = row.get("role")
        raise CaptureError(f"{where}: 'role' must be one of {', '.join(ROLES)} (it is {said!r})")
    sent = _probe_int(row, "sent_ns", where)
    first = _probe_int(row, "first_token_ns", where, null=True)
    index, prompt = _probe_int(row, "index", where), _probe_int(row, "prompt_tokens", where)
    tokens, chunks = _probe_int(row, "tokens", where), _probe_int(row, "chunks", where)
    assert sent is not None and index is not None and prompt is not None
    assert tokens is not None and chunks is not None
    if first is not None and first < sent:
        raise CaptureError(
            f"{where}: the first token ({first} ns) came before the request was sent "
            f"({sent} ns): time runs backwards"
        )
    return {
        "role": role,
        "index": index,
        "prompt_tokens": prompt,
        "ttft_ns": None if first is None else first - sent,
        "tokens": tokens,
        "chunks": chunks,
    }


def _values(values: dict[str, Any], where: str) -> EngineCounts:
    out = engine_metrics.counts()
    for key in engine_metrics.QUANTITIES:
        v = values.get(key)
        if v is not None and (
            isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
        ):
            raise CaptureError(f"{where}: metrics value '{key}' must be a number (it is {v!r})")
        out[key] = v
    return out


def gaps(probe: Probe) -> tuple[np.ndarray, np.ndarray]:
    """Every victim's inter-token gaps: the later token's arrival (ns, the probe's clock)
    and the gap (ns), in arrival order. A gap is the time between a victim's consecutive
    tokens; its first token waited for its prompt and is not a gap. The tokens of one
    multi-token chunk arrive together: a chunk of k tokens adds its wait and k − 1 gaps
    of 0.

    Raises:
        CaptureError: a victim's tokens arrive out of order (time runs backwards).
    """
    at: list[int] = []
    gap: list[int] = []
    for victim, tokens in probe.tokens.items():
        order = sorted(tokens)
        for prev, cur in zip(order, order[1:], strict=False):
            g = tokens[cur] - tokens[prev]
            if g < 0:
                raise CaptureError(
                    f"{probe.path}: victim {victim}'s token {cur} arrived at {tokens[cur]} "
                    f"ns, before its token {prev} ({tokens[prev]} ns): time runs backwards"
                )
            at.append(tokens[cur])
            gap.append(g)
    at_a, gap_a = np.asarray(at, dtype=np.int64), np.asarray(gap, dtype=np.int64)
    order_a = np.argsort(at_a, kind="stable")
    return at_a[order_a], gap_a[order_a]


def offset(probe: Probe) -> ItlClock | None:
    """The clock entry of the capture's first trace (``run.json``'s ``clock.traces``):
    ``offset_ns`` puts the probe's times on the trace's clock; None without one."""
    if probe.run is None or not probe.run.entries:
        return None
    return probe.run.entries[0].document()


def window_on_trace(probe: Probe, entry: ItlClock | None) -> list[int] | None:
    """The injection window on the trace's clock (ns), ``[start, end]``; None without an
    offset."""
    if entry is None or entry["offset_ns"] is None:
        return None
    lo, hi = probe.window
    return [lo + entry["offset_ns"], hi + entry["offset_ns"]]


def _metrics(probe: Probe) -> ItlMetrics | None:
    """The engine's counters: the before and after snapshots, each counter's increase
    over every snapshot between them (:func:`~traceview.capture.engine_metrics.increase`)
    and its resets, the largest running and waiting seen, how many snapshots there were,
    and the capture's notes on its reads."""
    notes = [] if probe.run is None else list(probe.run.metrics_notes)
    before = next((s["values"] for s in probe.snapshots if s["label"] == "before"), None)
    after = next((s["values"] for s in reversed(probe.snapshots) if s["label"] == "after"), None)
    if before is None or after is None:
        return {"notes": notes} if notes else None
    during = [s["values"] for s in probe.snapshots if s["label"] == "during"]
    delta, resets = engine_metrics.increase([before, *during, after])
    for key, count in resets.items():
        if count:
            notes.append(
                f"the engine's {key} counter went down {count} time(s) between snapshots "
                "(a restart?): its delta sums the rises, as Prometheus's increase() does"
            )

    def largest(key: Literal["running", "waiting"]) -> Count | None:
        seen = [v for s in probe.snapshots if (v := s["values"][key]) is not None]
        return max(seen) if seen else None

    return {
        "engine": None if probe.run is None else probe.run.engine,
        "snapshots": len(probe.snapshots),
        "before": before,
        "after": after,
        "delta": delta,
        "resets": resets,
        "running_max": largest("running"),
        "waiting_max": largest("waiting"),
        "notes": notes,
    }


def itl(source: str | os.PathLike[str]) -> ItlDocument:
    """The ``traceview.itl/1`` document of a capture folder or probe file.

    ``all`` and ``injection``: the victims' inter-token gaps (:func:`gaps`), over every
    token and over the gaps whose later token arrived inside the injection window.
    ``ttft``: per population (``victims``, ``injected``), the time from a request's send to
    its first token. ``requests``: each request's role, prompt tokens, TTFT, tokens and
    chunks. ``metrics``: the engine's counters (:mod:`~traceview.capture.engine_metrics`)
    and ``prefill_check``, its prompt tokens against those sent. ``window_on_trace_ns``:
    the injection window on the trace's clock. Each percentile comes with its n; a figure
    the capture cannot give is None.

    Raises:
        CaptureError: the probe file is missing or malformed.
    """
    probe = read(source)
    at, gap = gaps(probe)
    lo, hi = probe.window
    inside = gap[(at >= lo) & (at <= hi)]

    def ttft(role: Role) -> TtftStats:
        rows = [r for r in probe.requests if r["role"] == role]
        times = [t for r in rows if (t := r["ttft_ns"]) is not None]
        p = percentiles(np.asarray(times, dtype=np.int64))
        return {
            "n": p["n"],
            "p50_ns": p["p50_ns"],
            "p90_ns": p["p90_ns"],
            "p99_ns": p["p99_ns"],
            "max_ns": p["max_ns"],
            "requests": len(rows),
            "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
        }

    ttfts: Ttft = {"victims": ttft("victim"), "injected": ttft("injected")}
    metrics = _metrics(probe)
    check: PrefillCheck | None = None
    if metrics is not None and "delta" in metrics and "resets" in metrics and probe.requests:
        sent = sum(r["prompt_tokens"] for r in probe.requests)
        check = engine_metrics.prefill_check(
            sent,
            metrics["delta"]["prompt_tokens"],
            engine=metrics.get("engine"),
            preemptions=metrics["delta"]["preemptions"],
            resets=metrics["resets"]["prompt_tokens"],
        )
    entry = offset(probe)
    tokens = sum(len(t) for t in probe.tokens.values())
    chunks = sum(r["chunks"] for r in probe.requests if r["role"] == "victim")
    return {
        "schema": ITL_SCHEMA,
        "probe": str(probe.path),
        "victims": len(probe.tokens),
        "window_ns": hi - lo,
        "all": percentiles(gap),
        "injection": percentiles(inside),
        "tokens": {"victims": tokens, "chunks": chunks if probe.requests else None},
        "ttft": ttfts,
        "requests": probe.requests,
        "metrics": metrics,
        "prefill_check": check,
        "profiled": None if probe.run is None else probe.run.profiled,
        "clock": entry,
        "window_on_trace_ns": window_on_trace(probe, entry),
        "notes": [] if probe.run is None else [*probe.run.notes, *probe.run.errors],
    }


# --- the probe on the trace's clock ---------------------------------------------------------


@dataclass(frozen=True)
class OnTrace:
    """A capture's client view on one trace's clock (ns, as the trace's ``ts_ns``): the
    injection window (None where it misses the trace), each victim gap's later token
    (``at_ns``) with the gap (``gap_ns``), how the offset was found (``method``,
    ``uncertainty_ns``: None when nothing bounds it), and ``notes``, one sentence each,
    on what the chart cannot show as it is."""

    window_ns: tuple[int, int] | None
    at_ns: np.ndarray
    gap_ns: np.ndarray
    method: str
    uncertainty_ns: int | None
    notes: tuple[str, ...] = ()


def on_trace(source: str | os.PathLike[str], trace: Trace) -> OnTrace:
    """Lay a capture (folder or probe file) on ``trace``'s clock, by the offset its
    ``run.json`` holds for that trace: the entry whose fingerprint (base time, profiler
    span, events: :func:`~traceview.capture.clock.fingerprint`) is the trace's. A window
    that misses the trace's activity is not drawn (the gaps neither), and a note says so.

    Raises:
        CaptureError: the capture holds no clock (a bare probe file, or an unprofiled
            capture), did not record this trace, or found no offset for it (and why).
    """
    from traceview.capture.clock import activity_extent, fingerprint

    probe = read(source)
    run = probe.run
    name = Path(trace.meta.path or "").name
    if run is None:
        raise CaptureError(
            f"{probe.path}: no run.json beside it: a bare probe file holds no clock to lay "
            "on a trace"
        )
    if not run.profiled:
        raise CaptureError(
            f"{run.path}: an unprofiled capture (--no-profile) recorded no trace: its "
            "injection window has no place on one"
        )
    found = fingerprint(trace)
    entry = next((e for e in run.entries if e.matches(found)), None)
    if entry is None:
        listed = ", ".join(run.traces) or "no trace"
        raise CaptureError(
            f"{name}: not a trace this capture recorded ({run.path} lists {listed}, none "
            "with this trace's base time, profiler span and events): its injection window "
            "cannot be placed on it"
        )
    if entry.offset_ns is None or entry.method is None:
        raise CaptureError(
            f"{name}: the capture found no clock offset for it ({entry.why}): its injection "
            "window cannot be placed on it"
        )
    notes = []
    if entry.uncertainty_ns is None:
        notes.append(
            f"the injection window is placed by the wall clock, unchecked ({entry.why}): "
            "nothing bounds its error"
        )
    off = entry.offset_ns
    at, gap = gaps(probe)
    lo, hi = probe.window
    window: tuple[int, int] | None = (lo + off, hi + off)
    extent = activity_extent(trace)
    if extent is not None and window is not None:
        before, after = extent[0] - window[0], window[1] - extent[1]
        if window[1] < extent[0] or window[0] > extent[1]:
            side = (
                "before the trace's first event"
                if window[1] < extent[0]
                else ("after the trace's last event")
            )
            notes.append(
                f"the injection window lies wholly {side} ({fmt_gap(max(before, -after))}): "
                "it and the victims' gaps are not drawn"
            )
            window, at, gap = None, at[:0], gap[:0]
        elif before > 0 or after > 0:
            notes.append(
                "the injection window runs "
                + " and ".join(
                    text
                    for text, cut in (
                        (f"{fmt_gap(before)} before the trace's first event", before),
                        (f"{fmt_gap(after)} past its last", after),
                    )
                    if cut > 0
                )
            )
    return OnTrace(window, at + off, gap, entry.method, entry.uncertainty_ns, tuple(notes))


def fmt_gap(ns: int) -> str:
    """A duration in a note: ms below a second, else s."""
    return f"{ns / 1e6:,.1f} ms" if abs(ns) < 10**9 else f"{ns / 1e9:,.2f} s"


# --- two captures side by side -------------------------------------------------------------

RATES = ("p50_ns", "p90_ns", "p99_ns")  # the percentiles a comparison judges (no maximum)


def supports(quantile: str, n: int | None) -> bool:
    """Whether ``n`` samples support a verdict on ``quantile`` (``p90_ns``): the rule
    ``diff`` and ``check`` judge by (:func:`traceview.analysis.base.stats.samples_for`:
    below 1 / (1 − q) samples the percentile is the largest sample, or nearly)."""
    from traceview.analysis.base.stats import samples_for

    if quantile not in RATES or n is None:
        return False
    return n >= samples_for(int(quantile[1:3]) / 100)


_Quantile = Literal["p50_ns", "p90_ns", "p99_ns", "max_ns"]
_QS: tuple[_Quantile, ...] = ("p50_ns", "p90_ns", "p99_ns", "max_ns")
_FigureRole = Literal["rate", "shown", "workload"]
# (section, metric, field, value, n, unit, role)
_Figure = tuple[str, str, str, Count | None, int | None, str, _FigureRole]


def _figures(doc: ItlDocument) -> list[_Figure]:
    """(section, metric, field, value, n, unit, role) of each figure :func:`compare`
    shows: the latency percentiles are rates; the maxima, the counts and the engine's
    counters are shown, never judged."""
    out: list[_Figure] = []
    for pop, label, s in (
        ("all", "all tokens", doc["all"]),
        ("injection", "injection window", doc["injection"]),
    ):
        for q in _QS:
            role: _FigureRole = "rate" if q in RATES else "shown"
            out.append(("ITL", f"{label} {q[:-3]}", f"{pop}.{q}", s[q], s["n"], "ns", role))
    for pop, t in (("victims", doc["ttft"]["victims"]), ("injected", doc["ttft"]["injected"])):
        for q in _QS:
            role = "rate" if q in RATES else "shown"
            out.append(("TTFT", f"{pop} {q[:-3]}", f"ttft.{pop}.{q}", t[q], t["n"], "ns", role))
    out.append(
        (
            "work",
            "victim tokens",
            "tokens.victims",
            doc["tokens"]["victims"],
            None,
            "count",
            "workload",
        )
    )
    out.append(("work", "injection window", "window_ns", doc["window_ns"], None, "ns", "workload"))
    metrics = doc["metrics"]
    delta = None if metrics is None else metrics.get("delta")
    for key in engine_metrics.COUNTERS:
        out.append(
            (
                "engine",
                f"{key} (delta)",
                f"metrics.delta.{key}",
                None if delta is None else delta[key],
                None,
                "count",
                "workload",
            )
        )
    check = doc["prefill_check"]
    out.append(
        (
            "engine",
            "excess prompt tokens",
            "prefill_check.excess_tokens",
            None if check is None else check["excess_tokens"],
            None,
            "count",
            "workload",
        )
    )
    return out


def compare(a: ItlDocument, b: ItlDocument) -> ItlDiffDocument:
    """Two ``traceview.itl/1`` documents side by side (A the baseline, ratios B/A), as
    ``diff`` compares traces: a latency percentile gets a verdict (same within ±5%,
    better, worse) only where both populations support it (:func:`supports`; else
    ``too few``); maxima, counts and the engine's counters are shown, never judged."""
    from traceview.analysis.documents.verdicts import Metric, judgement, ratio_of

    rows: list[ItlDiffRow] = []
    for fa, fb in zip(_figures(a), _figures(b), strict=True):
        section, metric, path, va, na, unit, role = fa
        vb, nb = fb[3], fb[4]
        ratio = ratio_of(va, vb)
        verdict = None
        if role == "rate":
            quantile = path.rsplit(".", 1)[1]
            if supports(quantile, na) and supports(quantile, nb):
                verdict, _ = judgement(  # the rule diff judges a trace's figures by
                    Metric(section, metric, va, "lower", unit, na),
                    Metric(section, metric, vb, "lower", unit, nb),
                )
            else:
                verdict = "too few"
        rows.append(
            {
                "section": section,
                "metric": metric,
                "field": path,
                "a": va,
                "b": vb,
                "n_a": na,
                "n_b": nb,
                "ratio": None if ratio is None or not math.isfinite(ratio) else ratio,
                "verdict": verdict,
                "unit": unit,
                "role": role,
            }
        )
    return {"schema": ITL_DIFF_SCHEMA, "a": a["probe"], "b": b["probe"], "rows": rows}
