"""Runs: many rank traces analysed as one (``traceview.run/1``; docs/design.md, docs/metrics.md).

This module is the pure cross-rank computation: given each trace's summary and per-step
work (:class:`RankResult`, made by :mod:`traceview.batch.run`, which finds the files and runs
the process pool), :func:`assemble` builds the run. Across ranks:

- **rank**: Kineto's ``distributedInfo.rank``, else the file name (``rank3``, ``tp-3``,
  ``worker3``), else the file's order;
- **alignment**: steps are matched across ranks by their annotation's name where every
  rank's steps carry unique names (``ProfilerStep#12``), else by the annotation's order
  where every rank's steps are annotated, else by each rank's reconstructed steps in order;
- **compute** of a step: its busy time not overlapped by the rank's collectives on any
  stream (the union of all the step's device activity inside its span, less the union of
  its ``communication`` kernels); **collective** time: the ``communication`` kernel time
  starting in the step;
- **skew** per aligned step: the slowest rank's compute minus the fastest's;
- **collective wait** per rank and step: its collective time beyond the minimum across
  ranks in that step (fast ranks wait in the all-reduce for the slow one), the median over
  steps;
- **straggler**: the rank the others wait for, the one with the least collective wait
  (ties: the rank slowest in more aligned steps); without collectives, the rank slowest in
  the most aligned steps. Its excess per step is its compute minus the median of the other
  ranks', reported as the median over steps. Where the rank slowest by compute is another
  rank, the document says so (``straggler.agrees`` false, ``slowest_compute_rank`` and a
  warning), never naming one silently. A step counts for the rank whose compute is the
  largest alone (a tie counts for none); where no rank is the slowest alone in any step
  and none waits less, there is no straggler.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Sequence
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl

from traceview.analysis.base.document import (
    RUN_SCHEMA,
    AlignMethod,
    Percentiles,
    PhaseCadence,
    RankRow,
    RunDocument,
    Straggler,
)
from traceview.analysis.base.intervals import union
from traceview.analysis.base.precision import sig_or_none
from traceview.analysis.base.stats import mean, median_ns, percentiles
from traceview.analysis.classify.families import family_is
from traceview.analysis.documents.figures import trace_figures
from traceview.analysis.documents.summary import Summary
from traceview.analysis.steps.find import StepResult, ends_of
from traceview.analysis.timing.breakdown import step_time
from traceview.errors import RunError
from traceview.model import Trace
from traceview.paths import stored

SCHEMA = RUN_SCHEMA
TRACE_SUFFIXES = (".json", ".json.gz", ".pftrace", ".pftrace.gz", ".perfetto-trace")
_RANK_IN_NAME = (
    re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.IGNORECASE),
    re.compile(r"(?:^|[^a-z])tp[-_]?(\d+)", re.IGNORECASE),
    re.compile(r"(?:^|[^a-z])worker[-_]?(\d+)", re.IGNORECASE),
)


@dataclass
class RankResult:
    """One trace of a run: its summary and per-step figures, or why it was left out."""

    path: str
    rank: int | None = None
    rank_source: str = ""  # distributedInfo | file name | file name (DP, PP, TP order) | order
    summary: Summary | None = None
    # index, annotation, compute_ns, collective_ns, dependency_ns, serving (False: left out
    # for warm-up)
    per_step: pl.DataFrame | None = None
    skipped: str | None = None  # a trace with nothing to analyse (no device activity)
    error: str | None = None  # a trace that failed to load or analyse
    load_warnings: list[str] = field(default_factory=list)  # the loader's (trace.meta.warnings)
    truncated_at: int | None = None  # a truncated trace's cut (byte of its JSON text)
    world_size: int | None = None  # Kineto's distributedInfo.world_size, where it says


@dataclass
class RunSummary:
    """The summary of a run: ``to_dict()`` is the ``traceview.run/1`` document.

    Attributes:
        document: the run document (plain JSON-able data).
        ranks: the analysed ranks, ascending.
        left_out: traces skipped or failed, each with its reason.
        aligned: one row per aligned step and rank: ``step``, ``rank``, ``compute_ns``,
            ``collective_ns``, ``dependency_ns`` (Int64, ns).
        warnings: what a reader should know before trusting a figure.
    """

    document: RunDocument
    ranks: list[RankResult]
    left_out: list[RankResult]
    aligned: pl.DataFrame
    warnings: list[str]

    def to_dict(self) -> RunDocument:
        return self.document

    @property
    def steps(self) -> pl.DataFrame:
        """Every rank's steps table with ``rank`` and ``path`` columns in front."""
        frames = [
            r.summary.steps.select(
                pl.lit(r.rank, dtype=pl.Int64).alias("rank"),
                pl.lit(stored(r.path)).alias("path"),
                pl.all(),
            )
            for r in self.ranks
            if r.summary is not None
        ]
        return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def rank_from_name(name: str) -> int | None:
    """The rank a file name states (``…rank3…``, ``…-TP-3…``, ``worker3_…``), if any."""
    for pattern in _RANK_IN_NAME:
        m = pattern.search(name)
        if m:
            return int(m.group(1))
    return None


