"""Many traces at once: ``traceview scan`` serial vs the process pool vs Ray, and memory.

    python benchmarks/scan.py                # 64 rank traces of a simulated TP run
    python benchmarks/scan.py --traces 16 --steps 400 --repeat 1   # quicker
    python benchmarks/scan.py --s3           # the same scan from a local S3 server vs disk

``--s3`` starts moto's S3 server on 127.0.0.1 (the ``dev`` extra), uploads the traces, and
times ``scan s3://bench/traces -o DS`` against ``scan FOLDER -o DS`` (both on every core,
alternating, ``--repeat`` times; the target: the S3 scan at least 0.8x the disk scan's
throughput). It then reads one large object (``--object-mb``) through fsspec/s3fs (what
traceview uses) and through obstore (when installed), alternating, against reading the
same bytes from disk.

The traces come from fixtures/ranks.py (a tensor-parallel run whose all-reduces synchronise
the ranks): one rank's trace is generated, then written once per rank with its own
``distributedInfo.rank`` (so every file has its own content hash and rank). Each command
runs as a fresh process into a fresh dataset, the three alternating, ``--repeat`` times; the
fastest run of each is kept. Peak memory is the largest sum of RSS over the command's whole
process tree (the pool's or Ray's workers included), sampled every 20 ms with psutil, next to
the peak of loading one trace alone.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).parent / "out"


def generate(traces: int, steps: int) -> Path:
    sys.path.insert(0, str(ROOT))
    from fixtures.ranks import RankRun, build

    folder = OUT / f"scan_{traces}x{steps}"
    if folder.is_dir() and len(list(folder.glob("*.json.gz"))) == traces:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        paths, _ = build(RankRun(ranks=2, slow_rank=1, steps=steps, layers=8), Path(tmp))
        text = gzip.decompress(paths[0].read_bytes()).decode()
    marker = '"distributedInfo": {"backend":"nccl","rank":0,"world_size":2}'
    assert marker in text, "the generator's header changed"
    folder.mkdir(parents=True)
    for r in range(traces):
        info = f'"distributedInfo": {{"backend":"nccl","rank":{r},"world_size":{traces}}}'
        data = text.replace(marker, info).encode()
        (folder / f"rank{r}.pt.trace.json.gz").write_bytes(gzip.compress(data, compresslevel=1))
    return folder


def measure(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) summed over the process tree."""
    t0 = time.perf_counter()
    proc = psutil.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        total = 0
        with contextlib.suppress(psutil.Error):
            for p in [proc, *proc.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    total += p.memory_info().rss
        peak = max(peak, total)
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}")
    return wall, peak


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray engine")
    parser.add_argument("--s3", action="store_true", help="from a local S3 server vs disk")
    parser.add_argument("--object-mb", type=int, default=256, help="--s3: the read test's size")
    args = parser.parse_args()
    folder = generate(args.traces, args.steps)
    if args.s3:
        with s3_server() as endpoint:
            scan_from_s3(folder, endpoint, args.repeat)
            readers(endpoint, args.object_mb, args.repeat)
        return
    size = sum(p.stat().st_size for p in folder.glob("*.json.gz"))
    cores = os.cpu_count() or 1
    tv = [sys.executable, "-m", "traceview"]
    files = sorted(map(str, folder.glob("*.json.gz")))
    one = files[0]
    quarter = files[: max(1, len(files) // 4)]
    commands = {
        "one trace: load": [sys.executable, "-c", f"import traceview as tv; tv.load({one!r})"],
        "serial (-j 1)": [*tv, "scan", str(folder), "-j", "1"],
        f"pool (-j {cores})": [*tv, "scan", str(folder), "-j", str(cores)],
        # the same pool on a quarter of the traces: its peak must not grow with their number
        f"pool, {len(quarter)} traces": [*tv, "scan", *quarter, "-j", str(cores)],
    }
    try:
        import ray  # noqa: F401

        if not args.no_ray:
            commands["ray (local)"] = [*tv, "scan", str(folder), "--engine", "ray"]
    except ImportError:
        pass
    best: dict[str, tuple[float, int]] = {}
    for _ in range(args.repeat):
        for name, cmd in commands.items():
            with tempfile.TemporaryDirectory() as ds:
                full = cmd if name.startswith("one") else [*cmd, "-o", ds]
                wall, peak = measure(full)
            if name not in best or wall < best[name][0]:
                best[name] = (wall, max(peak, best.get(name, (0, 0))[1]))
    print(
        f"{args.traces} traces in {folder} ({size / 1e6:.0f} MB gz, {args.steps} steps each); "
        f"{cores} cores; fastest of {args.repeat} runs"
    )
    serial = best["serial (-j 1)"][0]
    load_peak = best["one trace: load"][1]
    for name, (wall, peak) in best.items():
        same_work = not name.startswith(("one", "pool,"))
        ratio = f"  speed-up vs serial {serial / wall:.2f}x" if same_work else ""
        print(
            f"{name:18} {wall:7.2f} s  peak RSS {peak / 1e9:.2f} GB "
            f"({peak / load_peak:.1f}x one trace's load){ratio}"
        )
    print(json.dumps({k: {"wall_s": v[0], "peak_rss": v[1]} for k, v in best.items()}))


@contextlib.contextmanager
def s3_server() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1, this process's (and its children's) environment
    pointing at it."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        time.sleep(0.1)
    url = f"http://127.0.0.1:{port}"
    os.environ.update(
        AWS_ENDPOINT_URL=url,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )
    try:
        yield url
    finally:
        server.terminate()
        server.wait(10)


def scan_from_s3(folder: Path, endpoint: str, repeat: int) -> None:
    """The same scan from the S3 server and from disk, alternating; fastest of each."""
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint)
    fs.mkdir("bench")
    files = sorted(folder.glob("*.json.gz"))
    for f in files:
        fs.put(str(f), f"bench/traces/{f.name}")
    size = sum(f.stat().st_size for f in files)
    cores = str(os.cpu_count() or 1)
    tv = [sys.executable, "-m", "traceview", "scan"]
    commands = {
        "disk": [*tv, str(folder), "-j", cores],
        "s3": [*tv, "s3://bench/traces", "-j", cores],
    }
    best: dict[str, tuple[float, int]] = {}
    for _ in range(repeat):
        for name, cmd in commands.items():
            with tempfile.TemporaryDirectory() as ds:
                wall, peak = measure([*cmd, "-o", ds])
            if name not in best or wall < best[name][0]:
                best[name] = (wall, peak)
    print(
        f"scan of {len(files)} traces ({size / 1e6:.0f} MB gz) on {cores} cores, "
        f"fastest of {repeat}: from disk {best['disk'][0]:.2f} s, from S3 {best['s3'][0]:.2f} s: "
        f"S3 throughput {best['disk'][0] / best['s3'][0]:.2f}x disk (target >= 0.8x)"
    )
    print(json.dumps({k: {"wall_s": v[0], "peak_rss": v[1]} for k, v in best.items()}))


