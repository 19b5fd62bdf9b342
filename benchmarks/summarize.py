"""Analysis cost next to parsing: ``traceview.load`` alone vs ``load`` + ``summarize``.

    python benchmarks/summarize.py                 # ~1M kernels from the engine simulator
    python benchmarks/summarize.py --steps 2000    # smaller
    python benchmarks/summarize.py --shape kineto  # load.py's Kineto-shaped 1M-kernel trace
    python benchmarks/summarize.py --shape vllm    # load.py's vLLM-shaped 1M-kernel trace
    python benchmarks/summarize.py --model fixtures/configs/engine-hybrid-moe.json  # + MFU/MBU
    python benchmarks/summarize.py --against 8c39115  # + summarize at that commit, same run

The trace comes from the fixture simulator (fixtures/engine.py): a hybrid model with
linear- and full-attention layers, thousands of decode steps with chunked prefill phases,
vLLM's per-step CPU annotations, a cudaLaunchKernel and an ac2g flow pair per kernel (as real
traces carry), so loading, step detection (bursts and annotations, cross-checked), gaps and
busy fractions all do real work. ``--shape kineto|vllm`` takes benchmarks/load.py's traces
instead. Each measurement runs in a fresh process, alternating the two commands, and the
fastest of ``--repeat`` runs is kept.

Targets: load + summarize at most 1.5x the load's time, and its peak RSS at most 1.3x the
load's peak. Every accessor of the analysis after its first ``.summary`` (``.steps``,
``.families``, ``.families_rollup``, ``.kernels``, ``.busy``, ``.decode_gaps``, ``.idle``)
together at most 0.15x that first ``.summary``. With ``--against REF``: the same summarize
at that commit (a git worktree under benchmarks/out/), alternating in the same run; its time
and peak within 5% of it.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).parent / "out"
TIME_TARGET, MEMORY_TARGET = 1.5, 1.3
ACCESSORS_TARGET = 0.15  # every accessor after the first .summary, over that .summary
AGAINST_TARGET = 1.05  # summarize's time and peak against the --against commit


def generate_shape(shape: str, kernels: int = 1_000_000) -> tuple[Path, int]:
    """benchmarks/load.py's trace of this shape (generated once)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import load as load_bench

    make = load_bench.generate if shape == "kineto" else load_bench.generate_vllm
    return make(kernels), kernels


