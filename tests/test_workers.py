"""A JSON trace decoded on several processes (``LoadOptions.workers``, issue 34) gives the
same frames, warnings and errors as one process: blocks are cut the same way, decoded by
helpers or here, and added in file order."""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import GENERATED, cut_in_half, real_traces, trace_params
from polars.testing import assert_frame_equal

import traceview as tv
from traceview import environ
from traceview.batch.pool import map_tasks
from traceview.cli import cli
from traceview.errors import TraceFormatError, UsageError
from traceview.loader import LoadOptions, helpers
from traceview.loader import json as load_json

FRAMES = ("kernels", "events", "flows", "counters", "metadata", "shapes")


@pytest.fixture(autouse=True)
def four_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loads here may use up to 4 processes (helpers are never more than the cores allow:
    on a 2-core machine a test of 3 workers would start one helper, not two)."""
    real = helpers.cores
    monkeypatch.setattr(helpers, "cores", lambda: max(real(), 4))


SMALL = 65_536  # bytes a block: a fixture of a few MB of text is dozens of blocks


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many blocks the helpers decoded, for each load (recorded when it stops them).
    The loading process waits for each block it gave a helper (by default it decodes one
    itself rather than wait while its helper starts: on these small texts, every one)."""
    counts: list[int] = []
    monkeypatch.setattr(helpers.Helpers, "worth_waiting", lambda *_a, **_k: True)
    close = helpers.Helpers.close

    def counted(self: helpers.Helpers) -> None:
        counts.append(self.answered)
        close(self)
        assert all(p.returncode is not None for p in self._processes), "a helper outlived its load"

    monkeypatch.setattr(helpers.Helpers, "close", counted)
    return counts


def _load(path: Path, workers: int, block_bytes: int = SMALL, **options: object) -> tv.Trace:
    return tv.load(
        path,
        options=LoadOptions(cache=False, block_bytes=block_bytes, workers=workers, **options),  # type: ignore[arg-type]
    )


def assert_same(a: tv.Trace, b: tv.Trace) -> None:
    for name in FRAMES:
        try:
            assert_frame_equal(getattr(a, name), getattr(b, name))
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None
    assert a.meta == b.meta


FIXTURES = sorted(GENERATED.glob("*.json.gz"))


