"""Small file helpers shared by the renderers and capture."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePosixPath

from traceview.errors import TraceviewError


def atomic_write(path: Path, write: Callable[[Path], object], *, overwrite: bool = False) -> Path:
    """Write ``path`` through a temporary file in its folder, put into place whole: an
    interrupted write leaves the old file or none, never half a file. Without
    ``overwrite`` (``--force``) a file that appeared at ``path`` since the writer rule was
    checked (another command writing the same output) is kept, and this write refused."""
    if not path.parent.is_dir():
        raise TraceviewError(f"{path}: no such directory {path.parent}")
    try:
        fd, tmp_name = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix or ".tmp"
        )
    except OSError as exc:  # a read-only folder, one without write permission
        raise TraceviewError(f"{path}: cannot be written: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 is not what a user's file should get
        _commit(tmp, path, overwrite=overwrite)
    except OSError as exc:  # a full disk, a quota, a folder made read-only meanwhile
        if exc.filename is not None and os.fsdecode(exc.filename) != tmp_name:
            raise  # a file the writer read (annotate reads its source): named as it is
        raise TraceviewError(f"{path}: cannot be written: {exc.strerror or exc}") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def _commit(tmp: Path, path: Path, *, overwrite: bool) -> None:
    """Put the written ``tmp`` at ``path``: replacing what is there when ``overwrite``,
    else only where nothing is (a hard link fails on an existing name, atomically; where
    the file system has no hard links, the name is claimed by an exclusive create)."""
    if overwrite:
        os.replace(tmp, path)
        return
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise
        except OSError:  # no hard links here (some network and FUSE file systems)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            try:  # the name is ours now: the whole file replaces the empty claim
                os.replace(tmp, path)
            except OSError:
                path.unlink(missing_ok=True)  # never an empty file left at the output
                raise
    except FileExistsError:
        raise TraceviewError(
            f"{path}: already exists (another command wrote it meanwhile; use --force to overwrite)"
        ) from None


_NOT_FILES = (
    (stat.S_ISFIFO, "a pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_a_file(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is where it exists and is neither a regular file nor a folder (a pipe,
    a device, a socket: nothing a trace is read from; a pipe's size is 0, a device's
    unbounded), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return next((what for test, what in _NOT_FILES if test(mode)), None)


def _same_file(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)  # a hard link, or a path through a bind mount
    except OSError:
        return False


def check_output(
    output: str | os.PathLike[str],
    *,
    inputs: Iterable[str | os.PathLike[str]] = (),
    force: bool = False,
    suffixes: Sequence[str] | None = None,
) -> Path:
    """The one rule every writer follows, checked before any work is done: the output is a
    file name (not a folder), is none of the command's ``inputs``, has a known suffix, and
    does not exist unless ``force``. Returns it as a Path.

    Raises:
        TraceviewError: one line naming the output and what is wrong.
    """
    path = Path(output)
    writer_rule(
        str(path),
        path.name,
        folder=path.is_dir(),
        an_input=any(_same_file(path, Path(source)) for source in inputs),
        exists=lambda: path.exists() or path.is_symlink(),  # a dangling link is a name too
        force=force,
        suffixes=suffixes,
    )
    if not path.parent.is_dir():
        raise TraceviewError(f"{path}: no such directory {path.parent}")
    return path


def url_output_name(url: str) -> str:
    """The object name an output URL ends in (``x.csv`` of ``s3://b/out/x.csv``): the name
    its local copy is written under before the upload.

    Raises:
        TraceviewError: a URL that names a folder rather than an object: its last segment
            is empty, ``.`` or ``..`` (``s3://b/out/``, ``s3://b/out/.``).
    """
    name = url.split("://", 1)[-1].rsplit("/", 1)[-1] if "/" in url.split("://", 1)[-1] else ""
    if name in ("", ".", ".."):
        raise TraceviewError(
            f"{url}: names a folder, not an object; give a file name for the output"
        )
    return name


def writer_rule(
    shown: str,
    name: str,
    *,
    folder: bool,
    an_input: bool,
    exists: Callable[[], bool],
    force: bool,
    suffixes: Sequence[str] | None,
) -> None:
    """The rule every output follows (:func:`check_output`; an output at a URL asks its
    store, ``cli/_options.py``), given what the output is: ``shown`` names it in the
    message, ``name`` is its file name, ``exists`` asks whether it exists.

    Raises:
        TraceviewError: one line naming the output and what is wrong.
    """
    if folder:
        raise TraceviewError(f"{shown}: is a folder; give a file name for the output")
    if an_input:
        raise TraceviewError(
            f"{shown}: is one of this command's inputs; traceview never writes over its "
            "inputs (choose another output)"
        )
    if suffixes is not None and not any(name.lower().endswith(s) for s in suffixes):
        got = "".join(PurePosixPath(name).suffixes[-2:]) or "(none)"
        raise TraceviewError(
            f"{shown}: unknown output suffix {got!r}; known: {', '.join(suffixes)}"
        )
    if not force and exists():
        raise TraceviewError(f"{shown}: already exists (use --force to overwrite)")


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
        return trim
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to do
        return None


_TRIM = _malloc_trim()


def release_free_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; a no-op
    elsewhere). numpy's large temporaries come from that heap once glibc has raised its
    mmap threshold, and their freed pages stay in the process: after the step finder, on
    1M kernels, about 50 MB of them. Memory only; no result depends on it."""
    if _TRIM is not None:
        _TRIM(0)


MAX_INPUT_BYTES = 16 << 20  # a config, GPU spec, checks or rules file: far above any real one


def read_capped(
    path: str | Path, what: str, error: type[TraceviewError], cap: int = MAX_INPUT_BYTES
) -> bytes:
    """A small input file's bytes, never more than ``cap`` read: a larger file (or
    ``/dev/zero``) is one ``error`` naming the file and ``what`` it was, at once."""
    try:
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > cap:
        raise error(f"{path}: larger than {cap >> 20} MiB; not a {what}")
    return data


def read_toml(path: str | Path, what: str, error: type[TraceviewError]) -> dict[str, object]:
    """A TOML file as a table; an unreadable, too large (:func:`read_capped`) or non-UTF-8
    file, or invalid TOML, is one ``error`` naming the file and ``what`` it was (``checks
    file``, ``GPU spec``)."""
    import tomllib

    data = read_capped(path, what, error)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise error(
            f"{path}: not a {what}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    except RecursionError:
        raise error(f"{path}: not a {what}: nested too deeply to read") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from None
    except ValueError:  # Python reads no integer of over 4300 digits
        raise error(f"{path}: not a {what}: an integer too long to read") from None
