"""The client's view of a capture on the terminal: ``traceview itl`` for one capture, and
for two side by side (their ``traceview.itl/1`` and ``traceview.itl-diff/1`` documents)."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from traceview.analysis.base.capture_document import (
    ItlClock,
    ItlDiffDocument,
    ItlDocument,
    PrefillCheck,
)
from traceview.render.format import fmt_count, fmt_ns, fmt_ratio, fmt_value, quantile_cells
from traceview.render.safe import line
from traceview.render.stdout import Stdout
from traceview.render.table import Table


def render_itl(rows: list[tuple[str, ItlDocument]], console: Console | None = None) -> None:
    """A capture's client view: the victims' inter-token latency per population, time to
    first token per population (each percentile with its n), the engine's counters over
    the workload with the re-prefill check and what it cannot see, and the injection
    window on the trace's clock, with the bound on its error (or why there is none)."""
    out = console or Stdout(highlight=False)
    table = Table(title="victims' inter-token latency", title_justify="left")
    for col in ("run", "population", "n", "p50", "p90", "p99", "max"):
        table.add_column(col, justify="left" if col in ("run", "population") else "right")
    for label, doc in rows:
        for title, s in (("all tokens", doc["all"]), ("injection window", doc["injection"])):
            table.add_row(label, title, f"{s['n']:,}", *quantile_cells(s))
    out.print(table)
    ttft = Table(title="time to first token (send to first token)", title_justify="left")
    for col in ("run", "population", "n", "prompt tokens (sum)", "p50", "p90", "p99", "max"):
        ttft.add_column(col, justify="left" if col in ("run", "population") else "right")
    for label, doc in rows:
        for pop, t in (("victims", doc["ttft"]["victims"]), ("injected", doc["ttft"]["injected"])):
            ttft.add_row(label, pop, f"{t['n']:,}", f"{t['prompt_tokens']:,}", *quantile_cells(t))
    out.print(ttft)
    engine = Table(
        title="the engine's /metrics over the workload (after − before)", title_justify="left"
    )
    cols = ("run", "prompt tokens", "sent", "check", "generation", "preemptions", "running max")
    for col in (*cols, "waiting max"):
        engine.add_column(col, justify="left" if col in ("run", "check") else "right")
    notes = []
    for label, doc in rows:
        where = f"{label or doc['probe']}: "
        m, check = doc["metrics"], doc["prefill_check"]
        read = [] if m is None else m["notes"]
        notes += [where + n for n in read]
        if m is None or "delta" not in m:
            if not read:
                notes.append(where + "no /metrics snapshots in this capture")
            continue
        d = m["delta"]
        engine.add_row(
            label,
            fmt_count(d["prompt_tokens"]),
            fmt_count(None if check is None else check["sent_prompt_tokens"]),
            _check(check),
            fmt_count(d["generation_tokens"]),
            fmt_count(d["preemptions"]),
            fmt_count(m.get("running_max")),
            fmt_count(m.get("waiting_max")),
        )
        notes += [f"{where}* {c}" for c in ([] if check is None else check["caveats"])]
    if engine.row_count:
        out.print(engine)
    for note in notes:
        out.print(Text(line(note)))
    for label, doc in rows:
        where = f"{label}: " if label else ""
        for note in doc["notes"]:
            out.print(Text(line(f"{where}{note}")))
        said = _window_said(doc)
        if said is not None:
            out.print(Text(line(where + said)))


def _window_said(doc: ItlDocument) -> str | None:
    """The injection window on the trace's clock in one line: where it lies, by which
    method and within what bound; or why it has no place (None where a note of the
    capture says so already)."""
    w, clock = doc["window_on_trace_ns"], doc["clock"]
    if doc["profiled"] is False:
        return "unprofiled (the control): no trace, no trace clock"
    if clock is None:
        return None
    if w is None:
        if any(clock["why"] and clock["why"] in note for note in doc["notes"]):
            return None  # the capture's note says it
        return f"injection window on the trace's clock ({clock['trace']}): none ({clock['why']})"
    bound = (
        "unchecked: nothing bounds its error"
        if clock["uncertainty_ns"] is None
        else f"± {fmt_ns(clock['uncertainty_ns'])}"
    )
    said = (
        f"injection window on the trace's clock ({clock['trace']}): "
        f"{_since(w[0], clock)}–{_since(w[1], clock)} ns by the {clock['method']} ({bound})"
    )
    return said + (f"; {clock['why']}" if clock["why"] and clock["uncertainty_ns"] else "")


def _since(t_ns: int, clock: ItlClock) -> str:
    """A time on the trace's clock, and after the profiler's start where the trace has
    one."""
    start = clock["profiler_start_ns"]
    return f"{t_ns:,}" if start is None else f"{t_ns:,} (+{fmt_ns(t_ns - start)})"


def _check(check: PrefillCheck | None) -> str:
    """The re-prefill check in a cell: the verdict and, when the counts differ, by how
    much (the engine's prompt tokens over those sent); ``*`` when a caveat follows."""
    if check is None or check["verdict"] is None:
        return "—"
    star = "*" if check["caveats"] else ""
    if check["verdict"] == "match":
        return "match" + star
    ratio = "" if check["ratio"] is None else f", {check['ratio']:.2f}×"
    return f"{check['verdict']}{star} ({check['excess_tokens']:+,}{ratio})"


def render_itl_diff(doc: ItlDiffDocument, console: Console | None = None) -> None:
    """Two captures side by side: each figure with its n, A, B, B/A and the verdict (a
    latency percentile only, where both populations support it)."""
    out = console or Stdout(highlight=False)
    table = Table(title=Text(f"A = {line(doc['a'])}\nB = {line(doc['b'])}"), title_justify="left")
    for col in ("section", "figure", "A", "B", "B/A", "verdict"):
        table.add_column(col, justify="right" if col in ("A", "B", "B/A") else "left")
    for r in doc["rows"]:
        na, nb = r["n_a"], r["n_b"]
        n = "" if na is None else (f" (n={na})" if na == nb else f" (n {na} → {nb})")
        table.add_row(
            r["section"],
            r["metric"] + n,
            fmt_value(r["a"], r["unit"]),
            fmt_value(r["b"], r["unit"]),
            fmt_ratio(r["ratio"]),
            r["verdict"] or "",
        )
    out.print(table)
