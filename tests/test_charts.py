"""Charts: the data behind each picture, and valid files of the requested format."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import GENERATED, truth
from matplotlib.backends.backend_agg import FigureCanvasAgg

import traceview as tv
from traceview.cli import cli
from traceview.render.charts import heartbeat_data, heartbeat_figure
from traceview.render.gaps_chart import gaps_data


@pytest.fixture(scope="module")
def chunked() -> tv.Summary:
    return tv.summarize(tv.load(GENERATED / "hybrid_chunked.json.gz"))


def test_heartbeat_data_is_the_planted_steps(scenario: str) -> None:
    t = truth(scenario)
    data = heartbeat_data(tv.summarize(tv.load(GENERATED / f"{scenario}.json.gz")))
    t0 = t["start_ns"]
    assert data.t0_ns == t0
    np.testing.assert_allclose(
        data.anchors_ms, [(s["anchor_ns"] - t0) / 1e6 for s in t["steps"]], rtol=0, atol=1e-9
    )
    # a step left out for warm-up is drawn as a warm-up tick, whatever its kind
    assert data.kinds == ["warm-up" if s["warmup"] else s["kind"] for s in t["steps"]]
    assert np.isnan(data.interval_ms[0])
    # an interval to or from a step that holds warm-up counts in no cadence: none is drawn
    steps = t["steps"]
    want = [
        b["interval_ns"] / 1e6 if a["warmup"] is None and b["warmup"] is None else np.nan
        for a, b in zip(steps, steps[1:], strict=False)
    ]
    np.testing.assert_allclose(data.interval_ms[1:], want, atol=1e-9)
    assert [(p.kind, p.start_ms, p.end_ms) for p in data.phases] == [
        (p["kind"], (p["start_ns"] - t0) / 1e6, (p["end_ns"] - t0) / 1e6) for p in t["phases"]
    ]
    assert data.prompt_spans_ms == [
        ((p["start_ns"] - t0) / 1e6, (p["end_ns"] - t0) / 1e6)
        for p in t["phases"]
        if p["kind"] in ("mixed", "prefill")  # where a prompt was being prefilled
    ]
    for band, p in zip(data.phases, t["phases"], strict=True):
        if p["cadence_p50_ns"] is None:
            assert band.cadence_p50_ms is None and "no cadence" in band.label
        else:
            assert band.label.startswith(
                f"{p['kind']} {p['cadence_p50_ns'] / 1e6:.1f} ms · n={p['steps'] - 1} "
            )


@pytest.mark.slow
def test_heartbeat_figure_draws_that_data(chunked: tv.Summary) -> None:
    data = heartbeat_data(chunked)
    fig = heartbeat_figure([data])
    main, ticks = fig.axes  # interval panel, tick panel
    positions = sorted(p for c in ticks.collections for p in c.get_positions())
    np.testing.assert_allclose(positions, sorted(data.anchors_ms))
    labels = main.get_legend().get_texts()
    mixed = next(p for p in truth("hybrid_chunked")["phases"] if p["kind"] == "mixed")
    assert any(
        f"mixed {mixed['cadence_p50_ns'] / 1e6:.1f} ms · n={mixed['steps'] - 1}" in t.get_text()
        for t in labels
    )
    shaded = [p for p in main.patches if p.get_alpha()]
    assert len(shaded) == sum(1 for p in data.phases if p.kind == "mixed")
    assert main.get_xlabel() == "time from first kernel (ms)"
    assert main.get_ylabel() == "step-to-step interval (ms)"


@pytest.mark.slow
def test_comparison_shares_scales() -> None:
    a = tv.summarize(tv.load(GENERATED / "hybrid_monolithic.json.gz"))
    b = tv.summarize(tv.load(GENERATED / "hybrid_chunked.json.gz"))
    fig = tv.plot.heartbeat([a, b])
    mains = [ax for ax in fig.axes if ax.get_ylabel()]
    assert len(mains) == 2
    assert mains[0].get_ylim() == mains[1].get_ylim()
    assert mains[0].get_xlim() == mains[1].get_xlim()


def test_gaps_data_carries_percentiles_and_n(chunked: tv.Summary) -> None:
    t = {g["population"]: g for g in truth("hybrid_chunked")["decode_gaps"]}
    for curve in gaps_data(chunked, chunked.decode_gaps):
        g = t[curve.population]
        assert curve.n == g["n"] == curve.gaps_us.size
        assert curve.p99_us == g["p99_ns"] / 1000
        assert f"n={g['n']}" in curve.label
    fig = tv.plot.gaps(chunked)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    assert all(
        f"n={t[p]['n']}" in txt.get_text()
        for p, txt in zip(("all", "decode", "mixed"), ax.get_legend().get_texts(), strict=True)
    )


def test_the_gaps_chart_keeps_its_title_and_legend_inside_the_figure(chunked: tv.Summary) -> None:
    """A long marker name and file name, and three populations' legend rows, once ran off
    the figure's edges (a newcomer's gaps.png): every text is drawn inside it."""
    from traceview.render.format import gap_title
    from traceview.render.gaps_chart import gaps_figure

    title = f"{gap_title(chunked.document)} — {'a_rather_long_trace_file_name_' * 3}.json.gz"
    fig = gaps_figure(gaps_data(chunked, chunked.decode_gaps), title=title)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    inside = fig.bbox.padded(1)
    ax = fig.axes[0]
    for artist in (ax.title, ax.get_legend()):
        box = artist.get_window_extent(renderer)
        assert inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1), artist


def test_an_efficiency_panel_below_1_percent_labels_its_ticks_apart() -> None:
    """Decode's MBU is under 1% of peak on the bundled trace: the y ticks once all read
    0% or 1%; their labels are now distinct."""
    model = GENERATED.parent / "configs" / "engine-hybrid-moe.json"
    summary = tv.summarize(
        tv.load(GENERATED / "hybrid_chunked.json.gz"), tv.AnalysisConfig(model=str(model))
    )
    fig = heartbeat_figure([heartbeat_data(summary)], efficiency=True)
    fig.draw(FigureCanvasAgg(fig).get_renderer())
    panel = fig.axes[-1]
    labels = [t.get_text() for t in panel.get_yticklabels() if t.get_text()]
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels


def test_plot_on_a_given_axes(chunked: tv.Summary) -> None:
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    assert tv.plot.heartbeat(chunked, ax=ax) is fig


@pytest.mark.parametrize(
    ("suffix", "magic"),
    [
        (".png", b"\x89PNG"),
        pytest.param(".svg", b"<?xml", marks=pytest.mark.slow),
        pytest.param(".pdf", b"%PDF", marks=pytest.mark.slow),
    ],
)
def test_cli_writes_valid_files(tmp_path: Path, suffix: str, magic: bytes) -> None:
    out = tmp_path / f"hb{suffix}"
    result = CliRunner().invoke(
        cli, ["heartbeat", str(GENERATED / "dense_sglang.json.gz"), "-o", str(out)]
    )
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes().startswith(magic)
    if suffix == ".png":
        import matplotlib.image

        h, w, _ = matplotlib.image.imread(out).shape
        assert (w, h) == (1800, 720)  # 12 x 4.8 in at 150 dpi
    gaps = tmp_path / f"gaps{suffix}"
    result = CliRunner().invoke(
        cli, ["gaps", str(GENERATED / "dense_sglang.json.gz"), "-o", str(gaps)]
    )
    assert result.exit_code == 0 and gaps.read_bytes().startswith(magic)


@pytest.mark.slow
def test_cli_comparison_window_and_style(tmp_path: Path) -> None:
    out = tmp_path / "cmp.png"
    result = CliRunner().invoke(
        cli,
        [
            "heartbeat",
            str(GENERATED / "hybrid_monolithic.json.gz"),
            str(GENERATED / "hybrid_chunked.json.gz"),
            "-o",
            str(out),
            "--window",
            "100ms:0.6s",
            "--style",
            "dark",
            "--title",
            "chunked prefill off vs on",
        ],
    )
    assert result.exit_code == 0, result.stderr
    import matplotlib.image

    h, w, _ = matplotlib.image.imread(out).shape
    assert (w, h) == (1800, 1350)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "chart.txt"], "unknown output suffix '.txt'; known: .png, .svg, .pdf"),
        (["-o", "chart.png", "--window", "5"], "--window: expected T0:T1"),
        (["-o", "chart.png", "--window", "2s:1s"], "the end must come after the start"),
        (["-o", "missing/dir/chart.png"], "no such directory"),
    ],
)
def test_cli_chart_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["heartbeat", str(GENERATED / "dense_sglang.json.gz"), *args])
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.output


@pytest.mark.slow
def test_a_single_step_trace_draws_its_timeline_by_family(tmp_path: Path) -> None:
    """Issue 21, item 7: with fewer than 2 steps there is no cadence; the heartbeat draws
    the step's device activity per family and says so, and the report does the same."""
    from fixtures.build import TraceBuilder

    tb = TraceBuilder()
    t = 1_000_000
    planted: dict[str, int] = {}
    for name, family, dur in [
        ("flash_fwd_splitkv_kernel", "full_attention", 30_000),
        ("nvjet_tst_128x64_64x8_2x1_v_bz_TNT", "gemm", 90_000),
        ("rms_norm_kernel", "norm", 8_000),
    ] * 4:
        tb.kernel(name, t, dur)
        planted[family] = planted.get(family, 0) + dur
        t += dur + 500_000  # gaps far wider than the span / 4000: every kernel its own bar
    path = tb.write(tmp_path / "one.json.gz")
    summary = tv.summarize(tv.load(path))
    assert summary.steps.height == 1
    data = heartbeat_data(summary)
    assert data.timeline is not None
    drawn = {family: float(length.sum()) * 1e6 for family, _start, length in data.timeline}
    assert drawn == pytest.approx({f: float(ns) for f, ns in planted.items()})
    assert [f for f, _s, _l in data.timeline] == ["gemm", "full_attention", "norm"]
    out = CliRunner().invoke(cli, ["heartbeat", str(path), "-o", str(tmp_path / "h.svg")])
    assert out.exit_code == 0, out.stderr
    assert "1 step(s), no cadence to draw: the chart shows the step's timeline by family" in (
        out.stderr + out.stdout
    )
    svg = (tmp_path / "h.svg").read_text()
    assert "its timeline by family" in svg and "gemm" in svg
    report = CliRunner().invoke(cli, ["report", str(path), "-o", str(tmp_path / "r.html")])
    assert report.exit_code == 0, report.stderr
    assert "its timeline by family" in (tmp_path / "r.html").read_text()
    # two steps or more: a cadence chart, no timeline
    assert (
        heartbeat_data(tv.summarize(tv.load(GENERATED / "hybrid_chunked.json.gz"))).timeline is None
    )
