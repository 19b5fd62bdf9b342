"""A capture's ``run.json``, read and checked in one place: :func:`read` returns a
:class:`CaptureRun` whose every field has its type, or raises one error naming the file
and the key. ``itl``, ``heartbeat --probe`` and ``report`` all read a capture through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from traceview.analysis.base.capture_document import CAPTURE_SCHEMA, Fingerprint, ItlClock
from traceview.errors import CaptureError

CAPTURE_SCHEMAS = (CAPTURE_SCHEMA, "traceview.run/1")  # the second: one release more
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class ClockEntry:
    """One trace's clock, as the capture found it (:func:`traceview.capture.clock.
    trace_offset`), with the trace's :func:`~traceview.capture.clock.fingerprint`."""

    trace: str
    offset_ns: int | None
    method: str | None
    uncertainty_ns: int | None
    evidence: str | None
    why: str | None
    base_time_ns: int | None
    profiler_start_ns: int | None
    profiler_end_ns: int | None
    events: int | None  # None: not recorded

    def matches(self, fingerprint: Fingerprint) -> bool:
        """Whether ``fingerprint`` (a loaded trace's) is this entry's trace: the same base
        time and profiler span, and the same number of events where that was recorded."""
        same = (
            self.base_time_ns == fingerprint["base_time_ns"]
            and self.profiler_start_ns == fingerprint["profiler_start_ns"]
            and self.profiler_end_ns == fingerprint["profiler_end_ns"]
        )
        return same and (self.events is None or self.events == fingerprint["events"])

    def document(self) -> ItlClock:
        """This entry as the ``itl`` document's ``clock``."""
        return {
            "trace": self.trace,
            "offset_ns": self.offset_ns,
            "method": self.method,
            "uncertainty_ns": self.uncertainty_ns,
            "evidence": self.evidence,
            "why": self.why,
            "base_time_ns": self.base_time_ns,
            "profiler_start_ns": self.profiler_start_ns,
            "profiler_end_ns": self.profiler_end_ns,
            "events": self.events,
        }


@dataclass(frozen=True)
class CaptureRun:
    """What ``run.json`` says of its capture: whether it was profiled, its traces (file
    names in the capture folder), each trace's clock, and the notes and errors the capture
    recorded."""

    path: Path
    schema: str
    engine: str | None
    profiled: bool
    traces: tuple[str, ...]
    entries: tuple[ClockEntry, ...]
    metrics_notes: tuple[str, ...]
    notes: tuple[str, ...]
    errors: tuple[str, ...]


class _Doc:
    """Typed reads of one JSON document, each error naming the file and the key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, want: str, value: Any, *, missing: bool = False) -> CaptureError:
        shown = "missing" if missing else f"{type(value).__name__} {value!r}"[:80]
        return CaptureError(f"{self.path}: '{key}' must be {want} (it is {shown})")

    def whole(
        self, obj: dict[str, Any], field: str, key: str, *, minimum: int | None = None
    ) -> int | None:
        """``obj[field]``: a whole number in Int64's range (at least ``minimum``), or None
        (null or absent)."""
        value = obj.get(field)
        if value is None:
            return None
        low = _INT64[0] if minimum is None else minimum
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _INT64[1]:
            bound = "a whole number" if minimum is None else f"a whole number ≥ {minimum}"
            raise self.fail(key, f"{bound} or null", value)
        return value

    def text(self, obj: dict[str, Any], field: str, key: str) -> str | None:
        value = obj.get(field)
        if value is not None and not isinstance(value, str):
            raise self.fail(key, "a string or null", value)
        return value

    def mapping(self, obj: dict[str, Any], field: str, key: str) -> dict[str, Any]:
        """``obj[field]``: an object ({} when null or absent)."""
        value = obj.get(field)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, "an object or null", value)
        return value

    def items(self, obj: dict[str, Any], field: str, key: str) -> list[Any]:
        """``obj[field]``: a list ([] when null or absent)."""
        value = obj.get(field)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(key, "a list or null", value)
        return value

    def texts(self, obj: dict[str, Any], field: str, key: str) -> tuple[str, ...]:
        values = self.items(obj, field, key)
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise self.fail(f"{key}[{i}]", "a string", v)
        return tuple(values)


def _file_name(doc: _Doc, value: Any, key: str) -> str:
    """A trace's name: a file of the capture folder, never a path that leaves it."""
    if (
        not isinstance(value, str)
        or value in ("", ".", "..")
        or "/" in value
        or "\\" in value
        or "\x00" in value
    ):
        raise doc.fail(key, "a file name in the capture folder", value)
    return value


def _entry(doc: _Doc, raw: Any, key: str) -> ClockEntry:
    if not isinstance(raw, dict):
        raise doc.fail(key, "an object", raw)
    if "trace" not in raw:
        raise doc.fail(f"{key}.trace", "a file name", None, missing=True)
    offset = doc.whole(raw, "offset_ns", f"{key}.offset_ns")
    method = doc.text(raw, "method", f"{key}.method")
    if offset is not None and method is None:
        raise doc.fail(f"{key}.method", "a string beside an offset", raw.get("method"))
    why = doc.text(raw, "why", f"{key}.why") or doc.text(raw, "error", f"{key}.error")
    return ClockEntry(
        trace=_file_name(doc, raw["trace"], f"{key}.trace"),
        offset_ns=offset,
        method=method,
        uncertainty_ns=doc.whole(raw, "uncertainty_ns", f"{key}.uncertainty_ns", minimum=0),
        evidence=doc.text(raw, "evidence", f"{key}.evidence"),
        why=why,
        base_time_ns=doc.whole(raw, "base_time_ns", f"{key}.base_time_ns"),
        profiler_start_ns=doc.whole(raw, "profiler_start_ns", f"{key}.profiler_start_ns"),
        profiler_end_ns=doc.whole(raw, "profiler_end_ns", f"{key}.profiler_end_ns"),
        events=doc.whole(raw, "events", f"{key}.events", minimum=0),
    )


def read(path: Path) -> CaptureRun:
    """Read and check a capture's ``run.json``.

    Raises:
        CaptureError: it cannot be read, is not JSON, is not a capture's run document
            (a rank run's ``traceview.run/1`` included), or a key has the wrong type (a
            time that is not a whole number, a trace named by a path, ...).
    """
    try:
        raw = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise CaptureError(f"{path}: not JSON ({exc})") from None
    if not isinstance(raw, dict) or raw.get("schema") not in CAPTURE_SCHEMAS:
        schema = raw.get("schema") if isinstance(raw, dict) else None
        raise CaptureError(
            f"{path}: not a capture's run.json (schema {schema!r}, expected {CAPTURE_SCHEMAS[0]!r})"
        )
    if "config" not in raw:  # traceview.run/1 is also the rank run's document
        raise CaptureError(f"{path}: a run of rank traces, not a capture's run.json")
    doc = _Doc(path)
    config = doc.mapping(raw, "config", "config")
    metrics = doc.mapping(raw, "metrics", "metrics")
    profiled = raw.get("profiled", True)
    if not isinstance(profiled, bool):
        raise doc.fail("profiled", "true or false", profiled)
    clock = doc.mapping(raw, "clock", "clock")
    doc.whole(clock, "wall_minus_monotonic_ns", "clock.wall_minus_monotonic_ns")
    doc.whole(clock, "read_width_ns", "clock.read_width_ns", minimum=0)
    for call in ("profile_start", "profile_stop"):
        times = doc.mapping(clock, call, f"clock.{call}")
        for side in ("sent_ns", "answered_ns"):
            doc.whole(times, side, f"clock.{call}.{side}")
    entries = tuple(
        _entry(doc, e, f"clock.traces[{i}]")
        for i, e in enumerate(doc.items(clock, "traces", "clock.traces"))
    )
    traces = tuple(
        _file_name(doc, t, f"traces[{i}]") for i, t in enumerate(doc.items(raw, "traces", "traces"))
    )
    legacy = doc.text(metrics, "note", "metrics.note")
    return CaptureRun(
        path=path,
        schema=str(raw["schema"]),
        engine=doc.text(metrics, "engine", "metrics.engine")
        or doc.text(config, "engine", "config.engine"),
        profiled=profiled,
        traces=traces,
        entries=entries,
        metrics_notes=doc.texts(metrics, "notes", "metrics.notes") + ((legacy,) if legacy else ()),
        notes=doc.texts(raw, "notes", "notes"),
        errors=doc.texts(raw, "errors", "errors"),
    )
