"""What the kernels between step-marker bursts say of two readings of a period
(docs/design.md, "A step's head"): the period's boundaries (coarse) are the steps', and the
others lie between layers, or every burst is a step inside a loop around steps (fine). The
names settle the coarse reading only; elsewhere :func:`reading` picks by one stated rule."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from traceview.analysis.base.intervals import distinct


class BoundaryNames(NamedTuple):
    """What lies between two bursts. A step's own head and tail (embedding, final norm,
    lm_head, sampling) run at step boundaries; some of their kernels also run inside
    layers (a top-1 router's argmax, a rotary gather).

    Attributes:
        at, code: per boundary (its index) the names (codes) of the kernels that run
            there, each pair once.
        edge: per pair, whether the name is a step-edge kernel (the rules' ``step_edge``
            role: sampling, the embedding lookup).
        after_at, after_code: the same pairs for the kernels that start after the
            boundary's longest idle gap (its pause).
    """

    at: np.ndarray
    code: np.ndarray
    edge: np.ndarray
    after_at: np.ndarray
    after_code: np.ndarray

    def window(self, lo: int, hi: int) -> BoundaryNames:
        """The boundaries ``[lo, hi)``, renumbered from 0."""
        mine = (self.at >= lo) & (self.at < hi)
        late = (self.after_at >= lo) & (self.after_at < hi)
        return BoundaryNames(
            self.at[mine] - lo,
            self.code[mine],
            self.edge[mine],
            self.after_at[late] - lo,
            self.after_code[late],
        )


COMMON = 0.8  # a name common to a set of boundaries runs in at least this share of them


ANY_EDGE = -1  # the code that stands for "some step-edge kernel", whichever it is


def common(names: BoundaryNames, chosen: np.ndarray, *, after: bool = False) -> set[int]:
    """The kernel names that run in at least :data:`COMMON` of the ``chosen`` boundaries
    (after their pause only, with ``after``). :data:`ANY_EDGE` is among them where some
    step-edge kernel runs there, whichever it is (a sampler that changes from call to
    call)."""
    at, code = (names.after_at, names.after_code) if after else (names.at, names.code)
    n = int(chosen.sum())
    if n == 0 or at.size == 0:
        return set()
    keep = chosen[at]
    codes, counts = np.unique(code[keep], return_counts=True)
    found = {int(c) for c, m in zip(codes, counts, strict=True) if m >= COMMON * n}
    if not after and names.edge.any():
        holding = distinct(at[keep & names.edge])
        if holding.size >= COMMON * n:
            found.add(ANY_EDGE)
    return found


def start_alike(names: BoundaryNames | None, coarse: np.ndarray, fine: np.ndarray) -> bool:
    """Whether the ``fine`` boundaries could start steps as the ``coarse`` ones do: the
    kernels common to them after their pause (a step's head, before its first burst) are
    common after the coarse ones' pause too. A loop adds its own kernels before a step's
    head, and changes none of it. A host wait inside a layer (an eager MoE layer waits
    between its router and its experts) is followed by the rest of that layer, which no
    step boundary starts with. True where nothing tells."""
    if names is None or not coarse.any() or not fine.any():
        return True
    return common(names, fine, after=True) <= common(names, coarse, after=True)


def edge_names(names: BoundaryNames) -> set[int]:
    """The codes of the names that run at a step's edge (the rules' ``step_edge``), and
    :data:`ANY_EDGE`."""
    return {ANY_EDGE} | {int(c) for c in distinct(names.code[names.edge])}


AFTER_PAUSE = (
    "the kernels after the shorter pauses never follow the longer ones, as the rest of an "
    "MoE layer follows its host wait, and as a loop's first step may run kernels of its own"
)
_EDGES_AGAINST_HEAD = (
    "sampling or embedding kernels run at the finer boundaries, as at a step's edge, and "
    "other kernels only at the coarser, as at a step's head or a generate() call's start; "
    "a top-1 MoE router or a rotary gather runs such kernels inside layers too"
)
_BOTH_PLAIN = (
    "each set of boundaries holds kernels the other lacks, and none of them is a sampler "
    "or an embedding lookup"
)
_HEAD_ONLY = (
    "kernels run only at the coarser boundaries, as a step's head does, and as a "
    "generate() call's own kernels do at its start"
)
_FINE_ONLY = (
    "kernels run at the finer boundaries and not between the other bursts, as at a "
    "step's edge, or as an MoE layer's own kernels before its host wait"
)


class Reading(NamedTuple):
    """What the kernels between the bursts say of two readings (:func:`reading`).

    Attributes:
        side: ``coarse`` or ``fine``, the reading taken; None where no kernel marks either.
        settled: whether the kernels settle it: a step-edge kernel common to the coarse
            boundaries and not to the fine ones. Else the reading is a guess.
        why: the evidence, in words (for the warning).
    """

    side: str | None
    settled: bool = False
    why: str = "no kernel between the bursts tells them apart"


def reading(
    names: BoundaryNames | None,
    coarse: np.ndarray,
    fine: np.ndarray,
    inner: np.ndarray | None = None,
) -> Reading:
    """Which boundaries the kernels between the bursts call the steps': ``coarse``
    (the ``fine`` ones lie between layers) or ``fine`` (the ``coarse`` ones are a loop
    around steps, each of them a step boundary too).

    The names settle one direction only. A step-edge kernel (sampling, the embedding
    lookup) common to the coarse boundaries and not to the fine ones settles the coarse,
    where no kernel is common to the fine ones alone: it runs at a step's edge, not at a
    host wait inside a step. A step-edge kernel common
    to the fine boundaries settles nothing: a top-1 MoE router's argmax and a rotary
    gather (``index_select``) run inside layers too. Nor do plain kernels: those common to
    the coarse boundaries alone may be a step's head or a loop's own setup (a
    ``generate()`` call's input copy, ``arange``, fill). Those common to the fine ones
    and missing from ``inner`` (the boundaries that lie between layers in both readings,
    None where too few tell)
    may be a step's edge or an MoE layer's own kernel. Where names mark the fine side with
    a step-edge kernel (common to every boundary where no ``inner`` tells), the fine
    reading is taken; else, where they mark the coarse side, the coarse; else the fine;
    none of these is settled."""
    if names is None or not coarse.any() or not fine.any():
        return Reading(None)
    on, off = common(names, coarse), common(names, fine)
    edge = edge_names(names)
    head = on - off
    # a step-edge kernel at the coarse boundaries, and no kernel common to the fine ones
    # alone: what runs between every two layers runs between two steps too, so a kernel
    # the fine boundaries hold and the coarse ones lack is a step's (a generate() call's
    # prefill embeds with another kernel than its decode steps)
    if head & edge and not off - on:
        return Reading("coarse", True)
    if inner is not None:
        fine_head = (off & on) - common(names, inner)
        fine_edge = fine_head & edge
    else:
        fine_head, fine_edge = set(), off & on & edge
    if fine_edge and head:
        return Reading("fine", why=_EDGES_AGAINST_HEAD)
    if head and fine_head:
        return Reading("coarse", why=_BOTH_PLAIN)
    if head:
        return Reading("coarse", why=_HEAD_ONLY)
    if fine_head:
        return Reading("fine", why=_FINE_ONLY)
    return Reading(None)


def holds_head(names: BoundaryNames | None, chosen: np.ndarray) -> np.ndarray | None:
    """Where the ``chosen`` boundaries hold a step's head (:func:`reading`): per
    boundary, whether it holds any of the kernels common to the chosen ones and not to the
    others; None where no kernel tells them apart."""
    if names is None or not chosen.any() or chosen.all():
        return None
    head = common(names, chosen) - common(names, ~chosen)
    if not head:
        return None
    holds = np.zeros(chosen.size, dtype=bool)
    hit = np.isin(names.code, list(head))
    if ANY_EDGE in head:
        hit |= names.edge
    holds[names.at[hit]] = True
    return holds
