"""One block of JSON events, decoded by the loader's typed decoder and by polars' native
JSON reader: where a block's time goes, and whether a native reader would pay (issue 34).

    python benchmarks/block.py                 # the kineto shape (benchmarks/load.py's)
    python benchmarks/block.py --shape long-names

Cuts the first full block (the loader's 6 MB, at an event boundary) from the 300k-kernel
trace of ``benchmarks/load.py`` (generated once into benchmarks/out/) and times, medians of
``--repeat`` runs with the cyclic collector off as in the loader:

- ``typed``: the loader's path, msgspec's typed decode, the columns and the frame;
- ``polars``: ``pl.read_json`` of the block with the loader's fields as its schema, in
  pieces of ``--piece`` bytes, on one thread and on two (it releases the GIL); ``pid``,
  ``tid`` and ``id`` are read as Int64, so a block holding a string one (Kineto's
  ``"pid": "Spans"`` metadata) is refused where the typed decoder takes it;
- the checks a native reader would need before its frame could stand for the typed one
  (polars reads ``1.5`` in an integer field as 1, a repeated key's first value, a number in
  a text field as its text): a regular expression for a value of a wrong type after a key
  the frame reads, a count of those keys, and a scan for ``\\u`` escapes.

Prints each in ms per block. Nothing here is traceview's load: it is the measurement the
docs (docs/performance.md) cite for not building a native reader.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import io
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl  # noqa: E402

import benchmarks.load as load  # noqa: E402
from traceview.loader.boundaries import last_cut  # noqa: E402
from traceview.loader.columns import DECODER, Block  # noqa: E402
from traceview.loader.json import BLOCK_BYTES  # noqa: E402

_ARGS = {
    "device": pl.Int64,
    "stream": pl.Int64,
    "correlation": pl.Int64,
    "External id": pl.Int64,
    "name": pl.String,
    "labels": pl.String,
    "sort_index": pl.Int64,
}
SCHEMA = {
    "ph": pl.String,
    "cat": pl.String,
    "name": pl.String,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "ts": pl.Float64,
    "dur": pl.Float64,
    "id": pl.Int64,
    "bp": pl.String,
    "args": pl.Struct(_ARGS),
}
_INTEGERS = "pid|tid|id|device|stream|correlation|External id|sort_index"
_TEXTS = "ph|cat|name|bp|labels"
WRONG_TYPE = (
    rf'"(?:{_INTEGERS})"\s*:\s*(?:-?[0-9]+[.eE]|[tf])'
    rf'|"(?:{_TEXTS})"\s*:\s*[-0-9tf]|"(?:ts|dur)"\s*:\s*[tf]'
)
KEYS = rf'"(?:{_INTEGERS}|{_TEXTS}|ts|dur)"\s*:'


def first_block(path: Path) -> bytes:
    """The first block the loader would cut from ``path``'s events array."""
    with gzip.open(path) as f:
        text = f.read(BLOCK_BYTES + (1 << 20))
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    buf = text[start : start + BLOCK_BYTES]
    return buf[: last_cut(buf)]


def pieces(block: bytes, size: int) -> list[bytes]:
    """``block`` cut at event boundaries into pieces of about ``size`` bytes."""
    out, start = [], 0
    while len(block) - start > size:
        cut = last_cut(block[start : start + size])
        out.append(block[start : start + cut])
        start = block.index(b",", start + cut) + 1
    out.append(block[start:])
    return out


def typed(block: bytes) -> pl.DataFrame:
    doc = b"".join((b"[", block, b"]"))
    return Block.from_structs(DECODER.decode(doc), 0).frame()


def native(parts: list[bytes], threads: int) -> list[pl.DataFrame]:
    def read(part: bytes) -> pl.DataFrame:
        return pl.read_json(io.BytesIO(b"".join((b"[", part, b"]"))), schema=SCHEMA)

    if threads == 1:
        return [read(p) for p in parts]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(read, parts))


def median_ms(work: Callable[[], object], repeat: int, per: int = 1) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) / per)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=["kineto", "long-names"], default="kineto")
    parser.add_argument("--piece", type=int, default=1 << 20, help="bytes per polars read")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    make = load.generate if args.shape == "kineto" else load.generate_long_names
    block = first_block(make(300_000))
    parts = pieces(block, args.piece)
    gc.disable()
    frame = typed(block)
    print(f"block: {len(block) / 1e6:.1f} MB, {frame.height:,} events, {args.shape} shape")
    text = pl.Series([block], dtype=pl.Binary).cast(pl.String)
    rows = [
        ("typed decode, columns, frame", median_ms(lambda: typed(block), args.repeat)),
        (
            f"polars read_json, {len(parts)} pieces, 1 thread",
            median_ms(lambda: native(parts, 1), args.repeat),
        ),
        (
            # 8 blocks on 2 threads: the time per block when both cores read
            f"polars read_json, {len(parts)} pieces, 2 threads (per block)",
            median_ms(lambda: native(parts * 8, 2), args.repeat, per=8),
        ),
        (
            "check: a wrong type after a key",
            median_ms(lambda: text.str.contains(WRONG_TYPE), args.repeat),
        ),
        ("check: count the keys", median_ms(lambda: text.str.count_matches(KEYS), args.repeat)),
        ("check: any \\u escape", median_ms(lambda: b"\\u" in block, args.repeat)),
    ]
    for name, ms in rows:
        print(f"{name:55s} {ms:7.1f} ms")


if __name__ == "__main__":
    main()
