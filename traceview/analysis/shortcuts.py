"""The module-level shortcuts: ``tv.summarize(t)`` is ``tv.analyze(t).summary``,
``tv.steps(t)`` is ``tv.analyze(t).steps``, and so on. Each takes the trace and one
:class:`~traceview.analysis.analyze.AnalysisConfig` (the one way to say how a trace is
analysed) and reads one figure of one :class:`~traceview.analysis.analyze.Analysis`: a
figure read through a shortcut is the one every other surface shows.

The keywords they took before the config (``rules``, ``method``, ``layers``,
``step_gap_ns``, ``device``, ``model``, ``gpu``) still work for one release: each replaces
its field of the config, and warns."""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from traceview._deprecated import deprecated
from traceview.analysis.analyze import AnalysisConfig, analyze
from traceview.analysis.classify.families import Rules
from traceview.analysis.documents.summary import Summary
from traceview.model import Trace

# the keywords each shortcut took beside its config, in the order they were given
_STEP_FIELDS = ("rules", "method", "layers", "step_gap_ns", "device")
_OLD_KEYWORDS = {
    "summarize": (*_STEP_FIELDS, "model", "gpu"),
    "steps": _STEP_FIELDS,
    "decode_gaps": _STEP_FIELDS,
    "families": ("rules", "device"),
    "kernels": ("rules", "device"),
    "busy": ("device",),
}


def _config(shortcut: str, config: object, old: dict[str, object]) -> AnalysisConfig | None:
    """The shortcut's config, with each old keyword that is given (not None) replacing its
    field (a :class:`Rules` given where the config goes is the old ``rules`` argument);
    each warns, naming the config field to set instead.

    Raises:
        TypeError: a keyword the shortcut never took, as Python says of any call.
    """
    if isinstance(config, Rules):  # tv.steps(trace, rules): the old second argument
        old = {"rules": config, **old}
        config = None
    allowed = _OLD_KEYWORDS[shortcut]
    unknown = sorted(set(old) - set(allowed))
    if unknown:
        raise TypeError(f"{shortcut}() got an unexpected keyword argument {unknown[0]!r}")
    given = {k: v for k, v in old.items() if v is not None}
    if not given:
        return config  # type: ignore[return-value]  # (analyze refuses what is no config)
    fields = ", ".join(f"{k}=..." for k in given)
    deprecated(
        f"tv.{shortcut}(trace, {fields})",
        f"tv.{shortcut}(trace, tv.AnalysisConfig({fields}))",
        stacklevel=4,
    )
    base = config if isinstance(config, AnalysisConfig) else AnalysisConfig()
    return replace(base, **given)  # type: ignore[arg-type]


def summarize(trace: Trace, config: AnalysisConfig | None = None, **deprecated: object) -> Summary:
    """Everything traceview knows about a trace, as the ``traceview.summary/1`` document
    (``tv.analyze(trace, config).summary``).

    Args:
        trace: the trace.
        config: how to analyse it (:class:`~traceview.AnalysisConfig`; default: its
            defaults).
        **deprecated: ``rules``, ``method``, ``layers``, ``step_gap_ns``, ``device``,
            ``model``, ``gpu``: each replaces its field of the config, and warns.

    Raises:
        UnsupportedTraceError: the trace has no device activity and no CPU ops.
    """
    return analyze(trace, _config("summarize", config, deprecated)).summary


def steps(trace: Trace, config: AnalysisConfig | None = None, **deprecated: object) -> pl.DataFrame:
    """The engine steps of one device, one row per step (``tv.analyze(trace).steps``).

    Args:
        trace: the trace.
        config: how to analyse it (:class:`~traceview.AnalysisConfig`).
        **deprecated: ``rules``, ``method``, ``layers``, ``step_gap_ns``, ``device``:
            each replaces its field of the config, and warns.

    Returns:
        DataFrame: ``index`` (Int64), ``start_ns``, ``anchor_ns``, ``end_ns`` (Int64, ns),
        ``interval_ns`` (Int64, ns, anchor-to-anchor; null for the first step), ``kind``
        (String: decode|mixed|prefill), ``kind_source`` (String: annotation|shapes|kernels,
        the evidence that decided the kind), ``phase`` (Int64, index of the phase; null
        for a step left out for warm-up),
        ``kernels`` (Int64, kernels starting in the step), ``busy_fraction`` (Float64,
        device-busy share of the step's span), ``prefill_ns`` and ``prefill_kernels``
        (Int64: ns and count of the prefill-only kernels starting in the step),
        ``annotation`` (String, the engine's outermost step annotation, when there is one);
        the engine's step record, null where its annotations do not say:
        ``context_requests``, ``context_tokens``, ``generation_requests``,
        ``generation_tokens``, ``new_requests``, ``cached_requests``, ``kv_tokens``,
        ``attention_pairs`` (Int64; the last two from vLLM's detailed form) and
        ``forward_mode`` (String, SGLang's); ``shape_tokens`` (Int64, the step's query
        tokens read from ``record_shapes``; null where not recorded or ambiguous),
        ``shape_kv_tokens``, ``shape_attention_pairs`` and ``shape_attention_ops`` (Int64,
        the context and the attention ops read there); ``ns_<family>`` (Int64, ns of kernel
        time per family in the step); and where the step's time went: ``busy_ns`` and
        ``idle_host_late_ns``, ``idle_launch_ns``, ``idle_sync_ns``,
        ``idle_dependency_ns``, ``idle_other_ns`` (Int64, ns), which add up to
        ``end_ns - start_ns`` exactly (null where the host's and the device's clocks
        disagree: :mod:`traceview.analysis.timing.clocks`); ``host_step_ns`` and
        ``host_before_gpu_ns`` (Int64, ns: the length of the engine's CPU step annotation
        that issued the step, and the time from its start to the step's first submitting
        call; null without one); ``warmup`` (String: graph_capture|triton_autotune|compile|
        lazy_loading, the warm-up the step holds; null for a serving step). With a model in
        the config: ``tokens``, ``attention_counted``, ``flops``, ``bytes``, ``mfu`` and
        ``mbu``.

        A trace with no device activity is analysed through its CPU ranges, as
        :func:`traceview.summarize` does.

    Raises:
        UnsupportedTraceError: no kernels on the device.
    """
    return analyze(trace, _config("steps", config, deprecated)).steps


