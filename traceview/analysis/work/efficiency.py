"""How close to the hardware: each step's FLOPs and bytes from the model's config and its
tokens, MFU and MBU against the device's peaks, and their spread per kind of step
(docs/metrics.md, "How close to the hardware").

Per step, with ``T`` its tokens (context plus generation tokens from the engine's
annotation, else the query tokens record_shapes states), ``N`` the active parameters of
the transformer blocks (no embedding, no lm_head; for a mixture of experts only the top-k
experts) and, where the annotation states them, the causal attention pairs ``P`` and the
context (KV) lengths ``K``:

- ``flops = 2·N·T + 2·heads·(qk_dim + v_dim)·P·full_attention_layers`` (the second term
  only where ``P`` is known: ``attention_counted``);
- ``bytes = weights(T) + K·kv_bytes_per_token·full_attention_layers``: the weights read
  (:meth:`ModelSpec.weight_bytes`: every block's part outside the routed experts, lm_head,
  and ``min(E, k·T)`` experts per mixture-of-experts block, each weight at its stored
  bytes); the KV term only where ``K`` is known;
- ``mfu = flops / busy_s / peak_flops[compute dtype]``, ``mbu = bytes / busy_s /
  peak_bytes_per_s``, ``busy_s`` the step's device activity inside its span.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from traceview.analysis.base.document import (
    KINDS,
    Efficiency,
    EfficiencyFamily,
    EfficiencyPhase,
    GpuPeaks,
)
from traceview.analysis.base.precision import sig
from traceview.analysis.work.devices import GpuSpec, match_device
from traceview.analysis.work.model_config import ModelSpec
from traceview.model import Trace

_STATED = pl.col("context_tokens").is_not_null() & pl.col("generation_tokens").is_not_null()
# a step whose KV reads are counted: the context the annotation states, else record_shapes'
# (as :func:`step_efficiency` reads them)
_CONTEXT_COUNTED = (_STATED & pl.col("kv_tokens").is_not_null()) | (
    ~_STATED & pl.col("shape_kv_tokens").is_not_null()
)


def step_efficiency(table: pl.DataFrame, model: ModelSpec, device: GpuSpec | None) -> pl.DataFrame:
    """The steps table with ``tokens``, ``attention_counted``, ``flops``, ``bytes``, ``mfu``
    and ``mbu`` (the module docstring): null where a step states no tokens; a ratio null
    where the device's peak is not known or the step has no busy time."""
    stated = _STATED
    # record_shapes' tokens count only where the step holds a whole forward: one read
    # attention op per full-attention layer (a burst may hold part of one)
    whole = pl.col("shape_attention_ops") == model.full_attention_layers
    t = table.select(
        pl.when(stated)
        .then(pl.col("context_tokens") + pl.col("generation_tokens"))
        .otherwise(pl.when(whole).then(pl.col("shape_tokens")))
        .cast(pl.Int64)
        .alias("tokens")
    )["tokens"]
    known = t.is_not_null().to_numpy()
    tokens = t.fill_null(0).to_numpy().astype(np.int64)
    full = model.full_attention_layers
    # the context lengths the annotation states, else those record_shapes' attention ops do
    context = table.select(
        pl.when(stated & pl.col("attention_pairs").is_not_null())
        .then(pl.col("attention_pairs"))
        .otherwise(pl.when(~stated).then(pl.col("shape_attention_pairs")))
        .alias("pairs"),
        pl.when(stated & pl.col("kv_tokens").is_not_null())
        .then(pl.col("kv_tokens"))
        .otherwise(pl.when(~stated).then(pl.col("shape_kv_tokens")))
        .alias("kv"),
    )
    pairs = context["pairs"]
    counted = pairs.is_not_null().to_numpy()
    per_pair = 2 * model.heads * (model.qk_dim + model.v_dim) * full
    pair_counts = pairs.fill_null(0).to_numpy()
    # FLOPs are exact integers: a step whose count would pass 2^62 (its tokens or pairs
    # beyond any real step's) gets none rather than an int64 that wrapped around
    estimate = 2.0 * model.active_block_params * tokens.astype(np.float64) + np.where(
        counted, pair_counts.astype(np.float64) * float(per_pair), 0.0
    )
    fits = estimate < 2.0**62
    safe_tokens = np.where(fits, tokens, 0)
    flops = 2 * model.active_block_params * safe_tokens + np.where(
        counted & fits, np.where(fits, pair_counts, 0).astype(np.int64) * per_pair, 0
    )
    kv = context["kv"]
    kv_read = kv.fill_null(0).to_numpy().astype(np.float64) * model.kv_bytes_per_token * full
    nbytes = model.weight_bytes(tokens) + np.where(kv.is_not_null().to_numpy(), kv_read, 0.0)
    busy_s = table["busy_ns"].to_numpy().astype(np.float64) / 1e9
    ok = known & fits & (busy_s > 0)
    seconds = np.where(ok, busy_s, np.nan)
    peak = None if device is None else device.peak_flops.get(model.compute_dtype)
    bandwidth = None if device is None else device.peak_bytes_per_s
    nan = np.full(tokens.size, np.nan)
    frame = pl.DataFrame(
        {
            "known": known,
            "fits": fits,
            "tokens": tokens,
            "attention_counted": counted,
            "flops": flops,
            "bytes": nbytes,
            "mfu": flops / seconds / peak if peak else nan,
            "mbu": nbytes / seconds / bandwidth if bandwidth else nan,
        }
    )
    when = pl.col("known")
    return table.with_columns(
        frame.select(
            pl.when(when).then(pl.col("tokens")).alias("tokens"),
            pl.when(when).then(pl.col("attention_counted")).alias("attention_counted"),
            pl.when(when & pl.col("fits")).then(pl.col("flops")).alias("flops"),
            pl.when(when).then(pl.col("bytes")).alias("bytes"),
            pl.col("mfu").fill_nan(None),
            pl.col("mbu").fill_nan(None),
        )
    )


