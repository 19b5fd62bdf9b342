"""Summary JSON of every fixture and every shared trace, kept as files (tests/golden/).

A refactor that changes no figure leaves every one of these the same; test_golden.py compares
them: integers, strings, booleans and nulls exactly, floats within :data:`REL_TOL` (a
document's floats carry 9 significant digits, docs/metrics.md; a last digit is noise, not a
regression). When a figure changes on purpose, see what moved, then accept it and say why in
the commit:

    .venv/bin/python -m tests.golden            # prints every figure that would change
    .venv/bin/python -m tests.golden --accept   # ... and writes the files

Without ``--accept`` nothing is written, so no change is accepted unseen. ``--only NAME``
limits it to the cases whose name contains NAME.

Paths inside a summary are written relative to the repository (fixtures) or as
``shared/traces/...``, so the files do not depend on where the checkout lives. The shared
traces' files are compared only where ../shared/traces exists.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
GENERATED = ROOT / "fixtures" / "generated"
SHARED = ROOT.parent / "shared" / "traces"
RUN = SHARED / "param" / "dlrm_8rank"
REL_TOL = 1e-7  # floats: relative tolerance (documents round to 9 significant digits)


def cases() -> list[tuple[str, list[Path]]]:
    """(golden file name, input paths): each fixture, each shared trace, and the 8-rank run."""
    out = [
        (f"fixture-{p.name.removesuffix('.json.gz')}", [p])
        for p in sorted(GENERATED.glob("*.json.gz"))
    ]
    if SHARED.is_dir():
        for p in sorted(SHARED.rglob("*.json.gz")):
            rel = p.relative_to(SHARED).as_posix().removesuffix(".json.gz").replace("/", "--")
            out.append((f"shared-{rel}", [p]))
        if RUN.is_dir():
            out.append(("run-param-dlrm_8rank", [RUN]))
    return out


def _relative(value: object) -> object:
    """Paths in the repository made relative to it, and the shared traces' to ../shared's
    parent (``shared/traces/...``), whatever the checkout's folder is called."""
    if isinstance(value, str):
        return value.replace(str(ROOT) + "/", "").replace(str(SHARED.parent.parent) + "/", "")
    if isinstance(value, list):
        return [_relative(v) for v in value]
    if isinstance(value, dict):
        return {k: _relative(v) for k, v in value.items()}
    return value


def render(paths: list[Path]) -> bytes:
    """The summary (or run) JSON of ``paths``, as ``summarize --json`` writes it."""
    import warnings

    import traceview as tv
    from traceview.errors import CaptureOnlyError

    doc: object
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if len(paths) == 1 and paths[0].is_file():
                doc = tv.analyze(str(paths[0])).serving().to_dict()
            else:
                doc = tv.summarize_run([str(p) for p in paths], tv.RunOptions(jobs=1)).to_dict()
        except CaptureOnlyError as exc:  # engine start-up only: the one line it says
            doc = {"capture_only": str(exc)}
    return orjson.dumps(_relative(doc), option=orjson.OPT_INDENT_2) + b"\n"


def differences(old: object, new: object, path: str = "$") -> list[str]:
    """Every value that differs between two JSON documents, one line each, named by its path
    (``$.steps.cadence.p50_ns: 9666430 -> 9666431``): floats within :data:`REL_TOL`, every
    other value exactly (an int is never equal to a float here, nor a bool to an int)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in old.keys() | new.keys():
            if key not in new:
                out.append(f"{path}.{key}: removed (was {_short(old[key])})")
            elif key not in old:
                out.append(f"{path}.{key}: added ({_short(new[key])})")
            else:
                out += differences(old[key], new[key], f"{path}.{key}")
        return sorted(out)
    if isinstance(old, list) and isinstance(new, list):
        out = []
        for i, (a, b) in enumerate(zip(old, new, strict=False)):
            out += differences(a, b, f"{path}[{i}]")
        if len(old) != len(new):
            out.append(f"{path}: {len(old)} items -> {len(new)}")
        return out
    if type(old) is float and type(new) is float:
        if old == new or math.isclose(old, new, rel_tol=REL_TOL):
            return []
    elif type(old) is type(new) and old == new:
        return []
    return [f"{path}: {_short(old)} -> {_short(new)}"]


def _short(value: object) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 80 else text[:77] + "..."


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.golden", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--accept", action="store_true", help="write the changed files")
    parser.add_argument("--only", default="", help="only the cases whose name contains this")
    parser.add_argument("--golden", type=Path, default=GOLDEN, help="the golden folder")
    args = parser.parse_args(argv)
    changed = 0
    for name, paths in cases():
        if args.only not in name:
            continue
        file = args.golden / f"{name}.json"
        got = render(paths)
        if file.is_file():
            diff = differences(orjson.loads(file.read_bytes()), orjson.loads(got))
        else:
            diff = ["new golden file"]
        if not diff:  # the same, or floats within REL_TOL: noise is never written
            continue
        changed += 1
        print(f"{name}:")
        for line in diff:
            print(f"  {line}")
        if args.accept:
            args.golden.mkdir(parents=True, exist_ok=True)
            file.write_bytes(got)
    if not changed:
        print("golden files: no figure would change")
    elif args.accept:
        print(f"golden files: wrote {changed}")
    else:
        print(f"golden files: {changed} would change; nothing written (add --accept to write)")
    return 1 if changed and not args.accept else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
