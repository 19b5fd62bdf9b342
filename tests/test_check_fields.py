"""``check``'s paths are decided by the summary's schema, never by one trace's document: a
figure of the schema that a trace lacks (a phase kind it never ran) is a failed row
without a value, as a null figure is; a path no summary has (a typo) is bad input on every
trace."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from conftest import GENERATED, truth

import traceview as tv
from traceview.analysis.documents.checks import Bounds, CheckError, check, lookup
from traceview.analysis.documents.fields import figure_path
from traceview.cli import cli

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
CONFIGS = ROOT / "fixtures" / "configs"
NO_PREFILL = "flashinfer_tc_decode"  # planted phases: decode, mixed, decode
WITH_PREFILL = "dense_sglang_extend"  # planted phases: decode and prefill, alternating


def _phases(name: str, kind: str) -> list[dict]:  # type: ignore[type-arg]
    return [p for p in truth(name)["phases"] if p["kind"] == kind]


def _check(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["check", *args])
    return r.exit_code, r.stdout, r.stderr


def test_a_phase_kind_the_trace_lacks_is_a_failed_row_without_a_value() -> None:
    """The probe's case: a prefill bound on a trace with no prefill phase exits 1 with the
    bound's row FAILED and no value (``—``), as a null figure does, and the other bounds are
    still checked against their planted figures."""
    assert _phases(NO_PREFILL, "prefill") == []
    (mixed,) = _phases(NO_PREFILL, "mixed")
    trace = str(GENERATED / f"{NO_PREFILL}.json.gz")
    bounds = ["--max", "steps.phases.prefill.cadence_p50_ns=5ms"]
    bounds += ["--max", f"steps.phases.mixed.cadence_p50_ns={mixed['cadence_p50_ns']}ns"]
    code, out, err = _check(trace, *bounds)
    assert code == 1, out + err
    assert "not a figure" not in err and "1 of 2 check(s) failed" in err
    row = next(line for line in out.splitlines() if "prefill" in line)
    assert "steps.phases.prefill.cadence_p50_ns <= 5ms" in row
    assert "—" in row and "FAILED" in row
    code, out, _ = _check(trace, *bounds, "--json")
    assert code == 1
    rows = {r["check"]: r for r in orjson.loads(out)["checks"]}
    absent = rows["steps.phases.prefill.cadence_p50_ns <= 5ms"]
    assert (absent["value"], absent["ok"], absent["limit"]) == (None, False, 5e6)
    held = rows[f"steps.phases.mixed.cadence_p50_ns <= {mixed['cadence_p50_ns']}ns"]
    assert (held["value"], held["ok"]) == (mixed["cadence_p50_ns"], True)
    # the skipped list's name is put back in the row, as for a figure that is there
    code, out, _ = _check(trace, "--max", "steps.prefill.cadence_p50_ns=5ms", "--json")
    (row,) = orjson.loads(out)["checks"]
    assert code == 1 and row["check"] == "steps.phases.prefill.cadence_p50_ns <= 5ms"


def test_one_checks_file_shared_by_traces_with_and_without_the_phase(tmp_path: Path) -> None:
    """A checks file that bounds the prefill phases holds on a trace whose planted prefill
    phases are within it, and fails (never exit 2) on one without a prefill phase."""
    prefill = _phases(WITH_PREFILL, "prefill")
    assert len(prefill) == 5 and {p["steps"] for p in prefill} == {1}
    checks = tmp_path / "checks.toml"
    checks.write_text('[min]\n"steps.phases.prefill.steps" = 1\n')
    with_it = str(GENERATED / f"{WITH_PREFILL}.json.gz")
    code, out, err = _check(with_it, "--checks", str(checks), "--json")
    assert code == 0, out + err
    assert [(r["value"], r["ok"]) for r in orjson.loads(out)["checks"]] == [(1, True)] * 5
    without = str(GENERATED / f"{NO_PREFILL}.json.gz")
    code, out, err = _check(without, "--checks", str(checks), "--json")
    assert code == 1, out + err
    (row,) = orjson.loads(out)["checks"]
    assert (row["value"], row["ok"]) == (None, False)


def test_an_absent_figure_through_the_api() -> None:
    """:func:`check` reads the schema the same way: no row is dropped, none raises."""
    summary = tv.summarize(tv.load(GENERATED / f"{NO_PREFILL}.json.gz"))
    result = check(summary, Bounds(minimum={"steps.phases.prefill.steps": 1}))
    assert [(r["check"], r["value"], r["ok"]) for r in result.rows] == [
        ("steps.phases.prefill.steps >= 1", None, False)
    ]
    with pytest.raises(CheckError, match="not a figure of the summary"):
        check(summary, Bounds(minimum={"steps.phases.prefil.steps": 1}))


@pytest.mark.parametrize(
    "key",
    [
        "steps.phases.prefil.cadence_p50_ns",  # a phase kind no summary has
        "steps.phases.prefill.cadense_p50_ns",  # a field no phase has
        "busy.nonsense",
        "decode_gaps.prefill.p99_ns",  # the gap populations are all, decode, mixed
        "decode_gaps.decode.filled.idle_ns.lunch",  # the idle causes are a closed set
        "stpes.phases.prefill.cadence_p50_ns",
    ],
)
def test_a_path_no_summary_has_is_bad_input_on_every_trace(tmp_path: Path, key: str) -> None:
    """A typo is one ``Error:`` line and exit 2, on a trace with the phase and one without,
    on the command line and in a checks file (naming the file)."""
    value = "5ms" if key.endswith("_ns") else "1"
    for name in (NO_PREFILL, WITH_PREFILL):
        code, _, err = _check(str(GENERATED / f"{name}.json.gz"), "--max", f"{key}={value}")
        assert code == 2, err
        assert err.endswith(
            f"Error: {key}: not a figure of the summary (see traceview "
            "summarize --json for the paths)\n"
        ), err
        assert "Traceback" not in err
    checks = tmp_path / "checks.toml"
    checks.write_text(f'[min]\n"{key}" = "{value}"\n')
    code, _, err = _check(str(GENERATED / f"{NO_PREFILL}.json.gz"), "--checks", str(checks))
    assert code == 2 and f"Error: {checks}: {key}: not a figure" in err


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("busy", "names a section, not a figure"),
        ("steps.phases.prefill.cadence", "names a section, not a figure"),
        ("trace.gpu", "names text, not a number"),
        ("steps.phases.prefill.kind", "names text, not a number"),
    ],
)
def test_a_section_or_text_is_bad_input_even_where_the_trace_lacks_it(
    key: str, message: str
) -> None:
    code, _, err = _check(str(GENERATED / f"{NO_PREFILL}.json.gz"), "--max", f"{key}=1")
    assert code == 2 and f"Error: {key}: {message}" in err


def _figures(node: object, trail: str = "") -> list[tuple[str, object]]:
    """Every number of a document with its path, each list item named as a user names it
    (its population, kind, family or rank; else its index)."""
    if isinstance(node, dict):
        return [x for k, v in node.items() for x in _figures(v, f"{trail}.{k}" if trail else k)]
    if isinstance(node, list):
        out = []
        for i, item in enumerate(node):
            name = str(i)
            if isinstance(item, dict):
                for field in ("population", "kind", "family", "rank"):
                    if isinstance(item.get(field), str | int) and not isinstance(item[field], bool):
                        name = str(item[field])
                        break
            out += _figures(item, f"{trail}.{name}")
        return out
    if isinstance(node, int | float) and not isinstance(node, bool):
        return [(trail, node)]
    return []


def _documents() -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    docs = [(p.name, json.loads(p.read_text())) for p in sorted(GOLDEN.glob("*.json"))]
    docs = [(name, doc) for name, doc in docs if "schema" in doc]  # not capture-only
    with_model = tv.summarize(
        tv.load(GENERATED / "dense_vllm_detailed.json.gz"),
        tv.AnalysisConfig(model=tv.load_model(CONFIGS / "engine-dense.json")),
    )
    return [*docs, ("dense_vllm_detailed --model", with_model.to_dict())]


def test_every_number_of_every_document_is_a_figure_of_its_schema() -> None:
    """The schema's closed sets are not too closed: every number in every fixture's and
    shared trace's summary (tests/golden), a run's document and a summary with efficiency
    figures is a figure of the schema, under the path a user writes, and check reads it
    there (a family's dotted name as a key of ``busy_by_family`` too)."""
    seen = 0
    for name, doc in _documents():
        run = doc["schema"] == "traceview.run/1"
        for path, value in _figures(doc):
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                figure = figure_path(path, run=run)
            # a deprecated key reads as its new one, which holds the same value
            assert figure == path or "is deprecated" in str(said[0].message), (name, path)
            assert value in [v for _, v in lookup(doc, path)], (name, path)
            assert value in [v for _, v in lookup(doc, figure)], (name, path)
            seen += 1
    assert seen > 5_000


def test_an_efficiency_bound_without_a_model_says_to_give_one() -> None:
    """Without --model, MFU and MBU are not computed: the bound cannot be judged, and the
    line says why (the schema allows the figure, so it would read as a failed row)."""
    result = CliRunner().invoke(
        cli,
        [
            "check",
            str(GENERATED / "dense_vllm_detailed.json.gz"),
            "--min",
            "efficiency.decode.mbu_p50=50%",
        ],
    )
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "give --model" in errors[0], result.stderr


@pytest.mark.parametrize(
    ("key", "where"),
    [
        # a list's name left out led lookup into decode_gaps, which has a "decode" item too
        ("decode.span_ns", ("time_breakdown", "decode", "span_ns")),
        # a family whose name holds a dot, its list's name left out
        ("linear_attention.decode.share", ("families", "linear_attention.decode", "share")),
    ],
)
def test_a_present_figure_is_found_however_its_key_is_shortened(
    key: str, where: tuple[str, str, str]
) -> None:
    trace = GENERATED / "hybrid_chunked.json.gz"
    doc = tv.summarize(str(trace)).to_dict()
    section, name, field = where
    items = doc[section]  # type: ignore[literal-required]
    want = sorted(i[field] for i in items if name in (i.get("kind"), i.get("family")))
    assert want, (section, name)
    limit = "1000000s" if key.endswith("_ns") else "1e18"
    result = check(tv.summarize(str(trace)), Bounds(maximum={key: limit}))
    got = sorted(r["value"] for r in result.rows)
    assert got == want and all(r["ok"] for r in result.rows), result.rows


@pytest.mark.parametrize(
    "key", ["efficiency.families.gemm.tflops", "efficiency.gpu.peak_bytes_per_s"]
)
def test_efficiency_figures_that_need_no_model_are_checked_without_one(key: str) -> None:
    """Only MFU, MBU and the model's numbers need --model; the device's peaks and the
    families' achieved rates are in every summary."""
    result = CliRunner().invoke(
        cli, ["check", str(GENERATED / "hybrid_vllm_old.json.gz"), "--min", f"{key}=0"]
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "key",
    ["time_breakdown.decode.idle_ns.host_late", "decode_gaps.decode.filled.busy_by_family.gemm"],
)
def test_a_value_of_an_ns_map_is_a_duration(key: str) -> None:
    """An idle cause's or a family's ns took no unit (it was read as a count, by the rule
    for a field's last name), so ``=1s`` was refused and a bare number meant ns."""
    trace = str(GENERATED / "hybrid_chunked.json.gz")
    ok = CliRunner().invoke(cli, ["check", trace, "--max", f"{key}=100s"])
    assert ok.exit_code == 0, ok.output
    bare = CliRunner().invoke(cli, ["check", trace, "--max", f"{key}=5"])
    assert bare.exit_code == 2 and "a duration needs a unit" in bare.stderr, bare.output


def test_the_api_refuses_a_regression_bound_it_cannot_judge() -> None:
    """A hostile probe's finding: ``tv.check(s, Bounds(max_regression=0.1))`` without a
    baseline returned ok=True, a bound never checked (the CLI refuses it)."""
    s = tv.summarize(tv.load(GENERATED / "dense_sglang.json.gz"))
    with pytest.raises(tv.TraceviewError, match="max_regression needs a baseline"):
        tv.check(s, tv.Bounds(max_regression=0.1))
    with pytest.raises(tv.TraceviewError, match="a baseline needs max_regression"):
        tv.check(s, tv.Bounds(baseline=s))
    assert tv.check(s, tv.Bounds(baseline=s, max_regression=0.1)).ok  # itself: no regression


def test_the_api_names_a_wrong_bounds_or_baseline() -> None:
    """A hostile probe's findings: ``tv.check(s, {})`` was an AttributeError and a path
    as the baseline said "diff compares Summaries"."""
    s = tv.summarize(tv.load(GENERATED / "dense_sglang.json.gz"))
    with pytest.raises(tv.TraceviewError, match="^bounds: a Bounds .*not dict$"):
        tv.check(s, {})  # type: ignore[arg-type]
    with pytest.raises(tv.TraceviewError, match="^Bounds.baseline: a summary .*not str$"):
        tv.check(s, tv.Bounds(baseline="a.json", max_regression=0.1))  # type: ignore[arg-type]


# a bound on each renamed key, and the same bound on its new name
RENAMED = [
    ("efficiency.device.peak_bytes_per_s", "efficiency.gpu.peak_bytes_per_s", "'device'"),
    ("steps.decoding_cadence.p90_ns", "steps.token_cadence.p90_ns", "'decoding_cadence'"),
    ("work.prefill_growth.0.first", "work.prefill_growth.0.measured_first", "'first'"),
]


@pytest.mark.parametrize(("old", "new", "key"), RENAMED, ids=[r[0] for r in RENAMED])
def test_a_bound_on_a_renamed_key_reads_its_new_key_and_warns(old: str, new: str, key: str) -> None:
    """A renamed key keeps working for one release: its bound reads the new key's figure,
    warns (a DeprecationWarning for the API, one ``Warning:`` line on the command line),
    and a bound on the new name does not warn."""
    summary = tv.summarize(tv.load(GENERATED / "hybrid_chunked.json.gz"))
    with pytest.warns(DeprecationWarning, match=f"{old}: the key {key} is deprecated"):
        by_old = check(summary, Bounds(minimum={old: 0}))
    by_new = check(summary, Bounds(minimum={new: 0}))
    assert [r["value"] for r in by_old.rows] == [r["value"] for r in by_new.rows]
    assert by_new.rows and all(r["value"] is not None for r in by_new.rows)
    code, _, err = _check(str(GENERATED / "hybrid_chunked.json.gz"), "--min", f"{old}=0")
    assert code == 0, err
    assert err.count(f"Warning: {old}: the key {key} is deprecated") == 1, err
    code, _, err = _check(str(GENERATED / "hybrid_chunked.json.gz"), "--min", f"{new}=0")
    assert code == 0 and "deprecated" not in err, err
