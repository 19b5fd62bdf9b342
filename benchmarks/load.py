"""Loading speed and memory: traceview.load against the obvious approach and its floor.

    python benchmarks/load.py                    # 1M kernels (~4.4M events, ~1.1 GB JSON)
    python benchmarks/load.py --shape vllm       # the shape of a real vLLM trace
    python benchmarks/load.py --kernels 200000   # smaller
    python benchmarks/load.py --stages           # also time each stage (gzip, JSON decode)
    python benchmarks/load.py --shape long-names # Kineto's pretty-printing, long C++ names
    python benchmarks/load.py --shape nsys       # an Nsight Systems export vs the same as JSON

Generates (once, cached in benchmarks/out/) a trace of one of two shapes:

- ``kineto`` (default): per kernel a cudaLaunchKernel, an ac2g flow pair, and every third
  kernel a cpu_op; every 20th kernel a memcpy with its launch.
- ``vllm``: what a vLLM decode trace under CUDA graphs looks like: per engine step a
  ``python_function`` stack from ``with_stack`` (30 nested frames with their Python ids), the
  step's ``user_annotation`` and ``gpu_user_annotation``, one ``cudaGraphLaunch`` whose flow
  fans out to the replay's 40 kernels (one ``s``, 40 ``f`` with the same id and
  correlation), and args on every kernel.
- ``nsys``: the ``kineto`` trace's device activity and CUDA calls (each kernel and its
  cudaLaunchKernel, every 20th kernel a memcpy with its cudaMemcpyAsync) as an Nsight
  Systems SQLite export in the 2025 layout (every kernel column filled); ``traceview.load``
  of the export is timed against ``traceview.load`` of the gzipped Kineto trace (target:
  at most 1.5x). The Kineto trace also holds cpu_ops and flows, which nsys does not record.

The peak memory target: the load's peak PSS (its process and its helper processes
together, sampled every 20 ms) at most 0.35x the JSON text; where helpers ran, the report
splits that peak into the loading process's share and the helpers'. Each approach runs
in a fresh process, so its peak RSS is its own, and every approach runs in the same
invocation, so the ratios compare like with like on a shared, noisy machine:

- ``import``      the interpreter with polars/numpy/orjson imported (the RSS baseline)
- ``floor``       stdlib gzip + ``orjson.loads`` of the whole document, no frames
- ``obvious``     the obvious loader: stdlib gzip + ``orjson.loads`` + polars frames of
                  kernels and other events with ns times (what traceview replaces)
- ``traceview-1`` ``traceview.load`` on one core (``workers=1``), the cache off
- ``traceview``   ``traceview.load`` (all frames built) on every core, the cache off
- ``first-open``  ``traceview.load`` with the cache on, into an empty cache (parse + write)
- ``re-open``     the same trace opened again with the cache on (read back from it)
- ``hta``         HolisticTraceAnalysis's parser (``parse_trace_dataframe`` with its default
                  config), when installed; ``--hta-python`` names an interpreter that has
                  it, since its pinned dependencies do not belong in traceview's venv

Repeats each measurement (``--repeat``, default 2) and reports the fastest run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

OUT = Path(__file__).parent / "out"

KERNEL = (
    '  {{\n    "ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": 7,\n'
    '    "ts": {ts}, "dur": {dur},\n    "args": {{\n'
    '      "External id": {c}, "queued": 0, "device": 0, "context": 1, "stream": 7, '
    '"correlation": {c}, "registers per thread": 128, "shared memory": 32768, '
    '"blocks per SM": 1.0, "warps per SM": 4.0, "grid": [132, 1, 1], "block": [128, 1, 1], '
    '"est. achieved occupancy %": 6\n    }}\n  }}'
)
MEMCPY = (
    '  {{\n    "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", '
    '"pid": 0, "tid": 2,\n    "ts": {ts}, "dur": {dur},\n    "args": {{\n'
    '      "External id": {c}, "device": 0, "context": 1, "stream": 2, "correlation": {c}, '
    '"bytes": 4096, "memory bandwidth (GB/s)": 2.5\n    }}\n  }}'
)
LAUNCH = (
    '  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "{name}", "pid": 4242, '
    '"tid": 4242,\n    "ts": {ts}, "dur": 4.250,\n    "args": {{\n'
    '      "External id": {c}, "cbid": 211, "correlation": {c}\n    }}\n  }}'
)
FLOW_S = (
    '  {{\n    "ph": "s", "id": {c}, "pid": 4242, "tid": 4242, "ts": {ts},\n'
    '    "cat": "ac2g", "name": "ac2g"\n  }}'
)
FLOW_F = (
    '  {{\n    "ph": "f", "id": {c}, "pid": 0, "tid": {tid}, "ts": {ts},\n'
    '    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}'
)
CPU_OP = (
    '  {{\n    "ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4242,\n'
    '    "ts": {ts}, "dur": 12.500,\n    "args": {{\n      "External id": {c}, '
    '"Record function id": 0, "Sequence number": {c}, "Fwd thread id": 0, "Ev Idx": {c}\n'
    "    }}\n  }}"
)
NAMES = [
    "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, "
    "false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >"
    ", false, true, false, false, true, true, false, false>(flash::Flash_fwd_params)",
    "nvjet_tst_128x64_64x8_2x1_v_bz_TNT",
    "void vllm::rms_norm_kernel<c10::BFloat16, 8, 4>(c10::BFloat16*, c10::BFloat16 const*, "
    "c10::BFloat16 const*, float, int, int)",
    "fused_recurrent_gated_delta_rule_fwd_kernel",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
]


def us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


LOAD_TARGET = 0.35  # peak RSS / JSON bytes


PY_FUNC = (
    '  {{\n    "ph": "X", "cat": "python_function", "name": "{name}", "pid": 4242, '
    '"tid": 4242,\n    "ts": {ts}, "dur": {dur},\n    "args": {{\n'
    '      "Python parent id": {parent}, "Python id": {pid}, "Python thread": 0\n    }}\n  }}'
)
STEP_CPU = (
    '  {{\n    "ph": "X", "cat": "user_annotation", "name": "{name}", "pid": 4242, '
    '"tid": 4242,\n    "ts": {ts}, "dur": {dur},\n    "args": {{\n'
    '      "External id": {c}, "Record function id": 0, "Ev Idx": {c}\n    }}\n  }}'
)
STEP_GPU = (
    '  {{\n    "ph": "X", "cat": "gpu_user_annotation", "name": "{name}", "pid": 0, '
    '"tid": 7,\n    "ts": {ts}, "dur": {dur},\n    "args": {{\n'
    '      "External id": {c}, "device": 0, "stream": 7\n    }}\n  }}'
)
FRAMES = [
    "vllm/v1/engine/core.py(812): run_busy_loop",
    "vllm/v1/engine/core.py(301): step",
    "vllm/v1/executor/abstract.py(88): execute_model",
    "vllm/v1/worker/gpu_worker.py(402): execute_model",
    "torch/utils/_contextlib.py(120): decorate_context",
    "vllm/v1/worker/gpu_model_runner.py(2140): execute_model",
    "vllm/v1/worker/gpu_model_runner.py(1620): _prepare_inputs",
    "vllm/v1/attention/backends/flash_attn.py(230): build",
    "vllm/v1/worker/gpu_input_batch.py(512): refresh_metadata",
    "vllm/compilation/cuda_graph.py(160): __call__",
    "torch/cuda/graphs.py(88): replay",
    "<built-in method replay of torch._C._CUDAGraph object at 0x7f2a1c2b3e70>",
]


def _write_once(path: Path, gpu: str, trace_name: str, batches: Iterator[list[str]]) -> Path:
    """Write ``path`` (once: an existing one is kept) as a Kineto trace whose events come in
    ``batches`` of JSON texts, gzipped, through a temporary name; return it."""
    OUT.mkdir(parents=True, exist_ok=True)
    if path.exists():
        return path
    from isal import igzip_threaded

    tmp = path.with_suffix(".tmp")
    with igzip_threaded.open(tmp, "wb", compresslevel=1, threads=2) as f:
        f.write(
            b'{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": '
            + f'"{gpu}", "numSms": 132}}],\n  "traceEvents": [\n'.encode()
        )
        first = True
        for batch in batches:
            if batch:
                f.write(((",\n" if not first else "") + ",\n".join(batch)).encode())
                first = False
        f.write(
            f'\n  ],\n  "traceName": "{trace_name}",\n  "displayTimeUnit": "ms",\n'.encode()
            + b'  "baseTimeNanoseconds": 1767189312000000000\n}\n'
        )
    tmp.rename(path)
    return path


def generate_vllm(kernels: int) -> Path:
    """Write (once) a vLLM-shaped trace with ``kernels`` kernels (see the module doc)."""
    path = OUT / f"vllm_{kernels}.pt.trace.json.gz"
    return _write_once(path, "NVIDIA H100 80GB HBM3", "bench-vllm", _vllm_steps(kernels))


def _vllm_steps(kernels: int) -> Iterator[list[str]]:
    """The vLLM-shaped trace's events, one engine step per batch."""
    per_step, frames = 40, 30
    t = 5_117_567_635_320_360
    py_id = 1000
    for step in range(kernels // per_step):
        batch: list[str] = []
        c = 10_000_000 + step * 10
        cpu0 = t - 400_000
        name = f"execute_context_0(0)_generation_{64 + step % 64}({64 + step % 64})"
        batch.append(STEP_CPU.format(name=name, ts=us(cpu0), dur="380.000", c=c))
        parent = 0
        for k in range(frames):  # a nested with_stack frame chain, 1 us inside each
            py_id += 1
            batch.append(
                PY_FUNC.format(
                    name=FRAMES[k % len(FRAMES)],
                    ts=us(cpu0 + 1_000 * (k + 1)),
                    dur=us(370_000 - 2_000 * k),
                    parent=parent,
                    pid=py_id,
                )
            )
            parent = py_id
        launch = cpu0 + 300_000
        batch.append(LAUNCH.format(name="cudaGraphLaunch", ts=us(launch), c=c))
        batch.append(FLOW_S.format(c=c, ts=us(launch)))
        g0 = t
        for i in range(per_step):
            dur = 3_000 + ((step * per_step + i) * 7919) % 20_000
            batch.append(KERNEL.format(name=NAMES[i % len(NAMES)], ts=us(t), dur=us(dur), c=c))
            batch.append(FLOW_F.format(c=c, tid=7, ts=us(t)))
            t += dur + 1_500
        batch.append(STEP_GPU.format(name=name, ts=us(g0), dur=us(t - g0), c=c))
        t += 250_000  # the host's turn between steps
        yield batch


# --- the long-names shape: Kineto's pretty-printing, C++ template names ------------------

LONG_KERNEL = (
    '  {{\n    "ph": "X",\n    "cat": "kernel",\n    "name": "{name}",\n    "pid": 0,\n'
    '    "tid": 7,\n    "ts": {ts},\n    "dur": {dur},\n    "args": {{\n'
    '      "External id": {c},\n      "queued": 0,\n      "device": 0,\n'
    '      "context": 1,\n      "stream": 7,\n      "correlation": {c},\n'
    '      "registers per thread": 168,\n      "shared memory": 98304,\n'
    '      "blocks per SM": 0.5,\n      "warps per SM": 4.0,\n'
    '      "grid": [66, 1, 1],\n      "block": [384, 1, 1],\n'
    '      "est. achieved occupancy %": 6\n    }}\n  }}'
)
LONG_MEMCPY = (
    '  {{\n    "ph": "X",\n    "cat": "gpu_memcpy",\n'
    '    "name": "Memcpy HtoD (Pinned -> Device)",\n    "pid": 0,\n    "tid": 2,\n'
    '    "ts": {ts},\n    "dur": {dur},\n    "args": {{\n      "External id": {c},\n'
    '      "device": 0,\n      "context": 1,\n      "stream": 2,\n'
    '      "correlation": {c},\n      "bytes": 4096,\n'
    '      "memory bandwidth (GB/s)": 2.5\n    }}\n  }}'
)
LONG_LAUNCH = (
    '  {{\n    "ph": "X",\n    "cat": "cuda_runtime",\n    "name": "{name}",\n'
    '    "pid": 4242,\n    "tid": 4242,\n    "ts": {ts},\n    "dur": 4.250,\n'
    '    "args": {{\n      "External id": {c},\n      "cbid": 211,\n'
    '      "correlation": {c}\n    }}\n  }}'
)
LONG_FLOW_S = (
    '  {{\n    "ph": "s",\n    "id": {c},\n    "pid": 4242,\n    "tid": 4242,\n'
    '    "ts": {ts},\n    "cat": "ac2g",\n    "name": "ac2g"\n  }}'
)
LONG_FLOW_F = (
    '  {{\n    "ph": "f",\n    "id": {c},\n    "pid": 0,\n    "tid": {tid},\n'
    '    "ts": {ts},\n    "cat": "ac2g",\n    "name": "ac2g",\n    "bp": "e"\n  }}'
)
LONG_CPU_OP = (
    '  {{\n    "ph": "X",\n    "cat": "cpu_op",\n    "name": "aten::mm",\n'
    '    "pid": 4242,\n    "tid": 4242,\n    "ts": {ts},\n    "dur": 12.500,\n'
    '    "args": {{\n      "External id": {c},\n      "Record function id": 0,\n'
    '      "Sequence number": {c},\n      "Fwd thread id": 0,\n      "Ev Idx": {c}\n'
    "    }}\n  }}"
)
LONG_NAMES = 4_000  # distinct kernel names


def long_name(i: int) -> str:
    """The ``i``-th of :data:`LONG_NAMES` distinct C++ template kernel names, 200 to 1,300
    characters long, as cutlass, FlashAttention and Triton-compiled kernels are named."""
    tile = (64, 128, 256)[i % 3], (32, 64, 128)[(i // 3) % 3], 16 << (i % 4)
    args = [
        f"cute::tuple<cute::C<{tile[0]}>, cute::C<{tile[1]}>, cute::C<{tile[2]}> >",
        "cutlass::bfloat16_t",
        "cutlass::layout::RowMajor",
        f"cutlass::gemm::collective::StageCountAutoCarveout<{(i * 7) % 97}>",
        "cutlass::epilogue::fusion::LinearCombination<cutlass::bfloat16_t, float>",
    ]
    # 200-1,299 characters, most of them short (a mean of about 420), as in real traces
    target = 200 + int(1_099 * (((i * 7919) % 1_000) / 999) ** 4)
    body = f"void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal_{i}<"
    k = 0
    while len(body) < target - 2:
        body += args[k % len(args)] + ", "
        k += 1
    return (body[: target - 2] + ">)").replace('"', "'")


def generate_long_names(kernels: int) -> Path:
    """Write (once) the ``long-names`` shape: the ``kineto`` shape's events, one key per
    line as Kineto pretty-prints them, its kernels named by :func:`long_name`."""
    path = OUT / f"long_names_{kernels}.pt.trace.json.gz"
    return _write_once(path, "NVIDIA H200", "bench-long-names", _long_name_events(kernels))


def _long_name_events(kernels: int) -> Iterator[list[str]]:
    names = [long_name(i) for i in range(LONG_NAMES)]
    return _events(kernels, LONG_TEMPLATES, lambda i: names[(i * 104_729) % LONG_NAMES])


def generate(kernels: int) -> Path:
    """Write (once) a Kineto-shaped trace with ``kernels`` kernels; return its path."""
    path = OUT / f"bench_{kernels}.pt.trace.json.gz"
    return _write_once(path, "NVIDIA H200", "bench", _kineto_events(kernels))


def generate_nsys(kernels: int) -> Path:
    """Write (once) the ``kineto`` shape's device activity and CUDA calls as an export."""
    import sqlite3

    from fixtures.nsys import API, KERNEL_2025, MEMCPY

    path = OUT / f"bench_{kernels}.nsys.sqlite"
    if path.exists():
        return path
    OUT.mkdir(exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    strings = [*NAMES, "cudaLaunchKernel_v7000", "cudaMemcpyAsync_v3020", "short"]
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(strings)))
    con.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, totalMemory INTEGER)")
    con.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H200', 150754820096)")
    for table, cols in (
        ("CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_2025),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", API),
    ):
        con.execute(f"CREATE TABLE {table} ({', '.join(c + ' INTEGER' for c in cols)})")
    gpid, gtid = (1 << 48) | (4242 << 24), (1 << 48) | (4242 << 24) | 4242
    launch, copy, short = len(NAMES), len(NAMES) + 1, len(NAMES) + 2

    def kernel(i: int, t: int, dur: int, c: int) -> tuple[int, ...]:
        row = dict.fromkeys(KERNEL_2025, 0)
        row |= {"start": t, "end": t + dur, "streamId": 7, "correlationId": c}
        row |= {"globalPid": gpid, "demangledName": i % len(NAMES), "shortName": short}
        row |= {"gridX": 132, "gridY": 1, "gridZ": 1, "blockX": 128, "blockY": 1, "blockZ": 1}
        row |= {"registersPerThread": 128, "dynamicSharedMemory": 32768, "gridId": i}
        return tuple(row.values())

    def api(t: int, c: int, name: int) -> tuple[int, ...]:
        return (t, t + 4_250, 0, gtid, c, name, 0, 0)

    t = 5_117_567_635_320_360
    k_rows, m_rows, r_rows = [], [], []
    for i in range(kernels):
        c = 10_000 + i
        t += 2_500
        if i % 20 == 0:
            m = dict.fromkeys(MEMCPY, 0)
            m |= {"start": t, "end": t + 2_112, "streamId": 2, "correlationId": c + 900_000_000}
            m |= {"globalPid": gpid, "bytes": 4096, "copyKind": 1, "srcKind": 2, "dstKind": 3}
            m_rows.append(tuple(m.values()))
            r_rows.append(api(t - 90_000, c + 900_000_000, copy))
        r_rows.append(api(t - 90_000, c, launch))
        dur = 1_000 + (i * 7919) % 40_000
        k_rows.append(kernel(i, t, dur, c))
        t += dur
    for table, rows in (
        ("CUPTI_ACTIVITY_KIND_KERNEL", k_rows),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", m_rows),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", r_rows),
    ):
        marks = ", ".join("?" * len(rows[0]))
        con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
    con.commit()
    con.close()
    tmp.rename(path)
    return path


