"""diff and check on fixtures with known differences: chunked vs monolithic prefill, and the
re-prefill bug vs its healthy twin."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import GENERATED, truth

import traceview as tv
from traceview.analysis.documents.checks import Bounds, CheckError, check, lookup, parse_value
from traceview.analysis.documents.compare import diff
from traceview.cli import cli


@pytest.fixture(scope="module")
def s() -> dict[str, tv.Summary]:
    return {
        n: tv.summarize(tv.load(GENERATED / f"{n}.json.gz"))
        for n in ("hybrid_chunked", "hybrid_refeed", "hybrid_monolithic")
    }


def _row(d, section: str, metric: str) -> dict:  # type: ignore[no-untyped-def]
    return next(
        r
        for r in d.rows.iter_rows(named=True)
        if r["section"] == section and r["metric"].startswith(metric)
    )


def _mixed_cadence(name: str) -> list[int]:
    t = truth(name)
    return [p["cadence"] for p in t["phases"] if p["kind"] == "mixed"][0]


def test_refeed_bug_shows_in_prompt_work_and_cadence(s: dict[str, tv.Summary]) -> None:
    d = diff(s["hybrid_chunked"], s["hybrid_refeed"])
    healthy, bug = truth("hybrid_chunked"), truth("hybrid_refeed")
    ph = [x["prefill_ns"] for x in healthy["steps"]]
    pb = [x["prefill_ns"] for x in bug["steps"]]
    work = _row(d, "work", "prefill ns total")
    assert (work["a"], work["b"]) == (sum(ph), sum(pb))
    assert work["ratio"] == pytest.approx(sum(pb) / sum(ph))
    assert work["verdict"] is None and work["role"] == "workload"  # a total: never judged
    per_step = _row(d, "work", "prefill ns per mixed step")
    mixed_h = [x["prefill_ns"] for x in healthy["steps"] if x["kind"] == "mixed"]
    mixed_b = [x["prefill_ns"] for x in bug["steps"] if x["kind"] == "mixed"]
    assert per_step["a"] == pytest.approx(np.mean(mixed_h))
    assert per_step["b"] == pytest.approx(np.mean(mixed_b))
    assert per_step["verdict"] == "worse"
    growth = _row(d, "headline", "prefill growth (largest)")
    assert growth["verdict"] == "worse" and growth["b"] > 5
    cad = _row(d, "cadence", "mixed p50")
    assert cad["a"] == _mixed_cadence("hybrid_chunked")["p50_ns"]
    assert cad["b"] == _mixed_cadence("hybrid_refeed")["p50_ns"]
    assert cad["ratio"] == pytest.approx(cad["b"] / cad["a"]) and cad["verdict"] == "worse"
    # launches are the same: the bug is more work per launch, not more launches
    launches = _row(d, "work", "prefill kernels per mixed step")
    assert launches["ratio"] == 1.0 and launches["verdict"] == "same"
    decode = _row(d, "cadence", "decode p50")
    assert decode["verdict"] == "same"
    # biggest changes first, among the rates
    rates = d.rows.filter(pl.col("role") == "rate")
    order = [abs(np.log(r)) for r in rates["ratio"].drop_nulls().to_list() if r > 0]
    finite = [x for x in order if np.isfinite(x)]
    assert finite == sorted(finite, reverse=True)


def test_workload_is_shown_never_judged_and_the_headline_is_decode_cadence(
    s: dict[str, tv.Summary],
) -> None:
    """Issue 21: chunked B did more steps and more prompt tokens than monolithic A. No total
    gets a verdict; the workload change is one line; the headline is the cadence a decoding
    request experiences (between consecutive steps with decode work), longer by the planted
    ratio where the prompt is chunked into the decode stream, shown unjudged: it pools
    decode and mixed steps, so it moves with their mix (issue 49)."""
    d = diff(s["hybrid_monolithic"], s["hybrid_chunked"])
    mono, chunked = truth("hybrid_monolithic"), truth("hybrid_chunked")
    workload = d.rows.filter(pl.col("role") == "workload")
    assert workload.height >= 8 and workload["verdict"].null_count() == workload.height
    assert set(workload["why"]) == {"workload"}
    # every row is judged or says why not, never both
    assert (d.rows["verdict"].is_null() == d.rows["why"].is_not_null()).all()
    names = set(workload["metric"].to_list())
    assert {"steps", "prompt tokens total", "prefill ns total", "gemm time"} <= names
    steps = chunked["step_count"] / mono["step_count"]
    tokens = chunked["prompt_tokens"] / mono["prompt_tokens"]
    assert d.workload == f"B did {steps:.2f}× the steps, {tokens:.2f}× the prompt tokens and " + (
        f"{chunked['decode_tokens'] / mono['decode_tokens']:.2f}× the decode tokens"
    )
    heads = d.rows.filter(pl.col("role") == "headline")["metric"].to_list()
    assert heads[0].startswith("token cadence p50")
    assert heads[2].startswith("token cadence p99")
    for q in ("p50", "p90", "p99"):
        row = _row(d, "headline", f"token cadence {q}")
        assert row["field"] == f"steps.token_cadence.{q}_ns"
        planted = chunked["token_cadence"][f"{q}_ns"] / mono["token_cadence"][f"{q}_ns"]
        assert (row["a"], row["b"]) == (
            mono["token_cadence"][f"{q}_ns"],
            chunked["token_cadence"][f"{q}_ns"],
        )
        assert row["ratio"] == pytest.approx(planted, rel=1e-12)
        assert (row["verdict"], row["why"]) == (None, "pooled over step kinds")
    # the chunked prompt stretches every tenth interval a decoding request sees: the p90
    p90 = _row(d, "headline", "token cadence p90")
    assert p90["ratio"] > 3


@pytest.mark.slow
def test_identical_inputs_say_nothing_changed_in_one_line(s: dict[str, tv.Summary]) -> None:
    path = str(GENERATED / "hybrid_chunked.json.gz")
    assert diff(s["hybrid_chunked"], s["hybrid_chunked"]).unchanged
    assert not diff(s["hybrid_chunked"], s["hybrid_refeed"]).unchanged
    for fmt in ([], ["--format", "markdown"]):
        out = CliRunner().invoke(cli, ["diff", path, path, *fmt], terminal_width=200)
        assert out.exit_code == 0, out.stderr
        said = [x for x in out.stdout.splitlines() if x.strip()]
        assert said[-1].endswith(
            "nothing changed beyond noise (every figure, the work and the kernels within ±5%)"
        )
        assert len(said) == (1 if not fmt else 2)  # markdown: its title line, then the line


def test_chunked_vs_monolithic(s: dict[str, tv.Summary]) -> None:
    d = diff(s["hybrid_monolithic"], s["hybrid_chunked"])
    mono, chunked = truth("hybrid_monolithic"), truth("hybrid_chunked")
    steps = _row(d, "steps", "mixed steps")
    assert (steps["a"], steps["b"]) == (1, 10)
    gaps = {g["population"]: g for g in mono["decode_gaps"]}
    gc = {g["population"]: g for g in chunked["decode_gaps"]}
    n = (gaps["mixed"]["n"], gc["mixed"]["n"])
    assert min(n) >= 2  # enough for a p50
    for q in ("p50", "p99"):
        r = _row(d, "decode gaps", f"mixed {q}")
        assert (r["a"], r["b"]) == (gaps["mixed"][f"{q}_ns"], gc["mixed"][f"{q}_ns"])
        if q == "p50" or min(n) >= 100:
            assert r["verdict"] == "better"
        else:  # issue 49: a p99 on fewer than 100 gaps is nearly their maximum
            assert (r["verdict"], r["why"]) == (None, "n < 100 for a p99")
    new = _row(d, "cadence", "mixed p50")  # one monolithic step has no cadence; now it does
    assert new["a"] is None and "(n 0 → 9)" in new["metric"]
    assert (new["verdict"], new["why"]) == (None, "n < 2 for a p50")


@pytest.mark.slow
def test_diff_outputs(s: dict[str, tv.Summary], tmp_path: Path) -> None:
    a, b = (str(GENERATED / f"{n}.json.gz") for n in ("hybrid_chunked", "hybrid_refeed"))
    md = CliRunner().invoke(cli, ["diff", a, b, "--format", "markdown"])
    assert md.exit_code == 0, md.stderr
    lines = md.stdout.splitlines()
    assert lines[2].startswith("- B did 1.00× the steps, ")  # the same steps, more tokens
    assert "| section | metric | A | B | B/A | verdict |" in lines
    assert "🔴 worse" in md.stdout
    js = CliRunner().invoke(cli, ["diff", a, b, "--json"])
    doc = json.loads(js.stdout)
    assert doc["schema"] == "traceview.diff/1" and doc["rows"][0]["role"] == "headline"
    assert doc["unchanged"] is False and doc["workload"].startswith("B did")
    table = CliRunner().invoke(cli, ["diff", a, b])
    assert table.exit_code == 0 and "kernels that changed most" in table.stdout
    assert diff(s["hybrid_chunked"], s["hybrid_chunked"]).rows.filter(~tv_col_same()).height == 0


def tv_col_same():  # type: ignore[no-untyped-def]
    import polars as pl

    return pl.col("verdict").is_in(["same", "n/a"])


def test_prefill_growth_catches_the_bug_and_passes_the_twin(s: dict[str, tv.Summary]) -> None:
    bug = check(s["hybrid_refeed"], Bounds(prefill_growth=1.5))
    ok = check(s["hybrid_chunked"], Bounds(prefill_growth=1.5))
    assert not bug.ok and ok.ok
    # the engine's own token counts are the measure: the bug re-feeds 2048·(c+1) tokens
    mixed = [x for x in truth("hybrid_refeed")["steps"] if x["kind"] == "mixed"]
    assert [x["context_tokens"] for x in mixed] == [2048 * (c + 1) for c in range(len(mixed))]
    assert s["hybrid_refeed"].to_dict()["work"]["prefill_growth"][0]["measure"] == "prompt_tokens"
    assert bug.rows[0]["value"] == pytest.approx(_line_growth([x["context_tokens"] for x in mixed]))
    ok_tokens = [x["context_tokens"] for x in truth("hybrid_chunked")["steps"] if x["chunk"] >= 0]
    assert ok.rows[0]["value"] == pytest.approx(_line_growth(ok_tokens)) == 1.0
    for name in ("hybrid_chunked", "hybrid_refeed"):
        result = CliRunner().invoke(
            cli, ["check", str(GENERATED / f"{name}.json.gz"), "--prefill-growth", "1.5"]
        )
        assert result.exit_code == (1 if name == "hybrid_refeed" else 0), result.stderr
    assert (
        "FAILED"
        in CliRunner()
        .invoke(cli, ["check", str(GENERATED / "hybrid_refeed.json.gz"), "--prefill-growth", "1.5"])
        .stdout
    )


def _line_growth(y: list[int]) -> float:
    slope, intercept = np.polyfit(np.arange(len(y)), y, 1)
    return float((intercept + slope * (len(y) - 1)) / intercept)


def test_prefill_growth_falls_back_to_kernel_time_without_token_counts(tmp_path: Path) -> None:
    """Without annotations, prompt work is the prefill-only kernel time per step."""
    import gzip

    doc = json.loads(gzip.decompress((GENERATED / "hybrid_refeed.json.gz").read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "user_annotation"]
    path = tmp_path / "refeed_bare.json"
    path.write_text(json.dumps(doc))
    growth = tv.summarize(tv.load(path)).to_dict()["work"]["prefill_growth"]
    pb = [x["prefill_ns"] for x in truth("hybrid_refeed")["steps"] if x["kind"] == "mixed"]
    assert growth[0]["measure"] == "prefill_ns"
    assert growth[0]["growth"] == pytest.approx(_line_growth(pb))


def test_check_bounds_on_token_counts(s: dict[str, tv.Summary]) -> None:
    t = truth("hybrid_refeed")
    path = str(GENERATED / "hybrid_refeed.json.gz")
    total = sum(x["context_tokens"] for x in t["steps"])
    assert total == t["prompt_tokens"] == 2048 * sum(range(1, 11))
    for bound, code in ((total, 0), (total - 1, 1)):
        result = CliRunner().invoke(cli, ["check", path, "--max", f"work.prompt_tokens={bound}"])
        assert result.exit_code == code, result.stdout + result.stderr
    mixed_tokens = CliRunner().invoke(
        cli, ["check", path, "--min", f"work.phases.mixed.prompt_tokens={total}"]
    )
    assert mixed_tokens.exit_code == 0, mixed_tokens.stdout + mixed_tokens.stderr
    d = diff(s["hybrid_chunked"], s["hybrid_refeed"])
    row = _row(d, "work", "prompt tokens total")
    assert (row["a"], row["b"]) == (truth("hybrid_chunked")["prompt_tokens"], total)
    assert row["verdict"] is None  # a total: shown as workload, never judged
    assert f"{total / truth('hybrid_chunked')['prompt_tokens']:.2f}× the prompt tokens" in (
        d.workload
    )


def test_bounds_exit_codes_exactly_where_they_should(s: dict[str, tv.Summary]) -> None:
    t = truth("hybrid_chunked")
    p99 = next(g for g in t["decode_gaps"] if g["population"] == "decode")["p99_ns"]
    path = str(GENERATED / "hybrid_chunked.json.gz")
    above = f"{(p99 + 1000) / 1e3}us"
    below = f"{(p99 - 1000) / 1e3}us"
    assert (
        CliRunner()
        .invoke(cli, ["check", path, "--max", f"decode_gaps.decode.p99_ns={above}"])
        .exit_code
        == 0
    )
    fail = CliRunner().invoke(cli, ["check", path, "--max", f"decode_gaps.decode.p99_ns={below}"])
    assert fail.exit_code == 1 and "1 of 1 check(s) failed" in fail.stderr
    busy = t["busy"]["fraction"]
    assert (
        CliRunner()
        .invoke(cli, ["check", path, "--min", f"busy.fraction={busy * 100 - 0.1}%"])
        .exit_code
        == 0
    )
    assert (
        CliRunner().invoke(cli, ["check", path, "--min", f"busy.fraction={busy + 0.001}"]).exit_code
        == 1
    )
    mixed = _mixed_cadence("hybrid_chunked")["p50_ns"]
    ok = CliRunner().invoke(
        cli, ["check", path, "--max", f"steps.phases.mixed.cadence_p50_ns={mixed}ns", "--json"]
    )
    assert ok.exit_code == 0 and json.loads(ok.stdout)["checks"][0]["value"] == mixed


@pytest.mark.slow
def test_baseline_regression(s: dict[str, tv.Summary]) -> None:
    a, b = (str(GENERATED / f"{n}.json.gz") for n in ("hybrid_chunked", "hybrid_refeed"))
    same = CliRunner().invoke(cli, ["check", a, "--baseline", a, "--max-regression", "1%"])
    assert same.exit_code == 0
    worse = CliRunner().invoke(cli, ["check", b, "--baseline", a, "--max-regression", "10%"])
    assert worse.exit_code == 1
    assert "cadence: mixed p50" in worse.stdout


def test_checks_file(tmp_path: Path) -> None:
    checks = tmp_path / "checks.toml"
    checks.write_text(
        '[max]\n"decode_gaps.decode.p99_ns" = "5ms"\n'
        '"families.linear_attention.prefill.total_ns" = "50ms"\n'
        '[min]\n"busy.fraction" = 0.8\n[options]\nprefill_growth = 1.5\n'
    )
    ok = CliRunner().invoke(
        cli, ["check", str(GENERATED / "hybrid_chunked.json.gz"), "--checks", str(checks)]
    )
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert "families.linear_attention.prefill.total_ns <= 50ms" in ok.stdout
    bad = CliRunner().invoke(
        cli, ["check", str(GENERATED / "hybrid_refeed.json.gz"), "--checks", str(checks)]
    )
    assert bad.exit_code == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max", "decode_gaps.nope.p99_ns=5ms"], "not a figure of the summary"),
        (["--max", "decode_gaps.decode.p99_ns=soon"], "cannot read 'soon'"),
        (["--max", "busy"], "expected KEY=VALUE"),
        (["--max", "busy=1"], "names a section, not a figure"),
        (["--max-regression", "5%"], "--max-regression needs --baseline"),
        ([], "nothing to check"),
    ],
)
def test_bad_checks_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["check", str(GENERATED / "dense_sglang.json.gz"), *args])
    assert result.exit_code == 2
    assert message in result.stderr or message in result.output


def test_lookup_and_units(s: dict[str, tv.Summary]) -> None:
    doc = s["hybrid_chunked"].to_dict()
    hits = lookup(doc, "steps.phases.decode.steps")
    assert [v for _, v in hits] == [24, 16]  # both decode phases are checked
    assert lookup(doc, "families.linear_attention.decode.count")[0][1] == 600
    assert parse_value("5ms") == 5e6 and parse_value("250us") == 250e3
    assert parse_value("90%") == 0.9 and parse_value("1.5") == 1.5
    with pytest.raises(CheckError):
        parse_value("fast")


@pytest.mark.parametrize("pair", [("hybrid_monolithic", "hybrid_chunked")], ids=str)
def test_every_row_with_a_field_shows_the_documents_value_there(
    s: dict[str, tv.Summary], pair: tuple[str, str]
) -> None:
    """Issue 33: one name, one figure. A diff row that names its ``field`` shows, as A and
    B, the values at that path of the two summary documents (read with check's path
    reader), and every headline row names its field; the headline's cadence is the
    token cadence (decode + mixed steps), labelled so, never the run's and dataset's
    ``decode_cadence`` (decode phases only)."""
    from traceview.analysis.documents.checks import lookup

    a, b = s[pair[0]], s[pair[1]]
    d = diff(a, b)
    rows = d.rows.iter_rows(named=True)
    headline = [r for r in d.rows.iter_rows(named=True) if r["role"] == "headline"]
    # the largest prefill growth is no one path (a hostile probe: its "(max)" field was
    # refused by check, which bounds it with --prefill-growth)
    growth_row = [r for r in headline if r["metric"].startswith("prefill growth (largest)")]
    assert len(growth_row) == 1 and growth_row[0]["field"] is None
    assert all(r["field"] for r in headline if r not in growth_row)
    checked = 0
    for r in rows:
        if r["field"] is None:
            continue
        for side, summary in (("a", a), ("b", b)):
            found = lookup(summary.to_dict(), r["field"])
            assert len(found) == 1, r["field"]
            value = found[0][1]
            assert r[side] == (None if value is None else pytest.approx(float(value))), r
        checked += 1
    assert checked >= 20
    growth = _row(d, "headline", "prefill growth (largest)")
    largest = max(g["growth"] for g in b.to_dict()["work"]["prefill_growth"])
    assert growth["b"] == pytest.approx(largest)
    assert not any("decode cadence" in r for r in d.rows["metric"].to_list())


def test_a_bound_given_twice_is_refused_not_half_checked(tmp_path: Path) -> None:
    """`--max busy.fraction=0.5 --max busy.fraction=0.9` once kept only the last bound and
    passed at a busy fraction above 0.5: a bound given twice is one line, exit 2."""
    path = str(GENERATED / "hybrid_chunked.json.gz")
    busy = truth("hybrid_chunked")["busy"]["fraction"]
    assert 0.5 < busy < 0.9  # the first bound fails, the second holds
    args = ["check", path, "--max", "busy.fraction=0.5", "--max", "busy.fraction=0.9"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stdout + r.stderr
    assert "busy.fraction" in r.stderr and "twice" in r.stderr
    # the same key in a checks file and on the command line
    checks = tmp_path / "checks.toml"
    checks.write_text('[max]\n"busy.fraction" = 0.5\n')
    r = CliRunner().invoke(
        cli, ["check", path, "--checks", str(checks), "--max", "busy.fraction=0.9"]
    )
    assert r.exit_code == 2 and "busy.fraction" in r.stderr and "checks file" in r.stderr
    # a lower and an upper bound on one figure are two bounds, both checked
    r = CliRunner().invoke(
        cli, ["check", path, "--min", "busy.fraction=0.5", "--max", "busy.fraction=0.9", "--json"]
    )
    assert r.exit_code == 0 and len(json.loads(r.stdout)["checks"]) == 2


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "0.5"])
def test_prefill_growth_must_be_a_finite_number_of_at_least_one(tmp_path: Path, value: str) -> None:
    """Growth is last chunk over first (1 is flat): a bound below 1, or nan, bounds
    nothing a user means; it is bad input, never a failed check."""
    path = str(GENERATED / "hybrid_chunked.json.gz")
    r = CliRunner().invoke(cli, ["check", path, "--prefill-growth", value])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stdout + r.stderr
    assert "--prefill-growth" in r.stderr and "Traceback" not in r.stderr
    checks = tmp_path / "checks.toml"
    checks.write_text(f"[options]\nprefill_growth = {value}\n")
    r = CliRunner().invoke(cli, ["check", path, "--checks", str(checks)])
    assert r.exit_code == 2 and "prefill_growth" in r.stderr and str(checks) in r.stderr
    with pytest.raises(CheckError, match="prefill_growth"):
        check(tv.summarize(tv.load(path)), Bounds(prefill_growth=float(value)))


def test_prefill_growth_of_one_is_a_flat_prefill() -> None:
    path = str(GENERATED / "hybrid_chunked.json.gz")
    assert CliRunner().invoke(cli, ["check", path, "--prefill-growth", "1"]).exit_code == 0


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_bound_that_is_not_finite_is_bad_input(tmp_path: Path, value: str) -> None:
    checks = tmp_path / "checks.toml"
    checks.write_text(f'[max]\n"busy.fraction" = {value}\n')
    path = str(GENERATED / "hybrid_chunked.json.gz")
    r = CliRunner().invoke(cli, ["check", path, "--checks", str(checks)])
    assert r.exit_code == 2 and "busy.fraction" in r.stderr and "finite" in r.stderr


def test_a_run_against_a_trace_names_both(tmp_path: Path) -> None:
    """A hostile probe's finding: `diff RUN TRACE` said what diff compares, naming neither
    input; it is said before either is read."""
    run = tmp_path / "run"
    run.mkdir()
    for rank in (0, 1):
        (run / f"rank{rank}.json.gz").write_bytes(b"not read")
    trace = str(GENERATED / "dense_sglang.json.gz")
    done = CliRunner().invoke(cli, ["diff", str(run), trace])
    assert done.exit_code == 2, done.output
    assert done.stderr == (
        "Error: diff compares a trace with a trace, or a run with a run: "
        f"A ({run}) is a run, B ({trace}) a trace\n"
    )


@pytest.mark.slow  # three engine traces built and summarized: about 1.5 s
def test_another_mix_of_steps_is_no_regression_and_slower_kernels_are(tmp_path: Path) -> None:
    """An unseen-trace probe's finding: a capture with more decode steps, every kernel and
    every step kind unchanged, failed `check --baseline --max-regression 10%` on five
    family rows (attention 1.3x "per step", gemm 1.17x "mean kernel"): a family's time over
    all steps, or per kernel, moves with the mix of steps. Planted: the fixture's engine
    with 48 decode steps after the prompt instead of 16 passes at 10%; the same engine with
    every kernel 10% slower fails at 5%, on its families' busy per decode step among
    others."""
    import dataclasses

    from fixtures.engine import SCENARIOS, build

    base = next(sc for sc in SCENARIOS if sc.name == "hybrid_chunked")

    def summary(scenario: object, name: str) -> tv.Summary:
        tb, _ = build(scenario)
        path = tmp_path / f"{name}.json.gz"
        tb.write(str(path))
        return tv.summarize(tv.load(path))

    a = summary(base, "a")
    more = summary(dataclasses.replace(base, decode_after=48), "more")
    slower = summary(dataclasses.replace(base, kernel_scale=1.1), "slower")
    assert more.steps.height > a.steps.height
    assert check(more, Bounds(baseline=a, max_regression=0.1)).ok
    assert check(a, Bounds(baseline=more, max_regression=0.1)).ok  # fewer decode steps
    failed = [r["check"] for r in check(slower, Bounds(baseline=a, max_regression=0.05)).failed]
    assert any(c.startswith("families: decode gemm busy per step") for c in failed), failed
    rows = diff(a, more).rows.filter(pl.col("section") == "families")
    mixed = rows.filter(pl.col("metric").str.contains("time per step|mean kernel"))
    assert mixed["verdict"].null_count() == mixed.height  # shown beside the work, unjudged


def _engine_summaries(
    tmp_path: Path, **plans: dict[str, object]
) -> dict[str, tuple[tv.Summary, dict]]:
    """Each plan's trace, from the fixture engine (hybrid_chunked's scenario with the
    plan's fields replaced): its summary and the truth the plan implies."""
    import dataclasses

    from fixtures.engine import SCENARIOS, build
    from fixtures.truth import truth as planned_truth

    base = next(sc for sc in SCENARIOS if sc.name == "hybrid_chunked")
    out = {}
    for name, fields in plans.items():
        sc = dataclasses.replace(base, name=name, **fields)  # type: ignore[arg-type]
        tb, steps = build(sc)
        path = tb.write(str(tmp_path / f"{name}.json.gz"))
        out[name] = (tv.summarize(tv.load(path)), planned_truth(sc, steps, str(path), 0))
    return out