def rank_of(trace: Trace, path: str) -> tuple[int | None, str]:
    """A trace's rank and where it came from: Kineto's ``distributedInfo.rank``, else the
    file name; (None, "") when neither says."""
    dist = trace.meta.extra.get("distributedInfo")
    rank = dist.get("rank") if isinstance(dist, dict) else None
    if isinstance(rank, int) and not isinstance(rank, bool):
        return rank, "distributedInfo"
    named = rank_from_name(Path(path).name)
    return (named, "file name") if named is not None else (None, "")


def _absent_ranks(ranks: list[RankResult], given: int) -> str | None:
    """What to say where the traces' own ``world_size`` counts more ranks than the run was
    given (``given``: the traces, analysed or left out): a rank whose trace is missing
    still takes part in the collectives, so the others wait for it."""
    sizes = {r.world_size for r in ranks if r.world_size is not None}
    if not sizes:
        return None
    world = max(sizes)
    present = sorted(int(r.rank) for r in ranks if r.rank is not None)
    if given >= world and len(present) >= world:
        return None
    # the world size is the trace's word, any number: the absent ranks are counted and the
    # first few named, so the memory this takes never follows that number
    inside = {k for k in present if 0 <= k < world}
    absent = world - len(inside)
    if absent == 0:
        return None
    first = list(itertools.islice((k for k in range(world) if k not in inside), 8))
    shown = ", ".join(map(str, first)) + (f", … ({absent:,} in all)" if absent > 8 else "")
    return (
        f"the traces say the run had {world:,} ranks (distributedInfo.world_size), and "
        f"{len(present)} are analysed here (absent: rank {shown}): where an absent rank "
        "takes part in the same collectives, every rank's collective wait includes waiting "
        "for it, and the straggler may be among the absent"
    )


def _replicas(ranks: list[RankResult]) -> str | None:
    """What to say where the ranks may never wait for each other: the files name several
    data-parallel replicas (SGLang's ``-DP-d`` parts repeating each (PP, TP) place; its DP
    attention names each place once), or no rank runs a communication kernel that the
    rules recognise. A replica with a file left out is not named so: only the warning is
    lost, never a figure."""
    layouts = [layout_from_name(Path(r.path).name) for r in ranks]
    if len(ranks) > 1 and None not in layouts:
        # replicas repeat one (PP, TP) place under several DP parts; SGLang's DP attention
        # names its ranks -TP-{global}-DP-{attention group}, each place once, and they share
        # their collectives
        places = Counter((x[1], x[2]) for x in layouts if x is not None)
        replicas = len({x[0] for x in layouts if x is not None})
        if replicas > 1 and all(n > 1 for n in places.values()):
            return (
                f"the files name {replicas} data-parallel replicas (their -DP- parts repeat "
                "each pipeline and tensor-parallel place): each serves its own requests and "
                "never waits for another, so the skew and the straggler across them compare "
                "independent work; give one replica's ranks for its skew"
            )
    tables = [r.per_step.filter(pl.col("serving")) for r in ranks if r.per_step is not None]
    if len(tables) > 1 and all(int(t["collective_ns"].sum()) == 0 for t in tables):
        return (
            "no rank runs a communication kernel that traceview recognises: if they run no "
            "collective, they never wait for each other, and the skew and the straggler "
            "compare independent work (an all-to-all the preset does not name would be "
            "missed here: name it in a rules file's communication family)"
        )
    return None


