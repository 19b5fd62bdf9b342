"""The one duration formatter and quantity reader, against values worked by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DOC_REL, GENERATED, truth

from traceview.cli import cli
from traceview.render.format import fmt_ns, fmt_ratio, fmt_value
from traceview.units import duration_ns, read_quantity


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (None, "—"),
        (0, "0 ns"),
        (999, "999 ns"),
        (1_000, "1.0 µs"),
        (12_345, "12.3 µs"),
        (2_500_000, "2.50 ms"),
        (1_500_000_000, "1.5 s"),
        (250_000_000_000, "250 s"),
        (-2_500_000, "-2.50 ms"),
    ],
)
def test_fmt_ns(ns: int | None, text: str) -> None:
    assert fmt_ns(ns) == text


def test_fmt_ratio_and_value() -> None:
    assert fmt_ratio(None) == "—"
    assert fmt_ratio(math.inf) == "∞"
    assert fmt_ratio(1.254) == "1.25×"
    assert fmt_value(0.4567, "fraction") == "45.7%"
    assert fmt_value(2_500_000, "ns") == "2.50 ms"
    assert fmt_value(1234, "count") == "1,234"
    assert fmt_value(1234.5, "tokens") == "1,234.5"
    assert fmt_value(None, "ns") == "—"


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("50us", 50_000),
        ("50µs", 50_000),
        ("2.5ms", 2_500_000),
        (" 1200 ns ", 1_200),
        ("1200", None),  # units are never guessed
        ("0", 0),
        ("0.0", 0),
        ("1s", 1_000_000_000),
        ("1e3us", 1_000_000),
        ("-5ms", None),
        ("90%", None),
        ("fast", None),
        ("", None),
        ("1e400s", None),  # infinite as a float
        ("9.3e9s", None),  # past an Int64 of ns
        ("9.2e9s", 9_200_000_000_000_000_000),
    ],
)
def test_duration_ns(text: str, ns: int | None) -> None:
    assert duration_ns(text) == ns


def test_read_quantity() -> None:
    assert read_quantity("90%") == (90.0, "%")
    assert read_quantity("-0.5MS") == (-0.5, "ms")
    assert read_quantity("7") == (7.0, "")
    assert read_quantity("7 apples") is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["summarize", "{t}", "--step-gap", "5"], "--step-gap: '5' has no unit"),
        (["summarize", "{t}", "--step-gap", "5%"], "--step-gap: '5%' is not a duration"),
        (["heartbeat", "{t}", "-o", "{o}", "--window", "100:200"], "--window: '100' has no unit"),
        (["check", "{t}", "--max", "busy.fraction=5ms"], "has a unit, but the field is a fraction"),
        (["check", "{t}", "--max", "decode_gaps.decode.p99_ns=5"], "'5' has no unit"),
        (["check", "{t}", "--max", "decode_gaps.decode.p99_ns=5%"], "is a percentage"),
        (["check", "{t}", "--min", "steps.count=3ms"], "has a unit, but the field is a count"),
        (
            ["heartbeat", "{t}", "-o", "{o}", "--window", "0:1e400s"],
            "--window: '1e400s' is too long",
        ),
        (["heartbeat", "{t}", "-o", "{o}", "--window", "0:1e300s"], "'1e300s' is too long"),
        (["summarize", "{t}", "--step-gap", "1e400s"], "--step-gap: '1e400s' is too long"),
    ],
    ids=[
        "step-gap",
        "step-gap-pct",
        "window",
        "fraction",
        "ns-bare",
        "ns-pct",
        "count",
        "window-infinite",
        "window-past-int64",
        "step-gap-infinite",
    ],
)
def test_units_are_never_guessed(tmp_path: Path, argv: list[str], message: str) -> None:
    subs = {"{t}": str(GENERATED / "dense_sglang.json.gz"), "{o}": str(tmp_path / "h.png")}
    result = CliRunner().invoke(cli, [subs.get(a, a) for a in argv])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.slow
def test_zero_and_percentages_where_they_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bare 0 and a percentage are read where they fit, to their exact values: each check
    reports the planted figure against the limit as read, and a limit just past the planted
    figure, as a percentage, fails."""
    import orjson

    from traceview.render import charts  # the command imports heartbeat_data as it runs

    t = str(GENERATED / "dense_sglang.json.gz")
    planted = truth("dense_sglang")
    fraction = planted["busy"]["fraction"]
    decode_p99 = next(g for g in planted["decode_gaps"] if g["population"] == "decode")["p99_ns"]
    argv = ["check", t, "--json", "--min", "decode_gaps.decode.p99_ns=0"]
    argv += ["--max", "busy.fraction=100%"]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    got = {r["check"]: r for r in orjson.loads(result.stdout)["checks"]}
    p99 = got["decode_gaps.decode.p99_ns >= 0"]
    assert (p99["value"], p99["limit"], p99["ok"]) == (decode_p99, 0, True)
    whole = got["busy.fraction <= 100%"]
    assert whole["limit"] == 1.0 and whole["value"] == pytest.approx(fraction, rel=DOC_REL)
    # the planted fraction (77.79%) against a maximum just under it (fails: exit 1) and
    # just over it (holds: exit 0)
    assert f"{fraction:.4f}" == "0.7779"
    for limit, exit_code in (("77.7%", 1), ("77.8%", 0)):
        result = CliRunner().invoke(cli, ["check", t, "--json", "--max", f"busy.fraction={limit}"])
        assert result.exit_code == exit_code, (limit, result.output)
        (row,) = orjson.loads(result.stdout)["checks"]
        assert row["limit"] == pytest.approx(float(limit[:-1]) / 100, rel=1e-12)
    # a window from a bare 0 to 5 ms reaches the chart as (0.0, 5.0) ms
    seen = []
    real = charts.heartbeat_data

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(kwargs["window_ms"])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(charts, "heartbeat_data", spy)
    out = tmp_path / "h.png"
    result = CliRunner().invoke(cli, ["heartbeat", t, "-o", str(out), "--window", "0:5ms"])
    assert result.exit_code == 0, result.output
    assert seen == [(0.0, 5.0)] and out.stat().st_size > 0


