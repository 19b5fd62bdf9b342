"""Which trace files a list of paths names: directories, globs and files."""

from __future__ import annotations

import glob
from collections.abc import Sequence
from pathlib import Path

from traceview.errors import RunError

TRACE_SUFFIXES = (".json", ".json.gz", ".pftrace", ".pftrace.gz", ".perfetto-trace")


def discover(paths: Sequence[str]) -> list[Path]:
    """The trace files a run names: each directory's traces (not recursive), each glob's
    matching trace files (a matching directory gives its traces; other files, such as
    ``*.png`` or ``*.html`` beside the traces, are left out), each file as given; sorted,
    without duplicates.

    Raises:
        RunError: a path that does not exist, or a run with no trace file.
    """
    found: list[Path] = []

    def folder(p: Path) -> list[Path]:
        return [c for c in p.iterdir() if c.is_file() and c.name.endswith(TRACE_SUFFIXES)]

    for text in paths:
        p = Path(text)
        if p.is_dir():
            found += folder(p)
        elif p.is_file():
            found.append(p)
        elif any(ch in text for ch in "*?["):
            for m in map(Path, glob.glob(text)):
                if m.is_dir():
                    found += folder(m)
                elif m.is_file() and m.name.endswith(TRACE_SUFFIXES):
                    found.append(m)
        else:
            raise RunError(f"{text}: no such file or directory")
    unique = sorted(set(found), key=lambda q: str(q))
    if not unique:
        raise RunError(
            f"{', '.join(paths)}: no trace files (looked for {', '.join(TRACE_SUFFIXES)})"
        )
    return unique
