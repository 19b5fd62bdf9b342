"""What the numbers in an Nsight Systems export stand for (:mod:`.nsys`): CUPTI's enums as
Kineto spells them in event names, a device row's raw args under Kineto's keys, and the
devices' properties under Kineto's ``deviceProperties`` keys."""

from __future__ import annotations

import polars as pl

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
    else:
        fields += [("bytes", num("bytes")), ("graph node id", num("graphNodeId"))]
        if kind == "memcpy":
            fields.append(("copy kind", num("copyKind")))
    parts: list[pl.Expr | str] = []
    for i, (key, expr) in enumerate(fields):
        parts += [pl.lit(("{" if i == 0 else ", ") + f'"{key}": '), expr]
    parts.append(pl.lit("}"))
    return pl.concat_str(parts).alias("args_json")


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
        g, c = gpu or {}, mapped or {}
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
