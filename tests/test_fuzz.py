"""Fuzzing the loader (and the summary) with mutated real traces: every input either loads
or gets one clear error (a TraceviewError); nothing else may escape.

CI runs a short pass. A longer one runs from the command line:

    python tests/test_fuzz.py --examples 3000      # prints the inputs tried and any crash
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import traceview as tv  # noqa: E402

SHARED = ROOT.parent / "shared" / "traces"


def _seed_text() -> list[bytes]:
    """Small real traces (their first few hundred events, as the profiler wrote them), and
    one generated fixture's: the text the mutations start from."""
    seeds = []
    for name in (
        "tracelens/torch-compile-triton.json.gz",
        "tracelens/b300-sglang-deepseek-r1-decode-graph.json.gz",
        "hta/mi250_minitoy_rocm62.json.gz",
    ):
        path = SHARED / name
        if path.exists():
            doc = json.loads(gzip.decompress(path.read_bytes()))
            events = doc["traceEvents"] if isinstance(doc, dict) else doc
            head = (
                {k: v for k, v in doc.items() if k != "traceEvents"}
                if isinstance(doc, dict)
                else {}
            )
            seeds.append(json.dumps({**head, "traceEvents": events[:300]}, indent=1).encode())
    fixture = gzip.decompress((ROOT / "fixtures/generated/dense_sglang.json.gz").read_bytes())
    seeds.append(fixture[:200_000])  # a cut one too
    seeds.append(fixture[:60_000] + b"]}")
    return seeds


SEEDS = _seed_text()
TOKENS = [
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b'"',
    b"\\",
    b"NaN",
    b"-1e999",
    b"null",
    b"\x00",
    b"\xff",
    b'"ts"',
    b'"dur"',
    b'"ph":"X"',
    b'"cat":"kernel"',
    b"[" * 50,
    b"]" * 50,
]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    seed = draw(st.sampled_from(range(len(SEEDS))))
    data = bytearray(SEEDS[seed])
    steps = []
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "delete", "insert", "duplicate", "token"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[at:]
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 2000))]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=64))
        elif op == "duplicate":
            n = draw(st.integers(1, 5000))
            data[at:at] = data[at : at + n]
        else:
            data[at:at] = draw(st.sampled_from(TOKENS))
        steps.append(f"{op}@{at}")
    compress = draw(st.booleans())
    blob = bytes(data)
    if compress:
        blob = gzip.compress(blob, mtime=0)
        if draw(st.booleans()) and blob:  # damage the compressed stream too
            cut = draw(st.integers(0, len(blob) - 1))
            blob = blob[:cut] if draw(st.booleans()) else blob[:cut] + b"\x00" + blob[cut + 1 :]
            steps.append(f"gzip-damage@{cut}")
    return f"seed{seed} {' '.join(steps)}{' gz' if compress else ''}", blob


def check_one(blob: bytes, folder: Path) -> None:
    """Load (and summarize) one input: a Trace or a TraceviewError, nothing else."""
    path = folder / "input.json"
    path.write_bytes(blob)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            trace = tv.load(path, options=tv.LoadOptions(cache=False))
        except tv.TraceviewError as exc:
            assert str(exc).startswith(str(path)), str(exc)
            assert "\n" not in str(exc), "an error is one line"
            return
        try:
            tv.summarize(trace)
        except tv.TraceviewError:
            return


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated())
def test_mutated_traces_load_or_fail_clearly(case: tuple[str, bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_one(case[1], Path(tmp))


@pytest.mark.slow
@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated())
def test_many_more_mutated_traces_load_or_fail_clearly(case: tuple[str, bytes]) -> None:
    """CI's longer pass (new random inputs each run; `make fuzz` runs 3000)."""
    with tempfile.TemporaryDirectory() as tmp:
        check_one(case[1], Path(tmp))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tried: list[str] = []
    crashes: list[tuple[str, str]] = []

    @settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(mutated())
    def run(case: tuple[str, bytes]) -> None:
        tried.append(case[0])
        with tempfile.TemporaryDirectory() as tmp:
            try:
                check_one(case[1], Path(tmp))
            except Exception:  # a crash: record it and go on
                crashes.append((case[0], traceback.format_exc(limit=3)))

    hypothesis.seed(args.seed)(run)()
    kinds: dict[str, int] = {}
    for name in tried:
        for step in name.split()[1:]:
            kind = step.split("@")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
    print(f"inputs tried: {len(tried)} (mutations: {kinds})")
    print(f"crashes: {len(crashes)}")
    for name, tb in crashes[:10]:
        print(f"--- {name}\n{tb}")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
