"""Capture's bookkeeping that needs no torch: which server-named traces the client copies
(compared as absolute paths, whatever folder the server or the client runs in), and which
of kineto's stderr lines are held back."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from traceview.capture import recorder
from traceview.capture.collect import collect, trusted
from traceview.capture.probe import ProbeConfig
from traceview.capture.recorder import quiet_profiler, start_profiler, stop_profiler
from traceview.errors import CaptureError

NAME = "lab_1796212790354.pt.trace.json.gz"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """cwd = tmp_path, holding prof/NAME (a trace), prof/sub/ (a folder), a secret beside
    prof/ and prof/link, a link to the secret."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prof" / "sub").mkdir(parents=True)
    (tmp_path / "prof" / NAME).write_bytes(b"trace")
    (tmp_path / "secret").write_bytes(b"PRIVATE KEY")
    (tmp_path / "prof" / "link").symlink_to(tmp_path / "secret")
    return tmp_path


def _cfg(profile_dir: str) -> ProbeConfig:
    return ProbeConfig(url="http://127.0.0.1:1", profile_dir=profile_dir)


@pytest.mark.parametrize("profile_dir", ["prof", "./prof/", "ABS"], ids=["rel", "dot", "abs"])
@pytest.mark.parametrize(
    "named",
    [f"prof/{NAME}", NAME, f"./prof/sub/../{NAME}", "ABS"],
    ids=["server-cwd-relative", "folder-relative", "dotted", "absolute"],
)
def test_a_trace_in_the_profile_folder_is_taken(folder: Path, profile_dir: str, named: str) -> None:
    """The lab server run from the client's folder names its trace relative to it (as
    ``traceview demo`` and ``capture lab --profile-dir prof`` did): it is the folder's file."""
    want = (folder / "prof" / NAME).resolve()
    cfg = _cfg(str(folder / "prof") if profile_dir == "ABS" else profile_dir)
    path = Path(str(want) if named == "ABS" else named)
    assert trusted(cfg, [path]) == [want]


@pytest.mark.parametrize("profile_dir", ["prof", "ABS"], ids=["rel", "abs"])
@pytest.mark.parametrize(
    "named",
    ["secret", "../secret", "prof/../secret", "ABS", "prof/link", "link", "prof/sub", "nothing"],
)
def test_a_name_outside_the_folder_or_no_file_is_refused(
    folder: Path, profile_dir: str, named: str
) -> None:
    cfg = _cfg(str(folder / "prof") if profile_dir == "ABS" else profile_dir)
    path = Path(str(folder / "secret") if named == "ABS" else named)
    with pytest.raises(CaptureError, match="not a file under the profile folder"):
        trusted(cfg, [path])


def test_the_folders_own_traces_are_taken_with_a_relative_profile_dir(folder: Path) -> None:
    cfg = ProbeConfig(url="http://127.0.0.1:1", engine="lab", profile_dir="prof")
    assert trusted(cfg, collect(cfg, started=0)) == [(folder / "prof" / NAME).resolve()]


USDT = b"USDT:2026-12-02 11:59:51 10769:10806 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
EXTERNAL = (
    b"ERROR: External init callback must run in same thread as registerClient "
    b"(1973589696 != -1775965312)\n"
)


def test_kinetos_lines_are_held_back_and_the_rest_comes_through(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with quiet_profiler():
        os.write(2, EXTERNAL + USDT + b"kept: USDT: in a sentence\n")
        os.write(2, b"ERROR: something else\n")
    assert capfd.readouterr().err == "kept: USDT: in a sentence\nERROR: something else\n"


def test_all_of_it_comes_through_when_the_profiler_fails(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(RuntimeError), quiet_profiler():
        os.write(2, EXTERNAL + USDT)
        raise RuntimeError("kineto failed")
    assert capfd.readouterr().err == (EXTERNAL + USDT).decode()


# kineto of a GPU build where torch sees no GPU: in its own log format, and in glog's
NO_GPU = (
    b"ERROR:2026-12-07 13:01:02 4242:4243 DeviceProperties.cpp:56] "
    b"gpuGetDeviceCount failed with code 35\n"
)
NO_GPU_GLOG = (
    b"E1207 13:01:02.123456  4243 DeviceProperties.cpp:60] gpuGetDeviceCount failed with code 100\n"
)
NO_PROPS = (
    b"ERROR:2026-12-07 13:01:02 4242:4243 DeviceProperties.cpp:66] "
    b"gpuGetDeviceProperties failed with 3\n"
)


class _Profile:
    """torch.profiler.profile as kineto of a GPU build behaves on a machine with no GPU:
    it says so on stderr when it starts and when it writes the trace."""

    def __init__(self, **_kwargs: Any) -> None:
        pass

    def __enter__(self) -> _Profile:
        os.write(2, NO_GPU + NO_GPU_GLOG + NO_PROPS)
        return self

    def __exit__(self, *_exc: object) -> None:
        os.write(2, USDT)

    def export_chrome_trace(self, path: str) -> None:
        os.write(2, NO_GPU)
        Path(path).write_text('{"traceEvents": []}')


@pytest.mark.parametrize("gpu", [False, True], ids=["torch-sees-no-gpu", "torch-sees-a-gpu"])
def test_the_gpu_count_failure_is_held_back_where_torch_sees_no_gpu(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    gpu: bool,
) -> None:
    """A CUDA build of torch on a machine with no GPU: kineto cannot count the GPUs, and
    that line reached the user of ``traceview demo``. Where torch sees a GPU, the same
    line means the trace has no device properties: it is shown."""
    torch = SimpleNamespace(
        cuda=SimpleNamespace(is_available=lambda: gpu),
        profiler=SimpleNamespace(
            profile=_Profile, ProfilerActivity=SimpleNamespace(CPU="cpu", CUDA="cuda")
        ),
    )
    monkeypatch.setattr(recorder, "_torch", lambda: torch)
    trace = stop_profiler(start_profiler(str(tmp_path), "lab"))
    assert Path(trace).name == "lab.pt.trace.json.gz"
    err = capfd.readouterr().err
    assert err == (
        (NO_GPU + NO_GPU_GLOG + NO_PROPS + NO_GPU).decode() if gpu else NO_PROPS.decode()
    )