# the per-step columns a model adds to the steps table (:func:`efficiency_section`)
STEP_WORK_COLUMNS: dict[str, pl.DataType] = {
    "tokens": pl.Int64(),
    "attention_counted": pl.Boolean(),
    "flops": pl.Int64(),
    "bytes": pl.Float64(),
    "mfu": pl.Float64(),
    "mbu": pl.Float64(),
}


def _quantile(values: np.ndarray, q: float) -> float | None:
    """numpy's linear percentile, to the document's precision (:func:`sig`)."""
    return sig(float(np.percentile(values, q))) if values.size else None


def phases(table: pl.DataFrame) -> list[EfficiencyPhase]:
    """Per kind of step (decode, mixed, prefill) that the trace has: ``steps`` (those with
    a rate), the p50 and p90 of ``mfu`` and ``mbu``, and ``tflops_p50`` (1e12 FLOP/s) and
    ``gbps_p50`` (1e9 B/s) over the steps' busy time."""
    out: list[EfficiencyPhase] = []
    for kind in KINDS:
        rows = table.filter((pl.col("kind") == kind) & pl.col("flops").is_not_null())
        rows = rows.filter(pl.col("busy_ns") > 0)
        if table.filter(pl.col("kind") == kind).height == 0:
            continue
        busy = rows["busy_ns"].to_numpy().astype(np.float64) / 1e9
        mfu = rows["mfu"].drop_nulls().to_numpy()
        mbu = rows["mbu"].drop_nulls().to_numpy()
        out.append(
            {
                "kind": kind,
                "steps": rows.height,
                "mfu_p50": _quantile(mfu, 50),
                "mfu_p90": _quantile(mfu, 90),
                "mbu_p50": _quantile(mbu, 50),
                "mbu_p90": _quantile(mbu, 90),
                "tflops_p50": _quantile(rows["flops"].to_numpy() / busy / 1e12, 50),
                "gbps_p50": _quantile(rows["bytes"].to_numpy() / busy / 1e9, 50),
            }
        )
    return out


def device_of(trace: Trace, device: int | None) -> Mapping[str, object] | None:
    """The analysed device's ``deviceProperties`` entry (by its ``id``; else the first)."""
    props = trace.meta.device_properties
    mine = [p for p in props if p.get("id") == device]
    return mine[0] if mine else (props[0] if props else None)


def device_peaks(trace: Trace, device: int | None, gpu: GpuSpec | None) -> GpuSpec | None:
    """The analysed device's peaks: ``gpu`` (``--gpu``), else the built-in entry matched
    from its ``deviceProperties``; None where neither."""
    return gpu or match_device(device_of(trace, device))


