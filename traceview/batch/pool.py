"""One function over many items, in this process or a pool of spawned worker processes."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import TypeVar

from traceview import environ
from traceview.errors import TraceviewError
from traceview.loader import helpers

T = TypeVar("T")
R = TypeVar("R")


PARENT_POLL_S = 0.5


_Filter = tuple[
    str,
    re.Pattern[str] | None,
    type[Warning] | tuple[type[Warning], ...],
    re.Pattern[str] | None,
    int,
]


def _start_worker(parent: int, filters: list[_Filter], load_workers: int | None) -> None:
    """A worker's initializer: the caller's warning filters (a command that prints its
    traces' warnings itself, escaped, ignores the loader's; a worker must not print them
    raw on its own), the processes each of its loads decodes on (``load_workers``: the
    cores shared among the pool, unless the caller set ``TRACEVIEW_WORKERS``), and a daemon
    thread that ends the worker as soon as its parent is gone (killed, even by SIGKILL,
    which runs no clean-up), instead of leaving it waiting on the pool's queue."""
    warnings.filters[:] = filters  # type: ignore[index]  # typeshed: a Sequence; it is a list
    # traceview's log records (a load's helpers that stopped) as warning lines, as the
    # command's own are (their messages are escaped where they are made)
    said = logging.StreamHandler()
    said.setFormatter(logging.Formatter("Warning: %(message)s"))
    logging.getLogger("traceview").addHandler(said)
    logging.getLogger("traceview").propagate = False
    if load_workers is not None:
        os.environ[environ.WORKERS] = str(load_workers)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="traceview-parent-watch", daemon=True).start()


def map_tasks(
    task: Callable[[T], R],
    items: Sequence[T],
    jobs: int,
    progress: Callable[[int, int], None] | None = None,
    *,
    finished: Callable[[int], None] | None = None,
) -> list[R]:
    """``[task(item) for item in items]``, in order: in this process when ``jobs`` is 1 or
    there is one item, else in ``min(jobs, len(items))`` spawned processes (a forked child
    of a process that ran polars' thread pool can deadlock), which exit when this process
    dies. ``task`` must be importable
    (a module-level function or a ``functools.partial`` of one). ``progress(done, total)``
    is called after each item, and ``finished(index)`` with the index of the item done."""
    total = len(items)
    if jobs <= 1 or total <= 1:
        out = []
        for i, item in enumerate(items, start=1):
            out.append(task(item))
            if finished:
                finished(i - 1)
            if progress:
                progress(i, total)
        return out
    results: dict[int, R] = {}
    processes = min(jobs, total)
    # jobs x each load's workers <= cores, unless the caller chose the workers
    shared = (
        None
        if os.environ.get(environ.WORKERS)
        else max(1, min(helpers.cores() // processes, helpers.DEFAULT_MAX_WORKERS))
    )
    with ProcessPoolExecutor(
        max_workers=processes,
        mp_context=get_context("spawn"),
        initializer=_start_worker,
        initargs=(os.getpid(), list(warnings.filters), shared),
    ) as pool:
        futures = {pool.submit(task, item): i for i, item in enumerate(items)}
        for done, fut in enumerate(as_completed(futures), start=1):
            try:
                results[futures[fut]] = fut.result()
            except BrokenProcessPool:
                raise TraceviewError(
                    "a worker process ended abruptly (killed, or out of memory; a script "
                    'that starts workers runs them under `if __name__ == "__main__":`, '
                    "docs/api.md); give jobs=1 (--jobs 1) to work in this process"
                ) from None
            if finished:
                finished(futures[fut])
            if progress:
                progress(done, total)
    return [results[i] for i in range(total)]
