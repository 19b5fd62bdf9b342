"""Nsight Systems SQLite exports (``nsys export --type sqlite``) ->
:class:`~traceview.model.Trace`.

The export is opened read-only (``mode=ro&immutable=1``: SQLite neither writes nor locks
the file) and each table is read with one query into polars. An export whose write-ahead
log or hot journal beside it holds part of its committed state is copied with it to a
temporary folder and read there (:func:`pending`). What maps where:

- ``CUPTI_ACTIVITY_KIND_KERNEL`` / ``_MEMCPY`` / ``_MEMSET`` -> ``kernels`` (categories
  ``kernel``, ``gpu_memcpy``, ``gpu_memset``, as Kineto writes them). A kernel's name is its
  ``demangledName`` through ``StringIds`` (never ``shortName``); a copy is named as Kineto
  names it (``Memcpy HtoD (Pinned -> Device)``) from ``copyKind``/``srcKind``/``dstKind``,
  a memset from ``memKind``. ``pid``/``tid`` are device/stream, as on Kineto's GPU tracks.
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` / ``_DRIVER`` -> ``events`` of kind ``runtime`` /
  ``driver``, named through ``StringIds`` without the ``_vNNNN`` version suffix
  (``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``); ``_SYNCHRONIZATION`` -> ``sync``.
- ``NVTX_EVENTS``: push/pop (59) and start/end (60) ranges -> ``user_annotation``, their
  text from ``text`` or ``textId``; marks (34) -> ``instant``. A range without an end, or
  one that ends before it starts, is counted as skipped, each by its reason.
- pid and tid come from ``globalTid``/``globalPid`` (pid = (g >> 24) & 0xFFFFFF, tid = g &
  0xFFFFFF); thread names from ``ThreadNames``, process names from ``PROCESSES``.
- Correlation ids repeat across processes. Where more than one process has CUDA activity,
  the ``correlation`` column is ``pid << 32 | correlationId`` on both sides, so a kernel
  joins only its own process's launch; with one process it is ``correlationId`` as written.
- ``TARGET_INFO_GPU`` (with ``TARGET_INFO_CUDA_DEVICE``) -> ``meta.device_properties``,
  with Kineto's ``deviceProperties`` keys (``name``, ``totalGlobalMem``, ``numSms``,
  ``computeMajor``…), so device peaks match as for a Kineto trace.
- With ``raw_args``, each kernel's grid, block, registers, shared memory and graph ids (a
  copy's bytes and kind) are its ``args_json``, under Kineto's key names.

Tables are created lazily, so any may be absent; columns are read by name (``PRAGMA
table_info``), so the 2024 layout and 2025's (with its added kernel columns) both load.
"""

from __future__ import annotations

import os
import sqlite3
import warnings as warnings_module
from collections import Counter

import polars as pl