def _kineto_events(kernels: int) -> Iterator[list[str]]:
    """The Kineto-shaped trace's events, about 20,000 per batch."""
    return _events(kernels, TEMPLATES, lambda i: NAMES[i % len(NAMES)])


class Templates(NamedTuple):
    """One shape's event texts (``str.format`` templates)."""

    launch: str
    memcpy: str
    cpu_op: str
    kernel: str
    flow_s: str
    flow_f: str


def _events(kernels: int, shape: Templates, name_of: Callable[[int], str]) -> Iterator[list[str]]:
    """The events of ``kernels`` kernels in ``shape``'s texts, the ``i``-th kernel named
    ``name_of(i)``: each kernel with its launch and flow pair, a cpu_op every third, a
    memcpy with its own launch every twentieth; about 20,000 events per batch."""
    t = 5_117_567_635_320_360
    batch: list[str] = []
    for i in range(kernels):
        c = 10_000 + i
        t += 2_500
        if i % 20 == 0:  # a memcpy with its own launch
            batch.append(
                shape.launch.format(name="cudaMemcpyAsync", ts=us(t - 90_000), c=c + 900_000_000)
            )
            batch.append(shape.memcpy.format(ts=us(t), dur="2.112", c=c + 900_000_000))
        if i % 3 == 0:
            batch.append(shape.cpu_op.format(ts=us(t - 95_000), c=c))
        batch.append(shape.launch.format(name="cudaLaunchKernel", ts=us(t - 90_000), c=c))
        batch.append(shape.flow_s.format(c=c, ts=us(t - 90_000)))
        dur = 1_000 + (i * 7919) % 40_000
        batch.append(shape.kernel.format(name=name_of(i), ts=us(t), dur=us(dur), c=c))
        batch.append(shape.flow_f.format(c=c, tid=7, ts=us(t)))
        t += dur
        if len(batch) > 20_000:
            yield batch
            batch = []
    yield batch


