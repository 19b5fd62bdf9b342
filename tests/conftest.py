from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The loaded-trace cache of the tests lives in a folder of their own, never the user's: one
# per test run, made by the process that starts the run (pytest, or xdist's controller),
# inherited through the environment by its workers and subprocesses (and by this file
# imported a second time as tests.conftest), which make none, and removed when the run ends
# (pytest_sessionfinish). tests/test_cleanup.py checks that a run leaves none behind.
TEST_CACHE_ENV = "TRACEVIEW_TEST_CACHE_DIR"
TEST_CACHE_PREFIX = "traceview-test-cache-"
OWN_CACHE: str | None = None  # the folder this process made, and removes
if TEST_CACHE_ENV not in os.environ:
    OWN_CACHE = tempfile.mkdtemp(prefix=TEST_CACHE_PREFIX)
    os.environ[TEST_CACHE_ENV] = OWN_CACHE
os.environ["TRACEVIEW_CACHE_DIR"] = os.environ[TEST_CACHE_ENV]

# Each load decodes on this process alone unless a test asks for more, or the run is given
# TRACEVIEW_WORKERS: helper interpreters started by the suite's many small loads cost the
# default run about a fifth more time on 2 cores. tests/test_workers.py checks that every
# worker count gives the same trace (and the commands with the default, every core).
os.environ.setdefault("TRACEVIEW_WORKERS", "1")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run's cache folder goes with the run (in xdist's controller, after its workers)."""
    if OWN_CACHE is not None:
        shutil.rmtree(OWN_CACHE, ignore_errors=True)


GENERATED = ROOT / "fixtures" / "generated"
# a document's floats carry 9 significant digits (traceview.analysis.base.precision): a figure
# equals its planted truth when it is within half a unit of the 9th digit
DOC_REL = 5e-9
SHARED_TRACES = ROOT.parent / "shared" / "traces"
ALL_SCENARIOS = sorted(p.name.removesuffix(".json.gz") for p in GENERATED.glob("*.json.gz"))


def _capture_only(name: str) -> bool:
    return bool(json.loads((GENERATED / f"{name}.truth.json").read_text()).get("capture_only"))


# the fixtures with serving steps; a trace of engine start-up only (CUDA-graph capture) has no
# steps, families or gaps to compare, and is tested on its own (tests/test_capture_regions.py)
CAPTURE_ONLY_NAMES = [n for n in ALL_SCENARIOS if _capture_only(n)]
SCENARIO_NAMES = [n for n in ALL_SCENARIOS if n not in CAPTURE_ONLY_NAMES]


def cut_in_half(dest: Path, *, gzip_bytes: bool = False) -> int:
    """Write hybrid_chunked cut in half at ``dest``: the first half of its JSON text,
    compressed again, or (``gzip_bytes``) the first half of its gzip bytes. Returns the
    planted cut the loader must report: the byte of the text just after the last event
    that closes before the cut (its events are separated by ``},\\n  {``)."""
    raw = (GENERATED / "hybrid_chunked.json.gz").read_bytes()
    if gzip_bytes:
        head = raw[: len(raw) // 2]
        dest.write_bytes(head)
        text = zlib.decompressobj(31).decompress(head)
    else:
        whole = gzip.decompress(raw)
        text = whole[: len(whole) // 2]
        dest.write_bytes(gzip.compress(text))
    return text.rfind(b"},\n  {") + 1


def real_traces() -> list[Path]:
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(SHARED_TRACES.rglob("*.json.gz"))


# The default run (the README's test command) sweeps the shared traces up to this size; the
# larger ones are marked slow and run in CI (`pytest -m slow`, .ci/run). Every shared trace
# up to 1.3 MB is still summarized in the default run, by tests/test_golden.py.
SAMPLE_BYTES = 40_000


def trace_params(paths: list[Path], fixture_sample: set[str] | None = None) -> list[object]:
    """``paths`` as pytest params named by file; marked ``slow``: the shared traces over
    SAMPLE_BYTES and, where ``fixture_sample`` names the fixtures to keep, the others."""

    def slow(p: Path) -> bool:
        if p.is_relative_to(SHARED_TRACES):
            return p.stat().st_size > SAMPLE_BYTES
        return fixture_sample is not None and p.name not in fixture_sample

    return [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if slow(p) else []) for p in paths]


def truth(name: str) -> dict:
    return json.loads((GENERATED / f"{name}.truth.json").read_text())


# The fixtures every per-fixture test sweeps in the default run (hybrid chunked prefill with
# CPU ranges, CUDA-graph-like steps with no annotations, SGLang); the others add variations
# (old vLLM's names, capture then serve, GPU ranges, extend steps, detailed vLLM ranges,
# layer spacing, an unknown recurrent kernel, FlashInfer's tensor-core decode, the re-feed
# twin) that tests naming them check by name, and CI sweeps them all (pytest -m slow).
DEFAULT_SWEEP = {
    "hybrid_chunked",
    "hybrid_tight",
    "dense_sglang",
}


@pytest.fixture(
    params=[
        pytest.param(n, marks=[] if n in DEFAULT_SWEEP else [pytest.mark.slow])
        for n in SCENARIO_NAMES
    ],
    ids=SCENARIO_NAMES,
)
def scenario(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def ray_alone() -> Iterator[None]:
    """One Ray test at a time on this machine, whichever xdist worker runs it: a test's
    `ray stop --force` ends every Ray process here, and `--address auto` joins whichever
    cluster it finds, so two at once break each other. Held by an exclusive lock on a file
    beside the temp root, for the whole test."""
    import fcntl

    with open(Path(tempfile.gettempdir()) / "traceview-tests-ray.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