@pytest.mark.slow  # three engine traces built and summarized: about 2.7 s
def test_a_mix_of_fewer_decode_steps_is_judged_per_kind_and_by_n(tmp_path: Path) -> None:
    """Issue 49: B runs every step kind as A does, with fewer decode steps around the same
    chunked prompt. `check B --baseline A --max-regression 10%` failed on the cadence over
    every step and the token cadence (decode and mixed steps pooled: their p90 moves
    with the share of mixed steps) and on percentiles whose n fell below what they need.
    Now those rows are shown unjudged, saying why; the per-kind rows are judged, and a real
    per-kind slowdown still fails."""
    s = _engine_summaries(
        tmp_path,
        a={"decode_before": 14, "decode_after": 14, "chunks": 4},
        b={"decode_before": 5, "decode_after": 6, "chunks": 4},
        slower={"decode_before": 14, "decode_after": 14, "chunks": 4, "kernel_scale": 1.3},
    )
    (a, ta), (b, tb), (slower, _) = s["a"], s["b"], s["slower"]
    d = diff(a, b)
    # the pooled figures moved with the mix: shown, with their planted values, unjudged
    for section, metric, value in (
        ("headline", "token cadence p90", lambda t: t["token_cadence"]["p90_ns"]),
        ("cadence", "all p90", lambda t: t["cadence"]["p90_ns"]),
        ("decode gaps", "all p99", lambda t: t["decode_gaps"][0]["p99_ns"]),
    ):
        r = _row(d, section, metric)
        assert (r["a"], r["b"]) == (value(ta), value(tb))
        assert (r["verdict"], r["why"]) == (None, "pooled over step kinds")
    assert _row(d, "headline", "token cadence p90")["ratio"] > 1.1
    # a percentile judged only where both populations are big enough for it
    n_a = {g["population"]: g["n"] for g in ta["decode_gaps"]}
    n_b = {g["population"]: g["n"] for g in tb["decode_gaps"]}
    assert n_a["decode"] >= 100 > n_b["decode"] >= 10
    p99 = _row(d, "headline", "decode gap p99 (decode steps)")
    assert (p99["verdict"], p99["why"]) == (None, "n < 100 for a p99")
    assert f"(n {n_a['decode']} → {n_b['decode']})" in p99["metric"]
    assert _row(d, "decode gaps", "decode p90")["verdict"] == "same"
    cad_n = [next(p for p in t["phases"] if p["kind"] == "decode") for t in (ta, tb)]
    assert (
        a.to_dict()["steps"]["cadence_by_kind"]["decode"]["n"]
        >= 10
        > (b.to_dict()["steps"]["cadence_by_kind"]["decode"]["n"])
    ), cad_n
    assert _row(d, "cadence", "decode p90")["why"] == "n < 10 for a p90"
    assert _row(d, "cadence", "decode p50")["verdict"] == "same"
    # check bounds what diff judges, and nothing else
    result = check(b, Bounds(baseline=a, max_regression=0.1))
    assert result.ok, result.failed
    assert len(result.rows) == d.judged.height > 0
    failed = [r["check"] for r in check(slower, Bounds(baseline=a, max_regression=0.1)).failed]
    assert any(c.startswith("cadence: decode p50") for c in failed), failed
    # the CLI says the same
    paths = [str(tmp_path / f"{n}.json.gz") for n in ("b", "a")]
    r = CliRunner().invoke(
        cli, ["check", paths[0], "--baseline", paths[1], "--max-regression", "10%"]
    )
    assert r.exit_code == 0, r.stdout
    md = CliRunner().invoke(cli, ["diff", paths[1], paths[0], "--format", "markdown"]).stdout
    assert "| (pooled over step kinds) |" in md and "| (n \\< 100 for a p99) |" in md


