"""One analysis of one trace: :func:`analyze` and its :class:`AnalysisConfig`.

Every surface reads a trace's figures from one :class:`Analysis`: the CLI's commands, the
module-level shortcuts (``tv.busy(t)`` is ``tv.analyze(t).busy``), runs, scans, ``diff``,
``check``, ``report`` and ``annotate``. The steps are found once per analysis and every
figure is computed once, on first use, by the module that defines it; so a figure has one
value (and one population) wherever it is read.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import polars as pl

from traceview._deprecated import deprecated
from traceview._io import release_free_memory
from traceview.analysis.base.document import Efficiency
from traceview.analysis.classify.families import Rules, load_rules
from traceview.analysis.documents import display
from traceview.analysis.documents.summary import (
    Summary,
    build,
    capture_only_summary,
    refuse_capture_only,
)
from traceview.analysis.steps.candidates import StepOptions
from traceview.analysis.steps.find import StepResult, find_steps
from traceview.analysis.steps.periodic import MAX_LAYERS
from traceview.analysis.timing.busy import BUSY_SCHEMA, busy_window
from traceview.analysis.work.devices import GpuSpec, load_gpu
from traceview.analysis.work.model_config import ModelSpec, load_model
from traceview.errors import CaptureOnlyError, UsageError
from traceview.loader import LoadOptions, load
from traceview.model import Trace

METHODS = ("auto", "bursts", "annotations")
MAX_NS = 2**63 - 1  # an Int64 of nanoseconds


def _count(name: str, value: object, low: int, high: int) -> None:
    """``value`` is None or an integer in ``[low, high]`` (a bool is not a count).

    Raises:
        UsageError: anything else, naming the field.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UsageError(f"{name}: {value!r} is not an integer from {low} to {high}")


