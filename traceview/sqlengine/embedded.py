"""The embedded PerfettoSQL engine: an in-memory SQLite database with Perfetto's tables.

It mirrors how Perfetto's trace processor imports a Kineto JSON trace (see
../shared/PERFETTO_SCHEMA.md in the project, docs/sql.md for users):

- ``process`` (upid, pid, name) and ``thread`` (utid, tid, name, upid) from pid/tid, with
  Perfetto's placeholders upid 0 / utid 0; a GPU device 0 is a *new* process, as there.
- ``thread_track`` / ``track``: one per (pid, tid), type ``thread_execution``.
- ``slice``: every complete and instant event (ts, dur in ns, category, name, track_id,
  depth and parent_id from nesting on the track, arg_set_id), ``cat``/``slice_id`` aliases.
- ``args``: ``args.``-prefixed keys (``args.stream``, ``args.grid[0]`` with flat_key
  ``args.grid``), int/real/string values; ``EXTRACT_ARG(arg_set_id, key)``.
- ``flow`` (slice_out = the slice enclosing the ``s`` event on its thread, slice_in = the
  slice enclosing the ``f`` event), ``counter`` / ``counter_track`` /
  ``process_counter_track`` (``"<name> <key>"``).

Events on one thread that overlap without nesting spill to overflow tracks of the thread,
as in Perfetto (see :func:`traceview.sqlengine.nesting.nesting`). Known difference: string
pids/tids are NULL (Perfetto makes up ids); docs/sql.md lists the rest.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import numpy as np
import orjson
import polars as pl

from traceview.model import Trace
from traceview.sqlengine.nesting import nesting as _nesting

KEPT_ARGS = {
    "args.device": "device",
    "args.stream": "stream",
    "args.correlation": "correlation",
    "args.External id": "external_id",
}

SCHEMA = """
CREATE TABLE process (upid INTEGER PRIMARY KEY, id INTEGER, pid INTEGER, name TEXT,
  start_ts INTEGER, end_ts INTEGER, parent_upid INTEGER, uid INTEGER, android_appid INTEGER,
  android_user_id INTEGER, cmdline TEXT, arg_set_id INTEGER, machine_id INTEGER);
CREATE TABLE thread (utid INTEGER PRIMARY KEY, id INTEGER, tid INTEGER, name TEXT,
  start_ts INTEGER, end_ts INTEGER, upid INTEGER, is_main_thread INTEGER, is_idle INTEGER,
  machine_id INTEGER, arg_set_id INTEGER);
CREATE TABLE thread_track (id INTEGER PRIMARY KEY, name TEXT, type TEXT, parent_id INTEGER,
  source_arg_set_id INTEGER, machine_id INTEGER, utid INTEGER);
CREATE TABLE track (id INTEGER PRIMARY KEY, name TEXT, type TEXT,
  dimension_arg_set_id INTEGER, parent_id INTEGER, source_arg_set_id INTEGER,
  machine_id INTEGER, track_group_id INTEGER);
CREATE TABLE _slice (id INTEGER PRIMARY KEY, ts INTEGER, dur INTEGER, track_id INTEGER,
  category TEXT, name TEXT, depth INTEGER, parent_id INTEGER, arg_set_id INTEGER,
  thread_ts INTEGER, thread_dur INTEGER, thread_instruction_count INTEGER,
  thread_instruction_delta INTEGER);
CREATE VIEW slice AS SELECT *, category AS cat, id AS slice_id FROM _slice;
CREATE TABLE flow (id INTEGER PRIMARY KEY, slice_out INTEGER, slice_in INTEGER,
  trace_id INTEGER, arg_set_id INTEGER);
CREATE TABLE counter_track (id INTEGER PRIMARY KEY, name TEXT, parent_id INTEGER, type TEXT,
  dimension_arg_set_id INTEGER, source_arg_set_id INTEGER, machine_id INTEGER, unit TEXT,
  description TEXT);
CREATE TABLE process_counter_track (id INTEGER PRIMARY KEY, name TEXT, type TEXT,
  parent_id INTEGER, source_arg_set_id INTEGER, machine_id INTEGER, unit TEXT,
  description TEXT, upid INTEGER);
