"""In-process recorder: any step callable under torch.profiler, written as Kineto JSON.

``record(step_fn, steps=5, warmup=1, out="traces")`` runs ``step_fn`` ``wait + warmup +
steps`` times under a wait/warmup/active schedule (CUDA activity when a GPU is present) and
writes ``NAME.pt.trace.json.gz`` plus ``NAME.meta.json`` (device, torch and CUDA versions,
command, workload, step count, wall times). Files are written atomically.
"""

from __future__ import annotations

import gzip
import os
import platform
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from traceview._io import atomic_write
from traceview.errors import CaptureError, MissingDependencyError

# the schema of NAME.meta.json; a probe's run.json is traceview.capture/1, another shape
RECORD_SCHEMA = "traceview.record/1"


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingDependencyError(
            "capture needs torch: pip install 'traceview[capture]'"
        ) from None
    return torch


# What kineto (torch.profiler's C++ side) writes to the process's stderr on every start and
# stop, bypassing Python: trace points and a warning about the thread it was started on.
_KINETO_NOISE = re.compile(
    rb"^(?:(?:USDT|STAGE):\d{4}-\d\d-\d\d \S+ \d+:\d+ \S+\.cpp:\d+\] "
    rb"|ERROR: External init callback must run in same thread as registerClient )"
)
# What kineto of a GPU build writes where torch sees no GPU (no driver, no device): it
# cannot count the GPUs. In its own log format or glog's. Noise only there: where torch
# sees a GPU, the same line means the trace has no device properties, and it is shown.
_NO_GPU_NOISE = re.compile(
    rb"^(?:ERROR:\d{4}-\d\d-\d\d \S+ \d+:\d+|E\d{4} \S+ +\d+) \S+\.cpp:\d+\] "
    rb"gpuGetDeviceCount failed with code -?\d+\s*$"
)


_HOLDING = threading.RLock()  # fd 2 is the process's: one holder at a time


@contextmanager
def quiet_profiler(*, no_gpu: bool = False) -> Iterator[None]:
    """Run the block with the process's stderr (fd 2) held back, then write it out less
    kineto's known lines (:data:`_KINETO_NOISE`, and with ``no_gpu``, torch seeing no GPU,
    :data:`_NO_GPU_NOISE`); when the block raises, all of it, as written. Anything else
    written to stderr meanwhile (any thread) comes out after."""
    noise = (_KINETO_NOISE, _NO_GPU_NOISE) if no_gpu else (_KINETO_NOISE,)
    with _HOLDING:
        yield from _held_back(noise)


def _held_back(noise: tuple[re.Pattern[bytes], ...]) -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no stderr to hold back
        yield
        return
    failed = True
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
            failed = False
        finally:
            with suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().splitlines(keepends=True)
            kept = [line for line in lines if failed or not any(p.match(line) for p in noise)]
            if kept:
                os.write(2, b"".join(kept))


def _no_gpu(torch: Any) -> bool:
    return not torch.cuda.is_available()


def _activities(torch: Any) -> list[Any]:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def _export(prof: Any, out: Path) -> Path:
    """Export a finished profiler to ``out`` (.pt.trace.json.gz), atomically."""
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(Path(tmp) / "t.gz", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(Path(tmp) / "t.gz", out)
    return out


def start_profiler(out_dir: str, name: str) -> Any:
    """Start profiling now (no schedule), for servers: stop with :func:`stop_profiler`."""
    torch = _torch()
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    prof = torch.profiler.profile(
        activities=_activities(torch), record_shapes=False, with_stack=False
    )
    with quiet_profiler(no_gpu=_no_gpu(torch)):
        prof.__enter__()
    prof._traceview_out = Path(out_dir) / f"{name}.pt.trace.json.gz"
    return prof


def stop_profiler(prof: Any) -> str:
    with quiet_profiler(no_gpu=_no_gpu(_torch())):
        prof.__exit__(None, None, None)
        return str(_export(prof, prof._traceview_out))


@dataclass(frozen=True)
class Recording:
    trace: Path
    meta: Path
    steps: int


def record(
    step_fn: Callable[[], Any],
    *,
    steps: int = 5,
    warmup: int = 1,
    wait: int = 0,
    out: str | os.PathLike[str] = "traces",
    name: str | None = None,
    record_shapes: bool = False,
    with_stack: bool = False,
    workload: dict[str, Any] | None = None,
) -> Recording:
    """Profile ``step_fn`` for ``steps`` active steps after ``wait`` + ``warmup`` ones.

    Raises:
        CaptureError: the step function failed, or nothing could be written.
        MissingDependencyError: torch is not installed.
    """
    torch = _torch()
    if steps < 1 or warmup < 0 or wait < 0:
        raise CaptureError("steps must be >= 1, warmup and wait >= 0")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = name or f"{socket.gethostname()}_{os.getpid()}.{int(time.time() * 1000)}"
    trace_path = out_dir / f"{name}.pt.trace.json.gz"
    schedule = torch.profiler.schedule(wait=wait, warmup=warmup, active=steps, repeat=1)
    holder: dict[str, Any] = {}

    def on_ready(prof: Any) -> None:
        holder["trace"] = _export(prof, trace_path)

    walls: list[float] = []
    t0 = time.time()
    prof = torch.profiler.profile(
        activities=_activities(torch),
        schedule=schedule,
        on_trace_ready=on_ready,
        record_shapes=record_shapes,
        with_stack=with_stack,
    )
    no_gpu = _no_gpu(torch)
    try:  # the profiler's calls under quiet_profiler, the step function's output as it comes
        with quiet_profiler(no_gpu=no_gpu):
            prof.__enter__()
        try:
            for _ in range(wait + warmup + steps):
                s = time.perf_counter()
                step_fn()  # the profiler names each step ProfilerStep#N itself
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                walls.append(time.perf_counter() - s)
                with quiet_profiler(no_gpu=no_gpu):
                    prof.step()
        finally:
            with quiet_profiler(no_gpu=no_gpu):
                prof.__exit__(None, None, None)
    except (MissingDependencyError, CaptureError):
        raise
    except Exception as exc:
        raise CaptureError(f"the step function failed: {type(exc).__name__}: {exc}") from exc
    if "trace" not in holder:
        raise CaptureError("the profiler produced no trace")
    cuda = torch.version.cuda if torch.cuda.is_available() else None
    meta = {
        "schema": RECORD_SCHEMA,
        "trace": trace_path.name,
        "device": torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "cuda": cuda,
        "python": platform.python_version(),
        "command": " ".join(sys.argv),
        "workload": workload or {},
        "steps": steps,
        "warmup": warmup,
        "wait": wait,
        "started_unix_s": t0,
        "wall_s_per_step": walls,
    }
    meta_path = out_dir / f"{name}.meta.json"
    data = orjson.dumps(meta, option=orjson.OPT_INDENT_2)
    atomic_write(meta_path, lambda target: target.write_bytes(data), overwrite=True)
    return Recording(trace_path, meta_path, steps)
