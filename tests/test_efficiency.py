"""How close to the hardware (issue 23): device peaks, models from their configs, and each
step's FLOPs, bytes, MFU and MBU against planted truth, by formulas written out here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import traceview as tv
from traceview.analysis.work.devices import match_device
from traceview.cli import cli

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "fixtures" / "configs"
GENERATED = ROOT / "fixtures" / "generated"
H200_BF16, H200_BYTES = 989.5e12, 4.8e12  # the H200 SXM datasheet: dense bf16, HBM3e


def truth(name: str) -> dict:
    return json.loads((GENERATED / f"{name}.truth.json").read_text())


# --- published parameter counts ---------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "total", "active"),
    [
        ("llama-3.1-8b", 8.03e9, 8.03e9),  # dense
        ("qwen3-30b-a3b", 30.5e9, 3.3e9),  # MoE; head_dim 128 is not hidden / heads (64)
        ("deepseek-v3", 671e9, 37e9),  # MoE with MLA, 3 dense blocks, a shared expert
    ],
)
def test_published_configs_give_their_published_sizes(
    config: str, total: float, active: float
) -> None:
    m = tv.load_model(CONFIGS / f"{config}.json")
    assert m.params == pytest.approx(total, rel=0.005)
    # the cards round the active count to two digits
    assert m.active_params == pytest.approx(active, rel=0.03)


def test_the_worked_example_in_the_docs_is_llama_3_1_8b() -> None:
    """docs/metrics.md works Llama-3.1-8B's count out by hand: the figures there are
    traceview's."""
    m = tv.load_model(CONFIGS / "llama-3.1-8b.json")
    text = (ROOT / "docs" / "metrics.md").read_text()
    assert f"{m.params:,}" in text
    assert f"{m.layers[0].params:,}" in text


def test_a_config_missing_a_field_names_it(tmp_path: Path) -> None:
    doc = json.loads((CONFIGS / "llama-3.1-8b.json").read_text())
    del doc["num_attention_heads"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(tv.EfficiencyInputError, match="num_attention_heads"):
        tv.load_model(path)
    trace = str(GENERATED / "dense_vllm_detailed.json.gz")
    r = CliRunner().invoke(cli, ["summarize", trace, "--model", str(path)])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "num_attention_heads" in r.stderr
    assert "Traceback" not in r.stderr


# --- device peaks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "memory_gib", "compute", "part", "bandwidth"),
    [
        ("NVIDIA H100 80GB HBM3", 79.2, "9.0", "NVIDIA H100 SXM", 3.35e12),
        ("NVIDIA H100 PCIe", 79.6, "9.0", "NVIDIA H100 PCIe", 2.0e12),
        ("NVIDIA H100 NVL", 93.6, "9.0", "NVIDIA H100 NVL", 3.9e12),
        ("NVIDIA A100-SXM4-80GB", 79.2, "8.0", "NVIDIA A100 SXM 80GB", 2.039e12),
        ("NVIDIA A100-SXM4-40GB", 39.4, "8.0", "NVIDIA A100 SXM 40GB", 1.555e12),
        ("NVIDIA A100 80GB PCIe", 79.2, "8.0", "NVIDIA A100 PCIe 80GB", 1.935e12),
        ("NVIDIA A100-PCIE-40GB", 39.4, "8.0", "NVIDIA A100 PCIe 40GB", 1.555e12),
        ("NVIDIA H200", 139.8, "9.0", "NVIDIA H200 SXM", 4.8e12),
        ("NVIDIA B200", 178.4, "10.0", "NVIDIA B200", 8.0e12),
        ("NVIDIA A10G", 22.0, "8.6", "NVIDIA A10G", 600e9),
        ("NVIDIA L4", 22.0, "8.9", "NVIDIA L4", 300e9),
        ("NVIDIA L40S", 44.4, "8.9", "NVIDIA L40S", 864e9),
        ("Tesla V100-SXM2-32GB", 31.7, "7.0", "NVIDIA V100 SXM2", 900e9),
        ("NVIDIA GeForce RTX 4090", 23.6, "8.9", "NVIDIA GeForce RTX 4090", 1008e9),
        ("NVIDIA GeForce RTX 3090", 23.7, "8.6", "NVIDIA GeForce RTX 3090", 936e9),
        ("NVIDIA GB10", 119.7, "12.1", "NVIDIA GB10", 273e9),
        ("AMD Instinct MI300X", 192.0, "9.4", "AMD Instinct MI300X", 5.3e12),
        ("", 192.0, "9.4", "AMD Instinct MI300X", 5.3e12),  # ROCm leaves it unnamed
        ("AMD Instinct MI325X", 256.0, "9.4", "AMD Instinct MI325X", 6.0e12),
        ("AMD Radeon Graphics", 64.0, "9.0", "AMD Instinct MI250X (one GCD)", 1.6e12),
    ],
)
def test_devices_match_by_name_and_memory(
    name: str, memory_gib: float, compute: str, part: str, bandwidth: float
) -> None:
    major, minor = compute.split(".")
    props = {
        "name": name,
        "totalGlobalMem": int(memory_gib * (1 << 30)),
        "computeMajor": int(major),
        "computeMinor": int(minor),
    }
    spec = match_device(props)
    assert spec is not None and spec.name == part
    assert spec.peak_bytes_per_s == bandwidth
    assert spec.source


