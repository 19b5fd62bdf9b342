"""Many traces at once: ``traceview scan`` serial vs the process pool vs Ray, and memory.

    python benchmarks/scan.py                # 64 rank traces of a simulated TP run
    python benchmarks/scan.py --traces 16 --steps 400 --repeat 1   # quicker

The traces come from fixtures/ranks.py (a tensor-parallel run whose all-reduces synchronise
the ranks): one rank's trace is generated, then written once per rank with its own
``distributedInfo.rank`` (so every file has its own content hash and rank). Each command
runs as a fresh process into a fresh dataset, the three alternating, ``--repeat`` times; the
fastest run of each is kept. Peak memory is the largest sum of RSS over the command's whole
process tree (the pool's or Ray's workers included), sampled every 20 ms with psutil, next to
the peak of loading one trace alone.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).parent / "out"


def generate(traces: int, steps: int) -> Path:
    sys.path.insert(0, str(ROOT))
    from fixtures.ranks import RankRun, build

    folder = OUT / f"scan_{traces}x{steps}"
    if folder.is_dir() and len(list(folder.glob("*.json.gz"))) == traces:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        paths, _ = build(RankRun(ranks=2, slow_rank=1, steps=steps, layers=8), Path(tmp))
        text = gzip.decompress(paths[0].read_bytes()).decode()
    marker = '"distributedInfo": {"backend":"nccl","rank":0,"world_size":2}'
    assert marker in text, "the generator's header changed"
    folder.mkdir(parents=True)
    for r in range(traces):
        info = f'"distributedInfo": {{"backend":"nccl","rank":{r},"world_size":{traces}}}'
        data = text.replace(marker, info).encode()
        (folder / f"rank{r}.pt.trace.json.gz").write_bytes(gzip.compress(data, compresslevel=1))
    return folder


def measure(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) summed over the process tree."""
    t0 = time.perf_counter()
    proc = psutil.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        total = 0
        with contextlib.suppress(psutil.Error):
            for p in [proc, *proc.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    total += p.memory_info().rss
        peak = max(peak, total)
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}")
    return wall, peak


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray engine")
    args = parser.parse_args()
    folder = generate(args.traces, args.steps)
    size = sum(p.stat().st_size for p in folder.glob("*.json.gz"))
    cores = os.cpu_count() or 1
    tv = [sys.executable, "-m", "traceview"]
    files = sorted(map(str, folder.glob("*.json.gz")))
    one = files[0]
    quarter = files[: max(1, len(files) // 4)]
    commands = {
        "one trace: load": [sys.executable, "-c", f"import traceview as tv; tv.load({one!r})"],
        "serial (-j 1)": [*tv, "scan", str(folder), "-j", "1"],
        f"pool (-j {cores})": [*tv, "scan", str(folder), "-j", str(cores)],
        # the same pool on a quarter of the traces: its peak must not grow with their number
        f"pool, {len(quarter)} traces": [*tv, "scan", *quarter, "-j", str(cores)],
    }
    try:
        import ray  # noqa: F401

        if not args.no_ray:
            commands["ray (local)"] = [*tv, "scan", str(folder), "--engine", "ray"]
    except ImportError:
        pass
    best: dict[str, tuple[float, int]] = {}
    for _ in range(args.repeat):
        for name, cmd in commands.items():
            with tempfile.TemporaryDirectory() as ds:
                full = cmd if name.startswith("one") else [*cmd, "-o", ds]
                wall, peak = measure(full)
            if name not in best or wall < best[name][0]:
                best[name] = (wall, max(peak, best.get(name, (0, 0))[1]))
    print(
        f"{args.traces} traces in {folder} ({size / 1e6:.0f} MB gz, {args.steps} steps each); "
        f"{cores} cores; fastest of {args.repeat} runs"
    )
    serial = best["serial (-j 1)"][0]
    load_peak = best["one trace: load"][1]
    for name, (wall, peak) in best.items():
        same_work = not name.startswith(("one", "pool,"))
        ratio = f"  speed-up vs serial {serial / wall:.2f}x" if same_work else ""
        print(
            f"{name:18} {wall:7.2f} s  peak RSS {peak / 1e9:.2f} GB "
            f"({peak / load_peak:.1f}x one trace's load){ratio}"
        )
    print(json.dumps({k: {"wall_s": v[0], "peak_rss": v[1]} for k, v in best.items()}))


if __name__ == "__main__":
    main()
