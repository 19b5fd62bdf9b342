"""Summary JSON of every fixture and every shared trace, kept as files (tests/golden/).

A refactor that changes no figure leaves every one of these byte-identical; test_golden.py
compares them. When a figure changes on purpose, regenerate them and say why in the commit:

    .venv/bin/python -m tests.golden --write

Paths inside a summary are written relative to the repository (fixtures) or as
``shared/traces/...``, so the files do not depend on where the checkout lives. The shared
traces' files are compared only where ../shared/traces exists.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
GENERATED = ROOT / "fixtures" / "generated"
SHARED = ROOT.parent / "shared" / "traces"
RUN = SHARED / "param" / "dlrm_8rank"


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

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if len(paths) == 1 and paths[0].is_file():
            doc = tv.summarize(tv.load(str(paths[0]))).to_dict()
        else:
            doc = tv.summarize_run([str(p) for p in paths], tv.RunOptions(jobs=1)).to_dict()
    return orjson.dumps(_relative(doc), option=orjson.OPT_INDENT_2) + b"\n"


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print(__doc__)
        return 2
    GOLDEN.mkdir(exist_ok=True)
    for name, paths in cases():
        (GOLDEN / f"{name}.json").write_bytes(render(paths))
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