def step_work(result: StepResult) -> pl.DataFrame:
    """Per step: ``compute_ns`` (busy time not overlapped by collectives on any stream,
    inside the step's span), ``collective_ns`` (``communication`` kernel time starting in
    the step), ``dependency_ns`` (the step's idle time waiting on queued work) and
    ``serving`` (False for a step left out for warm-up: the run's figures leave it out)."""
    k, table = result.kernels, result.table
    comm = family_is(k["family"], "communication")
    coll = k.filter(comm)
    starts = table["start_ns"].to_numpy().astype(np.int64, copy=False)
    ends = table["end_ns"].to_numpy().astype(np.int64, copy=False)
    busy = np.zeros(starts.size, dtype=np.int64)
    if k.height:
        u = union(k["ts_ns"].to_numpy().astype(np.int64, copy=False), ends_of(k))
        busy = u.clipped_lengths(starts, ends)
    in_collectives = np.zeros(starts.size, dtype=np.int64)
    if coll.height:
        uc = union(coll["ts_ns"].to_numpy().astype(np.int64, copy=False), ends_of(coll))
        in_collectives = uc.clipped_lengths(starts, ends)
    compute = busy - in_collectives
    step = np.searchsorted(starts, coll["ts_ns"].to_numpy(), side="right") - 1
    inside = step >= 0
    collective = np.bincount(
        step[inside], weights=coll["dur_ns"].to_numpy()[inside], minlength=starts.size
    ).astype(np.int64)
    return pl.DataFrame(
        {
            "index": table["index"],
            "annotation": table["annotation"],
            "compute_ns": compute.astype(np.int64),
            "collective_ns": collective,
            "dependency_ns": table["idle_dependency_ns"],
            "serving": table["phase"].is_not_null(),
        }
    )


# SGLang's ``{id}-TP-{tp}[-DP-{dp}][-PP-{pp}][-EP-…]`` names: TP is the rank within one
# data-parallel replica's pipeline stage, so DP and PP parts name other GPUs
_LAYOUT_PART = re.compile(r"-(DP|PP)-(\d+)(?=[-.]|$)", re.IGNORECASE)


def layout_from_name(name: str) -> tuple[int, int, int] | None:
    """``(dp, pp, tp)`` of a name with a TP part and a DP or PP part, else None."""
    parts = {k.upper(): int(v) for k, v in _LAYOUT_PART.findall(name)}
    tp = _RANK_IN_NAME[1].search(name)
    if not parts or tp is None:
        return None
    return parts.get("DP", 0), parts.get("PP", 0), int(tp.group(1))


def _by_layout(results: list[RankResult]) -> None:
    """Ranks named by SGLang's TP part alone repeat across its DP or PP parts: where they
    do, and every file ranked by its name has such parts, they are ranked in (DP, PP, TP)
    order instead (one replica's pipeline stages after another's)."""
    named = [r for r in results if r.rank_source == "file name"]
    if len({r.rank for r in named}) == len(named):
        return
    layouts = [layout_from_name(Path(r.path).name) for r in named]
    if any(x is None for x in layouts) or len(set(layouts)) != len(layouts):
        return
    order = sorted(range(len(named)), key=lambda i: layouts[i])  # type: ignore[arg-type,return-value]
    for rank, i in enumerate(order):
        named[i].rank, named[i].rank_source = rank, "file name (DP, PP, TP order)"


def _assign_ranks(results: list[RankResult]) -> None:
    _by_layout(results)
    taken: dict[int, str] = {}
    for r in results:
        if r.rank is None:
            continue
        if r.rank in taken:
            raise RunError(
                f"{taken[r.rank]} and {r.path} are both rank {r.rank}: two runs in one "
                "place? Give the files of one run"
            )
        taken[r.rank] = r.path
    free = (i for i in range(len(results) + len(taken)) if i not in taken)
    for r in results:
        if r.rank is None:
            r.rank, r.rank_source = next(free), "order"


