"""``traceview scan --engine ray``: the analysis in Ray tasks, on a cluster that shares no
disk with the driver.

The driver lists the traces. A worker reads an object by its URL itself, with the endpoint
and storage options the driver was given (:func:`traceview.loader.remote.settings`; its
credentials come from its own node's environment); a local file's bytes are shipped to it
through Ray's object store. Workers return rows, and the driver writes them into the
dataset (:mod:`.scan`'s commit), so neither the traces nor the dataset need a shared mount.
A worker that dies is retried once; a trace whose task fails twice becomes a row in
``errors/``.
"""

from __future__ import annotations

import os
import socket
from types import ModuleType
from typing import NamedTuple

from traceview import environ
from traceview.batch.dataset import unlock
from traceview.batch.scan_task import (
    Analysis,
    ScanOptions,
    ScanProgress,
    ScanStatus,
    Source,
    analyse,
    claim,
    commit_analysis,
    content_identity,
    counted,
    failed,
    settle,
    skipped_as,
)
from traceview.batch.store import Store
from traceview.errors import MissingDependencyError, TraceviewError
from traceview.loader import remote

RAY_IN_FLIGHT_PER_CPU = 2  # traces shipped ahead of the workers: bounds the object store


def reachable(address: str, timeout: float) -> None:
    """A ``host:port`` cluster address must accept a connection within ``timeout``: Ray
    itself retries an address where nothing listens for minutes.

    Raises:
        TraceviewError: nothing answers there in time (one line naming the address).
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", "ray://…" and the like: Ray resolves them itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise TraceviewError(
            f"Ray cluster {address}: nothing answers there within {timeout:g} s "
            f"({exc.strerror or exc}); start one with `ray start --head`, or set RAY_ADDRESS"
        ) from None


def run_ray(
    todo: list[Source],
    store: Store,
    options: ScanOptions,
    address: str | None,
    progress: ScanProgress | None,
) -> list[ScanStatus]:
    """Scan ``todo`` on a Ray cluster (see the module doc).

    Raises:
        MissingDependencyError: Ray is not installed.
        TraceviewError: the cluster cannot be joined (one line naming its address).
    """
    try:
        import ray
    except ImportError:
        raise MissingDependencyError(
            "traceview scan --engine ray needs Ray: pip install 'traceview[ray]'"
        ) from None
    started_here = not ray.is_initialized()
    if started_here:
        where = address or os.environ.get("RAY_ADDRESS") or None  # checked by scan()
        try:
            ray.init(address=where, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, TimeoutError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TraceviewError(
                f"Ray cluster {where or '(local)'}: cannot connect: {first}"
            ) from None
    try:
        return _tasks(ray, todo, store, options, progress)
    finally:
        if started_here:
            ray.shutdown()


def analyse_shipped(
    data: bytes, source: Source, trace_id: str, options: ScanOptions, workers: str = "1"
) -> Analysis:
    """A Ray task: analyse a local file from its bytes (shipped through Ray's object store,
    so the worker needs no view of the driver's disk) and return its rows, its load on
    ``workers`` processes (:func:`load_workers`)."""
    import tempfile
    from pathlib import Path

    os.environ[environ.WORKERS] = workers
    with tempfile.TemporaryDirectory(prefix="traceview-scan-") as tmp:
        copy = Path(tmp) / Path(source.path).name
        copy.write_bytes(data)
        return analyse(str(copy), source, trace_id, options)


def analyse_object(
    source: Source, options: ScanOptions, settings: dict[str, str], workers: str = "1"
) -> Analysis:
    """A Ray task: read an object by its URL, with the driver's endpoint and storage
    options, and return its rows (its trace id taken as it is read), its load on
    ``workers`` processes (:func:`load_workers`)."""
    os.environ[environ.WORKERS] = workers
    remote.apply_settings(settings)
    return analyse(source.path, source, None, options)


def load_workers() -> str:
    """The processes each task's load decodes on: a task holds one CPU, so one, unless the
    driver was given ``TRACEVIEW_WORKERS`` (``--workers``)."""
    return os.environ.get(environ.WORKERS) or "1"


class _Pending(NamedTuple):
    source: Source
    position: int
    trace_id: str | None  # a local file's (hashed by the driver)
    marker: str | None  # a local file's lock


def _tasks(
    ray: ModuleType,
    todo: list[Source],
    store: Store,
    options: ScanOptions,
    progress: ScanProgress | None,
) -> list[ScanStatus]:
    """The driver's loop: it hashes each local file and ships the bytes of those the
    dataset lacks, hands objects' URLs to the workers, and writes the rows they return."""
    shipped = ray.remote(max_retries=1)(analyse_shipped)
    by_url = ray.remote(max_retries=1)(analyse_object)
    settings = remote.settings()
    workers = load_workers()
    limit = max(2, int(ray.cluster_resources().get("CPU", 1)) * RAY_IN_FLIGHT_PER_CPU)
    queue = list(enumerate(todo))
    pending: dict[object, _Pending] = {}  # by the task's ObjectRef
    statuses: list[ScanStatus] = []
    finished = counted(todo, progress)

    def ship() -> None:
        while queue and len(pending) < limit:
            index, source = queue.pop(0)
            if remote.is_url(source.path):
                ref = by_url.remote(source, options, settings, workers)
                pending[ref] = _Pending(source, index, None, None)
                continue
            source, trace_id, marker = claim(store, source)
            if marker is None:
                statuses.append(skipped_as(store, source, trace_id))
                finished(index)
                continue
            with open(source.path, "rb") as f:
                data = ray.put(f.read())
            ref = shipped.remote(data, source, trace_id, options, workers)
            pending[ref] = _Pending(source, index, trace_id, marker)

    ship()
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        task = pending.pop(done[0])
        try:
            result: Analysis = ray.get(done[0])
        except Exception as exc:  # the task failed twice (a dying worker, an analysis bug)
            error = f"{task.source.path}: the Ray task failed twice: {_last_line(exc)}"
            tid = task.trace_id or content_identity(task.source.path, task.source, None)
            result = failed(task.source, tid, error)
        try:
            if task.marker is None:
                statuses.append(settle(store, result))
            else:
                statuses.append(commit_analysis(store, result))
        finally:
            if task.marker is not None:
                unlock(store, task.marker)
        finished(task.position)
        ship()
    return statuses


def _last_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[-1] if text else type(exc).__name__