@dataclass(frozen=True, slots=True)
class AnalysisConfig:
    """How a trace is analysed: the one way to configure an analysis, on every surface
    (the CLI builds one from its options; ``RunOptions`` and ``ScanOptions`` carry one;
    the shortcuts, ``tv.steps`` and the rest, take one).

    Attributes:
        method: how to find engine steps: ``auto`` (the engine's annotations where they
            cover the trace and agree with the bursts, else bursts), ``bursts`` or
            ``annotations``.
        layers: step-marker bursts per step (default: found from the trace).
        step_gap_ns: cut steps at every device-idle gap at least this long (ns) instead.
        device: the device to analyse (default: the one with the most kernel time).
        preset: the built-in classification preset.
        rules: a TOML rules file tried before the preset's rules, or :class:`Rules`
            (``tv.load_rules(...)``) used as they are.
        model: the model (``tv.load_model(path)``, or a ``config.json`` path, read here):
            each step's FLOPs, bytes, MFU and MBU.
        gpu: the GPU's peaks (``tv.load_gpu(...)``, or a part name or a ``SPEC.toml``
            path, read here), instead of those matched from the trace.
        window: ``(t0_ns, t1_ns)``: analyse only the events starting in this window, in
            ns from the trace's first device activity (``Trace.window``).
        keep_warmup: keep the steps that hold warm-up (CUDA-graph capture, Triton
            autotuning, compilation, lazy loading) in every figure, for a study of warm-up
            itself; they are marked (the steps table's ``warmup``) all the same. By default
            every serving figure leaves them out.

    Raises:
        UsageError: an unknown method, or a window whose end is not after its start.
        EfficiencyInputError: a model or GPU spec that cannot be read.
    """

    method: str = "auto"
    layers: int | None = None
    step_gap_ns: int | None = None
    device: int | None = None
    preset: str = "default"
    rules: str | Path | Rules | None = None
    model: ModelSpec | str | Path | None = None
    gpu: GpuSpec | str | None = None
    window: tuple[int, int] | None = None
    keep_warmup: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise UsageError(f"unknown step method {self.method!r} (one of: {', '.join(METHODS)})")
        _count("layers", self.layers, 1, MAX_LAYERS)
        _count("step_gap_ns", self.step_gap_ns, 0, MAX_NS)
        _count("device", self.device, 0, MAX_NS)
        if not isinstance(self.preset, str):
            raise UsageError(f"preset: {self.preset!r} is not a preset's name")
        if not isinstance(self.keep_warmup, bool):
            raise UsageError(f"keep_warmup: {self.keep_warmup!r} is not True or False")
        if self.rules is not None and not isinstance(self.rules, str | Path | Rules):
            raise UsageError(f"rules: {self.rules!r} is neither a rules file nor Rules")
        if self.rules is not None or self.preset != "default":
            self.load_rules()  # a preset or a rules file that cannot be read fails here
        if isinstance(self.model, str | Path):
            object.__setattr__(self, "model", load_model(self.model))
        elif self.model is not None and not isinstance(self.model, ModelSpec):
            raise UsageError(f"model: {self.model!r} is neither a config.json nor a ModelSpec")
        if isinstance(self.gpu, str):
            object.__setattr__(self, "gpu", load_gpu(self.gpu))
        elif self.gpu is not None and not isinstance(self.gpu, GpuSpec):
            raise UsageError(f"gpu: {self.gpu!r} is neither a part, a spec file nor a GpuSpec")
        if self.window is not None:
            w = self.window
            if not isinstance(w, tuple) or len(w) != 2:
                raise UsageError(f"window: {w!r} is not a (t0_ns, t1_ns) pair")
            if w[0] is None or w[1] is None:  # _count lets None by: a window has both ends
                raise UsageError(f"window: {w!r} needs both ends, (t0_ns, t1_ns)")
            _count("window's t0_ns", w[0], -MAX_NS, MAX_NS)
            _count("window's t1_ns", w[1], -MAX_NS, MAX_NS)
            if w[1] <= w[0]:
                raise UsageError(f"window {w}: its end is not after its start")

    @property
    def model_spec(self) -> ModelSpec | None:
        """The model, as read (a path given is read when the config is made)."""
        assert not isinstance(self.model, str | Path)
        return self.model

    @property
    def gpu_spec(self) -> GpuSpec | None:
        """The GPU's peaks, as read (a name or path given is read when the config is
        made)."""
        assert not isinstance(self.gpu, str)
        return self.gpu

    @property
    def device_spec(self) -> GpuSpec | None:
        """Deprecated: :attr:`gpu_spec` (``device`` is the device analysed, ``gpu`` its
        peaks)."""
        deprecated("AnalysisConfig.device_spec", "AnalysisConfig.gpu_spec")
        return self.gpu_spec

    def describe(self) -> dict[str, object]:
        """What decides the figures, as plain data: the step options, the rules (their
        name and a digest of their content), the model and the device's peaks (a digest
        of each as read), the window. Two configs that describe alike give the same
        figures (a dataset records it, so a scan never mixes two analyses)."""

        def digest(value: object) -> str:
            return hashlib.blake2b(repr(value).encode(), digest_size=8).hexdigest()

        rules = self.load_rules()
        model, gpu = self.model_spec, self.gpu_spec
        return {
            "method": self.method,
            "layers": self.layers,
            "step_gap_ns": self.step_gap_ns,
            "device": self.device,
            "rules": f"{rules.name} ({digest(rules)})",
            "model": None if model is None else f"{model.name} ({digest(model)})",
            "gpu": None if gpu is None else f"{gpu.name} ({digest(gpu.to_dict())})",
            "window": None if self.window is None else list(self.window),
            "keep_warmup": self.keep_warmup,
        }

    def step_options(self) -> StepOptions:
        """How the step finder finds steps."""
        return StepOptions(
            self.method, self.layers, self.step_gap_ns, self.device, self.keep_warmup
        )

    def load_rules(self) -> Rules:
        """The classification rules: ``rules`` as given, else the file's before the
        preset's, else the preset's."""
        if isinstance(self.rules, Rules):
            return self.rules
        return load_rules(self.preset, self.rules)


