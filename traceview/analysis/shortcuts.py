"""The module-level shortcuts: ``tv.summarize(t)`` is ``tv.analyze(t).summary``,
``tv.steps(t)`` is ``tv.analyze(t).steps``, and so on. Each maps its keywords onto one
:class:`~traceview.analysis.analyze.AnalysisConfig` and reads one figure of one
:class:`~traceview.analysis.analyze.Analysis`: a figure read through a shortcut is the one
every other surface shows."""

from __future__ import annotations

import polars as pl

from traceview.analysis.analyze import AnalysisConfig, analyze, config_with
from traceview.analysis.classify.families import Rules
from traceview.analysis.documents.summary import Summary
from traceview.analysis.work.devices import DeviceSpec
from traceview.analysis.work.model_config import ModelSpec
from traceview.model import Trace


def summarize(
    trace: Trace,
    rules: Rules | None = None,
    *,
    config: AnalysisConfig | None = None,
    method: str | None = None,
    layers: int | None = None,
    step_gap_ns: int | None = None,
    device: int | None = None,
    model: ModelSpec | None = None,
    gpu: DeviceSpec | None = None,
) -> Summary:
    """Everything traceview knows about a trace, as the ``traceview.summary/1`` document
    (``tv.analyze(trace, config).summary``).

    Args:
        trace: the trace.
        rules: classification (default: the config's, else the built-in preset).
        config: how to analyse it (:class:`~traceview.AnalysisConfig`); ``method``,
            ``layers``, ``step_gap_ns``, ``device``, ``model`` and ``gpu`` are shortcuts
            that replace its fields.

    Raises:
        UnsupportedTraceError: the trace has no device activity and no CPU ops.
    """
    given = config_with(
        config,
        rules,
        method=method,
        layers=layers,
        step_gap_ns=step_gap_ns,
        device=device,
        model=model,
        gpu=gpu,
    )
    return analyze(trace, given).summary


def steps(
    trace: Trace,
    rules: Rules | None = None,
    *,
    config: AnalysisConfig | None = None,
    method: str | None = None,
    layers: int | None = None,
    step_gap_ns: int | None = None,
    device: int | None = None,
) -> pl.DataFrame:
    """The engine steps of one device, one row per step (``tv.analyze(trace).steps``).

    Args:
        trace: the trace.
        rules: classification (default: the built-in preset).
        config: how to analyse it (:class:`~traceview.AnalysisConfig`); ``method``,
            ``layers``, ``step_gap_ns`` and ``device`` are shortcuts that replace its fields.

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
        ``end_ns - start_ns`` exactly; ``host_step_ns`` and ``host_before_gpu_ns`` (Int64,
        ns: the length of the engine's CPU step annotation that issued the step, and the
        time from its start to the step's first submitting call; null without one);
        ``warmup`` (String: graph_capture|triton_autotune|compile|lazy_loading, the
        warm-up the step holds; null for a serving step). With a model in the config:
        ``tokens``, ``attention_counted``, ``flops``, ``bytes``, ``mfu`` and ``mbu``.

        A trace with no device activity is analysed through its CPU ranges, as
        :func:`traceview.summarize` does.

    Raises:
        UnsupportedTraceError: no kernels on the device.
    """
    given = config_with(
        config, rules, method=method, layers=layers, step_gap_ns=step_gap_ns, device=device
    )
    return analyze(trace, given).steps


