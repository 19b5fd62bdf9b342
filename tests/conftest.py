from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# the loaded-trace cache of the tests lives in a folder of their own, never the user's
os.environ.setdefault("TRACEVIEW_CACHE_DIR", tempfile.mkdtemp(prefix="traceview-test-cache-"))

GENERATED = ROOT / "fixtures" / "generated"
SHARED_TRACES = ROOT.parent / "shared" / "traces"
SCENARIO_NAMES = sorted(p.name.removesuffix(".json.gz") for p in GENERATED.glob("*.json.gz"))


def real_traces() -> list[Path]:
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(SHARED_TRACES.rglob("*.json.gz"))


def truth(name: str) -> dict:
    return json.loads((GENERATED / f"{name}.truth.json").read_text())


@pytest.fixture(params=SCENARIO_NAMES)
def scenario(request: pytest.FixtureRequest) -> str:
    return str(request.param)