@pytest.mark.parametrize(
    "path",
    trace_params(FIXTURES + real_traces(), fixture_sample={"hybrid_chunked.json.gz"}),
)
def test_the_frames_are_the_same_for_every_worker_count(
    path: Path, answered: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    text = len(gzip.decompress(path.read_bytes()))
    # a few dozen blocks a trace (a real trace of 100 MB in 64 KiB blocks took 20 s)
    block_bytes = max(SMALL, text // 32)
    one = _load(path, 1, block_bytes)
    assert answered == []  # one worker: no helper is started
    many = _load(path, 3, block_bytes)
    assert_same(one, many)
    if text > 4 * block_bytes:
        assert answered and answered[0] > 0, "no block was decoded by a helper"
    # helpers that end as they should say nothing
    assert not [r for r in caplog.records if r.name == "traceview.loader"]


@pytest.mark.slow
def test_raw_args_are_the_same_for_every_worker_count(answered: list[int]) -> None:
    path = GENERATED / "hybrid_tight.json.gz"
    one = _load(path, 1, raw_args=True)
    many = _load(path, 2, raw_args=True)
    assert "args_json" in many.kernels.columns
    assert_same(one, many)
    assert answered[0] > 0


def _kernels(n: int, name: str = "k{i}", **extra: object) -> list[dict[str, object]]:
    return [
        {
            "ph": "X",
            "cat": "kernel",
            "name": name.format(i=i),
            "pid": 0,
            "tid": 7,
            "ts": 10 + 3 * i,
            "dur": 2,
            "args": {"device": 0, "stream": 7, "correlation": i, **extra},
        }
        for i in range(n)
    ]


def _write(path: Path, events: list[dict[str, object]]) -> Path:
    # Kineto's layout: one event per line, "},\n  {" between them
    body = ",\n  ".join(json.dumps(e) for e in events)
    path.write_text('{"traceEvents": [\n  ' + body + '\n], "displayTimeUnit": "ms"}')
    return path


def test_a_cut_inside_a_string_is_read_on_from(tmp_path: Path, answered: list[int]) -> None:
    """A name holding ``}, {`` looks like the boundary between two events; where a block's
    text ends inside such an event, its last cut falls in the string and the block does
    not end between events. The load reads on from that block (the rest without helpers),
    and every event loads once."""
    path = _write(tmp_path / "t.json", _kernels(3_000, name="void f<{{lambda()#{i}}}, {{x}}>()"))
    one = _load(path, 1)
    many = _load(path, 2)
    assert many.kernels.height == 3_000
    assert many.kernels["name"][5] == "void f<{lambda()#5}, {x}>()"
    assert_same(one, many)


@pytest.mark.slow
def test_a_block_is_decoded_here_rather_than_waited_for_while_its_helper_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A helper that takes a minute to start (a slow disk, a loaded machine) is not waited
    for: the loading process decodes the blocks it gave it, ends it when the load is done,
    and says nothing (the helper did not fail; the trace is the same)."""
    path = GENERATED / "hybrid_chunked.json.gz"
    one = _load(path, 1)
    monkeypatch.setattr(helpers, "_BOOT", "import time; time.sleep(60)\n" + helpers._BOOT)
    started: list[helpers.Helpers] = []
    close = helpers.Helpers.close

    def closing(self: helpers.Helpers) -> None:
        started.append(self)
        close(self)

    monkeypatch.setattr(helpers.Helpers, "close", closing)
    assert_same(one, _load(path, 2))
    assert len(started) == 1 and started[0].answered == 0
    assert all(p.returncode is not None for p in started[0]._processes)
    assert not [r for r in caplog.records if r.name == "traceview.loader"]
    # blocks larger than the pipe: the writer waits in the first block's send, and the
    # next, taken back, is never sent
    big = _write(tmp_path / "big.json", _kernels(40_000))
    assert_same(_load(big, 1, 1 << 20), _load(big, 2, 1 << 20))
    assert started[1].answered == 0 and sum(h.skipped for h in started[1]._helpers) >= 1


@pytest.mark.slow
def test_a_helper_that_does_not_exit_is_ended_quietly(
    monkeypatch: pytest.MonkeyPatch, answered: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    """A helper that answered every block and then does not exit (stuck at its interpreter's
    end) is ended after a short wait (it held the load 30 s), and is no failure to say."""
    path = GENERATED / "hybrid_chunked.json.gz"
    one = _load(path, 1)
    monkeypatch.setattr(helpers, "_BOOT", helpers._BOOT + "import time; time.sleep(600)\n")
    many: list[tv.Trace] = []
    loading = threading.Thread(target=lambda: many.append(_load(path, 2)), daemon=True)
    loading.start()
    loading.join(timeout=20)  # a hang check, not a timing: the wait was 30 s
    assert not loading.is_alive(), "the load waited for a helper that does not exit"
    assert_same(one, many[0])
    assert answered and answered[0] > 0
    assert not [r for r in caplog.records if r.name == "traceview.loader"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hybrid_chunked.json.gz", "dense_sglang.json.gz"])
def test_the_frames_are_the_same_when_blocks_are_decoded_here_or_by_helpers(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """As loads run (no waiting forced): blocks taken back from a starting helper, or at
    the end from behind another, and blocks its helper answered, in one load."""
    path = GENERATED / name
    one = _load(path, 1, 16_384)
    for workers in (2, 3):
        assert_same(one, _load(path, workers, 16_384))
    assert not [r for r in caplog.records if r.name == "traceview.loader"]


def test_a_bad_block_taken_back_from_a_starting_helper_is_named_as_by_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "t.json", _kernels(3_000))
    path.write_bytes(path.read_bytes().replace(b'"name": "k2700"', b'"name": k2700', 1))
    with pytest.raises(TraceFormatError) as one:
        _load(path, 1)
    monkeypatch.setattr(helpers, "_BOOT", "import time; time.sleep(60)\n" + helpers._BOOT)
    with pytest.raises(TraceFormatError) as many:
        _load(path, 2)
    assert str(many.value) == str(one.value)
    assert "after event #2699" in str(one.value)


@pytest.mark.slow
def test_a_helper_that_cannot_start_leaves_the_blocks_to_this_process(
    monkeypatch: pytest.MonkeyPatch, answered: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    path = GENERATED / "hybrid_chunked.json.gz"
    one = _load(path, 1)
    assert not caplog.records
    monkeypatch.setattr(helpers, "_BOOT", "import sys; sys.exit(3)")
    assert_same(one, _load(path, 2))
    assert answered == [0]
    # said once, not silently slower
    said = [r.getMessage() for r in caplog.records if r.name == "traceview.loader"]
    assert said == [
        f"{path}: helper processes stopped: one exited with status 3, leaving blocks unanswered; "
        "the rest was decoded by this process alone (the same trace, more slowly)"
    ]


def test_a_helper_ended_by_a_signal_is_named_by_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = GENERATED / "hybrid_chunked.json.gz"
    one = _load(path, 1)
    monkeypatch.setattr(helpers, "_BOOT", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert_same(one, _load(path, 2))  # the blocks it held are decoded here: the same trace
    said = [r.getMessage() for r in caplog.records if r.name == "traceview.loader"]
    assert len(said) == 1 and "one was ended by SIGKILL, leaving blocks unanswered" in said[0]


@pytest.mark.slow
def test_a_helper_that_never_answers_is_given_up_on(
    monkeypatch: pytest.MonkeyPatch, answered: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    """A helper alive but silent (stopped, deadlocked) once hung the load for ever: past
    the wait its blocks are decoded here, the same trace, and said once."""
    from traceview.loader import in_order

    path = GENERATED / "hybrid_chunked.json.gz"
    one = _load(path, 1)
    monkeypatch.setattr(in_order, "ANSWER_WAIT_S", 1.0)
    monkeypatch.setattr(helpers, "_BOOT", "import time; time.sleep(600)")
    assert_same(one, _load(path, 2))
    assert answered == [0]
    said = [r.getMessage() for r in caplog.records if r.name == "traceview.loader"]
    assert len(said) == 1 and "one did not answer a block in 1 s" in said[0], said


@pytest.mark.slow
def test_a_command_says_a_helpers_failure_once_as_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a user runs it: `summarize --workers 2` whose helpers die says so in one
    `Warning:` line naming the file (escaped), prints the same summary, and leaves the
    logger as it found it."""
    import functools
    import logging

    from click.testing import CliRunner

    from traceview.cli import cli

    source = GENERATED / "hybrid_chunked.json.gz"
    path = tmp_path / "odd\x1b[31m.json.gz"
    path.write_bytes(source.read_bytes())
    # the command's loads cut small blocks, so that this small trace starts helpers
    small = functools.partial(LoadOptions, cache=False, block_bytes=SMALL)
    # the package (tv.load is its function), which the command imports from as it loads
    monkeypatch.setattr(sys.modules["traceview.loader"], "LoadOptions", small)
    args = ["summarize", "--json", str(path)]
    one = CliRunner().invoke(cli, [*args, "--workers", "1"])
    monkeypatch.setattr(helpers, "_BOOT", "import sys; sys.exit(3)")
    two = CliRunner().invoke(cli, [*args, "--workers", "2"])
    assert one.exit_code == two.exit_code == 0, two.stderr
    assert json.loads(one.stdout) == json.loads(two.stdout)
    said = [w for w in two.stderr.splitlines() if "helper processes stopped" in w]
    assert said == [
        f"Warning: {tmp_path}/odd\\x1b[31m.json.gz: helper processes stopped: one exited with "
        "status 3, leaving blocks unanswered; the rest was decoded by this process alone (the same "
        "trace, more slowly)"
    ]
    assert "helper processes" not in one.stderr
    logger = logging.getLogger("traceview")
    assert logger.propagate and not logger.handlers


NONSENSE = {
    "garbage": "import sys; sys.stdin.buffer.read(24); sys.stdout.buffer.write(b'\\xff' * 64)",
    # the right mark and a length of 1 TiB, then the pipe closes: never reserved
    "a huge length": (
        "import struct, sys; sys.stdin.buffer.read(24); "
        "sys.stdout.buffer.write(struct.pack('<16sQ', b'traceview-block\\x01', 1 << 40))"
    ),
    "a pickle of another thing": (
        "import pickle, struct, sys; sys.stdin.buffer.read(24); d = pickle.dumps([1, 2]); "
        "sys.stdout.buffer.write(struct.pack('<16sQ', b'traceview-block\\x01', len(d)) + d); "
        "sys.stdout.flush(); sys.stdin.buffer.read()"
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("boot", NONSENSE.values(), ids=NONSENSE.keys())
def test_a_helper_that_answers_nonsense_is_given_no_more_blocks(
    monkeypatch: pytest.MonkeyPatch, answered: list[int], boot: str
) -> None:
    path = GENERATED / "hybrid_chunked.json.gz"
    one = _load(path, 1)
    monkeypatch.setattr(helpers, "_BOOT", boot)
    assert_same(one, _load(path, 2))
    assert answered == [0]


@pytest.mark.slow
def test_an_id_beyond_int32_in_a_helpers_block_widens_every_frame(
    tmp_path: Path, answered: list[int]
) -> None:
    events = _kernels(3_000)
    events[2_500]["tid"] = 140_234_567_890_123
    path = _write(tmp_path / "t.json", events)
    one, many = _load(path, 1), _load(path, 3)
    assert many.kernels.schema["tid"] == pl.Int64
    assert_same(one, many)
    assert answered[0] > 0


def test_a_bad_event_in_a_helpers_block_is_named_as_one_process_names_it(
    tmp_path: Path, answered: list[int]
) -> None:
    events = _kernels(3_000)
    del events[2_600]["ts"]
    path = _write(tmp_path / "t.json", events)
    messages = []
    for workers in (1, 2):
        with pytest.raises(TraceFormatError) as caught:
            _load(path, workers)
        messages.append(str(caught.value))
    assert "#2600" in messages[0] or "2600" in messages[0]
    assert messages[0] == messages[1]


@pytest.mark.slow
def test_invalid_json_in_a_helpers_block_names_the_byte(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.json", _kernels(3_000))
    text = path.read_bytes()
    at = text.index(b'"name": "k2700"')
    path.write_bytes(text[:at] + b'"name": k2700' + text[at + len(b'"name": "k2700"') :])
    messages = []
    for workers in (1, 2):
        with pytest.raises(TraceFormatError) as caught:
            _load(path, workers)
        messages.append(str(caught.value))
    assert "invalid JSON" in messages[0]
    assert messages[0] == messages[1]


@pytest.mark.slow
def test_a_truncated_trace_keeps_the_same_events_and_warning(tmp_path: Path) -> None:
    path = tmp_path / "cut.json.gz"
    cut = cut_in_half(path)
    with pytest.warns(tv.TraceviewWarning):
        one = _load(path, 1)
    with pytest.warns(tv.TraceviewWarning):
        many = _load(path, 2)
    assert one.meta.truncated_at == cut
    assert_same(one, many)
    with pytest.raises(TraceFormatError, match="truncated"):
        _load(path, 2, strict=True)


@pytest.mark.slow
def test_counters_and_begin_end_pairs_across_helpers_blocks(tmp_path: Path) -> None:
    events: list[dict[str, object]] = []
    for i in range(1_500):
        t = 100 + 10 * i
        events.append({"ph": "B", "name": f"b{i}", "pid": 1, "tid": 2, "ts": t})
        events.append({"ph": "C", "name": "mem", "pid": 1, "ts": t + 1, "args": {"used": i}})
        events.append({"ph": "E", "pid": 1, "tid": 2, "ts": t + 5})
    events += _kernels(10)
    path = _write(tmp_path / "t.json", events)
    one, many = _load(path, 1), _load(path, 2)
    assert many.counters.height == 1_500
    assert many.events.filter(pl.col("name").cast(pl.String).str.starts_with("b")).height == 1_500
    assert_same(one, many)


def test_workers_must_be_a_count() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(UsageError, match="LoadOptions.workers"):
            LoadOptions(workers=bad)  # type: ignore[arg-type]


def test_traceview_workers_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environ.WORKERS, "3")
    assert helpers.worker_count(None) == 3
    assert helpers.worker_count(1) == 1
    monkeypatch.delenv(environ.WORKERS)
    assert helpers.worker_count(None) == min(helpers.cores(), helpers.DEFAULT_MAX_WORKERS)
    monkeypatch.setattr(helpers, "cores", lambda: 64)
    assert helpers.worker_count(None) == helpers.DEFAULT_MAX_WORKERS  # the default's bound
    monkeypatch.setenv(environ.WORKERS, "64")
    assert helpers.worker_count(None) == 64  # asked for: given
    for bad in ("0", "two", "-2", "\u0663", "1.5"):  # U+0663: an Arabic-Indic 3
        monkeypatch.setenv(environ.WORKERS, bad)
        with pytest.raises(UsageError, match=environ.WORKERS):
            helpers.worker_count(None)


def test_the_workers_option_is_checked_and_scoped_to_the_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(environ.WORKERS, raising=False)
    path = str(GENERATED / "hybrid_chunked.json.gz")
    result = CliRunner().invoke(cli, ["info", "--workers", "0", path])
    assert result.exit_code == 2 and "--workers" in result.output
    result = CliRunner().invoke(cli, ["info", "--workers", "2", path])
    assert result.exit_code == 0, result.output
    assert environ.WORKERS not in os.environ  # restored after the command


def _workers_in_a_job(_: int) -> str | None:
    return os.environ.get(environ.WORKERS)


@pytest.mark.slow
def test_a_pool_of_jobs_shares_the_cores_among_its_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(environ.WORKERS, raising=False)
    shared = str(max(1, min(helpers.cores() // 2, helpers.DEFAULT_MAX_WORKERS)))
    assert map_tasks(_workers_in_a_job, [1, 2], jobs=2) == [shared, shared]
    monkeypatch.setenv(environ.WORKERS, "5")  # chosen by the caller: kept
    assert map_tasks(_workers_in_a_job, [1, 2], jobs=2) == ["5", "5"]


def test_decode_block_numbers_its_events_from_zero() -> None:
    text = ",\n  ".join(json.dumps(e) for e in _kernels(5)).encode()
    block = load_json.decode_block(text, False)
    assert block is not None and block.events == 5
    assert block.parts["kernels"][0].height == 5
    assert load_json.decode_block(text[:-3], False) is None  # ends inside an event


def test_a_ray_task_loads_on_one_core_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    from traceview.batch.scan_ray import load_workers

    monkeypatch.delenv(environ.WORKERS, raising=False)
    assert load_workers() == "1"  # a task holds one CPU
    monkeypatch.setenv(environ.WORKERS, "4")
    assert load_workers() == "4"


@pytest.mark.slow
def test_a_command_on_every_core_says_what_it_says_on_one(tmp_path: Path) -> None:
    """The commands as a user runs them (no TRACEVIEW_WORKERS: every core), on a trace
    large enough that its load starts helpers: the same summary as with one worker."""
    import subprocess
    import sys

    events = _kernels(90_000)
    for i, e in enumerate(events):
        e["name"] = f"void gemm_kernel<{i % 7}>(float*)" if i % 3 else "flash_fwd_kernel"
    path = _write(tmp_path / "big.json", events)
    assert path.stat().st_size > 2 * load_json.BLOCK_BYTES  # helpers start with block one
    env = {k: v for k, v in os.environ.items() if k != environ.WORKERS}
    outputs = []
    for extra in ({}, {environ.WORKERS: "1"}):
        done = subprocess.run(
            [sys.executable, "-m", "traceview", "--no-cache", "summarize", "--json", str(path)],
            capture_output=True,
            text=True,
            env={**env, **extra},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(json.loads(done.stdout))
    assert outputs[0] == outputs[1]


def test_helpers_are_not_started_beyond_what_the_text_can_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many cores and a small trace: a helper for every four blocks expected, at least one,
    never more than the workers allow, nor more than the cores."""
    from traceview.loader.in_order import helpers_for

    monkeypatch.setattr(helpers, "cores", lambda: 8)
    assert helpers_for(99_999, 10_000) == 7  # --workers 99999: the cores bound it
    monkeypatch.setattr(helpers, "cores", lambda: 64)

    assert helpers_for(64, 3) == 1  # an 18 MB text on 64 cores: one helper, not 63
    assert helpers_for(64, 40) == 10
    assert helpers_for(64, 10_000) == 63
    assert helpers_for(2, 10_000) == 1


@pytest.mark.slow
def test_an_odd_field_in_a_block_that_ends_inside_a_string(tmp_path: Path) -> None:
    """A block whose last cut fell in a name holding ``}, {`` and that also holds an odd
    field (``ts`` as a string, which the typed decoder refuses first) ends inside an event:
    it is read on from, not refused as invalid JSON, whatever the blocks or workers."""
    events = _kernels(400)
    for i, e in enumerate(events):
        if i < 10 or i > 300:
            e["name"] = "}, {" + "z" * 1_500
        if 100 <= i < 105:
            e["ts"] = str(e["ts"])
    path = tmp_path / "t.json"
    text = json.dumps({"traceEvents": events}, separators=(",", ":"))
    path.write_text(text.replace('},{"ph"', '}, {"ph"'))
    one, many = (
        tv.load(path, options=LoadOptions(cache=False, block_bytes=3_000, workers=w))
        for w in (1, 3)
    )
    assert one.kernels.height == 400
    assert_same(one, many)


@pytest.mark.slow
def test_begin_end_pairs_across_blocks_with_and_without_shapes(tmp_path: Path) -> None:
    """``B``/``E`` events in blocks that hold ``Input Dims`` and in blocks that do not (the
    blocks' frames have other columns) pair as one; this was a polars ShapeError."""
    events: list[dict[str, object]] = []
    for i in range(600):
        t = 100 + 10 * i
        events.append({"ph": "B", "name": f"b{i}", "pid": 1, "tid": 2, "ts": t})
        if i % 200 < 20:
            dims = {"Input Dims": [[2, 3]], "Input type": ["float"]}
            events.append(
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2,
                 "ts": t + 1, "dur": 1, "args": dims}
            )  # fmt: skip
        events.append({"ph": "E", "pid": 1, "tid": 2, "ts": t + 5})
    path = _write(tmp_path / "t.json", events + _kernels(5))
    one, many = _load(path, 1), _load(path, 3)
    assert one.events.filter(pl.col("name").cast(pl.String).str.starts_with("b")).height == 600
    assert one.shapes.height == 60
    assert_same(one, many)


@pytest.mark.slow
def test_a_module_in_the_current_folder_never_runs_in_a_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answered: list[int]
) -> None:
    """A helper is started with -P: a queue.py (or polars.py) in the folder the user runs
    traceview from is not imported in its place."""
    marker = tmp_path / "ran"
    (tmp_path / "queue.py").write_text(
        f"open({str(marker)!r}, 'a').write('x')\nraise SystemExit(9)\n"
    )
    monkeypatch.chdir(tmp_path)
    path = GENERATED / "hybrid_chunked.json.gz"
    assert_same(_load(path, 1), _load(path, 2))
    assert not marker.exists()
    assert answered[0] > 0