def _alignment(ranks: list[RankResult]) -> tuple[AlignMethod, pl.DataFrame, list[str]]:
    """How steps were matched across ranks, and the aligned (step, rank) rows."""
    tables = {r.rank: r.per_step for r in ranks if r.per_step is not None}
    warnings = []
    counts = {rank: t.height for rank, t in tables.items()}
    annotated = all(t["annotation"].null_count() == 0 for t in tables.values())
    unique = annotated and all(t["annotation"].n_unique() == t.height for t in tables.values())
    if len(set(counts.values())) > 1:
        warnings.append(
            "ranks have different step counts ("
            + ", ".join(f"rank {k}: {v}" for k, v in sorted(counts.items()))
            + (
                "): only the steps found on every rank are compared"
                if unique
                else f"): the first {min(counts.values())} steps of each rank are compared "
                "in order (no unique step names say which steps are the same: where a rank "
                "lacks an early step, every later pair is off by one, and skew reads high)"
            )
        )
    method: AlignMethod
    if unique:
        method = "annotation name"
        common = set.intersection(*(set(t["annotation"].to_list()) for t in tables.values()))
        order = [a for a in next(iter(tables.values()))["annotation"].to_list() if a in common]
        key = {a: i for i, a in enumerate(order)}
        rows = [
            t.filter(pl.col("annotation").is_in(order)).with_columns(
                pl.col("annotation").replace_strict(key, return_dtype=pl.Int64).alias("step"),
                pl.lit(rank, dtype=pl.Int64).alias("rank"),
            )
            for rank, t in tables.items()
        ]
    else:
        method = "annotation order" if annotated else "step order"
        n = min(counts.values()) if counts else 0
        rows = [
            t.head(n).with_columns(
                pl.col("index").alias("step"), pl.lit(rank, dtype=pl.Int64).alias("rank")
            )
            for rank, t in tables.items()
        ]
    if rows:  # a step left out for warm-up on any rank is compared on none
        both = pl.concat(rows)
        serving = both.group_by("step").agg(pl.col("serving").all(), pl.len().alias("n"))
        keep = serving.filter(pl.col("serving") & (pl.col("n") == len(rows)))["step"]
        if keep.len() < serving.height:
            warnings.append(
                f"{serving.height - keep.len()} aligned step(s) hold warm-up on some rank: "
                "they are compared on none"
            )
        rows = [both.filter(pl.col("step").is_in(keep.implode()))]
    aligned = (
        pl.concat(rows)
        .select("step", "rank", "compute_ns", "collective_ns", "dependency_ns")
        .sort("step", "rank")
        if rows
        else pl.DataFrame(
            schema={
                "step": pl.Int64,
                "rank": pl.Int64,
                "compute_ns": pl.Int64,
                "collective_ns": pl.Int64,
                "dependency_ns": pl.Int64,
            }
        )
    )
    return method, aligned, warnings


@dataclass
class CrossRank:
    """Across the aligned steps: compute skew, the straggler, each rank's collective wait."""

    skew: Percentiles
    straggler: Straggler | None
    wait: dict[int, int | None]


def cross_rank(aligned: pl.DataFrame, ranks: list[int]) -> CrossRank:
    """Skew, straggler and collective wait over the aligned steps (see the module doc)."""
    if aligned.height == 0 or len(ranks) < 2:
        return CrossRank(percentiles([]), None, {})
    compute = aligned.pivot(on="rank", index="step", values="compute_ns", sort_columns=True)
    collective = aligned.pivot(on="rank", index="step", values="collective_ns", sort_columns=True)
    cols = [str(r) for r in ranks]
    c = compute.select(cols).to_numpy().astype(np.int64, copy=False)
    w = collective.select(cols).to_numpy().astype(np.int64, copy=False)
    skew = percentiles(c.max(axis=1) - c.min(axis=1))
    # a step counts for the rank whose compute is the largest alone: a tie counts for none
    alone = (c == c.max(axis=1, keepdims=True)).sum(axis=1) == 1
    slowest = np.bincount(c.argmax(axis=1)[alone], minlength=len(ranks))
    excess = {}
    for i in range(len(ranks)):
        others = np.delete(c, i, axis=1)
        excess[i] = c[:, i] - np.median(others, axis=1)
    by_compute = max(range(len(ranks)), key=lambda i: (slowest[i], float(np.median(excess[i]))))
    wait = {ranks[i]: median_ns(w[:, i] - w.min(axis=1)) for i in range(len(ranks))}
    waits = [wait[r] or 0 for r in ranks]
    if not slowest.any() and len(set(waits)) == 1:  # the ranks tie: no one is waited for
        return CrossRank(skew, None, wait)
    by: Literal["collective wait", "compute"]
    if w.any():  # the rank the others wait for: the least wait, then the slowest
        best = min(
            range(len(ranks)), key=lambda i: (waits[i], -slowest[i], -float(np.median(excess[i])))
        )
        by = "collective wait"
    else:
        best, by = by_compute, "compute"
    straggler: Straggler = {
        "rank": ranks[best],
        "by": by,
        "steps_slowest": int(slowest[best]),
        "excess_p50_ns": median_ns(excess[best]),
        "slowest_compute_rank": ranks[by_compute],
        "agrees": best == by_compute,
    }
    return CrossRank(skew, straggler, wait)


