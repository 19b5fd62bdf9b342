"""Tokens per step from ``record_shapes``: the input dims of the step's attention ops.

The rule: an attention op whose layout is known gives the number of query tokens it ran,
from the dims of its first input (the query):

- ``vllm::unified_attention`` / ``vllm::unified_attention_with_output``: ``[T, heads,
  head_size]`` → T (vLLM flattens every request's tokens into one batch);
- ``aten::scaled_dot_product_attention``: ``[B, heads, S, head_size]`` → B·S.

Other attention ops are not read: their layouts differ (FlashAttention's own ``[B, S, heads,
head_size]``), so a guess could be wrong. An op belongs to the step whose span holds the
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

from traceview.analysis.intervals import I64
from traceview.analysis.launches import launches_within
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


def _read(name: str, text: str) -> Read:
    try:
        dims = orjson.loads(text)
        return READERS[name](dims)
    except (orjson.JSONDecodeError, TypeError, ValueError, IndexError, KeyError):
        return None


def _tokens(name: str, text: str) -> int | None:
    read = _read(name, text)
    return None if read is None else read[0]


def _requests(name: str, text: str) -> int | None:
    read = _read(name, text)
    return None if read is None else read[1]


def _launches_in(trace: Trace, ops: pl.DataFrame) -> pl.DataFrame:
    """Each kernel launch's ``correlation`` beside the innermost op of ``ops`` (``pid``,
    ``tid``, ``ts_ns``, ``op_end`` and the op's values) that encloses it on the launching
    thread (:func:`launches_within`); launches outside every op are dropped."""
    corr, row = launches_within(
        trace, ops.select("pid", "tid", pl.col("ts_ns").alias("a0"), pl.col("op_end").alias("a1"))
    )
    return ops[row].with_columns(pl.Series("correlation", corr, dtype=pl.Int64))


def shape_tokens(
    trace: Trace, kernels: pl.DataFrame, starts: I64
) -> tuple[list[int | None], list[int | None]]:
    """Query tokens per step (see the module docstring), and the requests they belong to
    where the op's layout says (``aten::scaled_dot_product_attention``'s batch dim; null
    for vLLM's flattened layout); ``kernels`` are the analysed device's, ``starts`` the
    steps' starts (ns)."""
    none: list[int | None] = [None] * starts.size
    shapes = trace.shapes
    if shapes.height == 0 or starts.size == 0:
        return none, none.copy()
    ops = shapes.filter(pl.col("name").cast(pl.String).is_in(list(READERS)))
    if ops.height == 0:
        return none, none.copy()
    both = pl.struct(pl.col("name").cast(pl.String), "input_dims")
    ops = ops.with_columns(
        both.map_elements(
            lambda r: _tokens(r["name"], r["input_dims"]), return_dtype=pl.Int64
        ).alias("tokens"),
        both.map_elements(
            lambda r: _requests(r["name"], r["input_dims"]), return_dtype=pl.Int64
        ).alias("requests"),
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("op_end"),
    ).filter(pl.col("tokens").is_not_null())
    linked = _launches_in(trace, ops.select("pid", "tid", "ts_ns", "op_end", "tokens", "requests"))
    if linked.height == 0:
        return none, none.copy()
    first_kernel = (
        kernels.select("correlation", pl.col("ts_ns").alias("k_ts"))
        .join(linked.select("correlation", "op_end", "tokens", "requests"), on="correlation")
        .group_by("op_end", "tokens", "requests")
        .agg(pl.col("k_ts").min())
    )
    step = np.searchsorted(starts, first_kernel["k_ts"].to_numpy(), side="right") - 1
    per_step = (
        first_kernel.with_columns(pl.Series("step", step, dtype=pl.Int64))
        .filter(pl.col("step") >= 0)
        .group_by("step")
        .agg(pl.col("tokens").unique(), pl.col("requests").unique())
    )
    tokens, requests = none.copy(), none.copy()
    for i, t, r in per_step.iter_rows():
        if len(t) == 1:
            tokens[i] = int(t[0])
            if len(r) == 1 and r[0] is not None:
                requests[i] = int(r[0])
    return tokens, requests


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


def shape_families(trace: Trace, kernels: pl.DataFrame) -> dict[str, str]:
    """Families that the launching op's input decides where the kernel name cannot.

    The rule: a PyTorch softmax kernel (``GENERIC_SOFTMAX``) is attention's work
    (``full_attention``) when every one of its launches is linked (launch correlation, then
    the innermost enclosing softmax op on the launching thread) to a softmax op whose input
    has rank 3 or more: attention scores are ``[B·heads, Lq, Lk]`` or ``[B, heads, Lq, Lk]``,
    while a sampler's logits are ``[B, vocab]``. Without ``record_shapes``, or where a single
    launch is not linked (a CUDA graph replay) or is 2-D, the name's own rule stands.
    Returns ``{kernel name: family}`` for the names decided.
    """
    if trace.shapes.height == 0 or kernels.height == 0:
        return {}
    names = [str(n) for n in kernels["name"].unique().drop_nulls().to_list()]
    softmax = [n for n in names if GENERIC_SOFTMAX.search(n)]
    if not softmax:
        return {}
    ops = trace.shapes.filter(pl.col("name").cast(pl.String).is_in(SOFTMAX_OPS))
    if ops.height == 0:
        return {}
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
    return {n: "full_attention" for n, attention in mine.iter_rows() if attention}
