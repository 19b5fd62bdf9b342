"""The summary and run documents hold exactly the keys and types that
traceview/analysis/base/document.py declares (the types mypy checks every reader against), on
every fixture, every shared trace and the 8-rank run: a TypedDict that drifted from what
analysis builds would let mypy pass readers of keys that are not there."""

from __future__ import annotations

import json
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

import orjson
import pytest

import traceview as tv
from tests.golden import GOLDEN, cases
from traceview.analysis.base.document import DEPRECATED_KEYS, RunDocument, SummaryDocument

CASES = cases()


def mismatches(value: Any, hint: Any, where: str = "") -> list[str]:
    """Where ``value`` (parsed JSON) does not have type ``hint``: a TypedDict must have
    its required keys and no undeclared one; ``int`` must not be a float (integers are
    integers, docs/design.md)."""
    origin = get_origin(hint)
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not an object"]
        hints = get_type_hints(hint)
        out = [f"{where}.{k}: not declared" for k in value if k not in hints]
        optional = {  # NotRequired (__required_keys__ misses it under postponed annotations)
            k
            for k, h in get_type_hints(hint, include_extras=True).items()
            if get_origin(h) is typing.NotRequired
        }
        out += [f"{where}.{k}: missing" for k in hints if k not in optional and k not in value]
        for k, h in hints.items():
            if k in value:
                out += mismatches(value[k], h, f"{where}.{k}")
        return out
    if origin in (typing.Union, types.UnionType):
        tried = [mismatches(value, h, where) for h in get_args(hint)]
        return [] if any(not t for t in tried) else tried[0]
    if origin is Literal:
        return [] if value in get_args(hint) else [f"{where}: {value!r} not in {get_args(hint)}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: not a list"]
        return [
            m
            for i, v in enumerate(value)
            for m in mismatches(v, get_args(hint)[0], f"{where}[{i}]")
        ]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        kt, vt = get_args(hint)
        return [
            m
            for k, v in value.items()
            for m in mismatches(k, kt if kt is not int else str, where)
            + mismatches(v, vt, f"{where}.{k}")
        ]
    if hint is type(None):
        return [] if value is None else [f"{where}: {value!r} is not null"]
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, float | int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, hint)
    return [] if ok else [f"{where}: {value!r} is not {hint.__name__}"]


def test_the_validator_finds_what_it_should() -> None:
    """The checker itself: a missing key, an extra key, a float for an int, a bad literal."""
    p = {"n": 3, "p50_ns": 1, "p90_ns": None, "p99_ns": 2, "max_ns": 2}
    from traceview.analysis.base.document import Percentiles

    assert mismatches(p, Percentiles) == []
    assert mismatches({**p, "extra": 1}, Percentiles) == [".extra: not declared"]
    assert mismatches({k: v for k, v in p.items() if k != "n"}, Percentiles) == [".n: missing"]
    assert mismatches({**p, "p50_ns": 1.5}, Percentiles) != []
    assert mismatches({**p, "n": True}, Percentiles) != []
    from traceview.analysis.base.capture_document import ItlMetrics

    assert mismatches({"notes": []}, ItlMetrics) == []  # the others are NotRequired
    assert mismatches({}, ItlMetrics) == [".notes: missing"]


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_documents_match_their_types(name: str) -> None:
    doc = json.loads((GOLDEN / f"{name}.json").read_text())
    if "capture_only" in doc:
        pytest.skip("engine start-up only: no summary document")
    hint = RunDocument if name.startswith("run-") else SummaryDocument
    assert mismatches(doc, hint) == []


def test_a_live_summary_matches_its_type() -> None:
    """Straight from summarize, as orjson writes it (what `summarize --json` prints), not
    through a golden file nor a round trip through the standard library's json."""
    from tests.conftest import GENERATED

    summary = tv.summarize(tv.load(str(GENERATED / "hybrid_refeed.json.gz")))
    assert mismatches(orjson.loads(summary.to_json()), SummaryDocument) == []
    assert summary.to_dict()["work"]["prefill_growth"], "the re-feed fixture has a growth row"


def test_an_unbounded_prefill_growth_matches_its_type(tmp_path: Path) -> None:
    """A prompt whose chunks grow from nearly nothing (64, 2,048, 8,192 tokens): the fitted
    line starts at or below zero, so the growth is unbounded: math.inf in Python, null in
    the document as written (JSON holds no infinity), and the type says so."""
    from tests.planned import GROWTH_FROM_NOTHING, growth_from_nothing, line_ends

    path, _ = growth_from_nothing(tmp_path)
    first, _ = line_ends(GROWTH_FROM_NOTHING)
    assert first <= 0  # the plan's line: the branch under test
    summary = tv.summarize(tv.load(path))
    (growth,) = summary.to_dict()["work"]["prefill_growth"]
    assert growth["growth"] == math.inf
    written = orjson.loads(summary.to_json())
    assert written["work"]["prefill_growth"][0]["growth"] is None
    assert mismatches(written, SummaryDocument) == []


def test_a_capture_only_summary_matches_its_type() -> None:
    """The 0-step summary of a trace that holds only CUDA-graph capture (issue 32)."""
    from tests.conftest import CAPTURE_ONLY_NAMES, GENERATED

    for name in CAPTURE_ONLY_NAMES:
        trace = tv.load(str(GENERATED / f"{name}.json.gz"))
        doc = tv.summarize(trace).to_dict()
        assert mismatches(json.loads(json.dumps(doc)), SummaryDocument) == []


def renamed_keys(value: Any, hint: Any, where: str = "") -> list[tuple[str, Any, Any]]:
    """Every deprecated key a value of type ``hint`` has, anywhere in it: (its path, its
    value, its new key's value); a key that is missing reads as the text "missing"."""
    args = get_args(hint)
    if get_origin(hint) in (typing.Union, types.UnionType):
        return [r for h in args if h is not type(None) for r in renamed_keys(value, h, where)]
    if typing.is_typeddict(hint) and isinstance(value, dict):
        renamed = DEPRECATED_KEYS.get(hint, {})
        out = [
            (f"{where}.{old}", value.get(old, "missing"), value.get(new, "missing"))
            for old, new in renamed.items()
        ]
        for k, h in get_type_hints(hint).items():
            if k in value and k not in renamed:
                out += renamed_keys(value[k], h, f"{where}.{k}")
        return out
    if get_origin(hint) is list and isinstance(value, list):
        return [r for i, v in enumerate(value) for r in renamed_keys(v, args[0], f"{where}[{i}]")]
    if get_origin(hint) is dict and isinstance(value, dict):
        return [r for k, v in value.items() for r in renamed_keys(v, args[1], f"{where}.{k}")]
    return []


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_each_deprecated_key_holds_its_new_key_s_value(name: str) -> None:
    """A renamed key stays beside its new one for one release, with the same value."""
    doc = json.loads((GOLDEN / f"{name}.json").read_text())
    if "capture_only" in doc:
        pytest.skip("engine start-up only: no summary document")
    hint = RunDocument if name.startswith("run-") else SummaryDocument
    pairs = renamed_keys(doc, hint)
    assert pairs, "every document holds renamed keys"
    assert [(path, old) for path, old, new in pairs if old != new or old == "missing"] == []
