"""Tokens per step from ``record_shapes``: the input dims of the step's attention ops.

The rule: an attention op whose layout is known gives the number of query tokens it ran,
from the dims of its first input (the query):

- ``vllm::unified_attention`` / ``vllm::unified_attention_with_output``: ``[T, heads,
  head_size]`` → T (vLLM flattens every request's tokens into one batch);
- ``aten::scaled_dot_product_attention``: ``[B, heads, S, head_size]`` → B·S.

Other attention ops are not read: their layouts differ (FlashAttention's own ``[B, S, heads,
head_size]``), so a guess could be wrong. ``aten::scaled_dot_product_attention``'s keys
``[B, heads_kv, S_kv, head_size]`` also give the step's context: ``B·S_kv`` KV tokens and,
its S queries being the last of each sequence (a causal forward), ``B·(S·(S_kv − S) +
S·(S + 1)/2)`` causal (query, key) pairs (``shape_kv_tokens``, ``shape_attention_pairs``).
``shape_attention_ops`` counts the read ops that belong to the step: one per attention
layer when the step holds a whole forward. An op belongs to the step whose span holds the
first kernel it launched (linked through the launch's correlation id). A step's count is
known only when every read op in it agrees (the layers of one forward see the same tokens);
otherwise, and where no op was read, it is null. The count is all query tokens of the
step: prompt and decode together, since the shapes do not tell them apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import orjson
import polars as pl

from traceview.analysis.base.intervals import I64
from traceview.analysis.base.launches import launches_within
from traceview.model import Trace

Read = tuple[int, int | None] | None  # (query tokens, requests where the layout says)


def _first_dim(dims: list[list[int]]) -> Read:
    q = dims[0] if dims else []
    return (int(q[0]), None) if len(q) == 3 else None


def _batch_times_seq(dims: list[list[int]]) -> Read:
    q = dims[0] if dims else []
    return (int(q[0]) * int(q[2]), int(q[0])) if len(q) == 4 else None


READERS: dict[str, Callable[[list[list[int]]], Read]] = {
    "vllm::unified_attention": _first_dim,
    "vllm::unified_attention_with_output": _first_dim,
    "aten::scaled_dot_product_attention": _batch_times_seq,
}


PER_OP = ("tokens", "requests", "kv", "pairs")
OP_VALUES = pl.Struct(dict.fromkeys(PER_OP, pl.Int64))


def _context(name: str, dims: list[list[int]]) -> tuple[int, int] | None:
    """KV tokens and causal pairs of an ``aten::scaled_dot_product_attention`` op (module
    docstring); None for every other op, or a layout that does not fit."""
    if name != "aten::scaled_dot_product_attention":
        return None
    q, k = dims[0], dims[1]
    if len(q) != 4 or len(k) != 4 or q[0] != k[0]:
        return None
    b, s, s_kv = int(q[0]), int(q[2]), int(k[2])
    if s > s_kv:
        return None
    return b * s_kv, b * (s * (s_kv - s) + s * (s + 1) // 2)


def _op_values(name: str, text: str) -> dict[str, int | None]:
    """An op's query tokens, requests, KV tokens and causal pairs (:data:`PER_OP`), from
    its input dims, parsed once; null where its layout does not say."""
    out: dict[str, int | None] = dict.fromkeys(PER_OP)
    try:
        dims = orjson.loads(text)
        read: Read = READERS[name](dims)
        if read is not None:
            out["tokens"], out["requests"] = read
        context = _context(name, dims)
        if context is not None:
            out["kv"], out["pairs"] = context
    except (orjson.JSONDecodeError, TypeError, ValueError, IndexError, KeyError):
        pass
    return out


def _launches_in(trace: Trace, ops: pl.DataFrame) -> pl.DataFrame:
    """Each kernel launch's ``correlation`` beside the innermost op of ``ops`` (``pid``,
    ``tid``, ``ts_ns``, ``op_end`` and the op's values) that encloses it on the launching
    thread (:func:`launches_within`); launches outside every op are dropped."""
    corr, row = launches_within(
        trace, ops.select("pid", "tid", pl.col("ts_ns").alias("a0"), pl.col("op_end").alias("a1"))
    )
    return ops[row].with_columns(pl.Series("correlation", corr, dtype=pl.Int64))


Column = list[int | None]
ShapeColumns = tuple[Column, Column, Column, Column, Column]


def shape_tokens(trace: Trace, kernels: pl.DataFrame, starts: I64) -> ShapeColumns:
    """Per step (see the module docstring): query tokens; the requests they belong to where
    the op's layout says (``aten::scaled_dot_product_attention``'s batch dim; null for
    vLLM's flattened layout); KV tokens and causal attention pairs, where the ops' keys say;
    how many read ops belong to the step.
    ``kernels`` are the analysed device's, ``starts`` the steps' starts (ns)."""
    none: list[int | None] = [None] * starts.size
    nothing = (none, none.copy(), none.copy(), none.copy(), none.copy())
    shapes = trace.shapes
    if shapes.height == 0 or starts.size == 0:
        return nothing
    ops = shapes.filter(pl.col("name").cast(pl.String).is_in(list(READERS)))
    if ops.height == 0:
        return nothing
    both = pl.struct(pl.col("name").cast(pl.String), "input_dims")
    values = both.map_elements(
        lambda r: _op_values(r["name"], r["input_dims"]), return_dtype=OP_VALUES
    )
    ops = (
        ops.with_columns(
            values.alias("_values"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("op_end")
        )
        .unnest("_values")
        .filter(pl.col("tokens").is_not_null())
    )

    linked = _launches_in(trace, ops.select("pid", "tid", "ts_ns", "op_end", *PER_OP))
    if linked.height == 0:
        return nothing
    first_kernel = (
        kernels.select("correlation", pl.col("ts_ns").alias("k_ts"))
        .join(linked.select("correlation", "op_end", *PER_OP), on="correlation")
        .group_by("op_end", *PER_OP)
        .agg(pl.col("k_ts").min())
    )
    step = np.searchsorted(starts, first_kernel["k_ts"].to_numpy(), side="right") - 1
    per_step = (
        first_kernel.with_columns(pl.Series("step", step, dtype=pl.Int64))
        .filter(pl.col("step") >= 0)
        .group_by("step")
        .agg(*(pl.col(c).unique() for c in PER_OP), pl.len().alias("ops"))
    )
    tokens, requests, kv, pairs = none.copy(), none.copy(), none.copy(), none.copy()
    ops_in = none.copy()
    for i, t, r, k, p, n in per_step.iter_rows():
        if len(t) == 1:  # every read op of the step agrees
            tokens[i], ops_in[i] = int(t[0]), int(n)
            if len(r) == 1 and r[0] is not None:
                requests[i] = int(r[0])
            if len(k) == 1 and len(p) == 1 and k[0] is not None and p[0] is not None:
                kv[i], pairs[i] = int(k[0]), int(p[0])
    return tokens, requests, kv, pairs, ops_in


# PyTorch's own softmax kernels: the name says softmax, not whose. The sampler's softmax over
# logits and eager attention's softmax over its scores launch the same kernels.
GENERIC_SOFTMAX = re.compile(r"cunn_SoftMaxForward|softmax_warp_forward|SoftMaxForwardSmem")
SOFTMAX_OPS = ("aten::_softmax", "aten::softmax", "aten::_masked_softmax", "aten::_safe_softmax")


def _rank(text: str) -> int | None:
    try:
        dims = orjson.loads(text)
        return len(dims[0]) if dims and isinstance(dims[0], list) else None
    except (orjson.JSONDecodeError, TypeError, IndexError):
        return None


# Inductor's template kernels: FlexAttention's (``triton_tem_fused_0`` under the
# ``flex_attention`` op) and the matmul templates' share the name's prefix
TEMPLATE = re.compile(r"^triton_tem_fused")
# the host ranges that say a launch is attention's: FlexAttention's op (eager, or the
# higher-order op), a Python frame of a ``flex_attention.py`` (with stacks: PyTorch's
# torch/nn/attention/flex_attention.py, vLLM's FlexAttention backend), and vLLM's attention
# op, around the compiled region whose launches Inductor records under the kernel's name
FLEX_OPS = r"(?i)flex_(attention|decoding)|^vllm::unified_attention"
FLEX_KINDS = ("cpu_op", "user_annotation", "python_function")


def _every_launch_in(
    trace: Trace, kernels: pl.DataFrame, names: list[str], ops: pl.DataFrame
) -> list[str]:
    """Of ``names``, those whose every launch lies inside one of ``ops`` (``pid``,
    ``tid``, ``ts_ns``, ``op_end``) on its launching thread."""
    linked = _launches_in(trace, ops).select("correlation").with_columns(pl.lit(True).alias("in"))
    mine = (
        kernels.filter(pl.col("name").cast(pl.String).is_in(names))
        .select(pl.col("name").cast(pl.String), "correlation")
        .join(linked.unique("correlation"), on="correlation", how="left")
        .group_by("name")
        .agg(pl.col("in").fill_null(False).all())
    )
    return [n for n, inside in mine.iter_rows() if inside]


def _flex_templates(trace: Trace, kernels: pl.DataFrame, names: list[str]) -> list[str]:
    """Inductor template kernels (:data:`TEMPLATE`) whose every launch lies inside a host
    range of :data:`FLEX_OPS` (an op, annotation or Python frame): FlexAttention's."""
    templates = [n for n in names if TEMPLATE.search(n)]
    if not templates:
        return []
    ops = trace.events.filter(
        pl.col("event_kind").is_in(FLEX_KINDS)
        & pl.col("name").cast(pl.String).str.contains(FLEX_OPS)
    )
    if ops.height == 0:
        return []
    ops = ops.select("pid", "tid", "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("op_end"))
    return _every_launch_in(trace, kernels, templates, ops)


def shape_families(trace: Trace, kernels: pl.DataFrame) -> dict[str, str]:
    """Families that the launching op decides where the kernel name cannot.

    The rules:

    - an Inductor template kernel (``triton_tem_fused_…``) is attention's
      (``full_attention``) when every one of its launches is linked (launch correlation,
      then an enclosing range on the launching thread) to a host op or annotation named
      ``flex_attention`` or ``flex_decoding``, a Python frame of a ``flex_attention.py``,
      or vLLM's ``vllm::unified_attention…`` op: FlexAttention's template, whose name
      (``triton_tem_fused_0``) Inductor's matmul templates share. Compiled, it launches
      under Inductor's record function named after the kernel, so the op around the
      compiled region is the evidence;
    - a PyTorch softmax kernel (``GENERIC_SOFTMAX``) is attention's work when every one
      of its launches is linked to a softmax op whose input has rank 3 or more:
      attention scores are ``[B·heads, Lq, Lk]`` or ``[B, heads, Lq, Lk]``, while a
      sampler's logits are ``[B, vocab]`` (this one needs ``record_shapes``).

    Where a single launch is not linked (a CUDA graph replay), or a softmax's is 2-D, the
    name's own rule stands. Returns ``{kernel name: family}`` for the names decided.
    """
    if kernels.height == 0:
        return {}
    names = [str(n) for n in kernels["name"].unique().drop_nulls().to_list()]
    out = dict.fromkeys(_flex_templates(trace, kernels, names), "full_attention")
    if trace.shapes.height == 0:
        return out
    softmax = [n for n in names if GENERIC_SOFTMAX.search(n)]
    if not softmax:
        return out
    ops = trace.shapes.filter(pl.col("name").cast(pl.String).is_in(SOFTMAX_OPS))
    if ops.height == 0:
        return out
    ops = ops.select(
        "pid",
        "tid",
        "ts_ns",
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("op_end"),
        pl.col("input_dims").map_elements(_rank, return_dtype=pl.Int64).alias("rank"),
    )
    linked = _launches_in(trace, ops).select("correlation", "rank")
    mine = (
        kernels.filter(pl.col("name").cast(pl.String).is_in(softmax))
        .select(pl.col("name").cast(pl.String), "correlation")
        .join(linked, on="correlation", how="left")
        .group_by("name")
        .agg((pl.col("rank").fill_null(0) >= 3).all().alias("attention"))
    )
    out |= {n: "full_attention" for n, attention in mine.iter_rows() if attention}
    return out