def decode_gaps(
    trace: Trace, config: AnalysisConfig | None = None, **deprecated: object
) -> pl.DataFrame:
    """The decode gaps of one device, one row per gap (``tv.analyze(trace).decode_gaps``).

    Args:
        trace: the trace.
        config: how to analyse it (:class:`~traceview.AnalysisConfig`).
        **deprecated: ``rules``, ``method``, ``layers``, ``step_gap_ns``, ``device``:
            each replaces its field of the config, and warns.

    Returns:
        DataFrame: ``start_ns`` (Int64, ns: the earlier marker's end), ``end_ns`` (Int64,
        ns: the next marker's start), ``gap_ns`` (Int64, ns, overlaps as 0),
        ``period_ns`` (Int64, ns: the next marker's start minus the earlier one's),
        ``overlap`` (Boolean), ``phase`` (Int64), ``population`` (String: decode|mixed).
        A gap across a step left out for warm-up is none.
    """
    return analyze(trace, _config("decode_gaps", config, deprecated)).decode_gaps


def families(
    trace: Trace,
    config: AnalysisConfig | None = None,
    *,
    roll_up: bool = False,
    **deprecated: object,
) -> pl.DataFrame:
    """Kernel time per layer family on the analysed device (default: the one with the most
    kernel time), CUDA-graph capture kernels left out (``tv.analyze(trace).families``).

    Args:
        trace: the trace.
        config: how to analyse it (:class:`~traceview.AnalysisConfig`).
        roll_up: report top-level families (``linear_attention``) instead of leaves.
        **deprecated: ``rules``, ``device``: each replaces its field of the config, and
            warns.

    Returns:
        DataFrame sorted by ``total_ns`` descending: ``family`` (String), ``count``
        (Int64, kernels), ``total_ns`` (Int64, ns of kernel time), ``mean_ns`` (Float64,
        ns), ``share`` (Float64, fraction of the device's kernel time, 0..1).
    """
    a = analyze(trace, _config("families", config, deprecated))
    return a.families_rollup if roll_up else a.families


def kernels(
    trace: Trace, config: AnalysisConfig | None = None, **deprecated: object
) -> pl.DataFrame:
    """Kernel time per kernel name on the analysed device, with its family, capture kernels
    left out (``tv.analyze(trace).kernels``). ``**deprecated``: ``rules``, ``device``, each
    replacing its field of the config, and warning.

    Returns:
        DataFrame sorted by ``total_ns`` descending: ``name`` (String), ``family`` (String),
        ``count`` (Int64), ``total_ns`` (Int64, ns), ``mean_ns`` (Float64, ns), ``share``
        (Float64, fraction of the device's kernel time); and the work read from
        ``record_shapes`` (``flops``, ``bytes``, ``tflops``, ``gbps``, ``intensity``,
        ``bound``; null without shapes).
    """
    return analyze(trace, _config("kernels", config, deprecated)).kernels


def busy(
    trace: Trace,
    t0_ns: int | None = None,
    t1_ns: int | None = None,
    *,
    config: AnalysisConfig | None = None,
    **deprecated: object,
) -> pl.DataFrame:
    """GPU-busy fraction of the analysed device, capture kernels left out
    (``tv.analyze(trace).busy``): over its first kernel start to its last kernel end, or
    over ``[t0_ns, t1_ns)`` on the trace's clock (either end, where given, replaces that
    end of the default window). Where steps are left out for warm-up, the window is
    measured inside the serving time alone (:meth:`Analysis.busy_between`). A window that
    holds none of the activity (before or after it) is a UsageError giving the activity's
    span, as :meth:`Trace.window` says of its own.

    Returns:
        DataFrame of one row: ``device`` (Int64), ``window_start_ns``, ``window_end_ns``
        (Int64, ns), ``busy_ns`` (Int64, ns: length of the union of all streams' activity
        inside the window), ``fraction`` (Float64, busy_ns / window length).
    """
    a = analyze(trace, _config("busy", config, deprecated))
    return a.busy if t0_ns is None and t1_ns is None else a.busy_between(t0_ns, t1_ns)
