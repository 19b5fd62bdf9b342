"""Step finding's arrays (DeviceKernels, FamilyCodes, the union, bursts and annotation links)
against plain per-row references written here, on frames built by hand: many chunks, a name
under two categories of different families, null streams and ids, steps with no marker."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import traceview as tv
from traceview.analysis.base.intervals import union
from traceview.analysis.classify.families import family_codes, family_rows, load_rules
from traceview.analysis.steps.bursts import _bursts
from traceview.analysis.steps.candidates import annotation_candidate, device_kernels

NAMES = [
    "flash_fwd_kernel",
    "fused_recurrent_gated_delta_rule_fwd_kernel",
    "sm90_xmma_gemm_bf16",
    "rms_norm_kernel",
    "Memcpy HtoD (Pinned -> Device)",
    "some_unknown_kernel",
]
CATS = ["kernel", "gpu_memcpy", "graph_kernel"]


def _frame(rng: np.random.Generator, n: int, chunks: int) -> pl.DataFrame:
    """``n`` kernels in time order, in ``chunks`` chunks (as the loader leaves a sorted
    trace), each name under one or more categories, some streams null."""
    ts = np.sort(rng.integers(0, 50_000_000, n))
    parts = []
    cuts = np.linspace(0, n, chunks + 1, dtype=int)
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        m = hi - lo
        names = [NAMES[i] for i in rng.integers(0, len(NAMES), m)]
        picks = rng.integers(0, len(CATS), m)
        cats = [
            CATS[i] if name.startswith(("Memcpy", "sm90")) else "kernel"
            for name, i in zip(names, picks, strict=True)
        ]
        stream = rng.integers(0, 3, m).astype(object)
        stream[rng.random(m) < 0.05] = None
        parts.append(
            pl.DataFrame(
                {
                    "ts_ns": ts[lo:hi],
                    "dur_ns": rng.integers(0, 40_000, m),
                    "name": pl.Series(names, dtype=pl.Categorical),
                    "cat": pl.Series(cats, dtype=pl.Categorical),
                    "pid": pl.Series([0] * m, dtype=pl.Int32),
                    "stream": pl.Series(list(stream), dtype=pl.Int32),
                    "correlation": pl.Series(range(lo, hi), dtype=pl.Int64),
                }
            )
        )
    return pl.concat(parts, rechunk=False)


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The preset, with a user rule for category graph_kernel: the sm90 GEMM under it and
    under kernel is one name with two categories and two families."""
    path = Path(tmp_path_factory.mktemp("rules")) / "rules.toml"
    path.write_text('[[rule]]\nfamily = "gemm.legacy"\ncategories = ["graph_kernel"]\n')
    return load_rules("default", path)


@pytest.mark.slow
def test_family_codes_are_each_kernels_own_rule(rules) -> None:  # type: ignore[no-untyped-def]
    frame = _frame(np.random.default_rng(1), 20_000, 9)
    assert frame["ts_ns"].n_chunks() == 9
    fam = family_codes(frame, rules)
    got = [fam.names[c] for c in fam.codes.tolist()]
    rows = frame.select(pl.col("name", "cat").cast(pl.String)).rows()
    assert got == [rules.family_of(n, c) for n, c in rows]
    assert {"gemm", "gemm.legacy"} <= set(got)  # the name under two categories, both ways
    assert fam.series().cast(pl.String).to_list() == got
    # per (name, cat) totals and the family table, summed here row by row
    dur = frame["dur_ns"].to_list()
    count: dict[tuple[str, str], int] = defaultdict(int)
    total: dict[tuple[str, str], int] = defaultdict(int)
    for (n, c), d in zip(rows, dur, strict=True):
        count[n, c] += 1
        total[n, c] += d
    totals = fam.totals(frame["dur_ns"].to_numpy())
    got_pairs = {
        (str(r["name"]), str(r["cat"])): (r["count"], r["total_ns"])
        for r in totals.iter_rows(named=True)
    }
    assert got_pairs == {p: (count[p], total[p]) for p in count}
    rolled = family_rows(totals, roll_up=True)
    by_root: dict[str, int] = defaultdict(int)
    for f, d in zip(got, dur, strict=True):
        by_root[f.split(".")[0]] += d
    assert dict(zip(rolled["family"], rolled["total_ns"], strict=True)) == by_root
    assert rolled["share"].sum() == pytest.approx(1.0)


def test_the_union_is_a_plain_sweeps_intervals() -> None:
    rng = np.random.default_rng(3)
    starts = np.sort(rng.integers(0, 2_000_000, 20_000))
    ends = starts + rng.integers(0, 400, starts.size)
    merged: list[list[int]] = []
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        if merged and a <= merged[-1][1]:  # touching intervals merge
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    u = union(starts, ends)
    assert u.starts.tolist() == [a for a, _ in merged]
    assert u.ends.tolist() == [b for _, b in merged]
    assert union(starts[::-1].copy(), ends[::-1].copy()).starts.tolist() == u.starts.tolist()