def test_an_unknown_device_gives_rates_without_ratios(tmp_path: Path) -> None:
    t = tv.load(GENERATED / "dense_vllm_detailed.json.gz")
    unknown = tv.GpuSpec("NVIDIA Imaginary X1")  # a --gpu with no peaks at all is refused
    assert unknown.peak_bytes_per_s is None
    s = tv.summarize(
        t,
        tv.AnalysisConfig(
            model=tv.load_model(CONFIGS / "engine-dense.json"),
            gpu=tv.GpuSpec("made up", {"fp8": 1e15}, None),
        ),
    )
    assert s.steps["mfu"].null_count() == s.steps.height  # no bf16 peak
    assert s.steps["mbu"].null_count() == s.steps.height  # no bandwidth
    assert s.steps["flops"].null_count() == 0
    phase = s.document["efficiency"]["phases"][0]
    assert phase["mfu_p50"] is None and phase["tflops_p50"] is not None
    assert any("no bf16 peak" in w for w in s.warnings)


def test_the_config_reads_its_gpu_once_and_device_spec_is_its_old_name() -> None:
    """``gpu`` is the GPU's peaks, ``device`` the device analysed: the config's read spec
    is ``gpu_spec``; ``device_spec`` still gives it for one release, and warns."""
    config = tv.AnalysisConfig(gpu="h100", device=0)
    assert config.gpu_spec == tv.load_gpu("h100") and config.device == 0
    with pytest.warns(DeprecationWarning, match="AnalysisConfig.device_spec is deprecated"):
        assert config.device_spec is config.gpu_spec


def test_gpu_option_takes_a_name_or_a_spec_file(tmp_path: Path) -> None:
    spec = tmp_path / "x.toml"
    spec.write_text(
        'name = "lab part"\npeak_bytes_per_s = 1e12\nsource = "our measurement"\n'
        "[peak_flops]\nbf16 = 5e14\n"
    )
    got = tv.load_gpu(str(spec))
    assert (got.name, got.peak_flops, got.peak_bytes_per_s) == ("lab part", {"bf16": 5e14}, 1e12)
    assert tv.load_gpu("h100").name == "NVIDIA H100 SXM"
    assert tv.load_gpu("NVIDIA H100 80GB HBM3").peak_bytes_per_s == 3.35e12
    trace = str(GENERATED / "dense_vllm_detailed.json.gz")
    r = CliRunner().invoke(cli, ["summarize", trace, "--gpu", "NVIDIA Imaginary X1"])
    assert r.exit_code == 2 and "unknown GPU" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[peak_flops]\nbf17 = 1\n')
    r = CliRunner().invoke(cli, ["summarize", trace, "--gpu", str(bad)])
    assert r.exit_code == 2 and "bf17" in r.stderr


# --- planted truth: each step's FLOPs, bytes, MFU and MBU --------------------------------


