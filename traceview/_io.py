"""Small file helpers shared by the renderers and capture."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from traceview.errors import TraceviewError


def atomic_write(path: Path, write: Callable[[Path], object]) -> Path:
    """Write ``path`` through a temporary file in its folder, renamed into place: an
    interrupted write leaves the old file or none, never half a file."""
    if not path.parent.is_dir():
        raise TraceviewError(f"{path}: no such directory {path.parent}")
    fd, tmp_name = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix or ".tmp"
    )
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 is not what a user's file should get
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path