def _hand_made() -> pl.DataFrame:
    """Stream 0 ends in a marker and stream 1 starts with one: two runs, not one."""
    names = ["sm90_xmma_gemm_bf16", "flash_fwd_kernel", "flash_fwd_kernel", "rms_norm_kernel"]
    return pl.DataFrame(
        {
            "ts_ns": [0, 10, 20, 30],
            "dur_ns": [5, 5, 5, 5],
            "name": pl.Series(names, dtype=pl.Categorical),
            "cat": pl.Series(["kernel"] * 4, dtype=pl.Categorical),
            "pid": pl.Series([0] * 4, dtype=pl.Int32),
            "stream": pl.Series([0, 1, 0, 1], dtype=pl.Int32),
            "correlation": pl.Series([1, 2, 3, 4], dtype=pl.Int64),
        }
    )


@pytest.mark.parametrize("seed", [None, 5, 6])
def test_bursts_are_runs_of_markers_on_one_stream(rules, seed: int | None) -> None:  # type: ignore[no-untyped-def]
    frame = _hand_made() if seed is None else _frame(np.random.default_rng(seed), 5_000, 4)
    k = device_kernels(frame, family_codes(frame, rules), ("full_attention",))
    assert k.marker.tolist() == (frame["name"].cast(pl.String) == "flash_fwd_kernel").to_list()
    # the reference: walk each stream's kernels in time order (a null stream is one stream)
    per_stream: dict[object, list[int]] = defaultdict(list)
    for i, s in enumerate(frame["stream"].to_list()):
        per_stream[s].append(i)
    runs = []
    ts = frame["ts_ns"].to_list()
    for s in sorted(per_stream, key=lambda s: (s is not None, s)):
        run: list[int] = []
        for i in per_stream[s] + [-1]:
            if i >= 0 and k.marker[i]:
                run.append(i)
                continue
            if run:
                runs.append((ts[run[0]], ts[run[-1]]))
            run = []
    runs.sort(key=lambda r: r[0])  # stable: equal starts keep their stream order
    start, last = _bursts(k)
    assert list(zip(start.tolist(), last.tolist(), strict=True)) == runs


def test_an_annotated_step_without_markers_anchors_at_its_first_kernel(tmp_path: Path) -> None:
    """Two CPU step ranges; the first launches a marker kernel after a GEMM, the second only
    GEMMs: step 0 anchors at its marker, step 1 at its first kernel; both hold every kernel
    launched inside them."""
    from fixtures.build import TraceBuilder

    tb = TraceBuilder()
    t0, step, gpu = 1_000_000_000, 100_000, 1_010_000_000
    launches = [
        ("sm90_xmma_gemm_bf16", 10_000, 0),
        ("flash_fwd_kernel", 20_000, 1),
        ("flash_fwd_kernel", 30_000, 2),
        ("sm90_xmma_gemm_bf16", 110_000, 10),
        ("sm90_xmma_gemm_bf16", 120_000, 11),
    ]
    for i in range(2):
        tb.cpu_op(
            "execute_context_0(0)_generation_2(2)", t0 + i * step, step, cat="user_annotation"
        )
    for name, cpu, slot in launches:
        corr = tb.next_correlation()
        tb.launch(name, t0 + cpu, corr, gpu + slot * 10_000)
        tb.kernel(name, gpu + slot * 10_000, 3_000, correlation=corr)
    trace = tv.load(str(tb.write(tmp_path / "t.json")))
    rules = load_rules()
    k = device_kernels(trace.kernels, family_codes(trace.kernels, rules), rules.step_marker)
    c = annotation_candidate(trace, k, 0)
    assert c is not None
    assert c.anchors.tolist() == [gpu + 10_000, gpu + 100_000]
    assert c.last_markers.tolist() == [gpu + 20_000, gpu + 110_000]
    assert c.first_kernel is not None and c.first_kernel.tolist() == [gpu, gpu + 100_000]
    assert c.coverage == 1.0


def test_family_codes_with_the_process_s_large_categorical_codes(rules) -> None:  # type: ignore[no-untyped-def]
    """Categorical codes are the process's while any categorical lives (a notebook holding
    other traces): after 100k other strings, a trace's names have large codes, and its
    kernels still take their own rule's family."""
    others = pl.Series([f"junk_{i}" for i in range(100_000)], dtype=pl.Categorical)
    names = [f"late_{n}" for n in NAMES]
    frame = pl.DataFrame(
        {
            "name": pl.Series(names * 50, dtype=pl.Categorical),
            "cat": pl.Series(["kernel"] * len(names) * 50, dtype=pl.Categorical),
        }
    )
    assert int(frame["name"].to_physical().min()) >= 100_000
    fam = family_codes(frame, rules)
    expect = [rules.family_of(n, "kernel") for n in names * 50]
    assert [fam.names[c] for c in fam.codes.tolist()] == expect
    assert others.len() == 100_000  # held to here, so its codes stay taken
