"""The API refuses what it cannot serve, as one UsageError naming the field (issue 33's
AnalysisConfig, found by a hostile probe), and a name cannot forge a line of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GENERATED

import traceview as tv
from traceview.cli import cli
from traceview.errors import CheckError, UsageError

TRACE = GENERATED / "hybrid_chunked.json.gz"


@pytest.mark.parametrize(
    "fields",
    [
        {"layers": 0},
        {"layers": -1},
        {"layers": True},
        {"layers": 2.5},
        {"layers": 10**20},
        {"step_gap_ns": -1},
        {"step_gap_ns": "50us"},
        {"device": "0"},
        {"device": -1},
        {"method": "nope"},
        {"window": (1, 2, 3)},
        {"window": "0:1s"},
        {"window": (5, 1)},
        {"gpu": 5},
        {"model": 5},
        {"rules": 5},
        {"preset": 5},
    ],
    ids=str,
)
def test_a_config_field_that_cannot_be_served_is_one_usage_error(fields: dict) -> None:
    with pytest.raises(UsageError) as err:
        tv.AnalysisConfig(**fields)
    name = next(iter(fields))
    assert name in str(err.value) or "method" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_config_that_is_no_config_is_refused() -> None:
    for wrong in ({"method": "bursts"}, "bursts"):
        with pytest.raises(UsageError, match="an AnalysisConfig, not"):
            tv.analyze(TRACE, wrong)  # type: ignore[arg-type]


def test_the_step_count_is_the_planted_one_or_an_error() -> None:
    """layers=0, -1 or True gave 100 steps instead of the planted 50 (a probe's finding)."""
    import json

    truth = json.loads(TRACE.with_name("hybrid_chunked.truth.json").read_text())
    assert tv.analyze(TRACE).steps.height == truth["step_count"]


def test_a_busy_window_must_be_a_window() -> None:
    t = tv.load(TRACE)
    start = int(tv.busy(t)["window_start_ns"][0])
    with pytest.raises(UsageError, match="end is not after its start"):
        tv.busy(t, start + 10, start)
    with pytest.raises(UsageError, match="t0_ns"):
        tv.busy(t, "0")  # type: ignore[arg-type]
    # a hostile probe's finding: a window beside the activity (times counted from the
    # trace's start, where busy takes the trace's clock) read a busy fraction of 0.0
    with pytest.raises(
        UsageError, match=r"holds none of the analysed device's activity \(it spans"
    ):
        tv.busy(t, 0, 10**8)
    # and the notebook's Analysis.busy_between, the same figure, said the same (it read 0.0)
    a = tv.analyze(t)
    with pytest.raises(
        UsageError, match=r"holds none of the analysed device's activity \(it spans"
    ):
        a.busy_between(0, 10**8)
    end = int(a.busy["window_end_ns"][0])
    with pytest.raises(UsageError, match="holds none"):
        a.busy_between(end, end + 10**6)
    assert a.busy_between(start, end)["fraction"][0] == a.busy["fraction"][0]


def test_diff_takes_summaries() -> None:
    with pytest.raises(CheckError, match="diff compares Summaries"):
        tv.diff(1, 2)  # type: ignore[arg-type]
    a = tv.analyze(TRACE)
    with pytest.raises(CheckError, match="not Analysis"):
        tv.diff(a, a)  # type: ignore[arg-type]


def test_one_path_is_a_path_not_its_characters(tmp_path: Path) -> None:
    report = tv.scan(str(TRACE), tmp_path / "ds")
    assert report.scanned == [str(TRACE)]
    run = tv.summarize_run(str(TRACE)).to_dict()
    assert len(run["ranks"]) == 1


def test_load_options_refuse_a_block_of_no_size() -> None:
    for size in (0, -100, True):
        with pytest.raises(UsageError, match="block_bytes"):
            tv.LoadOptions(block_bytes=size)


def test_a_huge_layers_is_one_line_not_a_traceback() -> None:
    for layers in ("99999999999999999999", "1000000000"):
        r = CliRunner().invoke(cli, ["summarize", str(TRACE), "--layers", layers])
        assert r.exit_code == 2, r.output
        assert r.stderr.count("\n") == 1 and "layers" in r.stderr


def test_a_name_with_a_line_break_cannot_forge_a_line(tmp_path: Path) -> None:
    """A file named 'x\\nError: fake' printed two Error: lines, one of them forged."""
    name = tmp_path / "gnl\nError: fake.json.gz"
    name.write_bytes(b"not a trace")
    r = CliRunner().invoke(cli, ["summarize", str(name)])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and r.stderr.count("Error:") == 2  # ours, and the name's
    assert r.stderr.startswith("Error: ") and "\\x0aError: fake" in r.stderr


def test_the_summary_repr_names_the_token_cadence() -> None:
    text = repr(tv.analyze(TRACE).summary)
    assert "token cadence" in text and "decode cadence" not in text


@pytest.mark.parametrize("command", ["steps", "sql"])
def test_an_output_folder_is_said_to_be_one(command: str, tmp_path: Path) -> None:
    """``steps TRACE -o FOLDER`` said "unknown output suffix '(none)'"."""
    folder = tmp_path / "out"
    folder.mkdir()
    args = [command, *(["top_kernels"] if command == "sql" else []), str(TRACE), "-o", str(folder)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2
    assert r.stderr == f"Error: {folder}: is a folder; give a file name for the output\n"


def test_busy_over_its_own_window_is_the_summarys() -> None:
    """busy_between over the default window gave the fraction unrounded (0.8271270159…)
    beside the summary's 0.827127016."""
    t = tv.load(TRACE)
    whole = tv.busy(t)
    again = tv.busy(t, int(whole["window_start_ns"][0]), int(whole["window_end_ns"][0]))
    assert again["fraction"][0] == whole["fraction"][0]
    assert again["busy_ns"][0] == whole["busy_ns"][0]
    # an end not given is the activity's own, on the shortcut and on the Analysis alike
    a = tv.analyze(t)
    mid = (int(whole["window_start_ns"][0]) + int(whole["window_end_ns"][0])) // 2
    assert a.busy_between().equals(whole)
    assert a.busy_between(None, mid).equals(tv.busy(t, None, mid))
    assert a.busy_between(mid).equals(tv.busy(t, mid))
    halves = a.busy_between(None, mid)["busy_ns"][0] + a.busy_between(mid)["busy_ns"][0]
    assert halves == whole["busy_ns"][0]


def test_capture_alone_is_refused_where_steps_are_judged(tmp_path: Path) -> None:
    """check, diff and a bounded busy refuse a trace of CUDA-graph capture alone, as the
    CLI does (the API judged its 0-step summary: a failed check on a null)."""
    from traceview.errors import CaptureOnlyError

    path = GENERATED / "sglang_capture_only.json.gz"
    summary = tv.analyze(path).summary
    with pytest.raises(CaptureOnlyError):
        tv.check(summary, tv.Bounds(maximum={"busy.fraction": 0.5}))
    with pytest.raises(CaptureOnlyError):
        tv.diff(summary, summary)
    with pytest.raises(CaptureOnlyError):
        tv.busy(tv.load(path), 0, 10)


def test_options_refuse_what_they_cannot_run() -> None:
    for bad in ({"jobs": 0}, {"jobs": -3}, {"jobs": True}, {"config": "x"}):
        with pytest.raises(UsageError):
            tv.RunOptions(**bad)
        with pytest.raises(UsageError):
            tv.ScanOptions(**bad)
    with pytest.raises(UsageError, match="engine"):
        tv.ScanOptions(engine="spark")


def test_rules_that_cannot_be_read_fail_when_the_config_is_made(tmp_path: Path) -> None:
    from traceview.errors import TraceviewError

    with pytest.raises(TraceviewError, match="nope"):
        tv.AnalysisConfig(preset="nope")
    with pytest.raises(TraceviewError):
        tv.AnalysisConfig(rules=str(tmp_path / "missing.toml"))


def test_a_capture_only_rank_is_left_out_even_when_strict(tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(GENERATED / "hybrid_chunked.json.gz", run / "rank0.json.gz")
    shutil.copy(GENERATED / "sglang_capture_only.json.gz", run / "rank1.json.gz")
    doc = tv.summarize_run(run, tv.RunOptions(strict=True)).to_dict()
    assert len(doc["ranks"]) == 1
    (left,) = doc["left_out"]
    assert left["skipped"] and "capture" in left["reason"]


def test_a_scheme_traceview_cannot_read_is_named() -> None:
    r = CliRunner().invoke(cli, ["info", "ftp://host/x.json.gz"])
    assert r.exit_code == 2
    assert r.stderr.startswith("Error: ftp://host/x.json.gz: unsupported scheme 'ftp' (known: s3")


@pytest.mark.parametrize(
    "body",
    [
        '[max]\n"decode_gaps.decode.p99_ns" = 5\n',
        '[max]\n"busy.fraction" = nan\n',
        "[options]\nprefill_growth = 0.5\n",
    ],
    ids=["no-unit", "nan", "growth"],
)
def test_a_bad_limit_in_a_checks_file_names_the_file(body: str, tmp_path: Path) -> None:
    """A probe's finding: a checks file's bad limit was one line that did not name the
    file it came from."""
    checks = tmp_path / "bounds.toml"
    checks.write_text(body)
    r = CliRunner().invoke(cli, ["check", str(TRACE), "--checks", str(checks)])
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"Error: {checks}: ") and r.stderr.count("\n") == 1


@pytest.mark.parametrize("window", [-1, (5, 1), (0, float("nan")), ("0", "1"), (1,), (True, 2)])
def test_a_chart_window_that_is_no_window_is_one_usage_error(window: object) -> None:
    """``heartbeat(window_ms=-1)`` was a TypeError from deep inside the chart."""
    pytest.importorskip("matplotlib")
    analysis = tv.analyze(TRACE)
    with pytest.raises(UsageError, match=r"window_ms=.*start < end"):
        analysis.heartbeat(window_ms=window)  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_chart_window_in_the_trace_draws() -> None:
    pytest.importorskip("matplotlib")
    figure = tv.analyze(TRACE).heartbeat(window_ms=(0, 50))
    assert figure.axes[0].get_xlim() == pytest.approx((0, 50), abs=1e-6)


def test_no_paths_and_a_half_window_are_said(tmp_path: Path) -> None:
    """A hostile probe's findings: ``tv.summarize_run([])`` and ``tv.scan([], ds)`` said
    ": no trace files" (the paths' place empty), and ``AnalysisConfig(window=(None, 5))``
    was a TypeError."""
    for call in (lambda: tv.summarize_run([]), lambda: tv.scan([], tmp_path / "ds")):
        with pytest.raises(tv.TraceviewError, match="^no paths given"):
            call()
    assert not (tmp_path / "ds").exists()
    with pytest.raises(UsageError, match=r"needs both ends"):
        tv.AnalysisConfig(window=(None, 5))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def chunked() -> tv.Trace:
    return tv.load(TRACE)


def test_a_shortcut_takes_a_config_and_its_old_keywords_warn(chunked: tv.Trace) -> None:
    """The shortcuts take the trace and one AnalysisConfig. For one release the keywords
    they took before it still replace the config's fields, and each call warns, naming
    the config to write instead."""
    bursts = tv.AnalysisConfig(method="bursts")
    assert tv.summarize(chunked).document["steps"]["method"] == "annotations"
    assert tv.summarize(chunked, bursts).document["steps"]["method"] == "bursts"
    said = r"tv.summarize\(trace, method=...\) is deprecated.*tv.AnalysisConfig\(method=...\)"
    with pytest.warns(DeprecationWarning, match=said):
        old = tv.summarize(chunked, method="bursts")
    assert old.document == tv.summarize(chunked, bursts).document
    with pytest.warns(DeprecationWarning, match=r"tv.steps\(trace, method=..., device=...\)"):
        steps = tv.steps(chunked, tv.AnalysisConfig(layers=2), method="bursts", device=0)
    assert steps.equals(tv.steps(chunked, tv.AnalysisConfig(layers=2, method="bursts")))
    rules = tv.load_rules("default")  # the old second argument, by position
    with pytest.warns(DeprecationWarning, match=r"tv.families\(trace, rules=...\)"):
        assert tv.families(chunked, rules).equals(tv.families(chunked))
    with pytest.warns(DeprecationWarning, match=r"tv.busy\(trace, device=...\)"):
        assert tv.busy(chunked, device=0).equals(tv.busy(chunked))
    with pytest.warns(DeprecationWarning, match=r"tv.kernels\(trace, device=...\)"):
        assert tv.kernels(chunked, device=0).equals(tv.kernels(chunked))
    with pytest.warns(DeprecationWarning, match=r"tv.decode_gaps\(trace, method=...\)"):
        assert tv.decode_gaps(chunked, method="bursts").equals(tv.decode_gaps(chunked, bursts))


def test_a_shortcut_refuses_a_keyword_it_never_took(chunked: tv.Trace) -> None:
    with pytest.raises(TypeError, match="steps\\(\\) got an unexpected keyword argument 'model'"):
        tv.steps(chunked, model="config.json")
    with pytest.raises(TypeError, match="busy\\(\\) got an unexpected keyword argument 'method'"):
        tv.busy(chunked, method="bursts")
    with pytest.raises(UsageError, match="config: an AnalysisConfig"):
        tv.steps(chunked, "bursts")  # type: ignore[arg-type]