TEMPLATES = Templates(LAUNCH, MEMCPY, CPU_OP, KERNEL, FLOW_S, FLOW_F)
LONG_TEMPLATES = Templates(
    LONG_LAUNCH, LONG_MEMCPY, LONG_CPU_OP, LONG_KERNEL, LONG_FLOW_S, LONG_FLOW_F
)


# --- the approaches, each run in its own process -----------------------------------------


def run_import(path: Path) -> dict[str, int]:
    import numpy  # noqa: F401
    import orjson  # noqa: F401
    import polars  # noqa: F401

    return {"events": 0, "kernels": 0}


def run_floor(path: Path) -> dict[str, int]:
    import orjson

    with gzip.open(path, "rb") as f:
        doc = orjson.loads(f.read())
    return {"events": len(doc["traceEvents"]), "kernels": 0}


def run_obvious(path: Path) -> dict[str, int]:
    import orjson
    import polars as pl

    with gzip.open(path, "rb") as f:
        doc = orjson.loads(f.read())
    events = doc["traceEvents"]
    device = {"kernel", "gpu_memcpy", "gpu_memset"}
    rows = [e for e in events if e.get("ph") == "X"]
    kern = [e for e in rows if e.get("cat", "").lower() in device]
    other = [e for e in rows if e.get("cat", "").lower() not in device]

    def frame(evs: list[dict]) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "ts_ns": pl.Series([round(e["ts"] * 1000) for e in evs], dtype=pl.Int64),
                "dur_ns": pl.Series([round(e["dur"] * 1000) for e in evs], dtype=pl.Int64),
                "name": pl.Series([e["name"] for e in evs], dtype=pl.Categorical),
                "pid": [e.get("pid") for e in evs],
                "tid": [e.get("tid") for e in evs],
                "correlation": [e.get("args", {}).get("correlation") for e in evs],
            }
        )

    k, o = frame(kern), frame(other)
    flows = pl.DataFrame({"id": [e.get("id") for e in events if e.get("ph") in ("s", "f")]})
    return {"events": len(events), "kernels": k.height + 0 * (o.height + flows.height)}