def generate(steps: int) -> tuple[Path, int]:
    sys.path.insert(0, str(ROOT))
    from fixtures.engine import SCENARIOS, build

    path = OUT / f"engine_{steps}.json.gz"
    meta = path.with_suffix(".meta")
    if path.exists() and meta.exists():
        return path, int(meta.read_text())
    OUT.mkdir(parents=True, exist_ok=True)
    per_phase = max(1, steps // 10)
    sc = dataclasses.replace(
        SCENARIOS[0],
        name="bench",
        layers="LLLF" * 3,
        decode_before=per_phase * 4,
        chunks=per_phase * 2,
        decode_after=steps - per_phase * 6,
        annotations="vllm-cpu",
        pause_ns=(200_000, 400_000),
    )
    tb, plan = build(sc)
    tb.write(path)
    kernels = sum(len(s.kernels) for s in plan)
    meta.write_text(str(kernels))
    return path, kernels


def _timed_efficiency() -> list[float]:
    """Wrap the summary's efficiency steps (per-step figures, the op work from shapes, the
    kernel table's and families' work) with timers: the seconds they took, added up."""
    try:
        import traceview.analysis.documents.summary as summary
    except ImportError:  # a commit before the analysis was grouped by concern (--against)
        import importlib  # (a name the layout rewrite leaves alone)

        summary = importlib.import_module("traceview.analysis." + "summary")

    spent = [0.0]
    for name in ("efficiency_section", "kernel_work", "family_work", "kernel_table_work"):
        original = getattr(summary, name)

        def timed(*args, _f=original, **kwargs):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            try:
                return _f(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - t

        setattr(summary, name, timed)
    return spent


def child(what: str, path: str, config: str | None = None) -> None:
    import traceview as tv

    spent = _timed_efficiency()
    model = tv.load_model(config) if config else None
    t0 = time.perf_counter()
    trace = tv.load(path, options=tv.LoadOptions(cache=False))  # time the parse, not the cache
    t1 = time.perf_counter()
    steps, accessors_s = 0, 0.0
    if what == "summarize":
        if hasattr(tv, "analyze"):
            a = tv.analyze(trace, tv.AnalysisConfig(model=model))
            steps = a.summary.to_dict()["steps"]["count"]
            t2 = time.perf_counter()
            for name in ("steps", "families", "families_rollup", "kernels", "busy"):
                getattr(a, name)
            _ = (a.decode_gaps, a.idle)
            accessors_s = time.perf_counter() - t2
        else:  # a commit before tv.analyze (--against)
            steps = tv.summarize(trace, tv.AnalysisConfig(model=model)).to_dict()["steps"]["count"]
    t2 = time.perf_counter() - accessors_s
    print(
        json.dumps(
            {
                "load_s": t1 - t0,
                "analysis_s": t2 - t1,
                "total_s": t2 - t0,
                "kernels": trace.kernels.height,
                "steps": steps,
                "efficiency_s": spent[0],
                "accessors_s": accessors_s,
                "peak_rss": peak_rss(),
            }
        )
    )


def worktree(ref: str) -> Path:
    """A checkout of ``ref`` under benchmarks/out/ (made once), to import its traceview."""
    where = OUT / f"tree-{ref}"
    if not where.exists():
        OUT.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(where), ref],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    return where


def peak_rss() -> int:
    """This process's peak resident set (VmHWM, bytes)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=8_000)
    parser.add_argument("--shape", choices=["engine", "kineto", "vllm"], default="engine")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--model",
        help="a config.json: also time summarize with it (MFU/MBU per step), against "
        "summarize without (target: efficiency adds <= 10%% to the analysis)",
    )
    parser.add_argument(
        "--against",
        metavar="REF",
        help="also time summarize at this git commit (a worktree under benchmarks/out/)",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    t0 = time.perf_counter()
    if args.shape == "engine":
        path, kernels = generate(args.steps)
    else:
        path, kernels = generate_shape(args.shape)
    print(
        f"trace: {path} ({args.shape} shape, {kernels:,} kernels, "
        f"{path.stat().st_size / 1e6:.0f} MB gz; ready in {time.perf_counter() - t0:.0f} s)"
    )
    best: dict[str, dict[str, float]] = {}
    runs: list[tuple[str, list[str], str | None]] = [("load", [], None), ("summarize", [], None)]
    if args.model:
        runs.append(("summarize", [args.model], None))
    if args.against:
        runs.append(("summarize", [], str(worktree(args.against))))
    for _ in range(args.repeat):
        for what, extra, tree in runs:
            env = dict(os.environ, PYTHONPATH=tree) if tree else None
            proc = subprocess.run(
                [sys.executable, __file__, "--child", what, str(path), *extra],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            )
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            key = what + ("+model" if extra else "") + ("@against" if tree else "")
            if key not in best or r["total_s"] < best[key]["total_s"]:
                best[key] = r
    load, summ = best["load"], best["summarize"]
    print(f"load alone:           {load['total_s']:.2f} s")
    print(
        f"load + summarize:     {summ['total_s']:.2f} s  (of which analysis "
        f"{summ['analysis_s']:.2f} s, {summ['steps']:,} steps found)"
    )
    print(
        f"ratio (load+summarize)/load: {summ['total_s'] / load['total_s']:.2f}x  "
        f"(target <= {TIME_TARGET}x)"
    )
    print(
        f"efficiency inside summarize, no model: {summ['efficiency_s']:.3f} s "
        f"({summ['efficiency_s'] / summ['analysis_s']:.1%} of the analysis)"
    )
    print(
        f"accessors after the first .summary: {summ['accessors_s']:.3f} s = "
        f"{summ['accessors_s'] / summ['analysis_s']:.3f}x that .summary "
        f"(target <= {ACCESSORS_TARGET}x)"
    )
    if "summarize@against" in best:
        old = best["summarize@against"]
        t, m = summ["total_s"] / old["total_s"], summ["peak_rss"] / old["peak_rss"]
        print(
            f"against {args.against}: load + summarize {summ['total_s']:.2f} s vs "
            f"{old['total_s']:.2f} s = {t:.3f}x (analysis {summ['analysis_s']:.2f} s vs "
            f"{old['analysis_s']:.2f} s = {summ['analysis_s'] / old['analysis_s']:.3f}x); peak "
            f"RSS {m:.3f}x (target <= {AGAINST_TARGET}x each)"
        )
    if "summarize+model" in best:
        m = best["summarize+model"]
        print(
            f"with --model: analysis {m['analysis_s']:.2f} s, of which efficiency "
            f"{m['efficiency_s']:.3f} s ({m['efficiency_s'] / m['analysis_s']:.1%}; target "
            f"<= 10%); analysis with/without the model {m['analysis_s'] / summ['analysis_s']:.2f}x"
        )
    with gzip.open(path, "rb") as f:
        json_bytes = sum(len(chunk) for chunk in iter(lambda: f.read(64 << 20), b""))
    print(
        f"peak RSS: load {load['peak_rss'] / 1e9:.2f} GB ({load['peak_rss'] / json_bytes:.2f}x "
        f"the {json_bytes / 1e9:.2f} GB JSON), load + summarize {summ['peak_rss'] / 1e9:.2f} GB "
        f"({summ['peak_rss'] / load['peak_rss']:.3f}x the load's peak; target <= "
        f"{MEMORY_TARGET}x: "
        f"{'meets' if summ['peak_rss'] / load['peak_rss'] <= MEMORY_TARGET else 'MISSES'})"
    )


if __name__ == "__main__":
    main()
