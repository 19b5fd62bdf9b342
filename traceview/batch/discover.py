"""Which trace files a list of paths names: directories, globs and files, and the same
at URLs (a folder of objects is every object under its prefix)."""

from __future__ import annotations

import fnmatch
import glob
import os
import posixpath
from collections.abc import Sequence
from pathlib import Path

from traceview._io import not_a_file
from traceview.errors import RunError
from traceview.loader import remote
from traceview.redact import shown

TRACE_SUFFIXES = (".json", ".json.gz", ".pftrace", ".pftrace.gz", ".perfetto-trace", ".sqlite")


def discover(paths: Sequence[str]) -> list[str]:
    """The trace files a run names: each directory's traces (not recursive), each glob's
    matching trace files (a matching directory gives its traces; other files, such as
    ``*.png`` or ``*.html`` beside the traces, are left out), each file as given, each
    folder URL's trace objects; sorted, without duplicates (:func:`discover_tree`, one
    level deep).

    Raises:
        RunError: a path that does not exist, or a run with no trace file.
        TraceFormatError: a URL whose store cannot be reached.
    """
    return [f for f, _ in discover_tree(paths, recursive=False)]


def _objects(url: str, recursive: bool) -> tuple[dict[str, str], dict[str, remote.RemoteObject]]:
    """The trace objects a URL names: itself, or those under the folder it names (every
    subfolder's where ``recursive``, hidden ones left out), each with the root it is named
    from."""
    globbed = remote.is_glob(url)
    if not globbed and not remote.is_folder(url):
        obj = remote.stat(url)
        return {url: url.rsplit("/", 1)[0]}, {url: obj}
    root = _url_root(url) if globbed else url.rstrip("/")
    found, objects = {}, {}
    for obj in remote.matching(url) if globbed else remote.listing(root):
        rel = remote.relative(obj.url, root)
        parts = rel.split("/")
        if not obj.url.endswith(TRACE_SUFFIXES) or any(p.startswith(".") for p in parts[:-1]):
            continue
        if globbed or recursive or len(parts) == 1:
            found[obj.url] = root
            objects[obj.url] = obj
    return found, objects


def _url_root(pattern: str) -> str:
    """A glob URL's fixed leading folders: the root its matches are named from."""
    scheme, _, rest = pattern.partition("://")
    parts = rest.split("/")
    fixed = []
    for part in parts[:-1]:
        if any(ch in part for ch in "*?["):
            break
        fixed.append(part)
    return f"{scheme}://{'/'.join(fixed)}"


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
    paths: Sequence[str],
    pattern: str | None = None,
    *,
    recursive: bool = True,
    objects: dict[str, remote.RemoteObject] | None = None,
) -> list[tuple[str, str]]:
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
    found: dict[str, str] = {}

    def tree(folder: Path, root: Path) -> None:
        for f in folder.rglob("*") if recursive else folder.iterdir():
            if f.is_file() and f.name.endswith(TRACE_SUFFIXES) and not _hidden(f, root):
                found.setdefault(str(f), str(root))

    for text in paths:
        p = Path(text)
        if remote.is_url(text):
            at, objs = _objects(text, recursive)
            for url, root in at.items():
                found.setdefault(url, root)
            if objects is not None:
                objects.update(objs)
        elif p.is_dir():
            tree(p, p)
        elif p.is_file():
            found.setdefault(text, str(p.parent))
        elif any(ch in text for ch in "*?["):
            base = _root_of(text)
            for m in map(Path, glob.glob(text)):
                if m.is_dir():
                    tree(m, base)
                elif m.is_file() and m.name.endswith(TRACE_SUFFIXES):
                    found.setdefault(str(m), str(base))
        elif (special := not_a_file(p)) is not None:
            raise RunError(f"{text}: is {special}, not a trace file")
        else:
            raise RunError(f"{text}: no such file or directory")
    if pattern is not None:
        found = {
            f: r
            for f, r in found.items()
            if fnmatch.fnmatch(_relative(f, r), pattern)
            or fnmatch.fnmatch(posixpath.basename(f), pattern)
        }
    if not paths:
        raise RunError("no paths given: name trace files, folders or globs")
    if not found:
        what = f" matching {pattern!r}" if pattern else ""
        where = ", in every subfolder" if recursive else ""
        raise RunError(
            f"{', '.join(paths)}: no trace files{what} "
            f"(looked for {', '.join(TRACE_SUFFIXES)}{where})"
        )
    return sorted(found.items())


def _relative(path: str, root: str) -> str:
    """``path`` under ``root``, with ``/`` separators (a URL's, or a file's)."""
    if remote.is_url(path):
        return remote.relative(path, root)
    return Path(path).relative_to(root).as_posix()


def run_name(path: str, root: str, ranked: bool) -> str:
    """The run a scanned trace belongs to, named by its path relative to ``root``: a trace
    that carries a rank belongs to its folder's run (``dlrm``; the root's own name where
    the folder is the root), any other trace is a run of its own (``y/z/trace.json.gz``).
    Paths are made absolute, not resolved: a symlinked trace is named where it is linked.
    A URL is named the same way under its root URL, both without their credentials
    (:func:`traceview.redact.shown`)."""
    if remote.is_url(path):
        where_url, base_url = shown(path), shown(root).rstrip("/")
        if ranked:
            where_url = posixpath.dirname(where_url)
            if where_url == base_url:
                return posixpath.basename(base_url)
        return remote.relative(where_url, base_url)
    where, base = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    if ranked:
        where = where.parent
        if where == base:
            return base.name
    try:
        return where.relative_to(base).as_posix()
    except ValueError:  # not under the root (it cannot be, as discover_tree finds them)
        return where.name
