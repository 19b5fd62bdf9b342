"""Runs of rank traces: planted truth (a slowed rank behind synchronising all-reduces), rank
detection, bad runs, the real 8-rank directory, and the commands that take a run."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import DOC_REL, GENERATED, ROOT, SHARED_TRACES, cut_in_half

import traceview as tv
from fixtures.build import TraceBuilder
from fixtures.ranks import RankRun, build
from traceview.analysis.documents.run import rank_from_name
from traceview.batch.run import RunOptions, summarize_run
from traceview.cli import cli
from traceview.errors import RunError

DLRM = SHARED_TRACES / "param" / "dlrm_8rank"


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, RankRun]:
    run = RankRun(ranks=4, slow_rank=2, slow_factor=1.25, steps=30)
    out = tmp_path_factory.mktemp("tp4")
    paths, truth = build(run, out)
    return out, truth, run


@pytest.mark.slow
def test_the_straggler_and_skew_equal_the_plan(planted: tuple[Path, dict, RankRun]) -> None:
    out, truth, run = planted
    result = summarize_run([str(out)], RunOptions(jobs=2))  # through the process pool
    doc = result.to_dict()
    assert doc["schema"] == "traceview.run/1"
    assert [r["rank"] for r in doc["ranks"]] == list(range(run.ranks))
    assert {r["rank_source"] for r in doc["ranks"]} == {"distributedInfo"}
    assert doc["alignment"] == {"method": "annotation order", "steps": run.steps}
    s = doc["straggler"]
    assert s["rank"] == truth["straggler"] and s["steps_slowest"] == run.steps
    assert s["excess_p50_ns"] == pytest.approx(truth["excess_p50_ns"], rel=0.01)
    # one story: the straggler is the rank the others wait for, and the slowest by compute
    waits = {r["rank"]: r["collective_wait_p50_ns"] for r in doc["ranks"]}
    assert waits[s["rank"]] == min(waits.values()) == 0
    assert (s["by"], s["agrees"], s["slowest_compute_rank"]) == ("collective wait", True, 2)
    # per-step skew: the plan's, step for step
    aligned = result.aligned.pivot(on="rank", index="step", values="compute_ns").drop("step")
    c = aligned.to_numpy()
    assert (c.max(axis=1) - c.min(axis=1)).tolist() == truth["skew"]
    assert c.tolist() == truth["compute"]
    assert doc["skew"]["p50_ns"] == int(np.rint(np.median(truth["skew"])))
    assert doc["skew"]["max_ns"] == max(truth["skew"])
    waits = [r["collective_wait_p50_ns"] for r in doc["ranks"]]
    assert waits == [int(np.rint(w)) for w in truth["collective_wait_p50_ns"]]
    kernels = [s["trace"]["kernels"] for s in doc["summaries"]]
    assert kernels == truth["kernels"]


@pytest.mark.slow
def test_each_ranks_breakdown_and_dependency_idle_equal_the_plan(
    planted: tuple[Path, dict, RankRun],
) -> None:
    """Issue 22, item 4: every rank's breakdown in the run document, its queued-work idle
    (dependency) beside its collective wait. The plan launches each step ahead of it, so a
    rank's idle inside a step is all dependency, and the pause the host's."""
    out, truth, run = planted
    result = summarize_run([str(out)], RunOptions(jobs=1))
    doc = result.to_dict()
    for row, planned in zip(doc["ranks"], truth["idle"], strict=True):
        b = row["time_breakdown"]
        assert b["idle_ns"]["dependency"] == sum(p["dependency"] for p in planned)
        assert b["idle_ns"]["host_late"] == sum(p["host_late"] for p in planned)
        assert b["idle_ns"]["launch"] == sum(p["launch"] for p in planned)
        assert b["idle_ns"]["sync"] == b["idle_ns"]["other"] == 0
        assert b["busy_ns"] + sum(b["idle_ns"].values()) == b["span_ns"]
        median = float(np.median([p["dependency"] for p in planned]))
        assert row["idle_dependency_p50_ns"] == int(np.rint(median))
        assert row["collective_wait_p50_ns"] is not None
    shown = CliRunner().invoke(cli, ["summarize", str(out)], terminal_width=160).stdout
    assert "coll. wait" in shown and "dep. idle" in shown


@pytest.mark.slow
def test_the_pool_and_one_process_agree(planted: tuple[Path, dict, RankRun]) -> None:
    out = planted[0]
    one = summarize_run([str(out)], RunOptions(jobs=1)).to_dict()
    two = summarize_run([str(out / "*.json.gz")], RunOptions(jobs=2)).to_dict()
    assert one == two


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("dp0_pp0_tp0_dcp0_ep0_rank3.1773.pt.trace.json.gz", 3),
        ("1782799835.68-TP-5-DECODE.trace.json.gz", 5),
        ("worker2_step_12.1694128201554.pt.trace.json.gz", 2),
        ("trace_rank-7.json", 7),
        ("host.1234.async_llm.pt.trace.json.gz", None),
    ],
)
def test_ranks_from_file_names(name: str, rank: int | None) -> None:
    assert rank_from_name(name) == rank


def _strip_distributed_info(src: Path, dst: Path) -> None:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc.pop("distributedInfo", None)
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))


def test_ranks_fall_back_to_names_then_order(
    planted: tuple[Path, dict, RankRun], tmp_path: Path
) -> None:
    out = planted[0]
    files = sorted(out.glob("*.json.gz"))
    _strip_distributed_info(files[0], tmp_path / "b_tp1.json.gz")
    _strip_distributed_info(files[1], tmp_path / "a_plain.json.gz")
    doc = summarize_run([str(tmp_path)]).to_dict()
    by_path = {Path(r["path"]).name: (r["rank"], r["rank_source"]) for r in doc["ranks"]}
    assert by_path == {"b_tp1.json.gz": (1, "file name"), "a_plain.json.gz": (0, "order")}


@pytest.mark.parametrize("layout", ["DP", pytest.param("PP", marks=pytest.mark.slow)])
def test_sglang_dp_and_pp_names_rank_in_layout_order(
    planted: tuple[Path, dict, RankRun], tmp_path: Path, layout: str
) -> None:
    """An unseen-trace probe's finding: SGLang's ``{id}-TP-{tp}-DP-{dp}`` (or ``-PP-``)
    files were refused as "both rank 0: two runs in one place?", their TP part read as the
    rank. Ranked in (DP, PP, TP) order, the run is the planted one rank for rank."""
    out, truth, run = planted
    for f in out.glob("*.json.gz"):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        r = doc.pop("distributedInfo")["rank"]
        name = f"1700000000-TP-{r % 2}-{layout}-{r // 2}.trace.json.gz"
        (tmp_path / name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    doc = summarize_run([str(tmp_path)], RunOptions(jobs=1)).to_dict()
    by_rank = {r["rank"]: Path(r["path"]).name for r in doc["ranks"]}
    named = "1700000000-TP-{}-{}-{}.trace.json.gz"
    assert by_rank == {r: named.format(r % 2, layout, r // 2) for r in range(4)}
    assert {r["rank_source"] for r in doc["ranks"]} == {"file name (DP, PP, TP order)"}
    assert doc["straggler"]["rank"] == truth["straggler"]


def _cpu_only(path: Path) -> Path:
    tb = TraceBuilder()
    tb.cpu_op("AsyncLLM.generate", 1_000_000, 50_000)
    return tb.write(path)


@pytest.mark.slow
def test_frontend_traces_are_skipped_and_bad_runs_are_one_line(
    planted: tuple[Path, dict, RankRun], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(planted[0], run_dir)
    _cpu_only(run_dir / "4242.async_llm.1700.pt.trace.json.gz")
    result = CliRunner().invoke(cli, ["summarize", str(run_dir), "--json", "-j", "1"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert len(doc["ranks"]) == 4
    assert doc["left_out"][0]["skipped"] and "no device activity" in doc["left_out"][0]["reason"]
    assert "async_llm" in result.stderr and "skipped" in result.stderr

    # a corrupt rank: left out with a warning, or (--strict) exit 2
    (run_dir / "rank9.json").write_text('{"traceEvents": [{"ph": "X", "cat": "kernel"')
    warned = CliRunner().invoke(cli, ["summarize", str(run_dir), "-j", "1"])
    assert warned.exit_code == 0 and "rank9.json" in warned.stderr
    bad = str(run_dir / "rank9.json")
    assert warned.stderr.count(bad) == 1, warned.stderr
    (run_dir / "rank8.json").write_bytes(b"")  # a failure: named once, not again in its reason
    empty = CliRunner().invoke(cli, ["summarize", str(run_dir), "-j", "1", "--json"])
    assert f"{run_dir / 'rank8.json'}: left out: empty file\n" in empty.stderr, empty.stderr
    reasons = {r["path"]: r["reason"] for r in json.loads(empty.stdout)["left_out"]}
    assert reasons[str(run_dir / "rank8.json")] == "empty file"
    (run_dir / "rank8.json").unlink()
    strict = CliRunner().invoke(cli, ["summarize", str(run_dir), "--strict", "-j", "1"])
    assert strict.exit_code == 2 and strict.stderr.startswith("Error: ")
    assert "rank9.json" in strict.stderr and len(strict.stderr.splitlines()) == 1
    assert strict.stderr.startswith(f"Error: {bad}: truncated inside an event")

    # two files for one rank
    dup = tmp_path / "dup"
    dup.mkdir()
    first = sorted(planted[0].glob("*.json.gz"))[0]
    shutil.copy(first, dup / "a.json.gz")
    shutil.copy(first, dup / "b.json.gz")
    both = CliRunner().invoke(cli, ["summarize", str(dup), "-j", "1"])
    assert both.exit_code == 2 and len(both.stderr.splitlines()) == 1
    assert "a.json.gz" in both.stderr and "b.json.gz" in both.stderr and "rank 0" in both.stderr

    # nothing analysable: an error naming what was found
    empty = tmp_path / "frontend_only"
    empty.mkdir()
    _cpu_only(empty / "1.async_llm.json.gz")
    none = CliRunner().invoke(cli, ["summarize", str(empty)])
    assert none.exit_code == 2 and "nothing to analyse" in none.stderr
    assert "1.async_llm.json.gz" in none.stderr
    nothing = CliRunner().invoke(cli, ["summarize", str(tmp_path / "no_such_dir" / "*.gz")])
    assert nothing.exit_code == 2 and "no trace files" in nothing.stderr
    # the user's files are untouched
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(
        [
            *(p.name for p in planted[0].iterdir()),
            "4242.async_llm.1700.pt.trace.json.gz",
            "rank9.json",
        ]
    )


def test_uneven_step_counts_warn_and_align_on_the_common_steps(tmp_path: Path) -> None:
    a = tmp_path / "a"
    b = tmp_path / "b"
    build(RankRun(ranks=2, slow_rank=1, steps=12), a)
    build(RankRun(ranks=2, slow_rank=1, steps=10), b)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(next(a.glob("*rank0*")), mixed / "r0_rank0.json.gz")
    shutil.copy(next(b.glob("*rank1*")), mixed / "r1_rank1.json.gz")
    run = summarize_run([str(mixed)])
    assert any("different step counts" in w for w in run.warnings)
    assert run.to_dict()["alignment"]["steps"] == 10


@pytest.mark.slow  # 4 s: the default run stays under 2 minutes; CI's slow run has it
def test_commands_take_a_run(planted: tuple[Path, dict, RankRun], tmp_path: Path) -> None:
    out, truth, run = planted
    steps = CliRunner().invoke(cli, ["steps", str(out), "-o", str(tmp_path / "s.parquet")])
    assert steps.exit_code == 0, steps.stderr
    table = pl.read_parquet(tmp_path / "s.parquet")
    assert table.columns[:2] == ["rank", "path"]
    assert table.group_by("rank").len().sort("rank")["len"].to_list() == [run.steps] * run.ranks
    png = tmp_path / "hb.png"
    hb = CliRunner().invoke(cli, ["heartbeat", str(out), "-o", str(png), "-j", "1"])
    assert hb.exit_code == 0, hb.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    excess = truth["excess_p50_ns"]
    ok = CliRunner().invoke(
        cli, ["check", str(out), "--max", f"straggler.excess_p50_ns={excess + 1}ns", "-j", "1"]
    )
    bad = CliRunner().invoke(
        cli, ["check", str(out), "--max", f"straggler.excess_p50_ns={excess - 1}ns", "-j", "1"]
    )
    assert (ok.exit_code, bad.exit_code) == (0, 1)
    rank2 = CliRunner().invoke(
        cli, ["check", str(out), "--max", "ranks.2.collective_wait_p50_ns=0", "-j", "1"]
    )
    assert rank2.exit_code == 0, rank2.stdout  # the straggler never waits
    slower = tmp_path / "slower"
    build(RankRun(ranks=4, slow_rank=2, slow_factor=1.5, steps=30), slower)
    d = CliRunner().invoke(cli, ["diff", str(out), str(slower), "--json", "-j", "1"])
    assert d.exit_code == 0, d.stderr
    rows = {r["field"]: r for r in json.loads(d.stdout)["rows"] if r["field"]}
    excess_row = rows["straggler.excess_p50_ns"]  # its label says its n too
    # the excess doubled, but it is a signed figure: shown, never judged by a ratio
    assert excess_row["ratio"] == pytest.approx(2.0, rel=0.01)
    assert excess_row["verdict"] is None
    assert excess_row["why"] == "a signed figure (no ratio)"
    mixed = CliRunner().invoke(cli, ["diff", str(out), str(next(out.glob("*.gz")))])
    assert mixed.exit_code == 2 and "a run with a run" in mixed.stderr


def _independent_busy(path: Path) -> tuple[int, float]:
    """Kernel count and busy fraction (union of kernel intervals over the first-to-last
    window) of the device with the most kernel time, with Python's json only."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    per: dict[int, list[tuple[int, int]]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() in (
            "kernel",
            "gpu_memcpy",
            "gpu_memset",
        ):
            t0 = round(e["ts"] * 1000)
            per.setdefault(e["args"].get("device", e["pid"]), []).append(
                (t0, t0 + round(e["dur"] * 1000))
            )
    dev = max(per, key=lambda d: sum(b - a for a, b in per[d]))
    iv = sorted(per[dev])
    busy, cur = 0, None
    for a, b in iv:
        if cur is None or a > cur[1]:
            busy += 0 if cur is None else cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    assert cur is not None
    busy += cur[1] - cur[0]
    window = max(b for _, b in iv) - iv[0][0]
    return len(iv), busy / window


