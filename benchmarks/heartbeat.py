"""Heartbeat rendering time on a 10,000-step trace (target: under 5 s to render).

    python benchmarks/heartbeat.py [--steps 10000]

The trace comes from the fixture simulator with a one-full-attention-layer model, so it has
many steps and few kernels. Times load, summarize and the chart (build + PNG) separately;
the render time is the chart alone, the CLI time is the whole `traceview heartbeat` run.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).parent / "out"


def generate(steps: int) -> Path:
    sys.path.insert(0, str(ROOT))
    from fixtures.engine import SCENARIOS, build

    path = OUT / f"heartbeat_{steps}.json.gz"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    third = steps // 3
    sc = dataclasses.replace(
        SCENARIOS[0],
        name="hb",
        layers="LF",
        decode_before=third,
        chunks=third,
        decode_after=steps - 2 * third,
        annotations="none",
        side_stream=False,
    )
    tb, _ = build(sc)
    tb.write(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    path = generate(args.steps)
    import traceview as tv
    from traceview.render.charts import heartbeat_data, heartbeat_figure, save_figure

    t0 = time.perf_counter()
    trace = tv.load(path, options=tv.LoadOptions(cache=False))  # time the parse, not the cache
    t1 = time.perf_counter()
    summary = tv.summarize(trace)
    t2 = time.perf_counter()
    out = OUT / "heartbeat_bench.png"
    save_figure(heartbeat_figure([heartbeat_data(summary)]), out, overwrite=True)
    t3 = time.perf_counter()
    cli0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "traceview", "heartbeat", str(path), "-o", str(out), "--force"],
        check=True,
        capture_output=True,
    )
    cli = time.perf_counter() - cli0
    print(
        f"trace: {path.name}: {trace.kernels.height:,} kernels, "
        f"{summary.to_dict()['steps']['count']:,} steps"
    )
    print(
        f"load {t1 - t0:.2f} s, summarize {t2 - t1:.2f} s, render heartbeat PNG "
        f"{t3 - t2:.2f} s (target < 5 s); whole CLI run {cli:.2f} s"
    )


if __name__ == "__main__":
    main()
