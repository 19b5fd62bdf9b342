"""Embedded SQL engine: building the database vs loading the trace (target: not slower).

    python benchmarks/sql.py [--kernels 1000000]

Uses the trace of benchmarks/load.py (generated there, cached in benchmarks/out/). Times, in
one process: traceview.load, then building the embedded database, then one query
(queries/kernel_families.sql).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kernels", type=int, default=1_000_000)
    args = parser.parse_args()
    from load import generate  # benchmarks/load.py

    import traceview as tv
    from traceview.sqlengine import resolve_query, run_embedded
    from traceview.sqlengine.embedded import Database

    path = generate(args.kernels)
    t0 = time.perf_counter()
    trace = tv.load(path, options=tv.LoadOptions(cache=False))  # time the parse, not the cache
    t1 = time.perf_counter()
    db = Database(trace)
    t2 = time.perf_counter()
    slices = db.conn.execute("select count(*) from slice").fetchone()[0]
    db.conn.close()
    sql, where = resolve_query("kernel_families")
    t3 = time.perf_counter()
    run_embedded(trace, sql, where)
    t4 = time.perf_counter()
    print(f"trace: {path.name} ({trace.kernels.height:,} kernels, {slices:,} slices)")
    print(
        f"load {t1 - t0:.2f} s; build database {t2 - t1:.2f} s "
        f"(ratio {(t2 - t1) / (t1 - t0):.2f}, target <= 1); "
        f"kernel_families query incl. build {t4 - t3:.2f} s"
    )


if __name__ == "__main__":
    main()
