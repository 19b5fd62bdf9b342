"""The bursts' period: which boundaries between step-marker bursts are step boundaries
(docs/design.md, "How steps are found"). A model has a constant number L of full-attention bursts
per step, so the step boundaries are every L-th boundary; L and the pattern's phase are
chosen where the chosen boundaries' idle gaps stand out locally (each beats every other
boundary within L-1 of it), unless the boundaries off the phase are themselves sharp
pauses: then the period is a loop around one-burst steps (:func:`_loop_around_steps`).
Where none does, a few fallbacks: every burst a step; the smallest L whose boundaries
beat nearly every gap off their phase (host stalls inside a few steps); a natural break
in the gaps, whose steps hold one burst count, or counts a few drafter runs apart
(:func:`draft_levels`); one step."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import polars as pl

from traceview.analysis.base.intervals import I64, distinct
from traceview.analysis.steps.marks import (
    AFTER_PAUSE,
    BoundaryNames,
    holds_head,
    reading,
    start_alike,
)

PERIODIC_MIN_SCORE = 0.8  # share of chosen boundaries that must beat their neighbourhood
PERIODIC_SURE = 0.95  # a period this clear ends the search
PERIODIC_MARGIN = 1.15  # ... by at least this factor (a tie or a drift is not a pause)
PERIODIC_TYPICAL = 0.8  # stalls: beat this quantile of the boundaries off the phase
PERIODIC_MIN_STEPS = 3  # chosen boundaries needed before a period is believed
STALL_MIN_STEPS = 10  # ... before one found past stalls is
MAX_LAYERS = 256
# a pause this many times the gaps it stands out from is a sharp one: a step boundary at
# any layer count (a one-layer model's, a drafter's steps)
SHARP_BREAK = 4.0
NATURAL_BREAK = 2.0  # the widest ratio between sorted gaps that is a clear break
# a pause two orders of magnitude above the gaps inside steps is a step boundary, whatever
# longer pause (a program's loop) recurs around a few of them: a layer that waits on the
# host idles the device a few times the launch gaps, not a hundred (eager MoE's per-layer
# sync: 20-100 µs over 5-10 µs launch gaps; CUDA graphs leave no host wait inside a step)
LOOP_SHARP = 100.0
# a sharp break whose steps hold different numbers of bursts is believed where those
# numbers are a few drafter runs apart: speculative decoding adds d bursts (its drafter's
# layers) each time its drafter runs, 0 to a few times a step, so the steps' burst counts
# lie on L + d·k for at most this many values of k; host stalls at random, in a trace with
# no between-step pause, cut stretches of any length (every count over a range)
DRAFT_LEVELS = 6


def _periodic_score(idle: I64, period: int) -> tuple[float, int]:
    """Best (score, phase) for boundaries every ``period``: the share of chosen boundaries
    whose idle gap beats every other boundary within ``period - 1`` of them."""
    n = idle.size
    s = pl.Series(idle.astype(np.float64))
    w = period - 1
    left = s.shift(1).rolling_max(window_size=w, min_samples=1).fill_null(-1.0).to_numpy()
    right = (
        s.reverse()
        .shift(1)
        .rolling_max(window_size=w, min_samples=1)
        .fill_null(-1.0)
        .reverse()
        .to_numpy()
    )
    neighbours = np.maximum(left, right)
    wins = (idle > PERIODIC_MARGIN * neighbours) & (idle > 0)
    pos = np.arange(n) % period
    total = np.bincount(pos, minlength=period)
    won = np.bincount(pos, weights=wins, minlength=period)
    share = np.where(total > 0, won / np.maximum(total, 1), 0.0)
    phase = int(np.argmax(share))
    return float(share[phase]), phase


def _past_stalls(idle: I64) -> tuple[float, int, int] | None:
    """Where no period stands out locally: the smallest period whose chosen boundaries,
    at least :data:`STALL_MIN_STEPS` of them, nearly all (:data:`PERIODIC_SURE`) beat the
    gaps off their phase but a fifth: a few host stalls inside steps, longer than the
    between-step pause, hide the period from the local test without changing it. The
    gaps off the phase are taken as all of them less the phase's share, so their
    :data:`PERIODIC_TYPICAL` quantile is the quantile of all at
    ``PERIODIC_TYPICAL * (period - 1) / period`` (exact where the phase holds the longest
    gaps, the pauses; one sort, O(n) a period). (score, period, phase); None where none
    does."""
    n = idle.size
    ranked = np.sort(idle)
    pos = np.arange(n)
    for period in range(2, min(MAX_LAYERS, n // STALL_MIN_STEPS) + 1):
        typical = ranked[int(PERIODIC_TYPICAL * (period - 1) / period * (n - 1))]
        if typical <= 0:
            continue
        wins = idle > PERIODIC_MARGIN * typical
        phase_of = pos % period
        total = np.bincount(phase_of, minlength=period)
        share = np.bincount(phase_of, weights=wins, minlength=period) / total
        phase = int(np.argmax(share))
        if share[phase] >= PERIODIC_SURE:
            return float(share[phase]), period, phase
    return None


def natural_break(values: I64) -> int | None:
    """A threshold at the widest ratio between consecutive sorted positive values, if that
    ratio is at least 2 (a clear break); None otherwise."""
    found = _widest_break(values)
    return found[0] if found is not None and found[1] >= NATURAL_BREAK else None


def _widest_break(values: I64) -> tuple[int, float] | None:
    """The threshold at the widest ratio between consecutive sorted distinct positive
    values (their geometric mean), and that ratio; None with fewer than two."""
    v = distinct(values[values > 0]).astype(np.float64)
    if v.size < 2:
        return None
    ratios = v[1:] / v[:-1]
    i = int(np.argmax(ratios))
    return int(np.ceil(np.sqrt(v[i] * v[i + 1]))), float(ratios[i])


def draft_levels(counts: np.ndarray) -> int:
    """How many drafter runs apart the steps' burst counts are, plus one: the counts read
    as ``min + d·k`` with ``d`` the greatest common divisor of their differences from the
    smallest (a drafter's layers), this is the number of values ``k`` spans (1 where every
    step holds as many bursts)."""
    low = int(counts.min())
    step = int(np.gcd.reduce(counts.astype(np.int64) - low))
    return 1 if step == 0 else (int(counts.max()) - low) // step + 1


def _every(n: int, period: int, phase: int) -> np.ndarray:
    """The mask of ``n`` boundaries that holds every ``period``-th, from ``phase``."""
    mask: np.ndarray = np.arange(n) % period == phase
    return mask


def _enough(inner: np.ndarray) -> np.ndarray | None:
    """The boundaries between layers in both readings, where there are enough of them to
    tell which kernels run there (:data:`PERIODIC_MIN_STEPS`); else None."""
    return inner if inner.sum() >= PERIODIC_MIN_STEPS else None


def _head_over_pauses(period: int, below: float) -> str:
    """The warning where kernels that run only every ``period`` bursts (no step-edge
    kernel among them) read the steps, against pauses between every two bursts that stand
    out ``below`` times above the gaps inside steps, as a loop around steps' do."""
    return (
        f"the step-marker bursts read two ways: {period} bursts a step, as kernels that run "
        f"only every {period} bursts say (a step's head), or 1 burst a step inside a loop "
        f"around steps, as the pauses between every two bursts say ({below:.0f}× the gaps "
        "inside steps; a generate() call's own kernels also run only at its start): read as "
        f"{period} a step; set --layers 1 for the other reading"
    )