def test_each_judgement_rule_and_the_check_that_reads_it() -> None:
    """Hostile cases around the one judgement (issue 49), figure by figure: the n each
    percentile needs, at and below its bound; empty, pooled, direction-less and maximum
    figures; 0 to more and back; and check's row for each judged one."""
    from traceview.analysis.documents.checks import regression_rows
    from traceview.analysis.documents.compare import Diff
    from traceview.analysis.documents.verdicts import Metric, judgement

    def pair(a: float | None, b: float | None, **kw: object) -> tuple[str | None, str | None]:
        fields: dict = {"better": "lower", "unit": "ns", **kw}
        n_a, n_b = fields.pop("n_a", None), fields.pop("n_b", None)
        return judgement(Metric("s", "m", a, n=n_a, **fields), Metric("s", "m", b, n=n_b, **fields))

    assert pair(1.0, 2.0, quantile=0.99, n_a=100, n_b=100) == ("worse", None)
    assert pair(1.0, 2.0, quantile=0.99, n_a=100, n_b=99) == (None, "n < 100 for a p99")
    assert pair(1.0, 2.0, quantile=0.9, n_a=10, n_b=10) == ("worse", None)
    assert pair(1.0, 2.0, quantile=0.9, n_a=9, n_b=10) == (None, "n < 10 for a p90")
    assert pair(1.0, 1.0, quantile=0.5, n_a=2, n_b=2) == ("same", None)
    assert pair(1.0, 2.0, quantile=0.5, n_a=1, n_b=2) == (None, "n < 2 for a p50")
    assert pair(None, 2.0, n_a=0, n_b=3) == (None, "an empty population")
    assert pair(1.0, 2.0, quantile=1.0, n_a=500, n_b=500) == (None, "a maximum")
    assert pair(1.0, 2.0, pooled=True) == (None, "pooled over step kinds")
    assert pair(1.0, 2.0, better=None) == (None, "no better direction")
    assert pair(None, None) == (None, "no figure")
    assert pair(0.0, 14_000.0) == ("worse", None)  # a skew from 0: worse, not "new"
    assert pair(14_000.0, 0.0) == ("better", None)  # to 0: B has a figure, not "gone"
    assert pair(0.0, 0.0) == ("same", None)
    assert pair(0.0, 0.5, better="higher") == ("better", None)
    assert pair(0.5, 0.0, better="higher") == ("worse", None)
    assert pair(None, 3.0) == ("new", None) and pair(3.0, None) == ("gone", None)
    assert pair(1.0, 2.0, role="workload", pooled=True) == (None, "workload")

    rows = pl.DataFrame(
        {
            "section": ["s"] * 6,
            "metric": ["lower", "higher", "from0", "both0", "new", "gone"],
            "ratio": [1.2, 0.85, float("inf"), None, None, None],
            "verdict": ["worse", "worse", "worse", "same", "new", "gone"],
            "better": ["lower", "higher", "lower", "lower", "lower", "higher"],
        }
    )
    empty = pl.DataFrame(schema={"change": pl.String})
    checks = regression_rows(Diff("a", "b", rows, empty), 0.1)
    said = {r["check"]: r["ok"] for r in checks}
    assert said == {
        "s: lower <= baseline × 1.10": False,
        "s: higher >= baseline × 0.90": False,
        "s: from0 <= baseline × 1.10": False,
        "s: both0 <= baseline × 1.10": True,
        "s: new <= baseline × 1.10 (only B has the figure)": False,
        "s: gone >= baseline × 0.90 (only A has the figure)": False,
    }
    assert {r["check"]: r["ok"] for r in regression_rows(Diff("a", "b", rows, empty), 0.25)}[
        "s: lower <= baseline × 1.25"
    ]