def run_traceview(path: Path) -> dict[str, int]:
    import traceview as tv

    trace = tv.load(path, options=tv.LoadOptions(cache=False))
    return {"events": trace.meta.events, "kernels": trace.kernels.height}


def run_traceview_one(path: Path) -> dict[str, int]:
    """``traceview.load`` on one core (``workers=1``: no helper processes)."""
    import traceview as tv

    trace = tv.load(path, options=tv.LoadOptions(cache=False, workers=1))
    return {"events": trace.meta.events, "kernels": trace.kernels.height}


def run_traceview_first(path: Path) -> dict[str, int]:
    """A first open with the cache on: parse, then write the cache entry."""
    import traceview as tv
    from traceview.loader import cache

    cache.clear()
    trace = tv.load(path)
    return {"events": trace.meta.events, "kernels": trace.kernels.height}


def run_traceview_cached(path: Path) -> dict[str, int]:
    """The same trace opened again, unchanged: read back from the cache."""
    import traceview as tv

    trace = tv.load(path)
    return {"events": trace.meta.events, "kernels": trace.kernels.height}


def run_hta(path: Path) -> dict[str, int]:
    from hta.common.trace_parser import parse_trace_dataframe  # type: ignore[import-not-found]
    from hta.configs.parser_config import ParserConfig  # type: ignore[import-not-found]

    _meta, df, _symbols = parse_trace_dataframe(str(path), ParserConfig.get_default_cfg())
    return {"events": len(df), "kernels": int((df["stream"] >= 0).sum())}


