"""Terminal rendering with rich (stdout)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def fmt_ns(ns: int | float | None) -> str:
    """A duration in ns as a human unit (ns, µs, ms, s)."""
    if ns is None:
        return "—"
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.3f} µs"
    return f"{ns:.0f} ns"


def render_info(doc: dict[str, Any], console: Console | None = None) -> None:
    out = console or Console(highlight=False)
    facts = Table(show_header=False, box=None, title="trace", title_justify="left")
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("path", str(doc["path"]))
    facts.add_row("format", f"{doc['format']} (schemaVersion {doc['schema_version']})")
    facts.add_row("GPU", str(doc["gpu"] or "—"))
    facts.add_row("events", f"{doc['events']:,} ({doc['skipped_events']:,} skipped)")
    kinds = ", ".join(f"{k} {v:,}" for k, v in doc["kernels_by_kind"].items())
    facts.add_row("device activity", f"{doc['kernels']:,}" + (f" ({kinds})" if kinds else ""))
    facts.add_row("span", fmt_ns(doc["span_ns"]))
    facts.add_row("flows / counters", f"{doc['flows']:,} / {doc['counters']:,}")
    out.print(facts)

    if doc["devices"]:
        dev = Table(title="devices", title_justify="left")
        for col in ("device", "kernels", "kernel time", "streams"):
            dev.add_column(col, justify="right" if col != "streams" else "left")
        for d in doc["devices"]:
            dev.add_row(
                str(d["device"]),
                f"{d['kernels']:,}",
                fmt_ns(d["kernel_time_ns"]),
                ", ".join(map(str, d["streams"])),
            )
        out.print(dev)

    cats = Table(title="events by category", title_justify="left")
    cats.add_column("frame")
    cats.add_column("category")
    cats.add_column("events", justify="right")
    for row in doc["categories"]:
        cats.add_row(row["frame"], row["cat"] or "—", f"{row['count']:,}")
    out.print(cats)