@pytest.mark.parametrize("a, b", [(-21_000, 50_000), (-21_000, -122_000), (50_000, -21_000)])
def test_a_signed_figure_gets_no_ratio_verdict(a: int, b: int) -> None:
    """The probe of issue 49: the straggler's excess may be negative (param/dlrm_8rank:
    -21 µs). -21 µs to +50 µs read ×-2.38, "better", and passed check; -21 to -122 µs
    read ×5.81, "worse". A ratio of signed values is no measure: the row is unjudged,
    so check does not bound it either."""
    from traceview.analysis.documents.verdicts import Metric, judgement, ratio_of

    def m(v: int, signed: bool = True) -> Metric:
        field = "straggler.excess_p50_ns"
        return Metric(
            "headline",
            "straggler excess p50",
            v,
            "lower",
            "ns",
            20,
            "headline",
            field,
            0.5,
            signed=signed,
        )

    assert ratio_of(a, b) is None
    assert judgement(m(a), m(b)) == (None, "a signed figure (no ratio)")
    assert judgement(m(1000), m(2000)) == (None, "a signed figure (no ratio)")  # either sign
    assert judgement(m(1000, False), m(2000, False)) == ("worse", None)


@pytest.mark.parametrize(
    "a, b", [(-50_000, 2_000_000), (2_000_000, -50_000), (-50_000, -60_000)], ids=str
)
def test_a_negative_value_gets_no_ratio_verdict(a: int, b: int) -> None:
    """A fitted intercept may fall below 0. ratio_of gives no ratio there, and judgement
    read that None as "both 0": -50 µs to 2 ms was "same", and check counted it B/A = 1.
    The row is unjudged and says why, so check does not bound it."""
    from traceview.analysis.documents.verdicts import Metric, judgement

    def m(v: int) -> Metric:
        return Metric(
            "cost", "decode fixed per step", v, "lower", "ns", 40, field="cost.decode.fixed_ns"
        )

    assert judgement(m(a), m(b)) == (None, "a negative value (no ratio)")
    assert judgement(m(0), m(0)) == ("same", None)  # both 0: the same
    assert judgement(m(50_000), m(2_000_000)) == ("worse", None)


