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


def test_zero_and_percentages_where_they_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bare 0 and a percentage are read where they fit, to their exact values: each check
    reports the planted figure against the limit as read, and a limit just past the planted
    figure, as a percentage, fails."""
    import orjson

    from traceview.cli import heartbeat as heartbeat_cli

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
    real = heartbeat_cli.heartbeat_data

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(kwargs["window_ms"])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(heartbeat_cli, "heartbeat_data", spy)
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