def decode_gaps(
    trace: Trace,
    rules: Rules | None = None,
    *,
    config: AnalysisConfig | None = None,
    method: str | None = None,
    layers: int | None = None,
    step_gap_ns: int | None = None,
    device: int | None = None,
) -> pl.DataFrame:
    """The decode gaps of one device, one row per gap (``tv.analyze(trace).decode_gaps``).

    Args:
        trace: the trace.
        rules: classification (default: the built-in preset).
        config: how to analyse it (:class:`~traceview.AnalysisConfig`); ``method``,
            ``layers``, ``step_gap_ns`` and ``device`` are shortcuts that replace its fields.

    Returns:
        DataFrame: ``start_ns`` (Int64, ns: the earlier marker's end), ``end_ns`` (Int64,
        ns: the next marker's start), ``gap_ns`` (Int64, ns, overlaps as 0),
        ``period_ns`` (Int64, ns: the next marker's start minus the earlier one's),
        ``overlap`` (Boolean), ``phase`` (Int64), ``population`` (String: decode|mixed).
        A gap across a step left out for warm-up is none.
    """
    given = config_with(
        config, rules, method=method, layers=layers, step_gap_ns=step_gap_ns, device=device
    )
    return analyze(trace, given).decode_gaps


def families(
    trace: Trace,
    rules: Rules | None = None,
    *,
    config: AnalysisConfig | None = None,
    roll_up: bool = False,
    device: int | None = None,
) -> pl.DataFrame:
    """Kernel time per layer family on the analysed device (default: the one with the most
    kernel time), CUDA-graph capture kernels left out (``tv.analyze(trace).families``).

    Args:
        trace: the trace.
        rules: classification (default: the built-in preset).
        config: how to analyse it (:class:`~traceview.AnalysisConfig`).
        roll_up: report top-level families (``linear_attention``) instead of leaves.
        device: the device (replaces the config's).

    Returns:
        DataFrame sorted by ``total_ns`` descending: ``family`` (String), ``count``
        (Int64, kernels), ``total_ns`` (Int64, ns of kernel time), ``mean_ns`` (Float64,
        ns), ``share`` (Float64, fraction of the device's kernel time, 0..1).
    """
    a = analyze(trace, config_with(config, rules, device=device))
    return a.families_rollup if roll_up else a.families


def kernels(
    trace: Trace,
    rules: Rules | None = None,
    *,
    config: AnalysisConfig | None = None,
    device: int | None = None,
) -> pl.DataFrame:
    """Kernel time per kernel name on the analysed device, with its family, capture kernels
    left out (``tv.analyze(trace).kernels``).

    Returns:
        DataFrame sorted by ``total_ns`` descending: ``name`` (String), ``family`` (String),
        ``count`` (Int64), ``total_ns`` (Int64, ns), ``mean_ns`` (Float64, ns), ``share``
        (Float64, fraction of the device's kernel time); and the work read from
        ``record_shapes`` (``flops``, ``bytes``, ``tflops``, ``gbps``, ``intensity``,
        ``bound``; null without shapes).
    """
    return analyze(trace, config_with(config, rules, device=device)).kernels


def busy(
    trace: Trace,
    t0_ns: int | None = None,
    t1_ns: int | None = None,
    *,
    config: AnalysisConfig | None = None,
    device: int | None = None,
) -> pl.DataFrame:
    """GPU-busy fraction of the analysed device, capture kernels left out
    (``tv.analyze(trace).busy``): over its first kernel start to its last kernel end, or
    over ``[t0_ns, t1_ns)`` on the trace's clock (either end, where given, replaces that
    end of the default window). A window that holds none of the activity (before or
    after it) is a UsageError giving the activity's span, as
    :meth:`Trace.window` says of its own.

    Returns:
        DataFrame of one row: ``device`` (Int64), ``window_start_ns``, ``window_end_ns``
        (Int64, ns), ``busy_ns`` (Int64, ns: length of the union of all streams' activity
        inside the window), ``fraction`` (Float64, busy_ns / window length).
    """
    a = analyze(trace, config_with(config, device=device))
    whole = a.busy
    if t0_ns is None and t1_ns is None:
        return whole
    if whole.height == 0:  # no serving kernels: say why (CUDA-graph capture alone)
        a.serving()
        return whole
    start, end = int(whole["window_start_ns"][0]), int(whole["window_end_ns"][0])
    return a.busy_between(start if t0_ns is None else t0_ns, end if t1_ns is None else t1_ns)