def test_a_window_outside_the_trace_names_its_span(tmp_path: Path) -> None:
    t = str(GENERATED / "dense_sglang.json.gz")
    out = tmp_path / "h.png"
    result = CliRunner().invoke(cli, ["heartbeat", t, "-o", str(out), "--window", "100s:200s"])
    assert result.exit_code == 2 and "is outside the trace, which spans 0-" in result.stderr
    assert not out.exists()


def _check_rows(argv: list[str]) -> tuple[int, dict[str, str], dict[str, dict]]:  # type: ignore[type-arg]
    """The check's exit code, its table's value cell per check, and its JSON rows."""
    import orjson

    table = CliRunner().invoke(cli, ["check", *argv])
    cells = {}
    for line in table.stdout.splitlines():
        parts = [p.strip() for p in line.split("│")]
        if len(parts) == 5 and parts[1] not in ("", "check"):
            cells[parts[1]] = parts[2]
    as_json = CliRunner().invoke(cli, ["check", *argv, "--json"])
    assert as_json.exit_code == table.exit_code, as_json.output
    rows = {r["check"]: r for r in orjson.loads(as_json.stdout)["checks"]}
    return table.exit_code, cells, rows


def _read(shown: str) -> tuple[float, str]:
    number, _, unit = shown.replace("%", " %").partition(" ")
    return float(number), unit