CREATE TABLE counter (id INTEGER PRIMARY KEY, ts INTEGER, track_id INTEGER, value DOUBLE,
  arg_set_id INTEGER);
CREATE TABLE args (id INTEGER PRIMARY KEY, arg_set_id INTEGER, flat_key TEXT, key TEXT,
  int_value INTEGER, string_value TEXT, real_value DOUBLE, value_type TEXT,
  display_value TEXT);
CREATE INDEX args_by_set ON args (arg_set_id);
"""


def flatten_args(
    value: object, key: str = "args", flat: str = "args"
) -> Iterable[tuple[str, str, object]]:
    """Perfetto's flattening: nested keys joined by '.', list items as ``[i]`` in ``key``
    and dropped from ``flat_key``. Yields (flat_key, key, value)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from flatten_args(v, f"{key}.{k}", f"{flat}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from flatten_args(v, f"{key}[{i}]", flat)
    else:
        yield flat, key, value


def _typed(value: Any) -> tuple[int | None, str | None, float | None, str]:
    """(int_value, string_value, real_value, value_type) as Perfetto stores a JSON value."""
    if isinstance(value, bool):
        return int(value), None, None, "bool"
    if isinstance(value, int):
        return value, None, None, "int"
    if isinstance(value, float):
        return None, None, value, "real"
    if value is None:
        return None, None, None, "null"
    return None, str(value), None, "string"


class Database:
    """The in-memory database for one trace (see the module docstring)."""

    def __init__(self, trace: Trace, *, with_args_table: bool = False) -> None:
        self.conn = sqlite3.connect(":memory:", check_same_thread=False)
        self.conn.executescript(SCHEMA)
        self._build(trace)
        self.conn.create_function("EXTRACT_ARG", 2, self._extract_arg, deterministic=True)
        # each (pattern, name) searched once: a trace repeats a few hundred kernel names, and
        # a family rule's search over a long C++ name costs microseconds (200k of them took
        # 1.4 s of kernel_families' 2.6 s on a 22k-kernel trace); held by this database only
        self._matched: dict[tuple[object, object], int | None] = {}
        self.conn.create_function("REGEXP", 2, self._regexp, deterministic=True)
        self.conn.create_aggregate("PERCENTILE", 2, _Percentile)  # type: ignore[arg-type]
        self.conn.create_aggregate("MEDIAN", 1, _Median)  # type: ignore[arg-type]
        if with_args_table:
            self._fill_args()
        self.conn.commit()

    def _regexp(self, pattern: str | None, value: str | None) -> int | None:
        key = (pattern, value)
        found = self._matched.get(key, -1)
        if found != -1:
            return found
        if len(self._matched) >= _MATCHES_KEPT:
            self._matched.clear()
        found = self._matched[key] = _regexp(pattern, value)
        return found

    # - building -

    def _build(self, trace: Trace) -> None:
        trace = trace.with_wide_ids()  # SQLite's integers; the tables below build Int64 ids
        kernels = trace.kernels.select(
            "ts_ns",
            "dur_ns",
            pl.col("name").cast(pl.String),
            pl.col("cat").cast(pl.String),
            "pid",
            "tid",
            "device",
            "stream",
            "correlation",
            "external_id",
            *(["args_json"] if "args_json" in trace.kernels.columns else []),
        )
        events = trace.events.select(
            "ts_ns",
            "dur_ns",
            pl.col("name").cast(pl.String),
            pl.col("cat").cast(pl.String),
            "pid",
            "tid",
            pl.lit(None, pl.Int64).alias("device"),
            pl.lit(None, pl.Int64).alias("stream"),
            "correlation",
            "external_id",
            *(["args_json"] if "args_json" in trace.events.columns else []),
        )
        if "args_json" in kernels.columns and "args_json" not in events.columns:
            events = events.with_columns(pl.lit(None, pl.String).alias("args_json"))
        if "args_json" in events.columns and "args_json" not in kernels.columns:
            kernels = kernels.with_columns(pl.lit(None, pl.String).alias("args_json"))
        slices = pl.concat([kernels, events]).with_row_index("_order")
        slices = (
            slices.sort(["ts_ns", "_order"])
            .drop("_order")
            .with_row_index("id", offset=0)
            .with_columns(pl.col("id").cast(pl.Int64))
        )

        # processes and threads, as trace processor numbers them (placeholders at 0)
        names = trace.metadata
        pnames = dict(
            names.filter(pl.col("name") == "process_name").select("pid", "value").iter_rows()
        )
        tnames = {
            (p, t): v
            for p, t, v in names.filter(pl.col("name") == "thread_name")
            .select("pid", "tid", "value")
            .iter_rows()
        }
        pairs = slices.select("pid", "tid").unique(maintain_order=True)
        flow_pairs = trace.flows.select("pid", "tid").unique(maintain_order=True)
        counter_pids = trace.counters.select("pid").unique(maintain_order=True)
        pids: list[Any] = []
        for p in [
            *pairs["pid"].to_list(),
            *flow_pairs["pid"].to_list(),
            *counter_pids["pid"].to_list(),
        ]:
            if p not in pids:
                pids.append(p)
        upid = {p: i + 1 for i, p in enumerate(pids)}
        self.conn.executemany(
            "INSERT INTO process (upid, id, pid, name) VALUES (?, ?, ?, ?)",
            [(0, 0, 0, None)] + [(u, u, p, pnames.get(p)) for p, u in upid.items()],
        )
        tids: list[tuple[Any, Any]] = []
        for pt in [*pairs.iter_rows(), *flow_pairs.iter_rows()]:
            if pt not in tids:
                tids.append(pt)
        utid = {pt: i + 1 for i, pt in enumerate(tids)}
        self.conn.executemany(
            "INSERT INTO thread (utid, id, tid, name, upid, is_idle) VALUES (?, ?, ?, ?, ?, ?)",
            [(0, 0, 0, None, None, 1)]
            + [(u, u, t, tnames.get((p, t)), upid[p], 0) for (p, t), u in utid.items()],
        )
        self.track_of = {pt: u - 1 for pt, u in utid.items()}  # track ids from 0
        self.conn.executemany(
            "INSERT INTO thread_track (id, name, type, utid) VALUES (?, NULL, "
            "'thread_execution', ?)",
            [(tr, utid[pt]) for pt, tr in self.track_of.items()],
        )
        self.conn.executemany(
            "INSERT INTO track (id, name, type) VALUES (?, NULL, 'thread_execution')",
            [(tr,) for tr in self.track_of.values()],
        )

        self.track_ids = pl.DataFrame(
            [(p, t, tr) for (p, t), tr in self.track_of.items()],
            schema={"pid": pl.Int64, "tid": pl.Int64, "track_id": pl.Int64},
            orient="row",
        )
        slices = slices.join(
            self.track_ids, on=["pid", "tid"], how="left", nulls_equal=True, maintain_order="left"
        )
        slices, spilled = _nesting(slices, next_track=len(self.track_of))
        if spilled:  # Perfetto's overflow tracks: more thread tracks of the same thread
            by_track = {tr: pt for pt, tr in self.track_of.items()}
            self.conn.executemany(
                "INSERT INTO thread_track (id, name, type, utid) VALUES (?, NULL, "
                "'thread_execution', ?)",
                [(tr, utid[by_track[src]]) for tr, src in spilled.items()],
            )
            self.conn.executemany(
                "INSERT INTO track (id, name, type) VALUES (?, NULL, 'thread_execution')",
                [(tr,) for tr in spilled],
            )
        self.slices = slices
        self.conn.executemany(
            "INSERT INTO _slice (id, ts, dur, track_id, category, name, depth, parent_id, "
            "arg_set_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            slices.select(
                "id",
                "ts_ns",
                "dur_ns",
                "track_id",
                "cat",
                "name",
                "depth",
                "parent_id",
                pl.col("id").alias("arg_set_id"),
            ).iter_rows(),
        )
        self._arg_columns = {
            col: slices[col].to_numpy(allow_copy=True) for col in KEPT_ARGS.values()
        }
        self._args_json = slices["args_json"].to_list() if "args_json" in slices.columns else None
        self._build_flows(trace, slices)
        self._build_counters(trace, upid)

    def _build_flows(self, trace: Trace, slices: pl.DataFrame) -> None:
        """Bind flow events to slices as Perfetto's JSON importer does, in timestamp order
        (file order on ties; a flow's ``f`` often comes before its ``s`` in the file):

        - a flow is named by (id, category, name);
        - ``s`` binds to the slice enclosing it on its thread (the deepest open slice); a
          second ``s`` of a flow already started is ignored;
        - ``t`` (a step) adds a flow from the flow's last slice to the one enclosing it;
        - ``f`` with ``"bp": "e"`` adds a flow to the slice enclosing it, other ``f``s to
          the next slice that begins on their thread; the flow stays open, so one ``s`` may
          fan out to several ``f`` (a CUDA graph's kernels share their launch's id);
        - an event with no slice to bind to, or an ``f``/``t`` whose flow never started, is
          dropped (Perfetto counts these in its stats).

        ``flow.trace_id`` numbers the flows (id, category, name) 0, 1, … in the order they
        first appear."""
        # a flow event without an id binds nothing (Perfetto: flow_invalid_id)
        flows = trace.flows.with_row_index("_i").filter(pl.col("id").is_not_null())
        if flows.height == 0:
            return
        ev = (
            flows.join(self.track_ids, on=["pid", "tid"], how="left", nulls_equal=True)
            .sort(["ts_ns", "_i"])
            .with_row_index("_o")  # processing order
        )
        here = _enclosing(slices, ev.select("track_id", "ts_ns"))
        loose = (pl.col("phase") == "f") & ~pl.col("enclosing")  # binds to the next slice
        later = _next_slice(slices, ev.filter(loose).select("_o", "track_id", "ts_ns"))
        ev = (
            ev.with_columns(
                here["slice_id"].alias("here"),
                here["slice_ts"].alias("here_ts"),
                pl.col("cat").cast(pl.String),
                pl.col("name").cast(pl.String),
            )
            .join(later, on="_o", how="left")
            .sort("_o")
        )
        key = ["id", "cat", "name"]
        # trace_id: the flows (id, category, name) numbered by their first appearance
        first_seen = pl.col("_o").min().over(key).rank("dense").cast(pl.Int64)
        ev = ev.with_columns((first_seen - 1).alias("flow"))
        stepped = ev.filter(pl.col("phase") == "t").select("flow").unique()
        plain = ev.join(stepped, on="flow", how="anti") if stepped.height else ev
        # a flow opens at its first s that has a slice to bind to; later s are ignored
        opened = (
            plain.filter((pl.col("phase") == "s") & pl.col("here").is_not_null())
            .group_by("flow")
            .agg(
                pl.col("_o").min().alias("s_o"),
                pl.col("here").sort_by("_o").first().alias("src"),
                pl.col("here_ts").sort_by("_o").first().alias("src_ts"),
            )
        )
        bound = (
            plain.filter(pl.col("phase") == "f")
            .with_columns(
                pl.when(pl.col("enclosing")).then("here").otherwise("later").alias("dst"),
                pl.when(pl.col("enclosing")).then("here_ts").otherwise("later_ts").alias("dst_ts"),
            )
            .filter(pl.col("dst").is_not_null())
            .join(opened, on="flow")
            .filter(pl.col("_o") > pl.col("s_o"))  # an f before its s has nothing to bind to
            .select("_o", "flow", "src", "src_ts", "dst", "dst_ts")
        )
        if stepped.height:  # flows with steps: bound event by event
            bound = pl.concat([bound, _stepped_flows(ev.join(stepped, on="flow"))])
        bound = bound.sort("_o")
        earlier_src = pl.col("src_ts") <= pl.col("dst_ts")  # the earlier slice flows out
        table = bound.select(
            pl.int_range(pl.len(), dtype=pl.Int64).alias("id"),
            pl.when(earlier_src).then("src").otherwise("dst").alias("slice_out"),
            pl.when(earlier_src).then("dst").otherwise("src").alias("slice_in"),
            pl.col("flow").alias("trace_id"),
        )
        self.conn.executemany(
            "INSERT INTO flow (id, slice_out, slice_in, trace_id) VALUES (?, ?, ?, ?)",
            table.iter_rows(),
        )

    def _build_counters(self, trace: Trace, upid: dict[Any, int]) -> None:
        c = trace.counters
        if c.height == 0:
            return
        c = c.with_columns((pl.col("name").cast(pl.String) + " " + pl.col("series")).alias("track"))
        tracks = c.select("track", "pid").unique(maintain_order=True)
        ids = {(t, p): i for i, (t, p) in enumerate(tracks.iter_rows())}
        self.conn.executemany(
            "INSERT INTO counter_track (id, name, type) VALUES (?, ?, 'json_counter')",
            [(i, t) for (t, _p), i in ids.items()],
        )
        self.conn.executemany(
            "INSERT INTO process_counter_track (id, name, type, upid) VALUES "
            "(?, ?, 'json_counter', ?)",
            [(i, t, upid.get(p)) for (t, p), i in ids.items()],
        )
        self.conn.executemany(
            "INSERT INTO counter (id, ts, track_id, value) VALUES (?, ?, ?, ?)",
            [
                (i, ts, ids[(t, p)], v)
                for i, (ts, t, p, v) in enumerate(
                    c.select("ts_ns", "track", "pid", "value").iter_rows()
                )
            ],
        )

    # - args -

    @lru_cache(maxsize=4096)  # noqa: B019 - one Database per query run
    def _parsed(self, arg_set_id: int) -> dict[str, Any]:
        if self._args_json is None or arg_set_id >= len(self._args_json):
            return {}
        raw = self._args_json[arg_set_id]
        if raw is None:
            return {}
        return {key: value for _flat, key, value in flatten_args(orjson.loads(raw))}

    def _extract_arg(self, arg_set_id: Any, key: Any) -> Any:
        if arg_set_id is None or key is None:
            return None
        i = int(arg_set_id)
        column = KEPT_ARGS.get(key)
        if column is not None and self._args_json is None:
            values = self._arg_columns[column]
            if 0 <= i < values.size:
                v = values[i]
                return None if v is None or (isinstance(v, float) and np.isnan(v)) else int(v)
            return None
        value = self._parsed(i).get(key)
        if isinstance(value, bool):
            return int(value)
        return value

    def _fill_args(self) -> None:
        rows: list[tuple[Any, ...]] = []
        if self._args_json is not None:
            for i, raw in enumerate(self._args_json):
                if raw is None:
                    continue
                for flat, key, value in flatten_args(orjson.loads(raw)):
                    iv, sv, rv, vt = _typed(value)
                    rows.append(
                        (i, flat, key, iv, sv, rv, vt, None if value is None else str(value))
                    )
        else:
            for key, column in KEPT_ARGS.items():
                values = self._arg_columns[column]
                for index in np.flatnonzero(~_null_mask(values)).tolist():
                    v = int(values[index])
                    rows.append((index, key, key, v, None, None, "int", str(v)))
            rows.sort(key=lambda r: r[0])
        self.conn.executemany(
            "INSERT INTO args (arg_set_id, flat_key, key, int_value, string_value, "
            "real_value, value_type, display_value) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def _null_mask(values: np.ndarray) -> np.ndarray:
    mask: np.ndarray
    if values.dtype == object:
        mask = np.array([v is None for v in values], dtype=bool)
    elif np.issubdtype(values.dtype, np.floating):
        mask = np.isnan(values)
    else:
        mask = np.zeros(values.size, dtype=bool)
    return mask


def _stepped_flows(ev: pl.DataFrame) -> pl.DataFrame:
    """Flows with ``t`` steps, event by event in processing order:
    (_o, flow, src, src_ts, dst, dst_ts)."""
    open_at: dict[int, tuple[int, int]] = {}
    out: list[tuple[int, int, int, int, int, int]] = []
    for order, flow, phase, here, here_ts, later, later_ts, enclosing in (
        ev.sort("_o")
        .select("_o", "flow", "phase", "here", "here_ts", "later", "later_ts", "enclosing")
        .iter_rows()
    ):
        if phase == "s":
            if here is not None and flow not in open_at:
                open_at[flow] = (here, here_ts)
        elif phase == "t":
            if here is not None and flow in open_at:
                out.append((order, flow, *open_at[flow], here, here_ts))
                open_at[flow] = (here, here_ts)
        else:
            target = (here, here_ts) if enclosing else (later, later_ts)
            if target[0] is not None and flow in open_at:
                out.append((order, flow, *open_at[flow], *target))
    return pl.DataFrame(
        out,
        schema={
            "_o": pl.UInt32,
            "flow": pl.Int64,
            "src": pl.Int64,
            "src_ts": pl.Int64,
            "dst": pl.Int64,
            "dst_ts": pl.Int64,
        },
        orient="row",
    )


def _enclosing(slices: pl.DataFrame, points: pl.DataFrame) -> pl.DataFrame:
    """For each (track_id, ts_ns) point, in order: ``slice_id`` and ``slice_ts`` of the
    deepest slice open there on its track (start <= ts < end, or a zero-length slice at
    ts), null where there is none."""
    spans = slices.select(
        "track_id",
        pl.col("ts_ns").alias("s_ts"),
        pl.col("dur_ns").alias("s_dur"),
        pl.col("id").alias("slice_id"),
    ).sort(["s_ts", "s_dur"], descending=[False, True])  # on a tie the shortest is last
    found = (
        points.with_row_index("_p")
        .join_asof(
            spans,
            left_on="ts_ns",
            right_on="s_ts",
            by="track_id",
            strategy="backward",
            check_sortedness=False,
        )
        .select("_p", "ts_ns", "slice_id", pl.col("s_ts").alias("a"), "s_dur")
        .with_columns((pl.col("a") + pl.col("s_dur")).alias("b"))
    )
    zero_at_ts = (pl.col("a") == pl.col("b")) & (pl.col("ts_ns") == pl.col("a"))
    covers = (pl.col("ts_ns") < pl.col("b")) | zero_at_ts
    keep = ["_p", "slice_id", pl.col("a").alias("slice_ts")]
    done = [found.filter(pl.col("slice_id").is_not_null() & covers).select(keep)]
    todo = found.filter(pl.col("slice_id").is_not_null() & ~covers).select(
        "_p", "ts_ns", "slice_id"
    )
    if todo.height:
        info = slices.select(
            pl.col("id").alias("slice_id"),
            pl.col("ts_ns").alias("a"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("b"),
            "parent_id",
        )
        # the latest slice to start may have closed already: its open ancestor encloses
        while todo.height:
            step = todo.select("_p", "ts_ns", "slice_id").join(info, on="slice_id", how="left")
            step = step.join(
                info.select("slice_id", "parent_id"), on="slice_id", how="left", suffix="_x"
            )
            done.append(step.filter(covers).select(keep))
            todo = step.filter(~covers & pl.col("parent_id").is_not_null()).select(
                "_p", "ts_ns", pl.col("parent_id").alias("slice_id")
            )
    resolved = pl.concat(done)
    return (
        points.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_p"))
        .join(resolved, on="_p", how="left")
        .sort("_p")
        .select("slice_id", "slice_ts")
    )


def _next_slice(slices: pl.DataFrame, points: pl.DataFrame) -> pl.DataFrame:
    """For each (_o, track_id, ts_ns) point: ``later`` and ``later_ts``, the first slice
    that begins on its track at or after ts (on a tie the outermost, which begins first)."""
    spans = slices.select(
        "track_id",
        pl.col("ts_ns").alias("later_ts"),
        pl.col("dur_ns").alias("s_dur"),
        pl.col("id").alias("later"),
    ).sort(["later_ts", "s_dur"], descending=[False, True])  # on a tie the longest is first
    return (
        points.sort("ts_ns")
        .join_asof(
            spans,
            left_on="ts_ns",
            right_on="later_ts",
            by="track_id",
            strategy="forward",
            check_sortedness=False,
        )
        .select("_o", "later", "later_ts")
    )


_MATCHES_KEPT = 1 << 16  # (pattern, name) answers a database keeps, at most


def _regexp(pattern: str | None, value: str | None) -> int | None:
    if pattern is None or value is None:
        return None
    return 1 if _compiled(pattern).search(value) else 0


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    import re

    return re.compile(pattern)


class _Percentile:
    """PERCENTILE(x, p): linear interpolation between closest ranks, p in 0..100."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.p: float | None = None

    def step(self, value: Any, p: Any) -> None:
        if value is not None:
            self.values.append(float(value))
        if p is not None:
            self.p = float(p)

    def finalize(self) -> float | None:
        if not self.values or self.p is None:
            return None
        return float(np.percentile(np.asarray(self.values), self.p))


class _Median(_Percentile):
    def step(self, value: Any) -> None:  # type: ignore[override]
        super().step(value, 50)
