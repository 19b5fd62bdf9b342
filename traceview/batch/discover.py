"""Which trace files a list of paths names: directories, globs and files."""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Sequence
from pathlib import Path

from traceview.errors import RunError

TRACE_SUFFIXES = (".json", ".json.gz", ".pftrace", ".pftrace.gz", ".perfetto-trace")


def discover(paths: Sequence[str]) -> list[Path]:
    """The trace files a run names: each directory's traces (not recursive), each glob's
    matching trace files (a matching directory gives its traces; other files, such as
    ``*.png`` or ``*.html`` beside the traces, are left out), each file as given; sorted,
    without duplicates (:func:`discover_tree`, one level deep).

    Raises:
        RunError: a path that does not exist, or a run with no trace file.
    """
    return [f for f, _ in discover_tree(paths, recursive=False)]


def _root_of(pattern: str) -> Path:
    """A glob's fixed leading folders: the root its matches are named from."""
    parts: list[str] = []
    for part in Path(pattern).parts[:-1]:
        if any(ch in part for ch in "*?["):
            break
        parts.append(part)
    return Path(*parts) if parts else Path(".")


def _hidden(path: Path, root: Path) -> bool:
    """Under a hidden folder of ``root`` (a dataset's ``.tmp``, ``.git``)."""
    return any(part.startswith(".") for part in path.relative_to(root).parts[:-1])


def discover_tree(
    paths: Sequence[str], pattern: str | None = None, *, recursive: bool = True
) -> list[tuple[Path, Path]]:
    """The trace files under each path, each with the root its run is named from
    (:func:`run_name`): a directory is searched through its subfolders (hidden ones left
    out; only its own files where not ``recursive``) and is its files' root; a glob's
    matches are rooted at its fixed leading folders; a file's root is its folder.
    ``pattern`` (``--glob``) keeps the files whose path relative to their root, or whose
    name, matches it. Only trace files (:data:`TRACE_SUFFIXES`) are kept, but a file
    named alone; sorted, without duplicates.

    Raises:
        RunError: a path that does not exist, or no trace file at all.
    """
    found: dict[Path, Path] = {}

    def tree(folder: Path, root: Path) -> None:
        for f in folder.rglob("*") if recursive else folder.iterdir():
            if f.is_file() and f.name.endswith(TRACE_SUFFIXES) and not _hidden(f, root):
                found.setdefault(f, root)

    for text in paths:
        p = Path(text)
        if p.is_dir():
            tree(p, p)
        elif p.is_file():
            found.setdefault(p, p.parent)
        elif any(ch in text for ch in "*?["):
            root = _root_of(text)
            for m in map(Path, glob.glob(text)):
                if m.is_dir():
                    tree(m, root)
                elif m.is_file() and m.name.endswith(TRACE_SUFFIXES):
                    found.setdefault(m, root)
        else:
            raise RunError(f"{text}: no such file or directory")
    if pattern is not None:
        found = {
            f: r
            for f, r in found.items()
            if fnmatch.fnmatch(f.relative_to(r).as_posix(), pattern)
            or fnmatch.fnmatch(f.name, pattern)
        }
    if not found:
        what = f" matching {pattern!r}" if pattern else ""
        where = ", in every subfolder" if recursive else ""
        raise RunError(
            f"{', '.join(paths)}: no trace files{what} "
            f"(looked for {', '.join(TRACE_SUFFIXES)}{where})"
        )
    return sorted(found.items(), key=lambda item: str(item[0]))


def run_name(path: Path, root: Path, ranked: bool) -> str:
    """The run a scanned trace belongs to, named by its path relative to ``root``: a trace
    that carries a rank belongs to its folder's run (``dlrm``; the root's own name where
    the folder is the root), any other trace is a run of its own (``y/z/trace.json.gz``).
    Paths are made absolute, not resolved: a symlinked trace is named where it is linked."""
    where, base = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    if ranked:
        where = where.parent
        if where == base:
            return base.name
    try:
        return where.relative_to(base).as_posix()
    except ValueError:  # not under the root (it cannot be, as discover_tree finds them)
        return where.name
