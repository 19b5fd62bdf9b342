"""The loaded-trace cache: a second open reads the frames back; a changed or replaced file is
never served stale; entries are atomic and bounded; it can be turned off and managed."""

from __future__ import annotations

import gzip
import importlib
import os
import shutil
import sys
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GENERATED

import traceview as tv
from traceview.cli import cli
from traceview.loader import cache

# the package (``tv.load`` is the function of the same name)
loading = importlib.import_module("traceview.loader")
ALWAYS = tv.LoadOptions(cache_min_bytes=0)  # the fixtures are small: cache them anyway


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(folder))
    monkeypatch.delenv("TRACEVIEW_CACHE", raising=False)
    return folder


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed the JSON although the cache holds this trace")

    monkeypatch.setattr(loading, "read_json", refuse)


def _key_of(path: Path) -> str:
    return cache._key(cache.content_digest(str(path)), "raw_args=False")


def _same(a: tv.Trace, b: tv.Trace) -> None:
    for name in cache.FRAMES:
        assert getattr(a, name).equals(getattr(b, name)), name
        assert getattr(a, name).schema == getattr(b, name).schema, name
    assert a.meta == b.meta


def test_a_second_open_reads_the_cache(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json.gz"
    shutil.copy(GENERATED / "hybrid_vllm_old.json.gz", path)  # has shapes too
    first = tv.load(path, options=ALWAYS)
    assert cache.info()["entries"] == 1
    _no_parse(monkeypatch)
    second = tv.load(path, options=ALWAYS)
    _same(first, second)
    assert tv.summarize(second).to_dict() == tv.summarize(first).to_dict()
    # below the size threshold, or turned off, nothing is read from it
    with pytest.raises(AssertionError, match="parsed the JSON"):
        tv.load(path)
    monkeypatch.setenv("TRACEVIEW_CACHE", "0")
    with pytest.raises(AssertionError, match="parsed the JSON"):
        tv.load(path, options=ALWAYS)


def test_a_changed_or_replaced_file_is_never_served_stale(cache_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    shutil.copy(GENERATED / "hybrid_chunked.json.gz", path)
    first = tv.load(path, options=ALWAYS)
    # rewritten in place to the same size with its mtime put back: the content check sees it
    other = (GENERATED / "hybrid_refeed.json.gz").read_bytes()
    original = path.read_bytes()
    st = path.stat()
    data = other[: len(original)].ljust(len(original), b"\0")
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    with pytest.warns(tv.TraceviewWarning, match="truncated"):  # the new bytes, parsed
        changed = tv.load(path, options=ALWAYS)
    assert changed.meta.truncated_at is not None and first.meta.truncated_at is None
    assert not changed.kernels.equals(first.kernels)
    # replaced by another trace (a new file at the same path)
    path.unlink()
    shutil.copy(GENERATED / "hybrid_refeed.json.gz", path)
    fresh = tv.load(path, options=tv.LoadOptions(cache=False))
    _same(tv.load(path, options=ALWAYS), fresh)


def test_entries_are_bounded_and_least_recently_used_go_first(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c = tmp_path / "a.json.gz", tmp_path / "b.json.gz", tmp_path / "c.json.gz"
    shutil.copy(GENERATED / "hybrid_chunked.json.gz", a)
    shutil.copy(GENERATED / "dense_sglang.json.gz", b)
    # the same trace with one more byte of whitespace: other content, frames of a's size
    c.write_bytes(gzip.compress(gzip.decompress(a.read_bytes()) + b" "))
    tv.load(a, options=ALWAYS)
    entry_a = next(cache_dir.iterdir())
    tv.load(b, options=ALWAYS)
    os.utime(entry_a / "meta.json", (1, 1))  # a is the least recently used
    both = cache.info()["bytes"]
    monkeypatch.setenv("TRACEVIEW_CACHE_MAX_BYTES", str(both))  # a and b fit, not a third
    tv.load(c, options=ALWAYS)
    info = cache.info()
    assert info["entries"] == 2 and info["bytes"] <= info["max_bytes"]
    assert not entry_a.exists()
    # a hit makes an entry the most recently used
    tv.load(b, options=ALWAYS)
    tv.load(a, options=ALWAYS)  # parsed again, cached again: c goes, b stays
    assert cache.info()["entries"] == 2
    assert _key_of(b) in {p.name for p in cache_dir.iterdir()}


def test_partial_entries_and_dead_writers_are_never_read(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json.gz"
    shutil.copy(GENERATED / "dense_sglang.json.gz", path)
    key = _key_of(path)
    # a folder without its meta.json (not something a rename leaves, but never trusted)
    (cache_dir / key).mkdir(parents=True)
    (cache_dir / key / "kernels.arrow").write_bytes(b"garbage")
    dead = cache_dir / f".tmp-{'d' * 32}"  # a writer's folder: ".tmp-" and a uuid
    dead.mkdir()
    os.utime(dead, (1, 1))
    first = tv.load(path, options=ALWAYS)
    assert (cache_dir / key / "meta.json").exists() and not dead.exists()
    # a corrupt frame file in a complete entry: parsed again and replaced, not a crash
    (cache_dir / key / "events.arrow").write_bytes(b"not arrow")
    _same(tv.load(path, options=ALWAYS), first)
    _no_parse(monkeypatch)
    _same(tv.load(path, options=ALWAYS), first)


def test_the_cli_switch_and_management(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / "t.json.gz"
    shutil.copy(GENERATED / "hybrid_chunked.json.gz", big)
    info = CliRunner().invoke(cli, ["cache", "info", "--json"])
    assert info.exit_code == 0
    assert '"entries": 0' in info.stdout and str(cache_dir) in info.stdout
    tv.load(big, options=ALWAYS)
    assert cache.info()["entries"] == 1
    cleared = CliRunner().invoke(cli, ["cache", "clear"])
    assert cleared.exit_code == 0 and "removed 1 cached trace" in cleared.stderr
    assert cache.info()["entries"] == 0
    monkeypatch.setenv("TRACEVIEW_CACHE", "1")  # restored after the test
    loader = sys.modules["traceview.loader"]  # the package (tv.load is its function)

    seen: list[bool] = []
    real_load = loader.load

    def load(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(cache.enabled())
        return real_load(*args, **kwargs)

    monkeypatch.setattr(loader, "load", load)
    no_cache = CliRunner().invoke(cli, ["--no-cache", "info", str(big)])
    assert no_cache.exit_code == 0
    assert seen == [False]  # off while the command loads
    # ... and for that command only: the process' setting is what it was (issue 33)
    assert os.environ.get("TRACEVIEW_CACHE") == "1" and cache.enabled()
    tv.load(big, options=ALWAYS)
    assert cache.info()["entries"] == 1


@pytest.mark.slow
def test_a_file_that_grows_during_the_parse_is_not_stored(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace opened while the profiler still writes it: the first load reads part of it
    (a hook appends the rest during the parse); nothing is stored under any key, and the
    next open parses the whole file."""
    whole = gzip.decompress((GENERATED / "hybrid_chunked.json.gz").read_bytes())
    path = tmp_path / "t.json"
    cut = len(whole) // 2
    path.write_bytes(whole[:cut])
    appended = []

    def grow(done: int, total: int) -> None:
        if not appended:
            with open(path, "ab") as f:
                f.write(whole[cut:])
            appended.append(True)

    options = tv.LoadOptions(cache_min_bytes=0, block_bytes=65_536, progress=grow)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tv.load(path, options=options)
    assert appended and cache.info()["entries"] == 0
    fresh = tv.load(path, options=tv.LoadOptions(cache=False))
    assert fresh.meta.truncated_at is None
    _same(tv.load(path, options=ALWAYS), fresh)  # parsed whole, and stored now
    assert cache.info()["entries"] == 1
    _no_parse(monkeypatch)
    _same(tv.load(path, options=ALWAYS), fresh)


def test_a_truncated_trace_is_never_stored(cache_dir: Path, tmp_path: Path) -> None:
    whole = gzip.decompress((GENERATED / "dense_sglang.json.gz").read_bytes())
    path = tmp_path / "t.json"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.warns(tv.TraceviewWarning, match="truncated"):
        tv.load(path, options=ALWAYS)
    assert cache.info()["entries"] == 0


def test_changed_bytes_inside_an_entry_are_never_served(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bit flipped in a frame file (here the kernels' durations) is caught by the size and
    CRC-32 the entry stores: the entry is dropped, the trace parsed again and the entry
    replaced."""
    path = tmp_path / "t.json.gz"
    shutil.copy(GENERATED / "hybrid_chunked.json.gz", path)
    first = tv.load(path, options=ALWAYS)
    parses = []
    parse = loading.read_json
    monkeypatch.setattr(loading, "read_json", lambda *a, **k: parses.append(1) or parse(*a, **k))
    frame = cache_dir / _key_of(path) / "kernels.arrow"
    data = bytearray(frame.read_bytes())
    data[len(data) // 2] ^= 0xFF
    frame.write_bytes(bytes(data))
    _same(tv.load(path, options=ALWAYS), first)
    assert len(parses) == 1, "a damaged entry was served"
    # an emptied frame file too
    frame.write_bytes(b"")
    _same(tv.load(path, options=ALWAYS), first)
    assert len(parses) == 2, "an emptied frame file was served"
    _no_parse(monkeypatch)  # replaced: the next open reads it
    _same(tv.load(path, options=ALWAYS), first)


def test_clear_says_what_it_could_not_remove(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json.gz"
    shutil.copy(GENERATED / "dense_sglang.json.gz", path)
    tv.load(path, options=ALWAYS)
    # a folder it cannot write (root ignores permissions, so the removal itself fails here)
    monkeypatch.setattr(cache.shutil, "rmtree", lambda *a, **k: None)
    result = CliRunner().invoke(cli, ["cache", "clear"])
    assert result.exit_code == 2
    assert "removed 0 cached traces" in result.stderr
    assert "could not remove 1 entry" in result.stderr
    assert cache.info()["entries"] == 1


def test_only_what_the_cache_wrote_is_ever_removed(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile probe's finding: with TRACEVIEW_CACHE_DIR naming the user's own folder,
    ``cache clear`` and eviction removed any folder holding a meta.json and any ``.tmp-*``
    folder. Only folders named as the cache names them, holding only an entry's files, go."""
    cache_dir.mkdir()
    mine = {
        "exp1": {"meta.json": b"{}", "results.csv": b"r"},  # a meta.json of the user's
        ".tmp-notes": {"n.txt": b"n"},
        "a" * 32: {"meta.json": b"{}", "kernels.arrow": b"x", "notes.txt": b"mine"},
        f".tmp-{'b' * 32}": {"meta.json": b"{}", "draft.md": b"d"},
    }
    for folder, files in mine.items():
        (cache_dir / folder).mkdir()
        for name, data in files.items():
            (cache_dir / folder / name).write_bytes(data)
        os.utime(cache_dir / folder, (1, 1))  # older than any entry, and than the stale bound
        os.utime(cache_dir / folder / "meta.json" if "meta.json" in files else cache_dir, (1, 1))
    (cache_dir / "plain.txt").write_bytes(b"p")

    def users_files() -> dict[str, bytes]:
        return {
            str(p.relative_to(cache_dir)): p.read_bytes()
            for p in cache_dir.rglob("*")
            if p.is_file() and p.relative_to(cache_dir).parts[0] in {*mine, "plain.txt"}
        }

    before = users_files()
    path = tmp_path / "t.json.gz"
    shutil.copy(GENERATED / "dense_sglang.json.gz", path)
    monkeypatch.setenv("TRACEVIEW_CACHE_MAX_BYTES", "1")  # every entry is over the bound
    tv.load(path, options=ALWAYS)  # stored, then evicted at once
    assert cache.info()["entries"] == 0 and users_files() == before
    monkeypatch.delenv("TRACEVIEW_CACHE_MAX_BYTES")
    tv.load(path, options=ALWAYS)
    assert cache.info()["entries"] == 1
    done = CliRunner().invoke(cli, ["cache", "clear"])
    assert done.exit_code == 0 and "removed 1 cached trace " in done.stderr
    assert cache.info()["entries"] == 0 and users_files() == before


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("TRACEVIEW_CACHE", "abc", "TRACEVIEW_CACHE='abc' is neither on"),
        ("TRACEVIEW_CACHE_MAX_BYTES", "lots", "TRACEVIEW_CACHE_MAX_BYTES='lots' is not a count"),
        ("TRACEVIEW_CACHE_MAX_BYTES", "-5", "TRACEVIEW_CACHE_MAX_BYTES='-5' is not a count"),
    ],
)
def test_a_cache_setting_that_means_nothing_is_said(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str, said: str
) -> None:
    """A hostile probe's finding: these were ignored silently (the cache left on, the
    bound at its default; a negative bound read "of -0.0 GiB"), where a bad
    TRACEVIEW_WORKERS is refused."""
    monkeypatch.setenv(name, value)
    done = CliRunner().invoke(cli, ["cache", "info"])
    assert done.exit_code == 2 and done.stderr == f"Error: {said}" + done.stderr.split(said)[1]
    assert len(done.stderr.splitlines()) == 1
    # before any work: a trace too small to cache, and a run (not one rank's failure)
    with pytest.raises(tv.TraceviewError, match=said.split("=")[0]):
        tv.load(GENERATED / "dense_sglang.json.gz")
    assert not cache_dir.exists() or not any(cache_dir.iterdir())  # nothing parsed or stored
    with pytest.raises(tv.TraceviewError, match=said.split("=")[0]):
        tv.summarize_run([str(GENERATED / "dense_sglang.json.gz")])


def test_cache_info_gives_its_sizes_in_binary_units(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is 4 GiB (docs/loading.md); it read "4.3 GB"."""
    done = CliRunner().invoke(cli, ["cache", "info"])
    assert done.exit_code == 0 and "size       0.0 MiB of 4.0 GiB" in done.stdout
    monkeypatch.setenv("TRACEVIEW_CACHE", "off")
    done = CliRunner().invoke(cli, ["cache", "info"])
    assert "(off (TRACEVIEW_CACHE=off))" in done.stdout  # the value as set
