"""Step candidates: each method proposes a list of steps with its evidence; one arbiter
chooses between them (docs/design.md, "How steps are found").

- ``bursts``: consecutive step-marker kernels on a stream form a per-layer burst. Between
  two bursts, the longest device-idle gap is the boundary's score. A model has a constant
  number L of full-attention bursts per step, so the step boundaries are every L-th
  boundary: L (and the phase of the pattern) is chosen where the chosen boundaries beat
  every other boundary within L-1 of them; that holds even when the between-step pause is
  barely longer than the gaps inside a step
  (:mod:`.periodic`). ``--layers N`` fixes L; ``--step-gap`` instead cuts at every idle
  gap of at least that length.
- ``annotations``: the engine's own per-step ranges (see :mod:`.annotations`), projected on
  the GPU or on the CPU thread and linked to kernels through correlation ids. Overlapping
  step ranges are one step (SGLang's ``execute_…`` around ``step[…]``, or one range
  projected once per stream), and their names merge into the step's record.
- ``idle``: with no step-marker kernels, bursts of device activity between idle gaps that
  stand out (a natural break in the gap distribution).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import polars as pl

from traceview.analysis.base.intervals import I64, distinct, first_of_each
from traceview.analysis.base.launches import launches_within, range_holding
from traceview.analysis.classify.families import FamilyCodes
from traceview.analysis.steps.periodic import PERIODIC_MIN_STEPS, PERIODIC_SURE
from traceview.analysis.steps.ranges import step_clusters, step_ranges
from traceview.analysis.steps.records import StepRecord, record
from traceview.model import GRAPH_REPLAY, Trace

ANNOTATION_COVERAGE = 0.9  # share of kernels annotations must hold to beat a weak guess


@dataclass(frozen=True, slots=True)
class StepOptions:
    """How to find steps.

    Attributes:
        method: ``auto`` (annotations where they cover the trace and agree with the bursts,
            else bursts), ``bursts`` or ``annotations``.
        layers: step-marker bursts per step (default: found from the trace).
        step_gap_ns: cut steps at every device-idle gap at least this long (ns) instead.
        device: the device to analyse (default: the one with the most kernel time).
        keep_warmup: keep the steps that hold warm-up (graph capture, autotuning,
            compilation) in every figure, for a study of warm-up itself; they are marked
            all the same.
    """

    method: str = "auto"
    layers: int | None = None
    step_gap_ns: int | None = None
    device: int | None = None
    keep_warmup: bool = False


def with_shortcuts(
    options: StepOptions | None,
    *,
    method: str | None = None,
    layers: int | None = None,
    step_gap_ns: int | None = None,
    device: int | None = None,
) -> StepOptions:
    """``options`` (default: ``StepOptions()``) with each shortcut that is given replacing its
    field: the one way every analysis function reads how to find steps."""
    opts = options or StepOptions()
    return StepOptions(
        method=opts.method if method is None else method,
        layers=opts.layers if layers is None else layers,
        step_gap_ns=opts.step_gap_ns if step_gap_ns is None else step_gap_ns,
        device=opts.device if device is None else device,
        keep_warmup=opts.keep_warmup,
    )


@dataclass(frozen=True, slots=True)
class DeviceKernels:
    """The analysed device's kernels (sorted by ``ts_ns``) as arrays, each read out of the
    frame once: step finding over a million kernels then works on these instead of adding
    columns to, sorting or joining the frame (each of which copies columns).

    Attributes:
        frame: the kernels as loaded (no ``family`` column).
        ts, dur: start and duration (ns, int64).
        family: each kernel's family.
        marker: each kernel is a step marker (a ``step_marker`` family, or a replay).
        replay: each kernel is a whole CUDA-graph replay (None where there is none).
        edge: each kernel is of a kind that runs at a step's edge (the rules'
            ``step_edge`` role: sampling, the embedding lookup; None where none is).
    """

    frame: pl.DataFrame
    ts: I64
    dur: I64
    family: FamilyCodes
    marker: np.ndarray
    replay: np.ndarray | None = None
    edge: np.ndarray | None = None

    @property
    def height(self) -> int:
        return int(self.ts.size)

    def ids(self, column: str) -> np.ndarray:
        """An id column (``stream``, ``pid``) as int64, null as one below the smallest."""
        values = self.frame[column]
        low = values.min()
        null = -1 if low is None else int(cast(int, low)) - 1
        return values.fill_null(null).to_numpy().astype(np.int64, copy=False)

    def correlation(self, start: int = 0, length: int | None = None) -> tuple[I64, np.ndarray]:
        """Each kernel's correlation id (0 where null) and whether it has one; of the kernels
        ``[start, start + length)`` only, where given."""
        values = self.frame["correlation"].slice(start, length)
        filled = values.fill_null(0)
        ids = filled.to_numpy().astype(np.int64, copy=False)
        del filled
        return ids, values.is_not_null().to_numpy()


def device_kernels(
    frame: pl.DataFrame,
    family: FamilyCodes,
    step_marker: tuple[str, ...],
    step_edge: tuple[str, ...] = (),
) -> DeviceKernels:
    """:class:`DeviceKernels` of ``frame`` (one device's kernels, sorted by ``ts_ns``).
    A whole CUDA-graph replay (:data:`~traceview.model.GRAPH_REPLAY`) is a step marker
    whatever the rules name it: it replays the step's layers, their attention among them,
    without itemising them. ``step_edge``: patterns (searched case-insensitively) of the
    kernels that run at a step's edge; each distinct name is matched once."""
    ts = frame["ts_ns"].to_numpy().astype(np.int64, copy=False)
    dur = frame["dur_ns"].to_numpy().astype(np.int64, copy=False)
    marker = family.mask(step_marker)
    edge = _edge_mask(family, step_edge)
    replays = replay_mask(frame)
    if not replays.any():
        return DeviceKernels(frame, ts, dur, family, marker, None, edge)
    return DeviceKernels(frame, ts, dur, family, marker | replays, replays, edge)


def _edge_mask(family: FamilyCodes, patterns: tuple[str, ...]) -> np.ndarray | None:
    """Per kernel: its name matches one of ``patterns``; None where none does."""
    if not patterns or family.pairs.height == 0:
        return None
    found = [re.compile(p, re.IGNORECASE) for p in patterns]
    hit = np.array(
        [any(f.search(str(n)) for f in found) for n in family.pairs["name"].to_list()],
        dtype=bool,
    )
    if not hit.any():
        return None
    out: np.ndarray = hit[family.pair_of]
    return out


def replay_mask(frame: pl.DataFrame) -> np.ndarray:
    """Per kernel: it is a whole CUDA-graph replay (an Nsight export traced at graph
    level), its kernels not itemised."""
    mask: np.ndarray = (frame["cat"] == GRAPH_REPLAY).fill_null(False).to_numpy()
    return mask


@dataclass
class Candidate:
    """One method's steps and the evidence behind them.

    Attributes:
        method: ``bursts`` | ``annotations`` | ``idle``.
        anchors: each step's anchor (ns): its first step-marker kernel's start.
        last_markers: each step's last step-marker kernel's start (ns).
        detail: how the boundaries were chosen, in words.
        strong: the evidence is strong (a clear period, the user's own option, or the
            engine's annotations) rather than a weaker guess.
        layers: step-marker bursts per step (bursts).
        names: each step's annotation names (annotations).
        first_kernel: each step's first kernel's start (annotations; CPU captures start
            their steps there).
        coverage: share of the device's kernels the steps hold (annotations).
        burst_starts: every step-marker burst's start (ns, in order; bursts).
        shared_ids: correlation ids launched inside steps of more than one process
            (annotations: a file merged from several processes).
        caveat: where the bursts read two ways that nothing decides, the warning that
            says so and names the option that chooses (bursts).
    """

    method: str
    anchors: I64
    last_markers: I64
    detail: str
    strong: bool
    layers: int | None = None
    names: list[list[str]] = field(default_factory=list)
    first_kernel: I64 | None = None
    coverage: float = 1.0
    burst_starts: I64 | None = None
    shared_ids: int = 0
    caveat: str | None = None

    @property
    def count(self) -> int:
        return int(self.anchors.size)


@dataclass
class Choice:
    """The arbiter's verdict: the candidate used, the annotation names per step (where the
    annotations could be matched to it), what a reader should know, and how many steps the
    annotation and burst candidates disagree on (None unless both exist)."""

    candidate: Candidate
    names: list[list[str]]
    warnings: list[str]
    disagreements: int | None
    annotation_steps: int


# --- annotations --------------------------------------------------------------------------


def _launched_in(trace: Trace, k: DeviceKernels, cpu: pl.DataFrame) -> tuple[np.ndarray, int]:
    """Per kernel, the CPU step cluster (``cpu``: ``cid``, ``pid``, ``tid``, ``a0``,
    ``a1``) its launch lies inside on the launching thread (:func:`launches_within`), by
    correlation id; -1 where none. A correlation launched twice keeps one launch (on one
    thread, the first). Also: how many ids are launched inside steps of more than one
    process (correlation ids repeat across processes: a file merged from several holds
    one process's launch for another's kernel, and nothing in a Kineto kernel says whose)."""
    launched, row = launches_within(trace, cpu)
    out = np.full(k.height, -1, dtype=np.int32)
    if launched.size == 0:
        return out, 0
    cid = cpu["cid"].to_numpy().astype(np.int32)[row]
    pid = cpu["pid"].fill_null(-1).to_numpy().astype(np.int64)[row]
    del row
    shared = 0
    if launched.size > 1 and not bool((launched[1:] > launched[:-1]).all()):
        order = np.lexsort((pid, launched))
        twice = launched[order][1:] == launched[order][:-1]
        others = twice & (pid[order][1:] != pid[order][:-1])
        shared = int(distinct(launched[order][1:][others]).size)
        del order, twice, others
        launched, first = first_of_each(launched)  # one launch per id
        cid = cid[first]
        del first
    del pid
    for c0 in range(0, k.height, LOOKUP_CHUNK):  # per-kernel arrays one slice at a time
        kc, known = k.correlation(c0, LOOKUP_CHUNK)
        pos = np.searchsorted(launched, kc)
        np.minimum(pos, launched.size - 1, out=pos)
        known &= launched[pos] == kc
        out[c0 : c0 + kc.size][known] = cid[pos[known]]
    return out, shared


LOOKUP_CHUNK = 1 << 18  # kernels whose launch is looked up at a time


def _annotation_groups(
    trace: Trace, k: DeviceKernels, device: int
) -> tuple[list[list[str]], np.ndarray, int] | None:
    """Per-step annotations as clusters (see :func:`step_clusters`, in time order): each
    cluster's names, per kernel the cluster that holds it (int32, -1 for none), and the
    correlation ids launched inside steps of several processes (:func:`_launched_in`);
    None if the trace has none linked to the device's kernels.

    GPU-projected annotations on this device take their kernels by time; CPU annotations
    take the kernels launched from inside them, through correlation ids (or, in a CPU
    capture with no launches, the activity of their own process that starts inside them).
    """
    ann = step_ranges(trace)
    if ann is None:
        return None
    gpu = ann.filter((pl.col("event_kind") == "gpu_user_annotation") & (pl.col("pid") == device))
    shared = 0
    if gpu.height:
        clusters = step_clusters(gpu.drop("event_kind", "pid", "tid"), [])
        held = range_holding(k.ts, clusters["a0"].to_numpy(), clusters["a1"].to_numpy())
    else:
        clusters = step_clusters(
            ann.filter(pl.col("event_kind") == "user_annotation").drop("event_kind"), ["pid", "tid"]
        )
        cpu = clusters.select("cid", "pid", "tid", "a0", "a1")
        held, shared = _launched_in(trace, k, cpu)
        if not (held >= 0).any():  # a CPU capture: its own process's activity by time
            pids = k.ids("pid")
            for (pid,), spans in cpu.sort("a0", maintain_order=True).group_by(
                "pid", maintain_order=True
            ):
                if pid is None:
                    continue
                mine = np.flatnonzero(pids == pid)
                at = range_holding(k.ts[mine], spans["a0"].to_numpy(), spans["a1"].to_numpy())
                held[mine[at >= 0]] = spans["cid"].to_numpy()[at[at >= 0]]
    if not (held >= 0).any():
        return None
    return clusters["names"].to_list(), held, shared


def annotation_candidate(trace: Trace, k: DeviceKernels, device: int) -> Candidate | None:
    """Steps from the engine's per-step annotations; None when there are none linked to
    the device's kernels. A step's anchor is its first step-marker kernel's start (its
    first kernel's, without one)."""
    groups = _annotation_groups(trace, k, device)
    if groups is None:
        return None
    names, held, shared = groups
    linked = np.flatnonzero(held >= 0)  # in time order
    cid = held[linked]
    n = len(names)
    first = np.full(n, k.height, dtype=np.int64)
    last = np.full(n, -1, dtype=np.int64)
    np.minimum.at(first, cid, linked)
    np.maximum.at(last, cid, linked)
    marks = linked[k.marker[linked]]
    first_mark, last_mark = first.copy(), last.copy()  # a step with no marker: its kernels
    with_marks = distinct(held[marks])
    first_mark[with_marks], last_mark[with_marks] = k.height, -1
    np.minimum.at(first_mark, held[marks], marks)
    np.maximum.at(last_mark, held[marks], marks)
    steps = np.flatnonzero(last >= 0)
    anchors, lasts, firsts = k.ts[first_mark[steps]], k.ts[last_mark[steps]], k.ts[first[steps]]
    order = np.lexsort((firsts, lasts, anchors))  # stable: equal steps stay in time order
    return Candidate(
        "annotations",
        anchors[order],
        lasts[order],
        "the engine's per-step annotations",
        True,
        names=[list(names[i]) for i in steps[order]],
        first_kernel=firsts[order],
        coverage=linked.size / max(k.height, 1),
        shared_ids=shared,
    )


# --- the arbiter ----------------------------------------------------------------------------


def layers_per_step(annotations: Candidate, bursts: Candidate) -> int | None:
    """The step-marker bursts every annotated step holds, where the annotations keep the
    model's fixed layer count: every burst lies in one annotated step, at least
    :data:`PERIODIC_MIN_STEPS` steps besides the first and the last (a capture may cut
    those), and one count, above 0, in at least :data:`PERIODIC_SURE` of those; else None.
    Nor is it a layer count where the annotations are torch.profiler's iterations alone
    (``ProfilerStep#N``, which may hold many engine steps) and the count is a whole multiple
    (2 or more) of the bursts' own period: each iteration then holds whole steps of the
    bursts (a ``generate()`` call of many forward passes), wrapping steps rather than
    marking one. An engine's own step annotation marks one step, whatever period the bursts
    lock onto (a stall every other layer makes a period of 2).

    Steps that each hold the same number of full-attention layers are the periodicity the
    bursts look for, found in the engine's own record: an annotation missing (a burst in
    no step), deferred past its kernels, or one step recorded for several (what makes CPU
    annotations untrustworthy) breaks it, while a between-step pause hidden by a copy on
    another stream, or a host stall inside a step, misleads the bursts without touching
    it."""
    starts = bursts.burst_starts
    if starts is None or annotations.count < PERIODIC_MIN_STEPS + 2:
        return None
    held = np.searchsorted(starts, annotations.last_markers, side="right")
    held -= np.searchsorted(starts, annotations.anchors, side="left")
    if int(held.sum()) != starts.size:  # a burst in no annotated step, or in two
        return None
    counts = held[1:-1]
    values, times = np.unique(counts, return_counts=True)
    mode = int(np.argmax(times))
    if values[mode] <= 0 or times[mode] < PERIODIC_SURE * counts.size:
        return None
    count = int(values[mode])
    period = bursts.layers
    if period and count >= 2 * period and count % period == 0 and _iterations(annotations):
        return None
    return count


def wraps_steps(annotations: Candidate, bursts: Candidate) -> bool:
    """Whether the annotations are torch.profiler's iterations alone (``ProfilerStep#N``)
    and each holds two or more of the bursts' steps (all, or all but the first and the
    last, which a capture may cut): a loop iteration of the program (a ``generate()``
    call of many forward passes) wraps engine steps rather than marking one, however weak
    the bursts' own evidence."""
    if not _iterations(annotations) or bursts.count < 2:
        return False
    held = np.searchsorted(bursts.anchors, annotations.last_markers, side="right")
    held -= np.searchsorted(bursts.anchors, annotations.anchors, side="left")
    inner = held[1:-1] if held.size >= PERIODIC_MIN_STEPS else held
    return bool(inner.size) and bool((inner >= 2).all())


_ITERATION = re.compile(r"ProfilerStep#\d+$")


def _iterations(annotations: Candidate) -> bool:
    """Whether every annotated step is named by torch.profiler's iterations alone."""
    return bool(annotations.names) and all(
        bool(names) and all(_ITERATION.match(n) for n in names) for names in annotations.names
    )


def choose(
    bursts: Candidate | None,
    annotations: Candidate | None,
    idle: Candidate | None,
    *,
    method: str = "auto",
    cpu_activity: bool = False,
) -> Choice:
    """Pick the steps to use, strongest evidence first.

    ``annotations`` and ``bursts`` force their method. ``auto`` uses the annotations where
    they agree with the bursts (the same anchors), where the bursts found no steps, and
    where they hold ≥ 90% of the kernels and either the bursts are only a weak guess, or
    each annotated step holds the same number of step-marker bursts
    (:func:`layers_per_step`), or the trace is a CPU capture (no device-idle pauses to go
    by); else the bursts; with neither, the idle candidate.
    """
    disagreements: int | None = None
    layers: int | None = None
    if bursts is not None and annotations is not None:
        a, b = set(annotations.anchors.tolist()), set(bursts.anchors.tolist())
        disagreements = len(a ^ b)
        if disagreements:
            layers = layers_per_step(annotations, bursts)
    covers = annotations is not None and annotations.coverage >= ANNOTATION_COVERAGE
    wrapping = annotations is not None and bursts is not None and wraps_steps(annotations, bursts)
    use_annotations = annotations is not None and (
        method == "annotations"
        or (
            method == "auto"
            and (
                bursts is None
                or disagreements == 0
                or (
                    covers
                    and not wrapping
                    and (not bursts.strong or cpu_activity or layers is not None)
                )
            )
        )
    )
    warnings: list[str] = []
    n_ann = 0 if annotations is None else annotations.count
    if annotations is not None and annotations.shared_ids:
        warnings.append(
            f"{annotations.shared_ids} correlation id(s) are launched inside the steps of "
            "more than one process (a trace merged from several processes numbers each "
            "process's launches from 1): a kernel may be linked to another process's step "
            "annotation; analyse each process's trace alone for its steps' kinds and names"
        )
    if use_annotations:
        assert annotations is not None
        if disagreements:
            assert bursts is not None
            warnings.append(
                f"per-step annotations and step-marker bursts disagree on {disagreements} "
                f"step(s) ({annotations.count} annotated vs {bursts.count} found from "
                "kernels); using the annotations"
                + (
                    f" (they hold {annotations.coverage:.0%} of the kernels, and each "
                    f"annotated step holds {layers} step-marker bursts, as a model's "
                    "fixed layer count does)"
                    if layers is not None and bursts.strong and not cpu_activity
                    else ""
                    if bursts.strong
                    else f" (they cover {annotations.coverage:.0%} of the kernels; the "
                    "bursts show no clear step structure)"
                )
            )
        return Choice(annotations, annotations.names, warnings, disagreements, n_ann)
    if bursts is not None and method != "annotations":
        if not bursts.strong:
            warnings.append(bursts.detail)
        if bursts.caveat is not None:
            warnings.append(bursts.caveat)
        names: list[list[str]] = [[] for _ in range(bursts.count)]
        if annotations is not None:
            if disagreements:
                warnings.append(
                    f"per-step annotations and step-marker bursts disagree on {disagreements} "
                    f"step(s) ({annotations.count} annotated vs {bursts.count} found from "
                    "kernels); using the bursts"
                )
            # a step whose anchor (first marker kernel) is an annotated step's keeps its record
            lookup = dict(zip(annotations.anchors.tolist(), annotations.names, strict=True))
            names = [lookup.get(int(x), []) for x in bursts.anchors]
        return Choice(bursts, names, warnings, disagreements, n_ann)
    assert idle is not None
    return Choice(idle, [[] for _ in range(idle.count)], [], disagreements, n_ann)


def records(names: list[list[str]]) -> list[StepRecord]:
    """Each step's record (see :func:`traceview.analysis.steps.records.record`)."""
    return [record(n) for n in names]