def efficiency_section(
    trace: Trace,
    device: int | None,
    table: pl.DataFrame,
    model: ModelSpec | None,
    spec: GpuSpec | None,
) -> tuple[pl.DataFrame, Efficiency, list[str]]:
    """The steps table (with the per-step columns where ``model`` is given), the summary's
    ``efficiency`` section (``families`` left for :func:`family_work`) and its warnings.
    ``spec``: the device's peaks (:func:`device_peaks`), None where not known."""
    props = device_of(trace, device)
    warnings: list[str] = []
    name = str(props.get("name") or "") if props else ""
    facts: GpuPeaks = (
        spec.to_dict()
        if spec is not None
        else {"name": name or None, "peak_flops": {}, "peak_bytes_per_s": None, "source": None}
    )
    if model is None:
        return table, {"gpu": facts, "model": None, "phases": None, "families": None}, []
    if spec is None:
        warnings.append(
            f"efficiency: device {name or '(unnamed)'!r} is not in traceview's device table: "
            "MFU and MBU are not given, the rates are (name its peaks with --gpu)"
        )
    elif model.compute_dtype not in spec.peak_flops:
        warnings.append(
            f"efficiency: {spec.name} has no {model.compute_dtype} peak: MFU is not given"
        )
    world = trace.meta.world_size
    if world is not None and world > 1:
        warnings.append(
            f"efficiency: this trace is one rank of {world}: the figures count the whole "
            "model per step; under tensor or expert parallelism each rank runs a share of "
            "it, and its MFU and MBU read that many times too high"
        )
    table = step_efficiency(table, model, spec)
    partial = table.filter(
        pl.col("tokens").is_null()
        & pl.col("shape_tokens").is_not_null()
        & (pl.col("shape_attention_ops") != model.full_attention_layers)
    ).height
    if partial:
        warnings.append(
            f"efficiency: {partial} step(s) hold part of a forward (record_shapes states their "
            f"tokens, but not one attention op per layer, {model.full_attention_layers}): "
            "their FLOPs and bytes are not given"
        )
    missing = int(table["tokens"].null_count()) - partial
    if missing:
        warnings.append(
            f"efficiency: {missing} step(s) state no tokens (no engine annotation, no "
            "record_shapes): their FLOPs and bytes are not given"
        )
    huge = table.filter(pl.col("tokens").is_not_null() & pl.col("flops").is_null()).height
    if huge:
        warnings.append(
            f"efficiency: {huge} step(s) state more tokens or attention pairs than their "
            "FLOPs can be counted for (over 2^62): their figures are not given"
        )
    windowed = model.windowed_layers
    if windowed and table.select((pl.col("flops").is_not_null() & _CONTEXT_COUNTED).any()).item():
        warnings.append(
            f"efficiency: {windowed} of the model's {model.full_attention_layers} attention "
            "layers attend over a sliding window: their KV reads and attention FLOPs are "
            "counted over the whole context, an upper bound (MBU and MFU read high where the "
            "context is longer than the window)"
        )
    warnings += _over_one(table, model)
    section: Efficiency = {
        "gpu": facts,
        "model": model.to_dict(),
        "phases": phases(table.filter(pl.col("phase").is_not_null())),  # warm-up left out
        "families": None,
    }
    return table, section, warnings


def _over_one(table: pl.DataFrame, model: ModelSpec) -> list[str]:
    """A warning for each of MFU and MBU that passes 1 in any step, naming its likely
    causes (on a dense model, never experts)."""
    out = []
    moe = any(layer.experts for layer in model.layers)
    parallel = "tensor- or expert-parallel" if moe else "tensor-parallel"
    causes = (
        f"the config is not the traced model's (a larger one), the trace is one rank of a "
        f"{parallel} run (each rank runs a share of the model)"
    )
    over = int((table["mfu"] > 1).sum())
    if over:
        out.append(
            f"efficiency: MFU above 1 in {over} step(s): more FLOPs counted than the device's "
            f"{model.compute_dtype} peak allows in their busy time; likely {causes}, or the "
            f"peak is too low (a wrong --gpu, or weights that are not {model.compute_dtype})"
        )
    over = int((table["mbu"] > 1).sum())
    if over:
        if moe:
            counted = (
                "the weights read count every expert a step's tokens could reach, "
                "min(E, k·tokens), an upper bound; or"
            )
        else:
            counted = (
                "every weight is counted as read from memory once per step (a small model's "
                "may stay in cache); or"
            )
        out.append(
            f"efficiency: MBU above 1 in {over} step(s): more bytes counted than the device's "
            f"bandwidth moves in their busy time; {counted} {causes}, or the bandwidth is too "
            "low (a wrong --gpu)"
        )
    return out