def _two_readings(coarse: int, fine: int, chosen: int, why: str) -> str:
    """The warning where the bursts read two ways and nothing between them settles it
    (``why``: what the kernels between them say)."""
    other = fine if chosen == coarse else coarse
    return (
        f"the step-marker bursts read two ways: {coarse} bursts a step, the longer pauses "
        f"between them a host wait inside a step (an eager MoE layer's sync), or {fine} "
        f"burst{'s' if fine != 1 else ''} a step inside a loop around steps (a program's "
        f"generate() calls); {why}: read as {chosen} a step; set --layers {other} for the "
        "other reading"
    )


def _edges_every_burst(period: int) -> str:
    """The words where every burst is a step because its boundaries hold a step's edge."""
    return (
        "every step-marker burst: the kernels between every two hold a step's edge "
        "(sampling, the embedding lookup), and those that run only every "
        f"{period} bursts are a loop's own (a program's generate() calls)"
    )


def _loop_around_steps(idle: I64, others: I64, period: int, phase: int) -> tuple[str | None, float]:
    """Whether a period of ``period`` bursts is a loop around one-burst steps (a program's
    ``generate()`` calls, each of a few steps of a one-layer model) rather than a model of
    ``period`` layers: the boundaries off the period's phase nearly all (80%) stand out
    :data:`SHARP_BREAK` times or more above the device's other idle gaps, and either by
    :data:`LOOP_SHARP` or more, or at least twice as sharply, in orders of magnitude, as
    the period's own pauses stand out above them (a 60 µs pause over 2 µs gaps, 30×,
    against a 300 µs pause every 5 bursts, 5×: 30 ≥ 5²). Then each burst is a step, as a
    pause that sharp is at any layer count (the words saying so); else None. A model whose
    every layer waits on the host (an MoE layer's sync: 50 µs over 2 µs launch gaps, 25×,
    against a 300 µs pause between steps, 6×) keeps its period: its layers' pauses lie
    about as far from the gaps as from that pause. Also how far the pauses off the phase
    stand out above the gaps (0 where they are no sharp pauses): :data:`LOOP_SHARP` times
    or more is too sharp for a host wait, and settles the reading."""
    if period < 2:
        return None, 0.0
    on = _every(idle.size, period, phase)
    if not _sharp_off_phase(idle, others, on):
        return None, 0.0
    typical, off = _inside_steps(others), idle[~on]
    inner = float(np.median(off))
    below, above = inner / typical, float(np.median(idle[on])) / inner
    if below < LOOP_SHARP and below < above**2:
        return None, below
    return (
        f"every step-marker burst: the pause between two stands out {below:.0f}× above the "
        f"gaps inside steps; the {above:.1f}× longer pause every {period} bursts is a loop "
        "around steps (a program's generate() calls), not a model's layers"
    ), below