def dense_truth(step: dict) -> tuple[int, float]:
    """engine-dense.json by hand: 8 Llama blocks, hidden 2048, 16 heads of 128, 4 KV heads,
    MLP 5632, vocab 32000 (tied), bf16."""
    h, heads, kvh, hd, inter, layers, vocab = 2048, 16, 4, 128, 5632, 8, 32000
    block = h * heads * hd + 2 * h * kvh * hd + heads * hd * h + 3 * h * inter + 2 * h
    n = layers * block
    tokens = step["context_tokens"] + step["generation_tokens"]
    flops = 2 * n * tokens + 2 * heads * (hd + hd) * step["attention_pairs"] * layers
    kv_per_token = 2 * kvh * hd * 2  # keys and values, bf16
    nbytes = 2 * (n + vocab * h) + step["kv_tokens"] * kv_per_token * layers
    return flops, nbytes


def hybrid_moe_truth(step: dict) -> tuple[int, float]:
    """engine-hybrid-moe.json by hand: LLLF twice, hidden 1024; Gated DeltaNet (8 key heads
    of 64, 16 value heads of 64, kernel 4); attention 8 heads of 128, 2 KV heads, q/k norms;
    per block 16 experts of 3·1024·256 (top 2), a router, a shared expert of 3·1024·256 with
    its gate; vocab 32000 untied, bf16."""
    h, e, k = 1024, 16, 2
    gdn_conv = 2 * 8 * 64 + 16 * 64
    gdn = h * (2 * 8 * 64 + 2 * 16 * 64) + h * 2 * 16 + gdn_conv * 4 + 2 * 16 + 64 + 16 * 64 * h
    attn = h * 8 * 128 + 2 * h * 2 * 128 + 8 * 128 * h + 2 * 128
    expert = 3 * h * 256
    shared = 3 * h * 256 + h
    fixed = h * e + shared + 2 * h  # router, shared expert, norms
    mixers = 6 * gdn + 2 * attn
    tokens = step["context_tokens"] + step["generation_tokens"]
    active = mixers + 8 * (fixed + k * expert)
    flops = 2 * active * tokens  # no context lengths in this annotation: no attention term
    nbytes = 2 * (mixers + 8 * fixed + 32000 * h + 8 * min(e, k * tokens) * expert)
    return flops, nbytes


@pytest.mark.parametrize(
    ("scenario", "config", "by_hand", "attention"),
    [
        ("dense_vllm_detailed", "engine-dense", dense_truth, True),
        ("hybrid_chunked", "engine-hybrid-moe", hybrid_moe_truth, False),
    ],
)
def test_each_step_is_as_planted(scenario: str, config: str, by_hand, attention: bool) -> None:  # type: ignore[no-untyped-def]
    t = truth(scenario)
    s = tv.summarize(
        tv.load(GENERATED / f"{scenario}.json.gz"),
        tv.AnalysisConfig(model=tv.load_model(CONFIGS / f"{config}.json")),
    )
    assert s.document["efficiency"]["gpu"]["name"] == "NVIDIA H200 SXM"
    rows = s.steps.to_dicts()
    assert len(rows) == len(t["steps"])
    for row, step in zip(rows, t["steps"], strict=True):
        flops, nbytes = by_hand(step)
        busy_s = step["busy_ns"] / 1e9
        assert row["tokens"] == step["context_tokens"] + step["generation_tokens"]
        assert row["attention_counted"] is attention
        assert row["flops"] == flops
        assert row["bytes"] == pytest.approx(nbytes, rel=1e-9)
        assert row["mfu"] == pytest.approx(flops / busy_s / H200_BF16, rel=1e-9)
        assert row["mbu"] == pytest.approx(nbytes / busy_s / H200_BYTES, rel=1e-9)
    # per kind: the p50 and p90 over that kind's steps
    for phase in s.document["efficiency"]["phases"]:
        mine = [r for r in rows if r["kind"] == phase["kind"]]
        assert phase["steps"] == len(mine)
        mbu = sorted(r["mbu"] for r in mine)
        assert phase["mbu_p50"] == pytest.approx(_percentile(mbu, 50), rel=1e-8)
        assert phase["mfu_p90"] == pytest.approx(
            _percentile(sorted(r["mfu"] for r in mine), 90), rel=1e-8
        )