def _bound(flops: float, nbytes: float, dtype: str | None, spec: GpuSpec | None) -> str | None:
    """``compute`` where the arithmetic intensity (FLOPs per byte) reaches the roofline's
    ridge, ``peak_flops[dtype] / peak_bytes_per_s``, else ``memory``; None where either
    peak is not known."""
    if spec is None or spec.peak_bytes_per_s is None or dtype is None or nbytes <= 0:
        return None
    peak = spec.peak_flops.get(dtype)
    if peak is None:
        return None
    return "compute" if flops / nbytes >= peak / spec.peak_bytes_per_s else "memory"


def _work_by(
    kernels: pl.DataFrame, work: pl.DataFrame, key: str, spec: GpuSpec | None
) -> pl.DataFrame:
    """FLOPs, bytes, rates over the kernels that carry work, arithmetic intensity and
    bound, per value of ``key`` (``name`` or ``family``), for kernels given work."""
    frame = pl.DataFrame(
        {
            key: kernels[key].cast(pl.String),
            "dur_ns": kernels["dur_ns"],
            "flops": work["flops"],
            "bytes": work["bytes"],
            "dtype": work["dtype"],
        }
    ).filter(pl.col("flops").is_not_null())
    by = (
        frame.group_by(key)
        .agg(
            pl.col("flops").sum(),
            pl.col("bytes").sum(),
            pl.col("dur_ns").sum().alias("_ns"),
            # the dtype carrying most of the FLOPs sets the roofline
            pl.col("dtype").sort_by("flops").last().alias("_dtype"),
        )
        .sort(key)
    )
    seconds = pl.col("_ns").cast(pl.Float64) / 1e9
    by = by.with_columns(
        (pl.col("flops") / seconds / 1e12).alias("tflops"),
        (pl.col("bytes") / seconds / 1e9).alias("gbps"),
        (pl.col("flops") / pl.col("bytes")).alias("intensity"),
    )
    bounds = [
        _bound(f, b, d, spec)
        for f, b, d in zip(by["flops"], by["bytes"], by["_dtype"], strict=True)
    ]
    return by.with_columns(pl.Series("bound", bounds, dtype=pl.String)).drop("_ns", "_dtype")


WORK_COLUMNS = {
    "flops": pl.Float64,
    "bytes": pl.Float64,
    "tflops": pl.Float64,
    "gbps": pl.Float64,
    "intensity": pl.Float64,
    "bound": pl.String,
}


def kernel_table_work(
    table: pl.DataFrame,
    kernels: pl.DataFrame,
    work: pl.DataFrame | None,
    spec: GpuSpec | None,
) -> pl.DataFrame:
    """The kernel table with ``flops``, ``bytes``, ``tflops``, ``gbps``, ``intensity`` and
    ``bound`` per kernel name (null where no read op launched it, or without shapes)."""
    if work is None:
        return table.with_columns(pl.lit(None, dtype=t).alias(c) for c, t in WORK_COLUMNS.items())
    return table.join(_work_by(kernels, work, "name", spec), on="name", how="left")


def family_work(
    kernels: pl.DataFrame, work: pl.DataFrame | None, spec: GpuSpec | None
) -> list[EfficiencyFamily] | None:
    """``efficiency.families``: per family with work, its FLOPs and bytes (rounded to
    integers), the rates over its kernels that carry work, and the bound."""
    if work is None:
        return None
    out: list[EfficiencyFamily] = []
    for r in _work_by(kernels, work, "family", spec).iter_rows(named=True):
        out.append(
            {
                "family": r["family"],
                "flops": int(round(r["flops"])),
                "bytes": int(round(r["bytes"])),
                "tflops": None if r["tflops"] is None else sig(r["tflops"]),
                "gbps": None if r["gbps"] is None else sig(r["gbps"]),
                "bound": r["bound"],
            }
        )
    return out