@pytest.mark.slow
@pytest.mark.skipif(not DLRM.is_dir(), reason="../shared/traces is not present")
def test_the_real_8_rank_directory() -> None:
    doc = summarize_run([str(DLRM)], RunOptions(jobs=2)).to_dict()
    assert [r["rank"] for r in doc["ranks"]] == list(range(8))
    assert {r["rank_source"] for r in doc["ranks"]} == {"distributedInfo"}
    assert doc["alignment"]["method"] == "annotation name"  # ProfilerStep#10 on every rank
    for row, summary in zip(doc["ranks"], doc["summaries"], strict=True):
        count, busy = _independent_busy(Path(row["path"]))
        assert summary["trace"]["kernels"] == count
        assert row["busy"] == pytest.approx(busy, rel=DOC_REL)
    assert doc["straggler"] is not None and doc["skew"]["n"] == 1
    # the straggler is the rank the others wait for: its collective wait is the smallest;
    # the rank with the most compute is another one, and the document says so
    s = doc["straggler"]
    waits = {r["rank"]: r["collective_wait_p50_ns"] for r in doc["ranks"]}
    assert waits[s["rank"]] == min(waits.values())
    compute = {r["rank"]: r["compute_p50_ns"] for r in doc["ranks"]}
    assert s["slowest_compute_rank"] == max(compute, key=compute.__getitem__)
    assert s["agrees"] is (s["rank"] == s["slowest_compute_rank"])
    if not s["agrees"]:
        assert any(
            w.startswith(f"straggler: rank {s['rank']} waits least") for w in doc["warnings"]
        )
    assert tv.TraceviewError  # the public error base is what RunError derives from
    assert issubclass(RunError, tv.TraceviewError)