def _inside_steps(others: I64) -> float:
    """The gaps inside steps, as one length: the 99th percentile of the device's idle
    gaps that are no boundary's longest (``others``); 0 where there are none."""
    return float(np.quantile(others, 0.99)) if others.size else 0.0


def _sharp_off_phase(idle: I64, others: I64, on: np.ndarray) -> bool:
    """Whether nearly all (80%) the boundaries off ``on`` stand out :data:`SHARP_BREAK`
    times or more above the device's other idle gaps (:func:`_inside_steps`): each could
    be a step boundary."""
    typical = _inside_steps(others)
    off = idle[~on]
    return (
        typical > 0 and off.size > 0 and (off >= SHARP_BREAK * typical).mean() >= PERIODIC_MIN_SCORE
    )


def _coarser(idle: I64, on: np.ndarray) -> tuple[np.ndarray, int, float] | None:
    """A period among the chosen boundaries: where every q-th of them (q ≥ 2) beats the
    rest of them nearby at nearly every place (:data:`PERIODIC_SURE`), that mask, q, and
    how far its pauses stand out above the rest (the ratio of medians); else None. A model
    whose every second layer waits on the host shows the wait as a period of 2 bursts, and
    its steps as one of 2·q."""
    chosen = np.flatnonzero(on)
    sub = idle[chosen]
    for q in range(2, min(MAX_LAYERS, sub.size // PERIODIC_MIN_STEPS) + 1):
        score, phase = _periodic_score(sub, q)
        if score < PERIODIC_SURE:
            continue
        mine = _every(sub.size, q, phase)
        rest = float(np.median(sub[~mine]))
        mask = np.zeros(idle.size, dtype=bool)
        mask[chosen[mine]] = True
        return mask, q, float(np.median(sub[mine])) / rest if rest > 0 else float("inf")
    return None


class Boundaries(NamedTuple):
    """The step boundaries among the burst boundaries, as :func:`choose_boundaries` reads
    them.

    Attributes:
        mask: per burst boundary, whether it is a step boundary.
        layers: L, the bursts a step (None where no period holds).
        detail: how, in words.
        strong: whether the evidence is strong (a period, or the user's own option) rather
            than a weaker guess.
        caveat: where the bursts read two ways that nothing decides, the warning that says
            so and names the option that chooses (else None).
    """

    mask: np.ndarray
    layers: int | None
    detail: str
    strong: bool
    caveat: str | None = None


def choose_boundaries(
    idle: I64,
    others: I64,
    layers: int | None,
    step_gap_ns: int | None,
    names: BoundaryNames | None = None,
) -> Boundaries:
    """Which burst boundaries are step boundaries, and how (:class:`Boundaries`).

    ``others`` are the device's idle gaps that are no boundary's longest: when (nearly)
    every boundary's gap stands out above them, every burst is a step (one full-attention
    layer per step). ``names``: the kernels between the bursts (:data:`BoundaryNames`):
    boundaries that hold a step's own head or tail are step boundaries where the pauses
    alone read two ways (:func:`reading`).
    """
    n = idle.size
    if n == 0:
        return Boundaries(np.zeros(0, dtype=bool), 1, "a single burst", False)
    if step_gap_ns is not None:
        return Boundaries(idle >= step_gap_ns, None, f"--step-gap {step_gap_ns} ns", True)
    if layers is not None:
        period = max(1, layers)
        if period == 1:
            return Boundaries(np.ones(n, dtype=bool), 1, "--layers 1", True)
        score, phase = _periodic_score(idle, period)
        said = f"--layers {period} (boundary score {score:.2f})"
        return Boundaries(_every(n, period, phase), period, said, True)
    best: tuple[float, int, int] | None = None
    for period in range(2, min(MAX_LAYERS, n // PERIODIC_MIN_STEPS) + 1):
        score, phase = _periodic_score(idle, period)
        if best is None or score > best[0] + 1e-9:
            best = (score, period, phase)
        if score >= PERIODIC_SURE:
            break  # multiples of the period score lower, not higher: no need to look on
    if best is not None and best[0] >= PERIODIC_MIN_SCORE:
        score, period, phase = best
        on = _every(n, period, phase)
        caveat = None
        if _sharp_off_phase(idle, others, on):
            # every burst could be a step: the period's pauses a loop around them, or its
            # bursts a model's layers that wait on the host
            looped, below = _loop_around_steps(idle, others, period, phase)
            sure = below >= LOOP_SHARP  # too sharp for a host wait
            marks = reading(names, on, ~on)
            # the kernels after the off-phase pauses never follow the period's: the rest
            # of a layer after its host wait (or a loop's first step running its own)
            inside = not start_alike(names, on, ~on)
            if marks.side == "fine" and (sure or not inside):
                if not sure:
                    caveat = _two_readings(period, 1, 1, marks.why)
                return Boundaries(
                    np.ones(n, dtype=bool), 1, _edges_every_burst(period), True, caveat
                )
            if marks.side is not None or (inside and not sure):
                if sure:  # names overrule pauses too sharp for a host wait: say so
                    caveat = _head_over_pauses(period, below)
                elif not marks.settled:
                    why = marks.why if marks.side == "coarse" else AFTER_PAUSE
                    caveat = _two_readings(period, 1, period, why)
            else:
                # the pauses decide, and say so unless they stand out too sharply for a
                # host wait and the kernels after them are a step's (not a layer's rest)
                if not sure or inside:
                    caveat = _two_readings(period, 1, 1 if looped else period, marks.why)
                if looped is not None:
                    return Boundaries(np.ones(n, dtype=bool), 1, looped, True, caveat)
        coarser = _coarser(idle, on)
        if coarser is not None:
            mask, q, ratio = coarser
            marks = reading(names, mask, on & ~mask, _enough(~on))
            # the finer pauses far above the gaps inside steps are steps' pauses (the loop
            # rule's reading); below, they may be host waits inside a step
            typical = _inside_steps(others)
            sharp_fine = typical > 0 and float(np.median(idle[on & ~mask])) >= LOOP_SHARP * typical
            if marks.side == "coarse":
                if not marks.settled and caveat is None:
                    caveat = _two_readings(period * q, period, period * q, marks.why)
                period *= q
                on = mask
            elif (
                caveat is None
                and not sharp_fine
                and (marks.side == "fine" or (others.size and ratio >= NATURAL_BREAK))
            ):
                caveat = _two_readings(period * q, period, period, marks.why)
        return Boundaries(
            on,
            period,
            (
                f"every {period} step-marker bursts: the between-step idle gap "
                f"beats every gap within {period - 1} bursts at {score:.0%} of "
                "boundaries"
            ),
            True,
            caveat,
        )
    if others.size:
        typical = _inside_steps(others)
        standing_out = float((idle > PERIODIC_MARGIN * typical).mean())
    else:
        standing_out = float((idle > 0).mean())
    if standing_out >= PERIODIC_MIN_SCORE:
        return Boundaries(
            np.ones(n, dtype=bool),
            1,
            (
                f"every step-marker burst: {standing_out:.0%} of the idle gaps between bursts "
                "stand out above the device's other idle gaps"
            ),
            False,
        )
    stalled = _past_stalls(idle)
    if stalled is not None:
        score, period, phase = stalled
        return Boundaries(
            _every(n, period, phase),
            period,
            (
                f"every {period} step-marker bursts: the between-step idle gap beats "
                f"{PERIODIC_TYPICAL:.0%} of the other boundaries' gaps at {score:.0%} of "
                "boundaries (a few longer gaps inside steps, host stalls, hide it nearby)"
            ),
            True,
        )
    widest = _widest_break(idle)
    sharp: tuple[int, float, int, int] | None = None  # a sharp break no rule took
    if widest is not None and widest[1] >= NATURAL_BREAK:
        threshold, ratio = widest
        mask = idle >= threshold
        finer = _widest_break(idle[mask])  # a second break among the gaps the first chose
        if finer is not None and finer[1] >= NATURAL_BREAK:
            coarse = idle >= finer[0]
            # host waits between layers below it, where its pauses hold the step's head and
            # are enough to be believed
            if (
                coarse.sum() > PERIODIC_MIN_STEPS
                and reading(names, coarse, mask & ~coarse, _enough(~mask)).side == "coarse"
            ):
                threshold, mask = finer[0], coarse
        heads = holds_head(names, mask)
        if heads is not None:  # a host stall inside a step holds no step head: no boundary
            mask &= heads
        counts = np.diff(np.flatnonzero(np.concatenate(([True], mask, [True]))))
        if counts.size > 2:
            inner = counts[1:-1]
            mode = int(np.bincount(inner).argmax())
            if (inner == mode).mean() >= PERIODIC_MIN_SCORE:
                return Boundaries(
                    mask,
                    mode,
                    (f"idle gaps ≥ {threshold} ns (a natural break in the gap distribution)"),
                    False,
                )
            if counts.size > PERIODIC_MIN_STEPS + 1 and ratio >= SHARP_BREAK:
                if draft_levels(inner) <= DRAFT_LEVELS or heads is not None:
                    return Boundaries(
                        mask,
                        mode,
                        (
                            f"idle gaps ≥ {threshold} ns (a sharp break in the gap "
                            f"distribution, {ratio:.0f}×; the steps hold {inner.min()} to "
                            f"{inner.max()} step-marker bursts, as a drafter run a varying "
                            "number of times a step does)"
                        ),
                        False,
                    )
                sharp = (threshold, ratio, int(inner.min()), int(inner.max()))
    if sharp is not None:
        threshold, ratio, low, high = sharp
        return Boundaries(
            np.zeros(n, dtype=bool),
            None,
            (
                f"no step structure found in the step-marker bursts: idle gaps of "
                f"{threshold} ns or more stand out {ratio:.0f}× above the others, but the "
                f"stretches they cut hold from {low} to {high} bursts, and no kernel marks "
                "them as steps (a drafter run many different numbers of times, or host "
                "stalls inside steps): all of them are taken as one step; set --step-gap "
                f"{threshold}ns to cut at those gaps, or --layers"
            ),
            False,
        )
    return Boundaries(
        np.zeros(n, dtype=bool),
        None,
        (
            "no step structure found in the step-marker bursts (no between-step pause stands "
            "out, no period): all of them are taken as one step; set --layers or --step-gap"
        ),
        False,
    )