class Analysis:
    """One trace and how it is analysed; each figure computed once, on first use, and
    kept. Made by :func:`analyze`.

    Attributes:
        trace: the trace analysed (the config's window applied).
        config: the :class:`AnalysisConfig`.
    """

    def __init__(self, trace: Trace, config: AnalysisConfig | None = None) -> None:
        if config is not None and not isinstance(config, AnalysisConfig):
            raise UsageError(
                f"config: an AnalysisConfig, not {type(config).__name__} "
                "(tv.AnalysisConfig(method=..., ...))"
            )
        self.config = config or AnalysisConfig()
        self.trace = trace if self.config.window is None else trace.window(*self.config.window)

    @cached_property
    def rules(self) -> Rules:
        """The classification rules, read once."""
        return self.config.load_rules()

    @cached_property
    def step_result(self) -> StepResult:
        """The step finder's whole result (steps, phases, the device's kernels with their
        families, their union): found once per analysis."""
        result = find_steps(self.trace, self.rules, self.config.step_options())
        release_free_memory()  # the step finder's temporaries, before the document's own
        return result

    @cached_property
    def summary(self) -> Summary:
        """The ``traceview.summary/1`` document and the tables beside it; for a trace that
        holds only CUDA-graph capture / warm-up (engine start-up), the document with 0
        steps and its ``capture`` section (:meth:`serving` refuses it instead)."""
        model, gpu = self.config.model_spec, self.config.gpu_spec
        try:
            result = self.step_result
        except CaptureOnlyError as exc:
            return capture_only_summary(
                self.trace, self.rules, self.config.device, str(exc), model, gpu
            )
        return build(self.rules, result, model, gpu)

    def serving(self) -> Summary:
        """:attr:`summary`, for the surfaces that draw or judge steps.

        Raises:
            CaptureOnlyError: the trace holds only CUDA-graph capture / warm-up, or every
                step it holds is left out for warm-up: no serving steps (its one line;
                exit 0 on the command line).
        """
        if self.summary.document["steps"]["method"] == "none":
            _ = self.step_result  # raises the step finder's CaptureOnlyError
        refuse_capture_only(self.summary)  # every step holds warm-up: none serves
        return self.summary

    @property
    def steps(self) -> pl.DataFrame:
        """One row per engine step (columns: :func:`traceview.steps`)."""
        return self.summary.steps

    @property
    def families(self) -> pl.DataFrame:
        """Kernel time per layer family on the analysed device, capture kernels and the
        steps left out for warm-up left out (columns: :func:`traceview.families`)."""
        return self.summary.families

    @property
    def families_rollup(self) -> pl.DataFrame:
        """:attr:`families` with dotted families rolled up (``linear_attention``)."""
        return self.summary.families_rollup

    @property
    def kernels(self) -> pl.DataFrame:
        """Kernel time per kernel name on the analysed device, with its family and work
        (columns: :func:`traceview.kernels`)."""
        return self.summary.kernel_table

    @cached_property
    def busy(self) -> pl.DataFrame:
        """The summary's GPU-busy fraction as one row: ``device``, ``window_start_ns``,
        ``window_end_ns``, ``busy_ns`` (Int64, ns) and ``fraction`` (Float64); the window
        is the analysed device's first kernel start to its last kernel end, capture
        kernels left out; where steps are left out for warm-up, the other steps' spans
        (``busy_ns`` over their length, the summary's ``busy.window_ns``)."""
        b = self.summary.document["busy"]
        if b["fraction"] is None and b["busy_ns"] is None:
            return pl.DataFrame(schema=BUSY_SCHEMA)
        row = {k: [b[k]] for k in BUSY_SCHEMA}  # type: ignore[literal-required]
        return pl.DataFrame(row, schema=BUSY_SCHEMA)

    def busy_between(self, t0_ns: int | None = None, t1_ns: int | None = None) -> pl.DataFrame:
        """GPU busy of the analysed device (capture kernels and the steps left out for
        warm-up left out) over the window ``[t0_ns, t1_ns)`` on the trace's clock, inside
        the serving time that :attr:`busy` measures (an end not given: that time's own, so
        with no ends this is :attr:`busy`); columns as :attr:`busy`, computed by
        :func:`~traceview.analysis.timing.busy.busy_window`.

        Raises:
            UsageError: a bound that is not an integer, an end not after the start, or a
                window that holds none of the activity (before or after it: 0.0 there
                would say nothing), giving the activity's span.
            CaptureOnlyError: no serving kernels (CUDA-graph capture alone).
        """
        _count("t0_ns", t0_ns, -MAX_NS, MAX_NS)
        _count("t1_ns", t1_ns, -MAX_NS, MAX_NS)
        if t0_ns is not None and t1_ns is not None and t1_ns <= t0_ns:
            raise UsageError(f"busy window [{t0_ns}, {t1_ns}): its end is not after its start")
        whole = self.busy
        if whole.height == 0:  # no serving kernels: say why (CUDA-graph capture alone)
            self.serving()
            return whole
        result = self.step_result
        row = busy_window(
            result.serving_union,
            result.device,
            t0_ns,
            t1_ns,
            self.trace.meta.path,
            result.serving_windows,
        )
        return pl.DataFrame([row], schema=BUSY_SCHEMA)

    @property
    def decode_gaps(self) -> pl.DataFrame:
        """One row per decode gap (columns: :func:`traceview.decode_gaps`)."""
        return self.summary.decode_gaps

    @property
    def idle(self) -> pl.DataFrame:
        """The analysed device's idle intervals of at least 50 µs, each split by cause,
        none inside a step left out for warm-up (``Summary.idle``)."""
        return self.summary.idle

    @property
    def efficiency(self) -> Efficiency:
        """The summary's ``efficiency`` section: FLOPs, bytes, MFU and MBU per phase where
        the config gives a model (docs/metrics.md).

        Raises:
            UsageError: the config gives no model.
        """
        if self.config.model_spec is None:
            raise UsageError(
                "efficiency needs a model: tv.analyze(trace, tv.AnalysisConfig(model=PATH))"
            )
        return self.summary.document["efficiency"]

    def heartbeat(
        self,
        *,
        title: str | None = None,
        window_ms: tuple[float, float] | None = None,
        style: str = "light",
    ) -> display.Figure:
        """The heartbeat chart (a matplotlib Figure; as ``tv.plot.heartbeat``)."""
        return display.heartbeat(self.summary, title, window_ms, style)

    def gaps(self, *, title: str | None = None, style: str = "light") -> display.Figure:
        """The decode-gap chart (a matplotlib Figure; as ``tv.plot.gaps``)."""
        return display.gaps(self.summary, title, style)

    def __repr__(self) -> str:
        done = [name for name in ("step_result", "summary") if name in self.__dict__]
        said = f", computed: {', '.join(done)}" if done else ""
        return f"Analysis({self.trace.meta.path!r}, {self.config!r}{said})"

    def _repr_html_(self) -> str:
        return self.summary._repr_html_()


def analyze(
    source: str | Path | Trace,
    config: AnalysisConfig | None = None,
    *,
    load_options: LoadOptions | None = None,
) -> Analysis:
    """One analysis of one trace: every figure computed once, on first use, and kept.

    Args:
        source: a path, a URL or a loaded :class:`~traceview.Trace`.
        config: how to analyse it (default: ``AnalysisConfig()``).
        load_options: how to load a path or URL (``tv.LoadOptions``).

    Returns:
        Analysis: ``.summary``, ``.steps``, ``.families``, ``.kernels``, ``.busy``,
        ``.decode_gaps``, ``.idle``, ``.efficiency`` (with a model); ``.heartbeat()`` and
        ``.gaps()`` draw its charts.

    Raises:
        TraceFormatError: a path or URL that is not a trace (when it is loaded).
        UsageError: a source that is none of these.
    """
    if isinstance(source, Trace):
        return Analysis(source, config)
    if isinstance(source, str | Path):
        return Analysis(load(str(source), options=load_options), config)
    raise UsageError(f"analyze: a path, URL or Trace, not {type(source).__name__}")