@pytest.mark.parametrize(
    ("key", "bound", "unit", "planted", "holds"),
    [
        # a duration in the bound's time unit, whatever its size; a bare 0 in ns
        ("decode_gaps.decode.p99_ns", "1ms", "ms", ("gap", "p99_ns"), False),
        ("decode_gaps.decode.p99_ns", "50us", "us", ("gap", "p99_ns"), False),
        ("decode_gaps.decode.p99_ns", "50µs", "µs", ("gap", "p99_ns"), False),
        ("decode_gaps.decode.p99_ns", "9000000ns", "ns", ("gap", "p99_ns"), True),
        ("decode_gaps.decode.p99_ns", "0", "ns", ("gap", "p99_ns"), False),
        ("steps.cadence.p99_ns", "2s", "s", ("cadence", "p99_ns"), True),
        # a fraction as a percentage or as a fraction, as its bound is written
        ("busy.fraction", "90%", "%", ("busy", "fraction"), True),
        ("busy.fraction", "0.7", "", ("busy", "fraction"), False),
        # a count as it is
        ("steps.count", "100", "", ("step_count", None), True),
    ],
)
def test_a_value_is_shown_in_its_bounds_unit(
    key: str, bound: str, unit: str, planted: tuple[str, str | None], holds: bool
) -> None:
    """The probe's case, for every unit check takes: the value reads in the unit its bound is
    written in (``82.16%`` beside ``>= 90%``, never ``0.8216``), on the terminal and in
    ``--json`` (``unit`` and ``shown``), to four significant digits of the planted figure;
    the verdict is the planted figure's against the bound."""
    t = truth("dense_sglang")
    where, field = planted
    if where == "gap":
        figure = next(g for g in t["decode_gaps"] if g["population"] == "decode")[field]
    else:
        figure = t[where] if field is None else t[where][field]
    code, cells, rows = _check_rows(
        [str(GENERATED / "dense_sglang.json.gz"), "--max", f"{key}={bound}"]
    )
    text = f"{key} <= {bound}"
    assert code == (0 if holds else 1)
    row = rows[text]
    assert row["ok"] is holds and row["unit"] == unit
    assert cells[text] == row["shown"]
    number, shown_unit = _read(row["shown"])
    assert shown_unit == unit
    scale = {"%": 100, "": 1, "ns": 1, "us": 1e-3, "µs": 1e-3, "ms": 1e-6, "s": 1e-9}[unit]
    assert number == pytest.approx(figure * scale, rel=5e-4)
    if unit == "" and key == "steps.count":
        assert row["shown"] == str(figure)


def test_an_efficiency_figure_reads_as_a_percentage_beside_a_percentage() -> None:
    """The probe's row: MBU bounded by ``50%`` reads as a percentage (it read 0.008492), by
    ``0.5`` as a fraction; the verdict is the same either way."""
    config = str(GENERATED.parent / "configs" / "engine-dense.json")
    trace = str(GENERATED / "dense_vllm_detailed.json.gz")
    for bound, unit in (("50%", "%"), ("0.5", "")):
        code, cells, rows = _check_rows(
            [trace, "--model", config, "--min", f"efficiency.decode.mbu_p50={bound}"]
        )
        text = f"efficiency.phases.decode.mbu_p50 >= {bound}"
        row = rows[text]
        assert code == 1 and row["ok"] is False and row["limit"] == 0.5
        assert 0 < row["value"] < 0.5 and row["unit"] == unit and cells[text] == row["shown"]
        number, shown_unit = _read(row["shown"])
        assert shown_unit == unit
        assert number == pytest.approx(row["value"] * (100 if unit else 1), rel=5e-4)


def test_a_failed_bound_never_reads_as_its_limit() -> None:
    """A value within four significant digits of its bound is shown with the digits that
    tell them apart: the planted busy fraction against a maximum a millionth under it."""
    fraction = truth("dense_sglang")["busy"]["fraction"]
    limit = f"{math.floor(fraction * 1e8) / 1e6:.6f}%"  # 77.789011%: under 77.789012%
    code, cells, rows = _check_rows(
        [str(GENERATED / "dense_sglang.json.gz"), "--max", f"busy.fraction={limit}"]
    )
    shown = cells[f"busy.fraction <= {limit}"]
    assert code == 1 and shown != limit
    number, unit = _read(shown)
    assert unit == "%" and number > float(limit[:-1])
    assert number == pytest.approx(fraction * 100, rel=1e-7)


def test_the_greek_mu_is_the_micro_sign() -> None:
    """``5μs`` (U+03BC) matched the case-blind pattern and then was no known unit: a
    KeyError traceback in check and --step-gap."""
    from traceview.units import read_quantity

    assert read_quantity("5\u03bcs") == read_quantity("5\u00b5s") == (5.0, "\u00b5s")


@pytest.mark.parametrize(
    ("value", "unit", "limit", "shown"),
    [
        (0.7000000000000001, "%", 0.7, ">70%"),
        (0.6999999999999999, "%", 0.7, "69.99999999999999%"),  # 17 digits tell them apart
        (1000000.0000000001, "ms", 1e6, ">1 ms"),
        (0.7, "%", 0.7, "70%"),
    ],
)
def test_a_value_a_float_step_from_its_limit_never_reads_as_the_limit(
    value: float, unit: str, limit: float, shown: str
) -> None:
    from traceview.units import written_as

    assert written_as(value, unit, limit) == shown