APPROACHES = {
    "import": run_import,
    "floor": run_floor,
    "obvious": run_obvious,
    "traceview-1": run_traceview_one,
    "traceview": run_traceview,
    "first-open": run_traceview_first,
    "re-open": run_traceview_cached,
    "hta": run_hta,
}


def child(approach: str, path: Path) -> None:
    t0 = time.perf_counter()
    counts = APPROACHES[approach](path)
    wall = time.perf_counter() - t0
    rss = peak_rss()
    print(json.dumps({"approach": approach, "wall_s": wall, "peak_rss": rss, **counts}))


class PssSampler:
    """The peak of a process's PSS plus its descendants' (the load's helper processes),
    sampled every 20 ms from /proc/PID/smaps_rollup by this (parent) process, so a child
    holding its GIL in one long call is still sampled. PSS shares each page among the
    processes that map it, so the sum counts shared libraries once. 0 where the system
    has no smaps_rollup."""

    def __init__(self, pid: int) -> None:
        import threading

        self.pid = pid
        self.peak = 0
        self.own_at_peak = 0  # the loading process's own share of the peak sum
        self.own_peak = 0  # the loading process alone, at its own peak
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        if Path(f"/proc/{pid}/smaps_rollup").exists():
            self._thread.start()

    @staticmethod
    def _pss(pid: str) -> int:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) * 1024
        except OSError:  # a process that just ended
            pass
        return 0

    @staticmethod
    def _tree(pid: str) -> list[str]:
        found, todo = [], [pid]
        while todo:
            p = todo.pop()
            found.append(p)
            try:
                for task in Path(f"/proc/{p}/task").iterdir():
                    todo += (task / "children").read_text().split()
            except OSError:
                pass
        return found

    def _run(self) -> None:
        while not self._done.wait(0.02):
            own, *helpers = (self._pss(p) for p in self._tree(str(self.pid)))
            total = own + sum(helpers)
            self.own_peak = max(self.own_peak, own)
            if total > self.peak:
                self.peak, self.own_at_peak = total, own

    def stop(self) -> int:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.peak


