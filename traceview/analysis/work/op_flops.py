"""FLOPs and bytes from record_shapes: each GEMM or attention op's work from its input
shapes and dtypes, handed to the kernels it launched (docs/metrics.md, "Per op from
shapes").

An op's work, from its ``Input Dims`` and ``Input type`` (``s`` the bytes per element):

- ``aten::mm`` ``[M,K]·[K,N]``, ``aten::_scaled_mm`` (the same, fp8 in): ``2·M·K·N``
  FLOPs; bytes ``(M·K + K·N + M·N)·s``;
- ``aten::addmm`` ``bias, [M,K], [K,N]`` and ``aten::linear`` ``[…,K], [N,K], bias``
  (``M`` the product of the leading dims): the same, plus the bias read;
- ``aten::bmm`` ``[B,M,K]·[B,K,N]`` and ``aten::baddbmm``: ``2·B·M·K·N``;
- ``aten::matmul``: as mm, linear or bmm by its operands' ranks (batch dims broadcast);
- ``aten::scaled_dot_product_attention`` and its ``_scaled_dot_product_*_attention`` forms,
  ``[B,H,S,D]`` queries against ``[B,H_kv,S_kv,D]`` keys and ``[…,D_v]`` values:
  ``2·B·H·S·S_kv·(D + D_v)`` (the full score matrix: a causal mask is not deducted);
  bytes, the four tensors once.

- a convolution (``aten::conv1d/2d/3d``, ``aten::convolution``, ``aten::_convolution``,
  ``aten::cudnn_convolution``, ``aten::miopen_convolution``), ``[N,C,*in]`` by a weight
  ``[O,C/g,*k]``, its stride, padding, dilation and groups read from ``Concrete Inputs``:
  each output size ``(in + 2·pad − dil·(k − 1) − 1) // stride + 1``, FLOPs ``2·N·O·
  prod(out)·(C/g)·prod(k)``; bytes, input, weight and output once. A transposed
  convolution, or one whose arguments are not recorded, is not counted.

The innermost such op around a launch (runtime or driver: ``cuLaunchKernel``
too) on its thread owns the kernels that launch started, through the correlation id; its
FLOPs and bytes go to the longest of its compute kernels (never to a copy or a memset it
also launched, nor to the layout copy a matmul may run before its GEMM).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import orjson
import polars as pl

from traceview.analysis.base.launches import launches_within
from traceview.model import Trace

Dims = list[list[int]]
Concrete = list[str]  # each input's value as record_shapes writes it ("" for a tensor)
Work = tuple[float, float, str] | None  # FLOPs, bytes, the dtype the math runs in

ELEMENT = {  # Input type -> (bytes per element, the dtype of its peak)
    "c10::BFloat16": (2.0, "bf16"),
    "c10::Half": (2.0, "fp16"),
    "float": (4.0, "fp32"),
    "double": (8.0, "fp32"),
    "c10::Float8_e4m3fn": (1.0, "fp8"),
    "c10::Float8_e5m2": (1.0, "fp8"),
    "c10::Float8_e4m3fnuz": (1.0, "fp8"),
    "c10::Float8_e5m2fnuz": (1.0, "fp8"),
    "c10::Float4_e2m1fn_x2": (1.0, "fp4"),  # two values per byte, as the tensor stores them
}


def _numel(shape: list[int]) -> int:
    return math.prod(shape) if shape else 0


def _element(types: list[str], i: int) -> tuple[float, str] | None:
    return ELEMENT.get(types[i]) if i < len(types) else None


def _gemm(m: int, k: int, n: int, batch: int, s: float, dtype: str, extra: float = 0) -> Work:
    flops = 2.0 * batch * m * k * n
    return flops, (batch * (m * k + k * n + m * n) + extra) * s, dtype


# where a convolution op keeps stride, padding, dilation, groups (and transposed) among its
# inputs, by the op's schema
CONV_ARGS = {
    "aten::conv1d": (3, 4, 5, 6, None),
    "aten::conv2d": (3, 4, 5, 6, None),
    "aten::conv3d": (3, 4, 5, 6, None),
    "aten::convolution": (3, 4, 5, 8, 6),
    "aten::_convolution": (3, 4, 5, 8, 6),
    "aten::cudnn_convolution": (3, 2, 4, 5, None),
    "aten::miopen_convolution": (4, 3, 5, 6, None),
}


def _value(text: str) -> object:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text  # 'same', 'valid', 'False' as written


def _conv(name: str, dims: Dims, types: list[str], concrete: Concrete) -> Work:
    x, w, e = dims[0], dims[1], _element(types, 0)
    spatial = len(x) - 2
    if e is None or spatial < 1 or len(w) != len(x) or not concrete:
        return None
    at_stride, at_pad, at_dil, at_groups, at_transposed = CONV_ARGS[name]
    if at_transposed is not None and str(_value(concrete[at_transposed])) in ("True", "true"):
        return None
    stride, pad, dil, groups = (_value(concrete[i]) for i in (at_stride, at_pad, at_dil, at_groups))
    if not isinstance(groups, int) or groups < 1 or x[1] != w[1] * groups:
        return None

    def per_dim(v: object, default: int) -> list[int] | None:
        if isinstance(v, int):
            return [v] * spatial
        if isinstance(v, list) and len(v) == spatial and all(isinstance(i, int) for i in v):
            return v
        return None if v not in ("", None) else [default] * spatial

    s, d = per_dim(stride, 1), per_dim(dil, 1)
    if s is None or d is None:
        return None
    if pad == "valid":
        p: list[int] | None = [0] * spatial
    elif pad == "same":
        p = None
    else:
        p = per_dim(pad, 0)
        if p is None:
            return None
    kernel = w[2:]
    if p is None:  # 'same': the output keeps the input's size (stride 1)
        out = list(x[2:])
    else:
        out = [
            (n + 2 * pp - dd * (k - 1) - 1) // ss + 1
            for n, pp, dd, k, ss in zip(x[2:], p, d, kernel, s, strict=True)
        ]
    if min(out) < 1:
        return None
    flops = 2.0 * x[0] * w[0] * math.prod(out) * w[1] * math.prod(kernel)
    nbytes = (_numel(x) + _numel(w) + x[0] * w[0] * math.prod(out)) * e[0]
    return flops, nbytes, e[1]


def _mm(dims: Dims, types: list[str], a: int = 0) -> Work:
    x, w, e = dims[a], dims[a + 1], _element(types, a)
    if e is None or len(x) != 2 or len(w) != 2 or x[1] != w[0]:
        return None
    return _gemm(x[0], x[1], w[1], 1, *e)


def _addmm(dims: Dims, types: list[str]) -> Work:
    work = _mm(dims, types, 1)
    e = _element(types, 1)
    if work is None or e is None:
        return None
    return work[0], work[1] + _numel(dims[0]) * e[0], work[2]


def _bmm(dims: Dims, types: list[str], a: int = 0) -> Work:
    x, w, e = dims[a], dims[a + 1], _element(types, a)
    if e is None or len(x) != 3 or len(w) != 3 or x[0] != w[0] or x[2] != w[1]:
        return None
    return _gemm(x[1], x[2], w[2], x[0], *e)


def _linear(dims: Dims, types: list[str]) -> Work:
    x, w, e = dims[0], dims[1], _element(types, 0)
    if e is None or len(x) < 1 or len(w) != 2 or x[-1] != w[1]:
        return None
    bias = _numel(dims[2]) if len(dims) > 2 else 0
    return _gemm(_numel(x[:-1]) or 1, w[1], w[0], 1, *e, extra=bias)


def _matmul(dims: Dims, types: list[str]) -> Work:
    x, w, e = dims[0], dims[1], _element(types, 0)
    if e is None or not x or not w:
        return None
    if len(w) == 1:  # a matrix-vector product
        w = [w[0], 1]
    if len(x) == 1:
        x = [1, x[0]]
    if x[-1] != w[-2]:
        return None
    lead_x, lead_w = x[:-2], w[:-2]
    if not lead_w:  # […, M, K] · [K, N]: the leading dims fold into M
        return _gemm(_numel(x[:-1]), x[-1], w[-1], 1, *e)
    batch = math.prod(
        max(a, b) for a, b in zip(_pad(lead_x, lead_w), _pad(lead_w, lead_x), strict=True)
    )
    return _gemm(x[-2], x[-1], w[-1], batch, *e)


def _pad(a: list[int], b: list[int]) -> list[int]:
    return [1] * (len(b) - len(a)) + a if len(b) > len(a) else a


def _attention(dims: Dims, types: list[str]) -> Work:
    q, k, v, e = dims[0], dims[1], dims[2], _element(types, 0)
    if e is None or len(q) != 4 or len(k) != 4 or len(v) != 4 or q[3] != k[3]:
        return None
    b, h, s, d = q
    s_kv, d_v = k[2], v[3]
    flops = 2.0 * b * h * s * s_kv * (d + d_v)
    return flops, (_numel(q) + _numel(k) + _numel(v) + b * h * s * d_v) * e[0], e[1]


READERS: dict[str, Callable[[Dims, list[str]], Work] | None] = {
    "aten::mm": _mm,
    "aten::_scaled_mm": _mm,
    "aten::addmm": _addmm,
    "aten::bmm": _bmm,
    "aten::baddbmm": lambda d, t: _bmm(d, t, 1),
    "aten::linear": _linear,
    "aten::matmul": _matmul,
    "aten::scaled_dot_product_attention": _attention,
    "aten::_scaled_dot_product_flash_attention": _attention,
    "aten::_scaled_dot_product_efficient_attention": _attention,
    "aten::_scaled_dot_product_cudnn_attention": _attention,
    **dict.fromkeys(CONV_ARGS),  # read with their concrete inputs (_conv)
}


def op_work(
    name: str, dims_text: str, types_text: str | None, concrete_text: str | None = None
) -> Work:
    """One op's FLOPs, bytes and compute dtype from its shapes, or None where its name,
    shapes or dtypes are not read (the module docstring)."""
    if name not in READERS or types_text is None:
        return None
    try:
        dims, types = orjson.loads(dims_text), orjson.loads(types_text)
        if not isinstance(dims, list) or not isinstance(types, list) or len(dims) < 2:
            return None
        reader = READERS[name]
        if reader is None:
            concrete = orjson.loads(concrete_text) if concrete_text else []
            if not isinstance(concrete, list):
                return None
            return _conv(name, dims, [str(x) for x in types], [str(x) for x in concrete])
        return reader(dims, [str(x) for x in types])
    except (orjson.JSONDecodeError, TypeError, ValueError, IndexError, ZeroDivisionError):
        return None


def ops_with_work(trace: Trace) -> pl.DataFrame:
    """The trace's GEMM and attention ops whose work is read: ``pid``, ``tid``, ``a0``,
    ``a1`` (ns), ``name``, ``flops``, ``bytes``, ``dtype``."""
    shapes = trace.shapes.filter(pl.col("name").cast(pl.String).is_in(list(READERS)))
    rows = []
    for r in shapes.iter_rows(named=True):
        work = op_work(
            str(r["name"]), r["input_dims"], r.get("input_types"), r.get("concrete_inputs")
        )
        if work is not None:
            rows.append(
                (r["pid"], r["tid"], r["ts_ns"], r["ts_ns"] + r["dur_ns"], str(r["name"]), *work)
            )
    return pl.DataFrame(
        rows,
        schema={
            "pid": pl.Int64,
            "tid": pl.Int64,
            "a0": pl.Int64,
            "a1": pl.Int64,
            "name": pl.String,
            "flops": pl.Float64,
            "bytes": pl.Float64,
            "dtype": pl.String,
        },
        orient="row",
    )


def kernel_work(trace: Trace, kernels: pl.DataFrame) -> pl.DataFrame | None:
    """Per kernel row of ``kernels`` (the analysed device's): ``flops``, ``bytes`` and
    ``dtype`` handed down from the innermost read op that launched it (null where none);
    None where the trace has no such op."""
    if trace.shapes.height == 0:
        return None
    ops = ops_with_work(trace)
    if ops.height == 0:
        return None
    corr, row = launches_within(trace, ops.select("pid", "tid", "a0", "a1"))
    if corr.size == 0:
        return None
    linked = pl.DataFrame({"correlation": corr, "_op": row.astype(np.int64)}).unique(
        "correlation", keep="first"
    )
    k = kernels.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("_k"),
        "correlation",
        "dur_ns",
        (pl.col("event_kind").cast(pl.String) == "kernel").alias("compute"),
    ).join(linked, on="correlation", how="left")
    k = k.with_columns(pl.when(pl.col("compute")).then(pl.col("_op")).alias("_op"))
    # an op's work goes to its longest compute kernel (the first, on a tie)
    longest = pl.struct(-pl.col("dur_ns"), pl.col("_k")).rank("ordinal").over("_op") == 1
    k = k.with_columns(pl.when(longest).then(pl.col("_op")).alias("_op"))
    ops_indexed = ops.with_row_index("_op").with_columns(pl.col("_op").cast(pl.Int64))
    k = k.join(ops_indexed.select("_op", "flops", "bytes", "dtype"), on="_op", how="left")
    return k.sort("_k").select("flops", "bytes", "dtype")