def readers(endpoint: str, megabytes: int, repeat: int) -> None:
    """One object read whole in 8 MB blocks: fsspec/s3fs (traceview's reader), obstore,
    and the same bytes from disk; fastest of ``repeat``, alternating."""
    sys.path.insert(0, str(ROOT))
    from traceview.loader import remote

    data = os.urandom(megabytes << 20)
    block = 8 << 20
    with tempfile.NamedTemporaryFile(dir=OUT, suffix=".bin") as disk:
        disk.write(data)
        disk.flush()
        import s3fs

        s3fs.S3FileSystem(endpoint_url=endpoint).pipe("bench/object.bin", data)
        del data

        def by_fsspec() -> int:
            n = 0
            with remote.open_binary("s3://bench/object.bin") as f:
                while chunk := f.read(block):
                    n += len(chunk)
            return n

        def from_disk() -> int:
            n = 0
            with open(disk.name, "rb") as f:
                while chunk := f.read(block):
                    n += len(chunk)
            return n

        ways = {"disk": from_disk, "fsspec (s3fs)": by_fsspec}
        try:
            import obstore
            from obstore.store import S3Store

            store = S3Store(
                "bench",
                endpoint=endpoint,
                client_options={"allow_http": True},
                access_key_id="bench",
                secret_access_key="bench",
                region="us-east-1",
            )

            def by_obstore() -> int:
                n = 0
                f = obstore.open_reader(store, "object.bin", buffer_size=block)
                while chunk := f.read(block):
                    n += len(chunk)
                f.close()
                return n

            ways["obstore"] = by_obstore
        except ImportError:
            print("obstore is not installed: pip install obstore to compare it")
        best: dict[str, float] = {}
        for _ in range(repeat):
            for name, read in ways.items():
                t0 = time.perf_counter()
                assert read() == megabytes << 20
                best[name] = min(best.get(name, 1e9), time.perf_counter() - t0)
    for name, wall in best.items():
        print(
            f"read {megabytes} MB, {name:14} {wall:6.2f} s  {megabytes / wall:7.1f} MB/s  "
            f"{best['fsspec (s3fs)'] / wall:.2f}x fsspec"
        )


if __name__ == "__main__":
    main()
