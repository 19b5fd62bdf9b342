"""Tests clean up after themselves (issue 32): a test run makes one loaded-trace cache folder
(tests/conftest.py) and removes it when it ends; its workers and subprocesses, and the
conftest imported a second time, make none. Each check runs with a temp root of its own
(TMPDIR), so another run on the machine cannot make it pass or fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, TEST_CACHE_ENV, TEST_CACHE_PREFIX


def _env(tmp: Path, *, inherit_cache: bool) -> dict[str, str]:
    """This environment with ``tmp`` as the temp root; without the run's cache folder
    unless ``inherit_cache`` (as a worker of this run would see it)."""
    env = {**os.environ, "TMPDIR": str(tmp)}
    if not inherit_cache:
        env.pop(TEST_CACHE_ENV, None)
        env.pop("TRACEVIEW_CACHE_DIR", None)
    return env


def _left(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(TEST_CACHE_PREFIX))


def test_a_process_of_the_run_makes_no_cache_folder(tmp_path: Path) -> None:
    """A worker or subprocess of a run (and this file imported again as tests.conftest)
    inherits the run's folder and makes none: each import used to make one (~30 per run
    under xdist), never removed."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = "import tests.conftest, conftest"
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**_env(tmp, inherit_cache=True), "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"},
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert _left(tmp) == []


@pytest.mark.parametrize(
    "workers",
    [pytest.param(None, id="one"), pytest.param("2", marks=pytest.mark.slow, id="xdist")],
)
def test_a_test_run_leaves_no_cache_folder_in_its_temp_root(
    tmp_path: Path, workers: str | None
) -> None:
    """A whole pytest run (one process, or xdist's controller and two workers), in a temp
    root of its own: the cache folder it made is gone when it ends."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    test = "tests/test_cleanup.py::test_the_run_has_its_own_cache_folder"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    if workers:
        cmd += ["-n", workers]
    r = subprocess.run(
        cmd, cwd=ROOT, env=_env(tmp, inherit_cache=False), capture_output=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert b"1 passed" in r.stdout
    assert _left(tmp) == []


def test_the_run_has_its_own_cache_folder() -> None:
    """The folder the loaded-trace cache of the tests writes to is the run's own, a
    folder made for it (the inner run of the test above checks that it goes)."""
    folder = Path(os.environ["TRACEVIEW_CACHE_DIR"])
    assert folder == Path(os.environ[TEST_CACHE_ENV])
    assert folder.name.startswith(TEST_CACHE_PREFIX) and folder.is_dir()