def _rank_row(
    r: RankResult, wait: dict[int, int | None], dependency: dict[int, int | None]
) -> RankRow:
    assert r.summary is not None and r.per_step is not None
    doc = r.summary.to_dict()
    by_kind: dict[str, PhaseCadence] = {
        kind: {"n": c["n"], "p50_ns": c["p50_ns"], "p99_ns": c["p99_ns"]}
        for kind, c in doc["steps"]["cadence_by_kind"].items()
    }
    per = r.per_step.filter(pl.col("serving"))
    return {
        "rank": r.rank,
        "rank_source": r.rank_source,
        "path": stored(r.path),
        "truncated": r.truncated_at is not None,
        "truncated_at_byte": r.truncated_at,
        **trace_figures(doc),
        "cadence_by_kind": by_kind,
        "compute_p50_ns": median_ns(per["compute_ns"].to_numpy()),
        "collective_ns_per_step": sig_or_none(mean(per["collective_ns"])),
        "collective_wait_p50_ns": wait.get(r.rank) if r.rank is not None else None,
        "idle_dependency_p50_ns": dependency.get(r.rank) if r.rank is not None else None,
        "time_breakdown": step_time(r.summary.steps.filter(pl.col("phase").is_not_null())),
        "cadence_by_phase": deepcopy(by_kind),  # deprecated, for one release
    }


def assemble(paths: Sequence[str], results: list[RankResult]) -> RunSummary:
    """The run of analysed traces (see the module docstring): ranks assigned, steps aligned,
    skew, straggler and collective wait across ranks, and the ``traceview.run/1`` document.

    Raises:
        RunError: nothing analysable, or two files for one rank.
    """
    ranks = [r for r in results if r.summary is not None]
    left_out = [r for r in results if r.summary is None]
    if not ranks:
        found = "; ".join(f"{Path(r.path).name}: {r.error or r.skipped}" for r in left_out)
        raise RunError(f"{', '.join(paths)}: nothing to analyse ({found})")
    _assign_ranks(ranks)
    ranks.sort(key=lambda r: r.rank if r.rank is not None else -1)
    # the loader's warnings of each rank (a truncated trace first of all): a worker that
    # loaded it cannot print them, the command does, from here
    warnings = [f"{r.path}: {line}" for r in ranks for line in r.load_warnings]
    warnings += [f"{r.path}: skipped: {r.skipped}" for r in left_out if r.skipped]
    warnings += [f"{r.path}: left out: {r.error}" for r in left_out if r.error]
    absent = _absent_ranks(ranks, len(ranks) + len(left_out))
    if absent is not None:
        warnings.append(absent)
    replicas = _replicas(ranks)
    if replicas is not None:
        warnings.append(replicas)
    method, aligned, align_warnings = _alignment(ranks)
    warnings += align_warnings
    rank_ids = [int(r.rank) for r in ranks if r.rank is not None]
    cross = cross_rank(aligned, rank_ids)
    s = cross.straggler
    if s is not None and not s["agrees"]:
        warnings.append(
            f"straggler: rank {s['rank']} waits least in collectives (the others wait for "
            f"it), but rank {s['slowest_compute_rank']} is slowest by compute in the most "
            "steps: the slow work may be outside the steps' compute (host, launches, a "
            "collective's own cost)"
        )
    dependency = {  # beside each rank's collective wait: over the same aligned steps
        # (none where the rank's idle is not split: its clocks disagree)
        int(rank): None if g["dependency_ns"].null_count() else median_ns(g["dependency_ns"])
        for (rank,), g in aligned.group_by(["rank"])
    }
    doc: RunDocument = {
        "schema": SCHEMA,
        "ranks": [_rank_row(r, cross.wait, dependency) for r in ranks],
        "alignment": {"method": method, "steps": int(aligned["step"].n_unique())},
        "skew": cross.skew,
        "straggler": cross.straggler,
        "left_out": [
            {
                "path": stored(r.path),
                "reason": None if (why := r.error or r.skipped) is None else stored(why),
                "skipped": r.skipped is not None,
            }
            for r in left_out
        ],
        "warnings": warnings,
        "summaries": [r.summary.to_dict() for r in ranks if r.summary is not None],
    }
    return RunSummary(doc, ranks, left_out, aligned, warnings)