def _percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, written out."""
    pos = (len(values) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def test_without_a_model_the_section_gives_the_device_only() -> None:
    s = tv.summarize(tv.load(GENERATED / "hybrid_chunked.json.gz"))
    eff = s.document["efficiency"]
    assert eff["gpu"]["peak_flops"]["bf16"] == H200_BF16
    assert (eff["model"], eff["phases"], eff["families"]) == (None, None, None)
    assert "mfu" not in s.steps.columns


def test_steps_without_tokens_have_no_figures() -> None:
    """A trace whose steps state no tokens (no annotation, no record_shapes): FLOPs are
    null, never a guess, and a warning says why."""
    s = tv.summarize(
        tv.load(GENERATED / "hybrid_tight.json.gz"),
        tv.AnalysisConfig(model=tv.load_model(CONFIGS / "engine-hybrid-moe.json")),
    )
    assert s.steps["flops"].null_count() == s.steps.height
    assert any("state no tokens" in w for w in s.warnings)


def test_check_and_diff_read_mfu_and_mbu_as_rates() -> None:
    t = tv.load(GENERATED / "dense_vllm_detailed.json.gz")
    model = tv.load_model(CONFIGS / "engine-dense.json")
    a = tv.summarize(t, tv.AnalysisConfig(model=model))
    decode = next(p for p in a.document["efficiency"]["phases"] if p["kind"] == "decode")
    # efficiency.decode.mbu_p50 names the decode phase's entry without its list's name
    result = tv.check(a, tv.Bounds(minimum={"efficiency.decode.mbu_p50": decode["mbu_p50"]}))
    assert result.ok and [r["value"] for r in result.rows] == [decode["mbu_p50"]]
    assert result.rows[0]["kind"] == "fraction"
    failing = tv.check(a, tv.Bounds(minimum={"efficiency.decode.mbu_p50": "99%"}))
    assert not failing.ok
    # the same steps against a device of half the bandwidth: MBU doubles, judged better
    half = tv.GpuSpec("half", {"bf16": H200_BF16}, H200_BYTES / 2)
    b = tv.summarize(t, tv.AnalysisConfig(model=model, gpu=half))
    rows = tv.diff(a, b).rows.filter(pl.col("section") == "efficiency")
    mbu = rows.filter(pl.col("metric").str.starts_with("decode MBU p50")).row(0, named=True)
    assert mbu["ratio"] == pytest.approx(2.0, rel=1e-6) and mbu["verdict"] == "better"
    assert mbu["role"] == "rate"
    mfu = rows.filter(pl.col("metric").str.starts_with("decode MFU p50")).row(0, named=True)
    assert mfu["verdict"] == "same"


def test_check_bounds_a_figure_whose_higher_value_is_better() -> None:
    """Issue 49: diff called the decode MBU p50 worse (×0.67) and `check
    --max-regression 10%` passed it: only the figures whose lower value is better were
    bounded. Planted: the same steps on a device of 1.5× the bandwidth, so MBU is 2/3."""
    t = tv.load(GENERATED / "dense_vllm_detailed.json.gz")
    model = tv.load_model(CONFIGS / "engine-dense.json")
    a = tv.summarize(t, model=model)
    wider = tv.DeviceSpec("wider", {"bf16": H200_BF16}, H200_BYTES * 1.5)
    b = tv.summarize(t, model=model, gpu=wider)
    d = tv.diff(a, b)
    mbu = d.rows.filter(pl.col("metric").str.starts_with("decode MBU p50")).row(0, named=True)
    assert mbu["ratio"] == pytest.approx(2 / 3, rel=1e-6) and mbu["verdict"] == "worse"
    result = tv.check(b, tv.Bounds(baseline=a, max_regression=0.1))
    failed = {r["check"]: r["value"] for r in result.failed}
    label = f"efficiency: {mbu['metric']} >= baseline × 0.90"
    assert failed[label] == pytest.approx(2 / 3, rel=1e-6)
    assert tv.check(b, tv.Bounds(baseline=a, max_regression=0.4)).ok  # 0.67 >= 0.60


# --- per op from record_shapes -----------------------------------------------------------


@pytest.mark.parametrize("scenario", ["hybrid_vllm_old", "vllm_capture_then_serve"])
def test_gemm_work_from_shapes_is_as_planted(scenario: str) -> None:
    """Each planted aten::mm's 2·T·K·N FLOPs and bytes reach its GEMM kernel, through
    runtime and driver launches alike (the down projection launches via cuLaunchKernel),
    and none reaches the kernels around it; the warm-up forwards under capture are left
    out with their kernels."""
    t = truth(scenario)
    s = tv.summarize(tv.load(GENERATED / f"{scenario}.json.gz"))
    planted = t["op_work"]
    kt = s.kernel_table.filter(pl.col("flops").is_not_null())
    got = {r["name"]: r for r in kt.iter_rows(named=True)}
    assert set(got) == set(planted["by_name"])
    for name, want in planted["by_name"].items():
        assert got[name]["flops"] == pytest.approx(want["flops"], rel=1e-12)
        assert got[name]["bytes"] == pytest.approx(want["bytes"], rel=1e-12)
        assert got[name]["tflops"] == pytest.approx(want["flops"] / want["ns"] * 1e9 / 1e12)
        assert got[name]["intensity"] == pytest.approx(want["flops"] / want["bytes"])
        ridge = H200_BF16 / H200_BYTES
        assert got[name]["bound"] == (
            "compute" if want["flops"] / want["bytes"] >= ridge else "memory"
        )
    families = {f["family"]: f for f in s.document["efficiency"]["families"] or []}
    assert set(families) == set(planted["by_family"])
    for family, want in planted["by_family"].items():
        assert families[family]["flops"] == want["flops"]
        assert families[family]["bytes"] == want["bytes"]
    assert planted["driver_flops"] > 0  # the driver's launches are part of what matched


def _stdlib_gemm_flops(path: Path) -> list[tuple[int, float]]:
    """(ts in ns, FLOPs) of every aten::mm/addmm/bmm op, read with json alone."""
    import gzip
    from decimal import Decimal

    out = []
    with gzip.open(path, "rt") as f:
        for e in json.load(f)["traceEvents"]:
            dims = (e.get("args") or {}).get("Input Dims")
            name = e.get("name")
            if (
                e.get("ph") != "X"
                or dims is None
                or name not in ("aten::mm", "aten::addmm", "aten::bmm")
            ):
                continue
            if name == "aten::addmm":
                dims = dims[1:]
            a, b = dims[0], dims[1]
            batched = name == "aten::bmm"
            flops = 2 * a[0] * a[1] * a[2] * b[2] if batched else 2 * a[0] * a[1] * b[1]
            ts = int(Decimal(str(e["ts"])) * 1000)
            out.append((ts, float(flops)))
    return sorted(out)


@pytest.mark.slow  # about 2-3 s; CI runs it (the default run stays under 2 minutes)
@pytest.mark.parametrize("name", ["h100-hf-qwen1.5-0.5b-chat", "h100-hf-owlv2-large"])
def test_real_gemm_flops_match_a_stdlib_reading(name: str) -> None:
    from traceview.analysis.work.op_flops import ops_with_work

    path = ROOT.parent / "shared" / "traces" / "tracelens" / f"{name}.json.gz"
    if not path.exists():
        pytest.skip("../shared/traces is not here")
    t = tv.load(path)
    ops = ops_with_work(t).filter(pl.col("name").is_in(["aten::mm", "aten::addmm", "aten::bmm"]))
    got = sorted(zip(ops["a0"].to_list(), ops["flops"].to_list(), strict=True))
    want = _stdlib_gemm_flops(path)
    assert len(got) == len(want) > 0
    assert [f for _, f in got] == [f for _, f in want]
    s = tv.summarize(t)
    peak = s.document["efficiency"]["gpu"]["peak_flops"]["bf16"]
    families = s.document["efficiency"]["families"] or []
    assert families and all(f["tflops"] * 1e12 < peak for f in families)
    # every read GEMM's work reached a kernel: the driver's launches count
    kernel_flops = s.kernel_table["flops"].sum()
    assert kernel_flops > 0


@pytest.mark.slow
def test_heartbeat_efficiency_panel_and_report_table(tmp_path: Path) -> None:
    from traceview.render.charts import heartbeat_data

    trace = str(GENERATED / "dense_vllm_detailed.json.gz")
    config = str(CONFIGS / "engine-dense.json")
    s = tv.summarize(tv.load(trace), tv.AnalysisConfig(model=tv.load_model(config)))
    data = heartbeat_data(s)
    assert data.efficiency is not None
    assert data.efficiency.mbu.tolist() == s.steps["mbu"].to_list()
    assert data.efficiency.edges_ms.size == s.steps.height + 1
    assert heartbeat_data(tv.summarize(tv.load(trace))).efficiency is None
    out = tmp_path / "hb.png"
    r = CliRunner().invoke(cli, ["heartbeat", trace, "--efficiency", "-o", str(out)])
    assert r.exit_code == 2 and "--efficiency needs --model" in r.stderr and not out.exists()
    args = ["heartbeat", trace, "--efficiency", "--model", config, "-o", str(out)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = tmp_path / "r.html"
    r = CliRunner().invoke(cli, ["report", trace, "--model", config, "-o", str(page)])
    assert r.exit_code == 0, r.stderr
    html = page.read_text()
    assert "Efficiency by phase" in html and "MBU p50" in html
    r = CliRunner().invoke(cli, ["summarize", trace, "--model", config])
    assert "efficiency by phase" in r.stdout


@pytest.mark.slow
def test_context_from_record_shapes_counts_attention() -> None:
    """Hugging Face generate with SDPA: the keys' dims give each step's context (a stdlib
    reading of the same ops), and with the model the attention term is in the FLOPs."""
    import gzip

    path = ROOT.parent / "shared" / "traces" / "tracelens" / "h100-hf-qwen1.5-0.5b-chat.json.gz"
    if not path.exists():
        pytest.skip("../shared/traces is not here")
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    read = set()
    for e in events:
        if e.get("name") == "aten::scaled_dot_product_attention" and e.get("ph") == "X":
            q, k = e["args"]["Input Dims"][0], e["args"]["Input Dims"][1]
            b, s, s_kv = q[0], q[2], k[2]
            read.add((b * s_kv, b * (s * (s_kv - s) + s * (s + 1) // 2)))
    model = tv.load_model(CONFIGS / "qwen1.5-0.5b-chat.json")
    t = tv.load(path)
    # the bursts cut the prefill forward in two (1 + 23 of its 24 attention layers): such
    # parts get no figures, never 2·N·T over a part of the model
    bursts = tv.summarize(t, tv.AnalysisConfig(model=model))
    assert bursts.steps["flops"].null_count() == bursts.steps.height
    assert any("hold part of a forward" in w for w in bursts.warnings)
    # the ProfilerStep annotation holds the whole forward
    s = tv.summarize(t, tv.AnalysisConfig(model=model, method="annotations"))
    rows = [r for r in s.steps.to_dicts() if r["shape_kv_tokens"] is not None]
    assert rows and {(r["shape_kv_tokens"], r["shape_attention_pairs"]) for r in rows} <= read
    for r in rows:
        assert r["shape_attention_ops"] == 24
        assert r["attention_counted"] is True
        # hand-written: 24 blocks of 16 heads of 64, attention 2·16·(64 + 64) per pair
        attention = 2 * 16 * (64 + 64) * r["shape_attention_pairs"] * 24
        assert r["flops"] == 2 * model.active_block_params * r["tokens"] + attention
        assert 0 < r["mfu"] < 1


@pytest.mark.slow
def test_convolution_work_reads_stride_and_padding() -> None:
    """OWLv2's patch embedding, a 14×14 convolution of stride 14 over a 1008×1008 image:
    its FLOPs from the recorded stride, padding and dilation, by hand, and they reach the
    kernel cuDNN ran for it."""
    from traceview.analysis.work.op_flops import op_work, ops_with_work

    path = ROOT.parent / "shared" / "traces" / "tracelens" / "h100-hf-owlv2-large.json.gz"
    if not path.exists():
        pytest.skip("../shared/traces is not here")
    t = tv.load(path)
    convs = ops_with_work(t).filter(pl.col("name") == "aten::cudnn_convolution")
    assert convs.height >= 1
    by_hand = 2 * 1 * 1024 * (1008 // 14) ** 2 * 3 * 14 * 14  # N·O·out²·C·k²
    assert convs["flops"].to_list() == [float(by_hand)] * convs.height
    # stride 1 and 'same' padding keep the size; a transposed convolution is not read
    dims = json.dumps([[2, 8, 32, 32], [16, 8, 3, 3], [16]])
    types = json.dumps(["float", "float", "float"])
    same = op_work(
        "aten::conv2d", dims, types, json.dumps(["", "", "", "[1, 1]", "same", "[1, 1]", "1"])
    )
    assert same is not None and same[0] == 2 * 2 * 16 * 32 * 32 * 8 * 9
    grouped = op_work(
        "aten::convolution",
        json.dumps([[1, 8, 10, 10], [8, 2, 3, 3], []]),
        types,
        json.dumps(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "4"]),
    )
    assert grouped is not None and grouped[0] == 2 * 1 * 8 * 5 * 5 * 2 * 9
    transposed = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "4"]
    assert op_work("aten::convolution", dims, types, json.dumps(transposed)) is None
    assert op_work("aten::conv2d", dims, types, None) is None  # no concrete inputs recorded
    s = tv.summarize(t)
    # cuDNN's kernel for it carries the work of every such convolution, nothing else does
    conv_kernels = s.kernel_table.filter(pl.col("flops") == float(by_hand * convs.height))
    assert conv_kernels.height == 1 and "cudnn" in conv_kernels["name"][0]


def test_a_rank_of_a_parallel_run_is_warned_about() -> None:
    """The figures count the whole model: on one rank of several that is said, not hidden."""
    path = ROOT.parent / "shared" / "traces" / "param" / "dlrm_8rank"
    if not path.exists():
        pytest.skip("../shared/traces is not here")
    trace = sorted(path.glob("worker0_*.json.gz"))[0]
    s = tv.summarize(
        tv.load(trace), tv.AnalysisConfig(model=tv.load_model(CONFIGS / "engine-dense.json"))
    )
    assert any("one rank of 8" in w for w in s.warnings)
    assert not any("one rank of" in w for w in tv.summarize(tv.load(trace)).warnings)


def test_sliding_window_layers_are_said_to_be_counted_as_full(tmp_path: Path) -> None:
    """An unseen-trace probe's finding: gpt-oss and Gemma name half their attention layers
    ``sliding_attention``; their KV reads were counted over the whole context, silently
    (MBU about 2x high at 8k tokens of context, window 128). The figures stay an upper
    bound, and say so; a config without such layers says nothing."""
    dense = json.loads((CONFIGS / "engine-dense.json").read_text())
    windowed = dense | {
        "layer_types": ["sliding_attention", "full_attention"] * 4,
        "sliding_window": 128,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(windowed))
    trace = tv.load(GENERATED / "dense_vllm_detailed.json.gz")
    s = tv.summarize(trace, tv.AnalysisConfig(model=tv.load_model(path)))
    said = [w for w in s.warnings if "sliding window" in w]
    assert len(said) == 1 and "4 of the model's 8 attention layers" in said[0]
    plain = tv.summarize(
        trace, tv.AnalysisConfig(model=tv.load_model(CONFIGS / "engine-dense.json"))
    )
    assert not any("sliding window" in w for w in plain.warnings)
    assert s.steps["bytes"].to_list() == plain.steps["bytes"].to_list()  # the same upper bound
    # a review's finding: steps whose context no annotation states count no KV: nothing said
    no_context = tv.summarize(
        tv.load(GENERATED / "hybrid_chunked.json.gz"), tv.AnalysisConfig(model=tv.load_model(path))
    )
    assert no_context.steps["flops"].is_not_null().any()
    assert not any("sliding window" in w for w in no_context.warnings)


def test_the_context_counted_is_the_one_step_efficiency_reads() -> None:
    """A review's finding: the sliding-window warning read record_shapes' context on steps
    whose tokens an annotation states, where step_efficiency counts no KV at all."""
    from traceview.analysis.work.efficiency import _CONTEXT_COUNTED

    steps = pl.DataFrame(
        {
            "context_tokens": [0, 0, None],
            "generation_tokens": [8, 8, None],
            "kv_tokens": [None, 4096, None],
            "shape_kv_tokens": [4096, None, 4096],
        },
        schema_overrides={"kv_tokens": pl.Int64, "shape_kv_tokens": pl.Int64},
    )
    assert steps.select(_CONTEXT_COUNTED)["context_tokens"].to_list() == [False, True, True]