from traceview.errors import NotATraceError, TraceFormatError, TraceviewWarning
from traceview.loader.nsys.names import (
    COPY_KINDS,
    MEMORY_KINDS,
    SYNC_KINDS,
    StringIds,
    device_args,
    device_properties,
    lookup,
)
from traceview.loader.nsys.sqlite_file import (
    SQLITE_MAGIC,
    Db,
    check_length,
    committed,
    connect,
    is_export_file,
    is_sqlite,
    pending,
    refuse_impossible_times,
    select,
    tables,
)
from traceview.model import (
    COUNTER_SCHEMA,
    EVENT_SCHEMA,
    FLOW_SCHEMA,
    GRAPH_REPLAY,
    KERNEL_SCHEMA,
    METADATA_SCHEMA,
    SHAPE_SCHEMA,
    Trace,
    TraceMeta,
    empty_frame,
    narrow_ids,
    replays_not_itemised,
    wide,
)

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
DEVICE_TABLES = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("kernel", "kernel"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("memcpy", "gpu_memcpy"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("memset", "gpu_memset"),
    # a whole replay of a CUDA graph (--cuda-graph-trace=graph): no row of its nodes
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": ("graph", GRAPH_REPLAY),
}
GRAPH_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
# CUpti_ActivityGraphTrace2: a replay whose first node ran on the host has this device
_HOST_DEVICE = 0x7FFFFFFF
HOST_TABLES = {
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("runtime", "cuda_runtime"),
    "CUPTI_ACTIVITY_KIND_DRIVER": ("driver", "cuda_driver"),
}
NVTX_PUSH_POP, NVTX_START_END, NVTX_MARK = 59, 60, 34
_VERSION_SUFFIX = r"_v\d+$"
_MASK24 = 0xFFFFFF


def report_problem(path: str) -> str | None:
    """What to say about an Nsight Systems report (``.nsys-rep``, ``.qdrep``), which
    traceview cannot read; None for any other name."""
    name = os.path.basename(path)
    for suffix in REPORT_SUFFIXES:
        if name.lower().endswith(suffix):
            stem = name[: -len(suffix)] or "report"
            return (
                "an Nsight Systems report, which traceview cannot read; export it to SQLite "
                f"first: nsys export --type sqlite -o {stem}.sqlite {name}"
            )
    return None


def _unpack(col: str) -> tuple[pl.Expr, pl.Expr]:
    """pid and tid from a serialized ``globalTid`` (or ``globalPid``, whose tid is 0)."""
    g = pl.col(col)
    return ((g // (1 << 24)) % (1 << 24)).alias("pid"), (g % (1 << 24)).alias("tid")


def _corr(key: bool) -> pl.Expr:
    """The trace's correlation key: per process where several processes have CUDA work."""
    c = pl.col("correlationId")
    if not key:
        return c.alias("correlation")
    return (((pl.col("globalPid") // (1 << 24)) % (1 << 24)) * (1 << 32) + c).alias("correlation")


class _Reader:
    def __init__(self, path: str, db: Db, raw_args: bool) -> None:
        self.path = path
        self.db = db
        self.raw_args = raw_args
        self.tables = tables(db)
        self.skipped: Counter[str] = Counter()
        self.rows = 0
        self.warnings: list[str] = []

    def run(self) -> Trace:
        t = self.tables
        if "StringIds" not in t or not (
            any(n.startswith("CUPTI_ACTIVITY_KIND_") for n in t)
            or {"TARGET_INFO_GPU", "NVTX_EVENTS"} & set(t)
        ):
            raise NotATraceError(
                self.path,
                "a SQLite database, but not an Nsight Systems export (no StringIds "
                "and CUPTI tables)",
            )
        present = [n for n in DEVICE_TABLES if n in t]
        if not present:
            raise TraceFormatError(
                self.path,
                "no kernels or device activity: the export has no CUDA activity tables "
                "(record with nsys profile --trace=cuda,nvtx)",
            )
        self.strings = StringIds(self.db, t, self.path)
        raw = {n: self._device_raw(n) for n in present}
        if sum(f.height for f in raw.values()) == 0:
            raise TraceFormatError(
                self.path, "no kernels or device activity: its CUDA activity tables are empty"
            )
        if GRAPH_TABLE in raw:
            raw[GRAPH_TABLE] = self._not_itemised(raw)
        host = {n: self._host_raw(n) for n in HOST_TABLES if n in t}
        sync = self._sync_raw() if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in t else None
        pids: set[int] = set()
        for f in [*raw.values(), *([sync] if sync is not None else [])]:
            pids |= set(((f["globalPid"] // (1 << 24)) % (1 << 24)).drop_nulls().unique().to_list())
        for f in host.values():
            pids |= set(((f["globalTid"] // (1 << 24)) % (1 << 24)).drop_nulls().unique().to_list())
        keyed = len(pids) > 1
        if keyed:
            self._shared_devices(raw)
        kernels = pl.concat(
            [self._device(n, f, keyed) for n, f in raw.items()], how="vertical"
        ).sort("ts_ns", maintain_order=True)
        del raw
        parts = [self._host(n, f, keyed) for n, f in host.items()]
        if sync is not None:
            parts.append(self._sync(sync, keyed))
        if "NVTX_EVENTS" in t:
            parts.append(self._nvtx())
        schema = wide(EVENT_SCHEMA)
        if self.raw_args:
            schema = {**schema, "args_json": pl.String()}
        events = (
            pl.concat([p.select(list(schema)) for p in parts], how="vertical").sort(
                "ts_ns", maintain_order=True
            )
            if parts
            else empty_frame(schema)
        )
        frames = {
            "kernels": kernels,
            "events": events,
            "flows": empty_frame(wide(FLOW_SCHEMA)),
            "counters": empty_frame(wide(COUNTER_SCHEMA)),
            "metadata": self._metadata(),
            "shapes": empty_frame(wide(SHAPE_SCHEMA)),
        }
        props = device_properties(
            self._rows("TARGET_INFO_GPU"),
            self._rows("TARGET_INFO_CUDA_DEVICE"),
            sorted(kernels["device"].drop_nulls().unique().to_list()),
        )
        extra = self._export_info()
        if self.db.text.replaced:
            n = self.db.text.replaced
            self.warnings.append(
                f"{n:,} text value{'s' if n != 1 else ''} (names, NVTX texts) not UTF-8: "
                "read with U+FFFD for each invalid byte sequence"
            )
        warnings = [
            f"{n} event{'s' if n != 1 else ''} skipped: {why}"
            for why, n in sorted(self.skipped.items())
        ]
        for line in [*self.warnings, *warnings]:
            warnings_module.warn(TraceviewWarning(f"{self.path}: {line}"), stacklevel=4)
        meta = TraceMeta(
            path=self.path,
            format="nsys",
            device_properties=props,
            gpu_name=next((str(p["name"]) for p in props if p.get("name")), None),
            events=self.rows,
            skipped_events=sum(self.skipped.values()),
            warnings=(*self.warnings, *warnings),
            extra=extra,
        )
        return Trace(meta=meta, **narrow_ids(frames))

    # - device activity -

    def _device_raw(self, table: str) -> pl.DataFrame:
        cols: dict[str, pl.DataType] = {
            "start": pl.Int64(),
            "end": pl.Int64(),
            "deviceId": pl.Int64(),
            "streamId": pl.Int64(),
            "correlationId": pl.Int64(),
            "globalPid": pl.Int64(),
        }
        have = self.tables[table]
        kind = DEVICE_TABLES[table][0]
        if kind == "kernel":
            name = "demangledName" if "demangledName" in have else "mangledName"
            cols["nameId"] = pl.Int64()
            extra = ["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"]
            extra += ["registersPerThread", "staticSharedMemory", "dynamicSharedMemory"]
            extra += ["graphId", "graphNodeId"]
        elif kind == "graph":  # the ids name it, so they are read with or without raw_args
            name = ""
            extra = ["graphId", "graphExecId"]
        elif kind == "memcpy":
            name = ""
            extra = ["copyKind", "srcKind", "dstKind", "bytes", "graphNodeId"]
        else:
            name = ""
            extra = ["memKind", "bytes", "graphNodeId"]
        if not self.raw_args and kind == "kernel":
            extra = []
        for c in extra:
            cols[c] = pl.Int64()
        read = [name if c == "nameId" else c for c in cols]
        self.db.no_reals(table, [c for c in read if c in have], self.path)
        exprs = [f'"{c}"' if c in have else "NULL" for c in read]
        rows = self.db.rows(f'SELECT {", ".join(exprs)} FROM "{table}"')
        self.rows += len(rows)
        return pl.DataFrame(rows, schema=cols, orient="row")

    def _device(self, table: str, f: pl.DataFrame, keyed: bool) -> pl.DataFrame:
        kind, cat = DEVICE_TABLES[table]
        what = "replay" if kind == "graph" else kind  # as a message names a row
        if kind == "graph":
            f = self._timed_replays(f)
        bad = f.filter(
            pl.col("start").is_null() | pl.col("end").is_null() | (pl.col("end") < pl.col("start"))
        ).height
        if bad:
            raise TraceFormatError(
                self.path,
                f"{bad:,} {what} row{'s' if bad != 1 else ''} in {table} without a valid "
                "start and end; every figure would be wrong without them",
            )
        refuse_impossible_times(f, table, what, self.path)
        unplaced = f.filter(pl.col("deviceId").is_null()).height
        if unplaced:  # never another device's time (a JSON trace's rule too)
            raise TraceFormatError(
                self.path,
                f"{unplaced:,} {what} row{'s' if unplaced != 1 else ''} in {table} without a "
                "deviceId; cannot place them on a device",
            )
        if kind == "kernel":
            unnamed = f.select(self.strings.text("nameId").is_null().sum()).item()
            if unnamed:
                self.warnings.append(
                    f"{unnamed:,} kernel{'s' if unnamed != 1 else ''} in {table} without a "
                    "name in StringIds (named '', family other)"
                )
            name = self.strings.text("nameId").fill_null("")
        elif kind == "graph":  # nsys shows a replay as its executable graph
            name = pl.format(
                "CUDA graph replay (graph {}, exec {})",
                pl.col("graphId").cast(pl.String).fill_null("?"),
                pl.col("graphExecId").cast(pl.String).fill_null("?"),
            )
        elif kind == "memcpy":
            base = pl.concat_str(pl.lit("Memcpy "), lookup("copyKind", COPY_KINDS))
            pair = pl.format(
                "{} ({} -> {})",
                base,
                lookup("srcKind", MEMORY_KINDS),
                lookup("dstKind", MEMORY_KINDS),
            )
            both = pl.col("srcKind").is_not_null() & pl.col("dstKind").is_not_null()
            name = pl.when(both).then(pair).otherwise(base)
        else:
            name = (
                pl.when(pl.col("memKind").is_not_null())
                .then(pl.format("Memset ({})", lookup("memKind", MEMORY_KINDS)))
                .otherwise(pl.lit("Memset"))
            )
        out = [
            pl.col("start").alias("ts_ns"),
            (pl.col("end") - pl.col("start")).alias("dur_ns"),
            name.cast(pl.Categorical).alias("name"),
            pl.lit(cat).cast(pl.Categorical).alias("cat"),
            pl.lit("kernel" if kind == "graph" else kind)
            .cast(KERNEL_SCHEMA["event_kind"])
            .alias("event_kind"),
            pl.col("deviceId").alias("pid"),
            pl.col("streamId").alias("tid"),
            pl.col("deviceId").alias("device"),
            pl.col("streamId").alias("stream"),
            _corr(keyed),
            pl.lit(None, pl.Int64).alias("external_id"),
        ]
        if self.raw_args:
            out.append(device_args(kind, f.columns, keyed))
        return f.select(out).cast(wide(KERNEL_SCHEMA))  # type: ignore[arg-type]

    def _not_itemised(self, raw: dict[str, pl.DataFrame]) -> pl.DataFrame:
        """The replays whose kernels the export does not itemise: a replay whose launch
        (process and correlation id) kernel, copy or memset rows share is read through
        those rows alone, never twice (its time counted again, the gaps between its
        kernels filled), and said."""
        replays = raw[GRAPH_TABLE]
        rows = [f.select("globalPid", "correlationId") for n, f in raw.items() if n != GRAPH_TABLE]
        if not rows or replays.height == 0:
            return replays
        itemised = pl.concat(rows).unique()
        both = replays.join(itemised, on=["globalPid", "correlationId"], how="semi").height
        if both:
            self.warnings.append(
                f"{both:,} CUDA-graph replay{'s' if both != 1 else ''} in {GRAPH_TABLE} "
                "also itemised by kernel rows (their launch's correlation id): read through "
                "those rows alone"
            )
        return replays.join(itemised, on=["globalPid", "correlationId"], how="anti")

    def _timed_replays(self, f: pl.DataFrame) -> pl.DataFrame:
        """The replays CUPTI could place: it writes 0 for both times where it could not time
        one, and device INT_MAX where its first node ran on the host; each such replay is
        skipped and counted. Said once: the replays' kernels are not itemised."""
        untimed = (pl.col("start") == 0) & (pl.col("end") == 0)
        host = pl.col("deviceId") == _HOST_DEVICE
        n_untimed, n_host = f.select(untimed.sum(), (host & ~untimed).sum()).row(0)
        if n_untimed:
            self.skipped["CUDA-graph replay CUPTI could not time (start and end 0)"] += n_untimed
        if n_host:
            self.skipped["CUDA-graph replay that started on the host (no device)"] += n_host
        f = f.filter(~untimed & ~host.fill_null(False))
        if f.height:
            self.warnings.append(replays_not_itemised(f.height))
        return f

    def _shared_devices(self, raw: dict[str, pl.DataFrame]) -> None:
        """A warning per CUDA device id that several processes report (each saw its own GPU
        as device 0, through CUDA_VISIBLE_DEVICES): their activity is analysed as one
        device's, and ``--device`` cannot tell them apart."""
        pairs = pl.concat([f.select("deviceId", "globalPid") for f in raw.values()]).unique()
        pairs = pairs.with_columns(pid=(pl.col("globalPid") // (1 << 24)) % (1 << 24))
        shared = pairs.group_by("deviceId").agg(pl.col("pid").unique().sort()).sort("deviceId")
        for device, procs in shared.filter(pl.col("pid").list.len() > 1).iter_rows():
            self.warnings.append(
                f"processes {', '.join(map(str, procs))} all report CUDA device {device}: "
                "their activity is analysed as one device's"
            )

    # - host side -

    def _host_raw(self, table: str) -> pl.DataFrame:
        cols: dict[str, pl.DataType] = {
            "start": pl.Int64(),
            "end": pl.Int64(),
            "globalTid": pl.Int64(),
            "correlationId": pl.Int64(),
            "nameId": pl.Int64(),
        }
        f = select(self.db, table, self.tables[table], cols, self.path)
        self.rows += f.height
        return f

    def _host(self, table: str, f: pl.DataFrame, keyed: bool) -> pl.DataFrame:
        kind, cat = HOST_TABLES[table]
        ok = pl.col("start").is_not_null() & pl.col("end").is_not_null()
        ok = ok & (pl.col("end") >= pl.col("start"))
        bad = f.height - f.filter(ok).height
        if bad:
            self.skipped[f"{table} call without a valid start and end"] += bad
        f = f.filter(ok).with_columns(pl.col("globalTid").alias("globalPid"))
        pid, tid = _unpack("globalTid")
        out = [
            pl.col("start").alias("ts_ns"),
            (pl.col("end") - pl.col("start")).alias("dur_ns"),
            self.strings.text("nameId")
            .fill_null("")
            .str.replace(_VERSION_SUFFIX, "")
            .cast(pl.Categorical)
            .alias("name"),
            pl.lit(cat).cast(pl.Categorical).alias("cat"),
            pl.lit(kind).cast(EVENT_SCHEMA["event_kind"]).alias("event_kind"),
            pid,
            tid,
            _corr(keyed),
            pl.lit(None, pl.Int64).alias("external_id"),
        ]
        if self.raw_args:
            out.append(
                pl.concat_str(
                    pl.lit('{"correlation": '),
                    pl.col("correlationId").cast(pl.String).fill_null("null"),
                    pl.lit("}"),
                ).alias("args_json")
            )
        return f.select(out).cast(wide(EVENT_SCHEMA))  # type: ignore[arg-type]

    def _sync_raw(self) -> pl.DataFrame:
        table = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
        cols: dict[str, pl.DataType] = {
            "start": pl.Int64(),
            "end": pl.Int64(),
            "deviceId": pl.Int64(),
            "streamId": pl.Int64(),
            "correlationId": pl.Int64(),
            "globalPid": pl.Int64(),
            "syncType": pl.Int64(),
        }
        f = select(self.db, table, self.tables[table], cols, self.path)
        self.rows += f.height
        return f

    def _sync(self, f: pl.DataFrame, keyed: bool) -> pl.DataFrame:
        ok = pl.col("start").is_not_null() & (pl.col("end") >= pl.col("start"))
        bad = f.height - f.filter(ok).height
        if bad:
            self.skipped["synchronization without a valid start and end"] += bad
        out = [
            pl.col("start").alias("ts_ns"),
            (pl.col("end") - pl.col("start")).alias("dur_ns"),
            lookup("syncType", SYNC_KINDS).cast(pl.Categorical).alias("name"),
            pl.lit("cuda_sync").cast(pl.Categorical).alias("cat"),
            pl.lit("sync").cast(EVENT_SCHEMA["event_kind"]).alias("event_kind"),
            pl.col("deviceId").alias("pid"),
            pl.col("streamId").alias("tid"),
            _corr(keyed),
            pl.lit(None, pl.Int64).alias("external_id"),
        ]
        if self.raw_args:
            out.append(pl.lit(None, pl.String).alias("args_json"))
        return f.filter(ok).select(out).cast(wide(EVENT_SCHEMA))  # type: ignore[arg-type]

    def _nvtx(self) -> pl.DataFrame:
        table = "NVTX_EVENTS"
        cols: dict[str, pl.DataType] = {
            "start": pl.Int64(),
            "end": pl.Int64(),
            "eventType": pl.Int64(),
            "text": pl.String(),
            "textId": pl.Int64(),
            "globalTid": pl.Int64(),
        }
        kinds = (NVTX_PUSH_POP, NVTX_START_END, NVTX_MARK)
        where = f"WHERE eventType IN {kinds!r}"
        f = select(self.db, table, self.tables[table], cols, self.path, where)
        self.rows += f.height
        mark = pl.col("eventType") == NVTX_MARK
        ok = mark | (pl.col("end").is_not_null() & (pl.col("end") >= pl.col("start")))
        open_ended, backwards = (
            f.filter(~mark)
            .select(
                pl.col("end").is_null().sum().alias("open"),
                (pl.col("end") < pl.col("start")).sum().alias("backwards"),
            )
            .row(0)
        )
        if open_ended:
            self.skipped["NVTX range without an end"] += open_ended
        if backwards:
            self.skipped["NVTX range that ends before it starts"] += backwards
        pid, tid = _unpack("globalTid")
        out = [
            pl.col("start").alias("ts_ns"),
            pl.when(mark).then(0).otherwise(pl.col("end") - pl.col("start")).alias("dur_ns"),
            pl.coalesce(pl.col("text"), self.strings.text("textId"), pl.lit(""))
            .cast(pl.Categorical)
            .alias("name"),
            pl.when(mark)
            .then(pl.lit("cpu_instant_event"))
            .otherwise(pl.lit("user_annotation"))
            .cast(pl.Categorical)
            .alias("cat"),
            pl.when(mark)
            .then(pl.lit("instant"))
            .otherwise(pl.lit("user_annotation"))
            .cast(EVENT_SCHEMA["event_kind"])
            .alias("event_kind"),
            pid,
            tid,
            pl.lit(None, pl.Int64).alias("correlation"),
            pl.lit(None, pl.Int64).alias("external_id"),
        ]
        if self.raw_args:
            out.append(pl.lit(None, pl.String).alias("args_json"))
        return f.filter(ok).select(out).cast(wide(EVENT_SCHEMA))  # type: ignore[arg-type]

    # - metadata -

    def _metadata(self) -> pl.DataFrame:
        rows: list[tuple[str, int | None, int | None, str]] = []
        t = self.tables
        if "PROCESSES" in t and {"globalPid", "name"} <= t["PROCESSES"]:
            for g, name in self.db.rows("SELECT globalPid, CAST(name AS TEXT) FROM PROCESSES"):
                if g is not None:
                    rows.append(("process_name", (g >> 24) & _MASK24, 0, str(name or "")))
        if "ThreadNames" in t and {"nameId", "globalTid"} <= t["ThreadNames"]:
            names = dict(
                zip(self.strings.ids.to_list(), self.strings.values.to_list(), strict=True)
            )
            for name_id, g in self.db.rows("SELECT nameId, globalTid FROM ThreadNames"):
                if g is not None:
                    rows.append(
                        ("thread_name", (g >> 24) & _MASK24, g & _MASK24, names.get(name_id) or "")
                    )
        frame = pl.DataFrame(rows, schema=list(METADATA_SCHEMA), orient="row")
        return frame.cast(wide(METADATA_SCHEMA))  # type: ignore[arg-type]

    def _rows(self, table: str) -> list[dict[str, object]]:
        if table not in self.tables:
            return []
        rows, names = self.db.fetch(f'SELECT * FROM "{table}"')
        return [dict(zip(names, r, strict=True)) for r in rows]

    def _export_info(self) -> dict[str, object]:
        info = {}
        for table in ("META_DATA_EXPORT", "META_DATA_CAPTURE"):
            if table in self.tables and {"name", "value"} <= self.tables[table]:
                for k, v in self.db.rows(
                    f"SELECT CAST(name AS TEXT), CAST(value AS TEXT) FROM {table}"
                ):
                    info[str(k)] = v
        return {"nsys": info} if info else {}


def load_nsys(path: str, *, raw_args: bool = False, source: str | None = None) -> Trace:
    """Read an Nsight Systems SQLite export (see the module doc); ``source``: the name to
    give it (an object's URL, where ``path`` is the local copy).

    Raises:
        TraceFormatError: a cut or corrupt database, no CUDA activity, or activity rows
            without times.
        NotATraceError: a SQLite database that is not an Nsight Systems export.
    """
    name = source or path
    check_length(path, name)
    with committed(path, name) as (readable, copy):
        try:
            con = connect(readable, copy=copy)
        except sqlite3.Error as exc:
            raise TraceFormatError(name, f"cannot open the SQLite database ({exc})") from None
        try:
            return _Reader(name, Db(con), raw_args).run()
        except sqlite3.DatabaseError as exc:
            raise TraceFormatError(name, f"a corrupt SQLite database ({exc})") from None
        except sqlite3.Error as exc:
            raise TraceFormatError(name, f"cannot read the SQLite database ({exc})") from None
        finally:
            con.close()


__all__ = [
    "SQLITE_MAGIC",
    "is_export_file",
    "is_sqlite",
    "load_nsys",
    "pending",
    "report_problem",
]
