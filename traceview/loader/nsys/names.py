"""What the numbers in an Nsight Systems export stand for (:mod:`.reader`): CUPTI's enums as
Kineto spells them in event names, a device row's raw args under Kineto's keys, the
devices' properties under Kineto's ``deviceProperties`` keys, and ``StringIds`` (the text
of every name id)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceview.errors import TraceFormatError, shown_value

if TYPE_CHECKING:
    from traceview.loader.nsys.sqlite_file import Db

# CUPTI's enums as Kineto spells them in event names (CUpti_ActivityMemcpyKind,
# CUpti_ActivityMemoryKind, CUpti_ActivitySynchronizationType)
COPY_KINDS = ["Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD"]
COPY_KINDS += ["HtoH", "PtoP"]
MEMORY_KINDS = ["Unknown", "Pageable", "Pinned", "Device", "Array", "Managed"]
MEMORY_KINDS += ["Device Static", "Managed Static"]
SYNC_KINDS = ["Unknown", "Event Sync", "Stream Wait Event", "Stream Sync", "Context Sync"]


def lookup(col: str, names: list[str]) -> pl.Expr:
    return pl.col(col).replace_strict(
        list(range(len(names))), names, default="Unknown", return_dtype=pl.String
    )


def device_args(kind: str, columns: list[str], keyed: bool) -> pl.Expr:
    """A device row's ``args_json``, under Kineto's key names."""

    def num(c: str) -> pl.Expr:
        return pl.col(c).cast(pl.String).fill_null("null")

    fields: list[tuple[str, pl.Expr]] = [
        ("device", num("deviceId")),
        ("stream", num("streamId")),
        ("correlation", num("correlationId")),
    ]
    if kind == "kernel":
        fields += [
            ("grid", pl.format("[{}, {}, {}]", num("gridX"), num("gridY"), num("gridZ"))),
            ("block", pl.format("[{}, {}, {}]", num("blockX"), num("blockY"), num("blockZ"))),
            ("registers per thread", num("registersPerThread")),
            (
                "shared memory",
                (pl.col("staticSharedMemory") + pl.col("dynamicSharedMemory"))
                .cast(pl.String)
                .fill_null("null"),
            ),
            ("graph id", num("graphId")),
            ("graph node id", num("graphNodeId")),
        ]
    elif kind == "graph":
        fields += [("graph id", num("graphId")), ("graph exec id", num("graphExecId"))]
    else:
        fields += [("bytes", num("bytes")), ("graph node id", num("graphNodeId"))]
        if kind == "memcpy":
            fields.append(("copy kind", num("copyKind")))
    parts: list[pl.Expr | str] = []
    for i, (key, expr) in enumerate(fields):
        parts += [pl.lit(("{" if i == 0 else ", ") + f'"{key}": '), expr]
    parts.append(pl.lit("}"))
    return pl.concat_str(parts).alias("args_json")


_TEXT_PROPERTIES = {"name", "chipName", "uuid", "busLocation"}


def _typed(row: dict[str, object]) -> dict[str, object]:
    """A TARGET_INFO row's values of the type each property has: text for the names, an
    integer for the rest. A value of another type (a BLOB name's bytes are read as UTF-8
    text; ``smCount = 'many'``, a real) is left out, never passed on as another type."""
    out: dict[str, object] = {}
    for key, value in row.items():
        if key in _TEXT_PROPERTIES:
            if isinstance(value, bytes):
                value = value.decode(errors="replace")
            if isinstance(value, str):
                out[key] = value
        elif isinstance(value, int) and not isinstance(value, bool):
            out[key] = value
    return out


def device_properties(
    gpu_rows: list[dict[str, object]], cuda: list[dict[str, object]], devices: list[int]
) -> tuple[dict[str, object], ...]:
    """Per device with activity, Kineto's ``deviceProperties`` keys from
    ``TARGET_INFO_GPU`` (the GPU that ``TARGET_INFO_CUDA_DEVICE`` maps the CUDA device
    to, else the GPU with the device's id)."""
    gpus = {g.get("id"): g for g in gpu_rows}
    out = []
    for d in devices:
        mapped = next((c for c in cuda if c.get("cudaId") == d), None)
        gpu = gpus.get(mapped.get("gpuId")) if mapped else None
        gpu = gpu or gpus.get(d)
        if gpu is None and mapped is None:
            continue
        g, c = _typed(gpu or {}), _typed(mapped or {})
        prop = {
            "id": d,
            "name": g.get("name"),
            "totalGlobalMem": g.get("totalMemory"),
            "numSms": g.get("smCount") or c.get("numMultiprocessors"),
            "computeMajor": g.get("computeMajor", c.get("computeCapabilityMajor")),
            "computeMinor": g.get("computeMinor", c.get("computeCapabilityMinor")),
            "memoryBandwidth": g.get("memoryBandwidth"),
            "clockRate": g.get("clockRate"),
            "l2CacheSize": g.get("l2CacheSize"),
            "chipName": g.get("chipName"),
            "uuid": g.get("uuid") or c.get("uuid"),
        }
        out.append({k: v for k, v in prop.items() if v is not None and v != ""})
    return tuple(out)


class StringIds:
    """``StringIds``: id -> text, applied to whole columns. A value is read as text
    whatever SQLite holds (a BLOB's bytes decoded as UTF-8); an id that is not an integer
    is an error: no name can be matched to it."""

    def __init__(self, db: Db, tables: dict[str, set[str]], path: str) -> None:
        missing = {"id", "value"} - tables.get("StringIds", {"id", "value"})
        if missing:
            raise TraceFormatError(
                path,
                f"StringIds has no {' or '.join(sorted(missing))} column: no name can be read; "
                "not a readable Nsight Systems export",
            )
        rows = (
            db.rows("SELECT id, CAST(value AS TEXT) FROM StringIds")
            if "StringIds" in tables
            else []
        )
        ids = [r[0] for r in rows]
        try:
            self.ids = pl.Series("id", ids, dtype=pl.Int64)
        except (TypeError, pl.exceptions.PolarsError):
            bad = next(i for i in ids if i is not None and type(i) is not int)
            raise TraceFormatError(
                path,
                f"StringIds holds an id that is not an integer ({shown_value(bad)}): no name can "
                "be matched to it; not a readable Nsight Systems export",
            ) from None
        self.values = pl.Series("value", [r[1] for r in rows], dtype=pl.String)
        if self.ids.n_unique() != self.ids.len():  # StringIds holds an id twice
            both = pl.DataFrame([self.ids, self.values]).unique(maintain_order=True)
            twice = both.filter(pl.col("id").is_duplicated() & pl.col("id").is_not_null())
            if twice.height:
                raise TraceFormatError(
                    path,
                    f"StringIds gives the id {twice['id'][0]} more than one text: the name of "
                    "what refers to it cannot be told; not a readable Nsight Systems export",
                )
            self.ids, self.values = both["id"], both["value"]

    def text(self, col: str) -> pl.Expr:
        return pl.col(col).replace_strict(
            self.ids, self.values, default=None, return_dtype=pl.String
        )