@pytest.mark.slow  # about 1.7 s a case; CI runs it
@pytest.mark.parametrize("side", ["A", "B"])
def test_a_family_on_one_side_only_costs_zero_on_the_other(tmp_path: Path, side: str) -> None:
    """The probe of issue 49: rope removed in B read "decode rope busy per step": A
    12.65 µs, B none, unjudged as "an empty population"; a family new in B likewise, and
    check --max-regression 10% passed. The side without the family has steps of the kind:
    its figure is 0 ns a step over them, and the row is judged (and bounded)."""
    import gzip

    raw = json.loads(gzip.decompress((GENERATED / "hybrid_chunked.json.gz").read_bytes()))
    raw["traceEvents"] = [e for e in raw["traceEvents"] if "rotary" not in str(e.get("name"))]
    without = tmp_path / "norope.json.gz"
    without.write_bytes(gzip.compress(json.dumps(raw).encode()))
    a, b = (str(GENERATED / "hybrid_chunked.json.gz"), str(without))
    if side == "B":
        a, b = b, a
    d = diff(tv.summarize(tv.load(a)), tv.summarize(tv.load(b)))
    rows = d.rows.filter(pl.col("metric").str.contains("rope busy per step"))
    assert rows.height == 2
    for r in rows.iter_rows(named=True):
        zero = r["b"] if side == "A" else r["a"]
        assert zero == 0.0 and r["why"] is None
        assert r["verdict"] == ("better" if side == "A" else "worse")
    done = CliRunner().invoke(cli, ["check", b, "--baseline", a, "--max-regression", "10%"])
    if side == "B":  # rope new in B: its cost per step is a regression check bounds
        assert done.exit_code == 1 and "rope busy per step" in done.stdout


def test_a_rank_absent_from_one_run_is_said_so(tmp_path: Path) -> None:
    """The probe of issue 49: a run diff whose B lacks a rank showed its rows unjudged as
    "n < 2 for a p50", as if its population were small. Planted: 3 ranks in A, rank 2's
    trace left out of B."""
    import shutil

    from fixtures.ranks import RankRun, build

    a, b = tmp_path / "a", tmp_path / "b"
    build(RankRun(ranks=3, slow_rank=1, steps=8), a)
    b.mkdir()
    for f in a.iterdir():
        if "_rank2." not in f.name:
            shutil.copy(f, b)
    d = diff(tv.summarize_run([str(a)]), tv.summarize_run([str(b)]))
    rows = d.rows.filter(pl.col("section") == "rank 2")
    assert rows.height > 0
    assert rows["why"].unique().to_list() == ["rank 2 is absent from B"]
    assert rows["verdict"].null_count() == rows.height
    others = d.rows.filter(pl.col("section") == "rank 1")["why"].to_list()
    assert "rank 1 is absent from B" not in others