@pytest.mark.slow
def test_past_8_ranks_the_heartbeat_is_a_band_with_the_straggler(tmp_path: Path) -> None:
    from traceview.render.run_chart import run_heartbeat_data, run_heartbeat_figure

    build(RankRun(ranks=10, slow_rank=7, slow_factor=1.3, steps=8), tmp_path)
    run = summarize_run([str(tmp_path)])
    data = run_heartbeat_data(run)
    assert data.band is not None and data.straggler is not None and data.straggler[0] == 7
    x, med, lo, hi = data.band
    assert x.size == 8 and bool(np.all(lo[1:] <= med[1:])) and bool(np.all(med[1:] <= hi[1:]))
    fig = run_heartbeat_figure(data)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels[0] == "min–max of ranks" and labels[1] == "median of ranks"
    assert labels[2].startswith("rank 7 (straggler") and len(labels) == 3


def _truncated_run(run: Path) -> tuple[int, int]:
    """A run of three ranks: rank 0 cut in half (an ESC byte in its name, printed
    escaped), rank 1 cut in half inside its gzip stream, rank 2 whole. Returns the
    planted cuts of ranks 0 and 1."""
    run.mkdir()
    cut = cut_in_half(run / "rank0-\x1b[31m.json.gz")
    cut_gz = cut_in_half(run / "rank1.json.gz", gzip_bytes=True)
    shutil.copy(GENERATED / "hybrid_chunked.json.gz", run / "rank2.json.gz")
    return cut, cut_gz