def peak_rss() -> int:
    """This process's peak resident set (VmHWM, bytes). Unlike ru_maxrss it is not
    inherited from the parent across fork+exec."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(approach: str, path: Path, repeat: int, python: str = sys.executable) -> dict | None:
    best = None
    # each approach runs as a user's process does, with Python's byte-code cache on (a
    # shell that sets PYTHONDONTWRITEBYTECODE would make traceview's import compile its
    # modules every time: 0.2 s of a re-open here)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for _ in range(repeat):
        with subprocess.Popen(
            [python, __file__, "--child", approach, str(path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            sampler = PssSampler(proc.pid)
            stdout, stderr = proc.communicate()
            pss = sampler.stop()
            split = (sampler.own_at_peak, sampler.own_peak)
        if proc.returncode != 0:
            last = (stderr.strip().splitlines() or ["failed"])[-1]
            print(f"  {approach}: skipped ({last})", file=sys.stderr)
            return None
        r = json.loads(stdout.strip().splitlines()[-1])
        r["peak_pss"] = pss
        r["own_at_peak"], r["own_peak"] = split
        if best is None or r["wall_s"] < best["wall_s"]:
            best = r
    return best


def stages(path: Path) -> None:
    """Justify the dependencies: each stage timed with and without them."""
    import orjson
    from isal import igzip_threaded

    def timed(fn):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out

    def drain(opener) -> bytes:  # type: ignore[no-untyped-def]
        with opener() as f:
            first = f.read(64 << 20)  # keep the first 64 MB for the decode stage
            while f.read(8 << 20):  # read as the loader does, in 8 MB blocks
                pass
        return first

    t_std, data = timed(lambda: drain(lambda: gzip.open(path, "rb")))  # noqa: SIM115
    t_isal, _ = timed(lambda: drain(lambda: igzip_threaded.open(path, "rb", threads=1)))
    cut = data.rfind(b"},\n  {") + 1
    piece = b"[" + data[data.index(b"[", data.index(b'"traceEvents"')) + 1 : cut] + b"]"
    del data
    from traceview.loader.columns import DECODER

    t_orjson, a = timed(lambda: orjson.loads(piece))
    t_msgspec, b = timed(lambda: DECODER.decode(piece))
    assert len(a) == len(b)
    print(
        f"stages: gzip decompress stdlib {t_std:.2f} s, isal {t_isal:.2f} s "
        f"(isal/stdlib {t_isal / t_std:.2f}); decode {len(piece) >> 20} MB of events: "
        f"orjson generic {t_orjson:.2f} s, msgspec typed {t_msgspec:.2f} s "
        f"(typed/generic {t_msgspec / t_orjson:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument(
        "--shape", choices=["kineto", "vllm", "long-names", "nsys"], default="kineto"
    )
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=list(APPROACHES))
    parser.add_argument("--stages", action="store_true")
    parser.add_argument(
        "--hta-python",
        default=sys.executable,
        help="interpreter with HolisticTraceAnalysis installed (its own venv)",
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return

    # the cache's own folder for this benchmark, never the user's
    os.environ["TRACEVIEW_CACHE_DIR"] = str(OUT / "cache")
    if args.shape == "nsys":
        nsys_main(args.kernels, args.repeat)
        return
    t0 = time.perf_counter()
    generators = {"kineto": generate, "vllm": generate_vllm, "long-names": generate_long_names}
    path = generators[args.shape](args.kernels)
    with gzip.open(path, "rb") as f:
        json_bytes = sum(len(chunk) for chunk in iter(lambda: f.read(64 << 20), b""))
    print(
        f"trace: {path} ({args.kernels:,} kernels, {path.stat().st_size / 1e6:.0f} MB gz, "
        f"{json_bytes / 1e9:.2f} GB JSON; ready in {time.perf_counter() - t0:.0f} s)"
    )
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores")
    results = {}
    for name in args.only:
        if name == "hta":
            r = measure(name, path, 1, args.hta_python)
        else:
            r = measure(name, path, args.repeat)
        if r:
            results[name] = r
    base = results.get("obvious")
    floor = results.get("floor")
    print(
        f"\n{'approach':<12} {'wall s':>8} {'events/s':>12} {'peak RSS':>10} "
        f"{'RSS/JSON':>9} {'PSS/JSON':>9} {'vs obvious':>11} {'vs floor':>9}"
    )
    for name, r in results.items():
        eps = r["events"] / r["wall_s"] if r["events"] else 0
        vs_obv = f"{r['wall_s'] / base['wall_s']:.2f}x" if base else "-"
        vs_floor = f"{r['wall_s'] / floor['wall_s']:.2f}x" if floor else "-"
        pss = f"{r['peak_pss'] / json_bytes:>9.3f}" if r.get("peak_pss") else f"{'-':>9}"
        print(
            f"{name:<12} {r['wall_s']:>8.2f} {eps:>12,.0f} {r['peak_rss'] / 1e9:>8.2f}GB "
            f"{r['peak_rss'] / json_bytes:>9.3f} {pss} {vs_obv:>11} {vs_floor:>9}"
        )
    for name, r in results.items():  # where the peak of several processes lies
        if r.get("peak_pss") and r["peak_pss"] > r["own_at_peak"] > 0:
            total, own, alone = (r[k] / (1 << 20) for k in ("peak_pss", "own_at_peak", "own_peak"))
            print(
                f"  {name}: PSS peak {total:.0f} MiB = loading process {own:.0f} + helpers "
                f"{total - own:.0f} MiB (the loading process alone peaked at {alone:.0f} MiB)"
            )
    one = results.get("traceview-1")
    if one and "traceview" in results:
        print(
            f"\nevery core / one core: {one['wall_s'] / results['traceview']['wall_s']:.2f}x "
            f"faster ({os.cpu_count()} cores)"
        )
    if args.stages:
        stages(path)
    tv_r = results.get("traceview")
    if tv_r and "hta" in results:
        hta = results["hta"]
        print(
            f"\nHTA / traceview wall: {hta['wall_s'] / tv_r['wall_s']:.1f}x "
            f"(HTA {hta['wall_s'] / args.kernels * 1e6:.1f} µs per kernel)"
        )
    if tv_r:
        print(f"traceview: {tv_r['wall_s'] / args.kernels * 1e6:.2f} µs per kernel")
        peak = tv_r.get("peak_pss") or tv_r["peak_rss"]
        ratio = peak / json_bytes
        verdict = "meets" if ratio <= LOAD_TARGET else "MISSES"
        what = "PSS of the load's processes" if tv_r.get("peak_pss") else "RSS"
        print(
            f"memory: load peak {ratio:.3f}x the JSON ({what}; {args.shape} shape; target <= "
            f"{LOAD_TARGET}x: {verdict})"
        )
    first, again = results.get("first-open"), results.get("re-open")
    if first and again:
        print(
            f"cache: re-open / first open {again['wall_s'] / first['wall_s']:.3f}x "
            f"(target <= 0.05x); first open with the cache / without "
            f"{first['wall_s'] / tv_r['wall_s']:.2f}x"
            if tv_r
            else f"cache: re-open / first open {again['wall_s'] / first['wall_s']:.3f}x"
        )


def nsys_main(kernels: int, repeat: int) -> None:
    """``--shape nsys``: traceview.load of the export against the same as Kineto JSON."""
    t0 = time.perf_counter()
    json_path, nsys_path = generate(kernels), generate_nsys(kernels)
    print(
        f"traces: {json_path} ({json_path.stat().st_size / 1e6:.0f} MB gz) and {nsys_path} "
        f"({nsys_path.stat().st_size / 1e6:.0f} MB), {kernels:,} kernels; ready in "
        f"{time.perf_counter() - t0:.0f} s"
    )
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores")
    j = measure("traceview", json_path, repeat)
    n = measure("traceview", nsys_path, repeat)
    if not j or not n:
        return
    for label, r in (("kineto .json.gz", j), ("nsys .sqlite", n)):
        print(
            f"{label:<16} {r['wall_s']:>7.2f} s  {r['kernels']:>10,} kernels  "
            f"peak RSS {r['peak_rss'] / 1e9:.2f} GB"
        )
    ratio = n["wall_s"] / j["wall_s"]
    verdict = "meets" if ratio <= 1.5 else "MISSES"
    print(f"nsys / kineto load wall: {ratio:.2f}x (target <= 1.5x: {verdict})")


if __name__ == "__main__":
    main()