def _said_once_and_marked(stdout: str | bytes, stderr: bytes, cuts: tuple[int, int]) -> None:
    rows = {row["rank"]: row for row in json.loads(stdout)["ranks"]}
    assert (rows[0]["truncated"], rows[0]["truncated_at_byte"]) == (True, cuts[0])
    assert (rows[1]["truncated"], rows[1]["truncated_at_byte"]) == (True, cuts[1])
    assert (rows[2]["truncated"], rows[2]["truncated_at_byte"]) == (False, None)
    assert b"\x1b" not in stderr  # a worker prints nothing raw; the command escapes
    assert stderr.count(f"truncated inside an event after byte {cuts[0]:,} ".encode()) == 1
    assert stderr.count(f"after byte {cuts[1]:,} (its gzip stream ends early)".encode()) == 1
    assert b"rank0-\\x1b[31m.json.gz: truncated" in stderr


@pytest.mark.slow
def test_a_truncated_rank_is_said_once_and_marked_in_its_row(tmp_path: Path) -> None:
    """Issue 32: a run's truncated trace was said nowhere (the loader's warning is ignored
    under the command's filter). The command says it once per trace, escaped, the
    rank's row carries the planted cut, and with --strict the run fails on it."""
    cuts = _truncated_run(tmp_path / "run")
    r = CliRunner().invoke(cli, ["summarize", str(tmp_path / "run"), "--json", "-j", "1"])
    assert r.exit_code == 0, r.stderr
    _said_once_and_marked(r.stdout, r.stderr_bytes, cuts)
    strict = CliRunner().invoke(cli, ["summarize", str(tmp_path / "run"), "--strict", "-j", "1"])
    assert strict.exit_code == 2 and "Traceback" not in strict.stderr
    assert strict.stderr.startswith("Error: ") and "truncated" in strict.stderr


@pytest.mark.slow
def test_a_truncated_rank_read_by_a_pool_worker_is_said_once(tmp_path: Path) -> None:
    """The same through the process pool: a worker takes the command's warning filters
    (8c39115), so the warning travels back with the rank and the command says it."""
    cuts = _truncated_run(tmp_path / "run")
    cmd = [sys.executable, "-m", "traceview", "summarize", str(tmp_path / "run"), "--json"]
    r = subprocess.run([*cmd, "-j", "3"], cwd=ROOT, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    _said_once_and_marked(r.stdout, r.stderr, cuts)


def test_the_rank_tables_headers_are_never_cut(planted: tuple[Path, dict, RankRun]) -> None:
    """At 76 columns the headers read ``ste…`` and ``dep. id…`` (the 8-rank DLRM run at 80)."""
    import io

    from rich.console import Console

    from traceview.render.run_table import render_run

    buf = io.StringIO()
    doc = summarize_run([str(planted[0])], RunOptions(jobs=1)).to_dict()
    render_run(doc, Console(file=buf, width=76, highlight=False))
    header = next(ln for ln in buf.getvalue().splitlines() if "rank" in ln and "steps" in ln)
    for name in ("cadence", "busy", "compute", "coll.", "coll. wait", "dep. idle"):
        assert name in header, header
    assert "…" not in header


@pytest.mark.parametrize("width", [80, 66])
def test_the_rank_tables_values_are_never_cut(
    planted: tuple[Path, dict, RankRun], width: int
) -> None:
    """Issue 49: at 80 columns, with every figure at its widest, the table cut a value
    (``999.99 m…``) to keep its headers whole. A value keeps its width; a two-word header
    may take two lines instead."""
    import io

    from rich.console import Console

    from traceview.render.run_table import render_run

    doc = summarize_run([str(planted[0])], RunOptions(jobs=1)).to_dict()
    wide = 999_990_000  # 999.99 ms: fmt_ns's widest
    for r in doc["ranks"]:
        r["rank"] = 1000 + (r["rank"] or 0)
        r["steps"] = 123_456
        r["busy"] = 1.0
        for key in ("cadence_p50_ns", "compute_p50_ns", "idle_dependency_p50_ns"):
            r[key] = wide  # type: ignore[literal-required]
        r["collective_ns_per_step"] = wide
        r["collective_wait_p50_ns"] = wide
    buf = io.StringIO()
    render_run(doc, Console(file=buf, width=width, highlight=False))
    shown = buf.getvalue()
    table = shown.split("cadence: median step interval")[0]
    assert "…" not in table, table
    if width < 80:  # narrower than the widest row: a value wraps, never loses a character
        assert table.count("999.99") == 5 * len(doc["ranks"]) == table.count("ms")
        assert table.count("123,456") == table.count("100.0%") == len(doc["ranks"])
        return
    for r in doc["ranks"]:
        row = next(ln for ln in table.splitlines() if ln.strip().startswith(str(r["rank"])))
        assert (
            row.split()
            == [str(r["rank"]), "123,456", "999.99", "ms", "100.0%"]
            + [
                "999.99",
                "ms",
            ]
            * 4
        ), row
    heads = " ".join(table.split())
    for word in ("rank", "steps", "cadence", "busy", "compute", "coll.", "wait", "dep.", "idle"):
        assert f" {word} " in f" {heads} "


@pytest.mark.slow  # two spawned workers that fail to start: about 3 s
def test_a_script_without_a_main_guard_gets_one_clear_error(tmp_path: Path) -> None:
    """A newcomer's finding: a script that asks for jobs=2 without ``if __name__ ==
    "__main__":`` ended in the pool's BrokenProcessPool traceback (each spawned worker runs
    the script again, which multiprocessing refuses). It is now a TraceviewError that says
    what to do."""
    for rank, name in enumerate(("dense_sglang", "hybrid_chunked")):
        shutil.copy(GENERATED / f"{name}.json.gz", tmp_path / f"rank{rank}.json.gz")
    script = tmp_path / "script.py"
    script.write_text(
        "import traceview as tv\n"
        "try:\n"
        "    tv.summarize_run([r'" + str(tmp_path) + "'], tv.RunOptions(jobs=2))\n"
        "except tv.TraceviewError as exc:\n"
        "    print('ERROR', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    said = [line for line in done.stdout.splitlines() if line.startswith("ERROR")]
    assert said and "a worker process ended abruptly" in said[0], done.stdout + done.stderr
    assert 'if __name__ == "__main__":' in said[0]


@pytest.mark.slow  # three runs of two ranks: about 3 s
def test_ranks_that_tie_in_every_step_have_no_straggler(tmp_path: Path) -> None:
    """A hostile probe's finding: two copies of one trace (compute equal in every step)
    named rank 0 the straggler, "slowest by compute in 50 of 50 steps, 0 ns over": a tie
    went to the first rank. A step counts for the rank whose compute is the largest alone;
    with one copy's step made slower, that rank is the straggler, in that step alone."""
    for rank in (0, 1):
        shutil.copy(GENERATED / "hybrid_chunked.json.gz", tmp_path / f"rank{rank}.json.gz")
    run = summarize_run([str(tmp_path)])
    doc = run.to_dict()
    assert doc["skew"]["max_ns"] == 0 and doc["straggler"] is None
    said = CliRunner().invoke(cli, ["summarize", str(tmp_path), "-j", "1"])
    assert said.exit_code == 0 and "the ranks tie in every step" in said.stdout
    # rank 1: one kernel of its step 3 lasts 1 µs longer (its compute, alone the largest)
    text = json.loads(gzip.decompress((tmp_path / "rank1.json.gz").read_bytes()))
    steps = run.ranks[1].summary.steps  # type: ignore[union-attr]
    start, end = (int(steps["start_ns"][3]), int(steps["end_ns"][3]))
    kernel = next(
        e
        for e in text["traceEvents"]
        if e.get("cat") == "kernel" and start <= round(e["ts"] * 1000) < end - 10_000
    )
    kernel["dur"] += 1.0
    (tmp_path / "rank1.json.gz").write_bytes(gzip.compress(json.dumps(text).encode()))
    s = summarize_run([str(tmp_path)]).to_dict()["straggler"]
    assert s is not None and (s["rank"], s["steps_slowest"]) == (1, 1)


def test_a_rank_whose_trace_is_missing_is_said(
    planted: tuple[Path, dict, RankRun], tmp_path: Path
) -> None:
    """An unseen-trace probe's finding: three of a four-rank run's traces (one failed to
    flush) read "no straggler, 0 ns of collective wait" and no warning, while every present
    rank waited in its collectives for the absent one. The traces' own world_size says how
    many ranks there were: the run names the absent rank; the whole run does not."""
    out, truth, run = planted
    files = sorted(out.glob("*.json.gz"))
    assert len(files) == run.ranks == 4
    absent = next(f for f in files if "_rank2." in f.name)
    three = [str(f) for f in files if f != absent]
    said = summarize_run(three, RunOptions(jobs=1)).warnings
    assert any("4 ranks (distributedInfo.world_size), and 3 are analysed" in w for w in said)
    assert any("absent: rank 2)" in w for w in said), said
    whole = summarize_run([str(out)], RunOptions(jobs=1)).warnings
    assert not any("world_size" in w for w in whole)


def test_a_world_size_of_a_billion_is_said_in_bounded_memory() -> None:
    """A hostile probe's finding: ``distributedInfo.world_size = 10**9`` made the run list
    every absent rank (24 GB). Two ranks of a billion, in a process capped at 2 GiB: the
    warning counts the absent ranks and names the first eight."""
    import resource

    code = (
        "from traceview.analysis.documents.run import RankResult, _absent_ranks\n"
        "ranks = [RankResult(path=f'r{k}', rank=k, world_size=10**9) for k in (0, 5)]\n"
        "print(_absent_ranks(ranks, 2))\n"
    )

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the run had 1,000,000,000 ranks (distributedInfo.world_size), and 2 are" in done.stdout
    assert "(absent: rank 1, 2, 3, 4, 6, 7, 8, 9, … (999,999,998 in all))" in done.stdout


def test_data_parallel_replicas_and_ranks_without_collectives_are_said(tmp_path: Path) -> None:
    """An unseen-trace probe's finding: two SGLang data-parallel replicas (``-TP-0-DP-0``,
    ``-DP-1``) were compared step by step as if they ran in lockstep: "straggler rank 0 …
    slowest in 22 of 40 steps" with no word that replicas never wait for each other. Each
    is said; a tensor-parallel run with collectives says neither."""
    for dp in (0, 1):
        name = f"1733-TP-0-DP-{dp}.trace.json.gz"
        shutil.copy(GENERATED / "dense_sglang.json.gz", tmp_path / name)
    said = summarize_run([str(tmp_path)], RunOptions(jobs=1)).warnings
    assert any("2 data-parallel replicas (their -DP- parts repeat" in w for w in said), said
    alone = tmp_path / "plain"
    alone.mkdir()
    for rank in (0, 1):  # a fixture without communication kernels
        shutil.copy(GENERATED / "hybrid_chunked.json.gz", alone / f"rank{rank}.json.gz")
    said = summarize_run([str(alone)], RunOptions(jobs=1)).warnings
    assert any("no rank runs a communication kernel" in w for w in said), said
    # a review's finding: SGLang's DP attention names ranks -TP-{global}-DP-{group}, each
    # place once: ranks that share their collectives, not replicas
    attention = tmp_path / "dp_attention"
    attention.mkdir()
    for r in (0, 1):
        name = f"1733-TP-{r}-DP-{r}-PP-0.trace.json.gz"
        shutil.copy(GENERATED / "dense_sglang.json.gz", attention / name)
    said = summarize_run([str(attention)], RunOptions(jobs=1)).warnings
    assert not any("replicas" in w for w in said), said


def test_a_tensor_parallel_run_is_not_said_to_be_replicas(
    planted: tuple[Path, dict, RankRun],
) -> None:
    out, _, _ = planted
    said = summarize_run([str(out)], RunOptions(jobs=1)).warnings
    assert not any("replicas" in w or "no rank runs a communication" in w for w in said), said


def test_a_run_diffs_workload_line_names_each_ranks_steps(tmp_path: Path) -> None:
    """Issue 49: the line read "B did 0.95× the steps, 1.00× the steps …": each rank's
    step count was worded as the run's. Rank 0 of B ran fewer steps than the others."""
    a, b, short = tmp_path / "a", tmp_path / "b", tmp_path / "short"
    build(RankRun(ranks=3, slow_rank=1, steps=12), a)
    build(RankRun(ranks=3, slow_rank=1, steps=12), b)
    build(RankRun(ranks=3, slow_rank=1, steps=9), short)
    rank0 = RankRun().file_pattern.format(r=0)
    shutil.copy(short / rank0, b / rank0)  # B's rank 0 ran 9 steps, its others 12
    runs = [summarize_run([str(x)], RunOptions(jobs=1)) for x in (a, b)]
    steps = [{r["rank"]: r["steps"] for r in run.to_dict()["ranks"]} for run in runs]
    assert steps == [{0: 12, 1: 12, 2: 12}, {0: 9, 1: 12, 2: 12}]
    aligned = [run.to_dict()["alignment"]["steps"] for run in runs]
    d = tv.diff(*runs)
    assert d.workload == (
        f"B did 1.00× the ranks, {aligned[1] / aligned[0]:.2f}× the aligned steps, "
        f"{9 / 12:.2f}× the steps on rank 0 and 1.00× on ranks 1 and 2"
    )
    assert tv.diff(runs[0], runs[0]).workload == (
        "B did the same work as A (ranks, aligned steps, each rank's steps within ±5%)"
    )


def test_check_bounds_every_row_diff_judges_a_skew_from_zero_included(tmp_path: Path) -> None:
    """Issue 49: `check --max-regression` bounded only the rows whose A was above 0 and
    whose lower value is better: a compute skew from 0 (balanced ranks) to 14 µs passed,
    and diff called the way back, 14 µs to 0 ns, "gone" while B has a figure. Planted:
    ranks of equal speed (skew 0 in every step) against a slowed rank."""
    even, slow = tmp_path / "even", tmp_path / "slow"
    _, t_even = build(RankRun(ranks=2, slow_rank=1, slow_factor=1.0, steps=12), even)
    _, t_slow = build(RankRun(ranks=2, slow_rank=1, slow_factor=1.25, steps=12), slow)
    assert set(t_even["skew"]) == {0} and min(t_slow["skew"]) > 0
    a, b = (summarize_run([str(x)], RunOptions(jobs=1)) for x in (even, slow))
    worse = tv.diff(a, b)
    skew = worse.rows.filter(pl.col("metric").str.starts_with("compute skew p50")).row(
        0, named=True
    )
    assert (skew["a"], skew["b"]) == (0, int(np.rint(np.median(t_slow["skew"]))))
    assert (skew["ratio"], skew["verdict"]) == (float("inf"), "worse")
    result = tv.check(b, tv.Bounds(baseline=a, max_regression=0.1))
    assert not result.ok
    failed = [r["check"] for r in result.failed]
    assert "headline: compute skew p50 (n=12) <= baseline × 1.10" in failed
    # every judged row has its check, and only those
    assert len(result.rows) == worse.judged.height
    back = tv.diff(b, a).rows.filter(pl.col("metric").str.starts_with("compute skew p50"))
    assert back.row(0, named=True)["verdict"] == "better"  # B has a figure: 0 ns
    assert back.row(0, named=True)["ratio"] == 0
