"""Efficiency inputs are data, never believed (issue 32, item 5): every hostile or careless
model config (``--model``) and GPU spec (``--gpu``) is one line naming the file and the
key, exit 2; a figure past 100% always says why."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceview as tv
from traceview.cli import cli

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "fixtures" / "configs"
GENERATED = ROOT / "fixtures" / "generated"
DENSE_TRACE = str(GENERATED / "dense_vllm_detailed.json.gz")

DENSE, MOE, MLA, HYBRID = "engine-dense", "qwen3-30b-a3b", "deepseek-v3", "engine-hybrid-moe"
DIGITS = "7" * 5000


def _raw(value: str) -> str:
    """A value written into the JSON text as it stands (NaN, Infinity, 5000 digits)."""
    return f"@@{value}@@"


# (base config, key, value, the key the message names): each a config a careless or hostile
# user could give; ``_raw`` values are JSON text that json.dumps would not write
HOSTILE = [
    (DENSE, "hidden_size", _raw("NaN"), "hidden_size"),
    (DENSE, "hidden_size", _raw("Infinity"), "hidden_size"),
    (DENSE, "num_hidden_layers", _raw("-Infinity"), "num_hidden_layers"),
    (DENSE, "num_hidden_layers", _raw("NaN"), "num_hidden_layers"),
    (DENSE, "num_attention_heads", 0, "num_attention_heads"),
    (DENSE, "num_attention_heads", 0.5, "num_attention_heads"),
    (DENSE, "hidden_size", 1e30, "hidden_size"),
    (DENSE, "intermediate_size", 1e30, "intermediate_size"),
    (DENSE, "vocab_size", 1e30, "vocab_size"),
    (DENSE, "hidden_size", _raw(DIGITS), "hidden_size"),
    (DENSE, "head_dim", 1_000_000_000, "head_dim"),
    (DENSE, "hidden_size", 0, "hidden_size"),
    (DENSE, "num_hidden_layers", 0, "num_hidden_layers"),
    (DENSE, "hidden_size", 4096.5, "hidden_size"),
    (DENSE, "num_hidden_layers", 10_001, "num_hidden_layers"),
    (DENSE, "vocab_size", 100_000_001, "vocab_size"),
    (DENSE, "vocab_size", True, "vocab_size"),
    (DENSE, "hidden_size", "2048", "hidden_size"),
    (DENSE, "intermediate_size", [5632], "intermediate_size"),
    (DENSE, "hidden_size", {"value": 2048}, "hidden_size"),
    (DENSE, "num_key_value_heads", -1, "num_key_value_heads"),
    (DENSE, "num_key_value_heads", 5, "num_key_value_heads"),  # does not divide 16 heads
    (DENSE, "tie_word_embeddings", "false", "tie_word_embeddings"),
    (DENSE, "attention_bias", "true", "attention_bias"),
    (DENSE, "torch_dtype", 5, "torch_dtype"),
    (DENSE, "quantization_config", {"bits": 3}, "quantization_config"),
    (DENSE, "quantization_config", {"quant_method": "gptq", "bits": "4"}, "quantization_config"),
    (DENSE, "quantization_config", {"load_in_4bit": "yes"}, "load_in_4bit"),
    (DENSE, "quantization_config", "fp8", "quantization_config"),
    (MOE, "num_experts_per_tok", 512, "num_experts_per_tok"),  # more than its 128 experts
    (MOE, "num_experts_per_tok", 0, "num_experts_per_tok"),
    (MOE, "mlp_only_layers", [[1], [2]], "mlp_only_layers"),
    (MOE, "mlp_only_layers", [48], "mlp_only_layers"),  # it has layers 0 to 47
    (MOE, "num_experts", _raw("NaN"), "num_experts"),
    (MOE, "num_experts", -1, "num_experts"),
    (MOE, "moe_intermediate_size", 1e30, "moe_intermediate_size"),
    (MOE, "decoder_sparse_step", 0, "decoder_sparse_step"),
    (MOE, "head_dim", 1e9, "head_dim"),
    (MLA, "kv_lora_rank", _raw("NaN"), "kv_lora_rank"),
    (MLA, "q_lora_rank", -1, "q_lora_rank"),
    (MLA, "n_shared_experts", 1.5, "n_shared_experts"),
    (MLA, "first_k_dense_replace", _raw("Infinity"), "first_k_dense_replace"),
    (MLA, "n_routed_experts", _raw(DIGITS), "n_routed_experts"),
    (HYBRID, "layer_types", [1, 2, 3, 4, 5, 6, 7, 8], "layer_types"),
    (HYBRID, "linear_num_key_heads", 0, "linear_num_key_heads"),
    (HYBRID, "linear_conv_kernel_dim", 1e30, "linear_conv_kernel_dim"),
]


def _write(tmp_path: Path, base: str, key: str, value: object) -> Path:
    doc = json.loads((CONFIGS / f"{base}.json").read_text())
    doc[key] = value
    text = json.dumps(doc)
    if isinstance(value, str) and value.startswith("@@"):
        text = text.replace(json.dumps(value), value.strip("@"))
    path = tmp_path / "config.json"
    path.write_text(text)
    return path


def _one_line_error(r, *names: str) -> None:  # type: ignore[no-untyped-def]
    """Exit 2, one line ``Error: …`` on stderr naming each of ``names``, no traceback."""
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr
    for name in names:
        assert name in r.stderr, (name, r.stderr)


def test_the_bases_are_valid() -> None:
    """The sweep's bases load: what fails below fails for its one changed key."""
    for base in (DENSE, MOE, MLA, HYBRID):
        assert tv.load_model(CONFIGS / f"{base}.json").params > 0


@pytest.mark.parametrize(
    ("base", "key", "value", "named"),
    HOSTILE,
    ids=[f"{b}-{k}-{str(v)[:12]}" for b, k, v, _ in HOSTILE],
)
def test_a_hostile_config_is_one_line_naming_the_key(
    tmp_path: Path, base: str, key: str, value: object, named: str
) -> None:
    path = _write(tmp_path, base, key, value)
    r = CliRunner().invoke(cli, ["summarize", DENSE_TRACE, "--model", str(path)])
    _one_line_error(r, str(path), named)
    with pytest.raises(tv.EfficiencyInputError, match=named):  # the API says the same
        tv.load_model(path)


def test_a_deeply_nested_config_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": ' + "[" * 100_000 + "]" * 100_000 + "}")
    r = CliRunner().invoke(cli, ["summarize", DENSE_TRACE, "--model", str(path)])
    _one_line_error(r, str(path), "nested too deeply")


def test_a_non_utf8_config_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'{"model_type": "\xff"}')
    r = CliRunner().invoke(cli, ["summarize", DENSE_TRACE, "--model", str(path)])
    _one_line_error(r, str(path), "UTF-8")


def _limit_memory() -> None:  # in the child: even a regression cannot take the machine
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _run_guarded(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a child held to 4 GiB and 2 minutes: the inputs that once grew past 15 GB
    cannot take the machine even should that come back."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "traceview", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        preexec_fn=_limit_memory,
    )


@pytest.mark.slow
@pytest.mark.parametrize("layers", ["1000000000", "1e9"])
def test_a_billion_layers_fail_fast(tmp_path: Path, layers: str) -> None:
    path = _write(tmp_path, DENSE, "num_hidden_layers", _raw(layers))
    start = time.monotonic()
    r = _run_guarded("summarize", DENSE_TRACE, "--model", str(path))
    assert time.monotonic() - start < 60
    assert r.returncode == 2, r.stderr[-500:]
    assert r.stderr.count("\n") == 1 and "num_hidden_layers" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--model", "--gpu"])
def test_dev_zero_fails_fast_without_reading_it_all(tmp_path: Path, option: str) -> None:
    """``/dev/zero`` (endless) as a config or a spec: refused after 16 MiB, at once."""
    target = "/dev/zero"
    if option == "--gpu":  # a spec is read as a file when its name ends in .toml
        target = str(tmp_path / "zero.toml")
        os.symlink("/dev/zero", target)
    start = time.monotonic()
    r = _run_guarded("summarize", DENSE_TRACE, option, target)
    assert time.monotonic() - start < 60
    assert r.returncode == 2, r.stderr[-500:]
    assert r.stderr.count("\n") == 1 and "larger than 16 MiB" in r.stderr and target in r.stderr


def test_a_config_just_over_the_cap_is_refused_and_one_under_is_read(tmp_path: Path) -> None:
    doc = json.loads((CONFIGS / f"{DENSE}.json").read_text())
    base = json.dumps(doc)
    big, small = tmp_path / "big.json", tmp_path / "small.json"
    pad = (16 << 20) - len(base) - len(', "_pad": ""')
    small.write_text(base[:-1] + ', "_pad": "' + "x" * pad + '"}')
    big.write_text(base[:-1] + ', "_pad": "' + "x" * (pad + 1) + '"}')
    assert small.stat().st_size == 16 << 20
    assert tv.load_model(small).params == tv.load_model(CONFIGS / f"{DENSE}.json").params
    with pytest.raises(tv.EfficiencyInputError, match="larger than 16 MiB"):
        tv.load_model(big)


# --- the figures a config within its bounds gives are never wrapped ---------------------


def test_flops_past_int64_are_not_given_rather_than_wrapped(tmp_path: Path) -> None:
    """A config within every bound, with 100,000 heads of 100,000: the prefill steps'
    attention FLOPs pass 2^62 and are not given (with a warning); the decode steps'
    are exact, written out here."""
    layers, heads, head_dim, hidden, inter = 250, 100_000, 100_000, 8, 8
    doc = json.loads((CONFIGS / f"{DENSE}.json").read_text())
    doc.update(
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=head_dim,
        hidden_size=hidden,
        intermediate_size=inter,
    )
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    q = heads * head_dim
    n = layers * (4 * hidden * q + 3 * hidden * inter + 2 * hidden)
    per_pair = 2 * heads * (2 * head_dim) * layers
    truth = json.loads((GENERATED / "dense_vllm_detailed.truth.json").read_text())
    s = tv.summarize(tv.load(DENSE_TRACE), tv.AnalysisConfig(model=tv.load_model(path)))
    rows = s.steps.to_dicts()
    given = 0
    for row, step in zip(rows, truth["steps"], strict=True):
        tokens = step["context_tokens"] + step["generation_tokens"]
        exact = 2 * n * tokens + per_pair * step["attention_pairs"]
        if exact >= 2**62:
            assert row["flops"] is None and row["mfu"] is None
        else:
            assert row["flops"] == exact and row["mfu"] > 0
            given += 1
    assert 0 < given < len(rows)
    assert any("over 2^62" in w for w in s.warnings)


# --- device specs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("bf16 = inf", "peak_flops.bf16"),
        ("bf16 = nan", "peak_flops.bf16"),
        ("bf16 = -inf", "peak_flops.bf16"),
        ("bf16 = 1e-300", "peak_flops.bf16"),
        ("bf16 = 0", "peak_flops.bf16"),
        ("bf16 = -1e15", "peak_flops.bf16"),
        ("bf16 = 1e30", "peak_flops.bf16"),
        ('bf16 = "fast"', "peak_flops.bf16"),
        ("bf16 = true", "peak_flops.bf16"),
        ("bf16 = " + DIGITS[:4000], "peak_flops.bf16"),
        ("bf16 = " + DIGITS, "integer too long"),
    ],
)
def test_a_gpu_spec_peak_must_be_finite_and_bounded(tmp_path: Path, line: str, named: str) -> None:
    spec = tmp_path / "gpu.toml"
    spec.write_text(f'name = "lab part"\npeak_bytes_per_s = 1e12\n[peak_flops]\n{line}\n')
    r = CliRunner().invoke(cli, ["summarize", DENSE_TRACE, "--gpu", str(spec)])
    _one_line_error(r, str(spec), named)


@pytest.mark.parametrize("value", ["inf", "nan", "1e-300", "0", "1e30", "-1"])
def test_a_gpu_spec_bandwidth_must_be_finite_and_bounded(tmp_path: Path, value: str) -> None:
    spec = tmp_path / "gpu.toml"
    spec.write_text(f'name = "lab part"\npeak_bytes_per_s = {value}\n[peak_flops]\nbf16 = 1e15\n')
    config = str(CONFIGS / f"{DENSE}.json")
    r = CliRunner().invoke(
        cli,
        ["check", DENSE_TRACE, "--gpu", str(spec), "--model", config, "--max", "steps.count=1e9"],
    )
    _one_line_error(r, str(spec), "peak_bytes_per_s")


def test_a_non_utf8_gpu_spec_is_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "gpu.toml"
    spec.write_bytes(b'name = "lab \xff part"\npeak_bytes_per_s = 1e12\n')
    r = CliRunner().invoke(cli, ["summarize", DENSE_TRACE, "--gpu", str(spec)])
    _one_line_error(r, str(spec), "UTF-8")


def test_the_built_in_devices_are_within_the_bounds() -> None:
    from traceview.analysis.work.devices import PEAK_BYTES_PER_S, PEAK_FLOPS, builtin_devices

    for entry in builtin_devices():
        for peak in entry.spec.peak_flops.values():
            assert PEAK_FLOPS[0] * 1e3 <= peak <= PEAK_FLOPS[1] / 10
        bandwidth = entry.spec.peak_bytes_per_s
        assert bandwidth is None or PEAK_BYTES_PER_S[0] * 1e3 <= bandwidth <= PEAK_BYTES_PER_S[1]


# --- a figure above 100% says why ---------------------------------------------------------


def _slow_part(tmp_path: Path) -> tv.GpuSpec:
    """A part far slower than the H200 the fixtures ran on: every step passes 100%."""
    spec = tmp_path / "slow.toml"
    spec.write_text('name = "slow part"\npeak_bytes_per_s = 1e6\n[peak_flops]\nbf16 = 1e6\n')
    return tv.load_gpu(str(spec))


@pytest.mark.parametrize(
    ("scenario", "config", "moe"),
    [("dense_vllm_detailed", DENSE, False), ("hybrid_chunked", HYBRID, True)],
)
def test_mfu_and_mbu_above_one_are_warned_with_their_cause(
    tmp_path: Path, scenario: str, config: str, moe: bool
) -> None:
    truth = json.loads((GENERATED / f"{scenario}.truth.json").read_text())
    counted = sum(
        1
        for x in truth["steps"]
        if x["context_tokens"] is not None and x["generation_tokens"] is not None and x["busy_ns"]
    )
    s = tv.summarize(
        tv.load(GENERATED / f"{scenario}.json.gz"),
        tv.AnalysisConfig(
            model=tv.load_model(CONFIGS / f"{config}.json"), gpu=_slow_part(tmp_path)
        ),
    )
    assert (s.steps["mfu"] > 1).sum() == (s.steps["mbu"] > 1).sum() == counted > 0
    mfu = [w for w in s.warnings if w.startswith("efficiency: MFU above 1")]
    mbu = [w for w in s.warnings if w.startswith("efficiency: MBU above 1")]
    assert len(mfu) == len(mbu) == 1
    assert f"in {counted} step(s)" in mfu[0] and f"in {counted} step(s)" in mbu[0]
    for w in mfu + mbu:
        assert "not the traced model's" in w and "--gpu" in w
    assert ("expert" in mbu[0]) is moe  # a dense model's warning never speaks of experts
    # within the device's peaks, no such warning
    plain = tv.summarize(
        tv.load(GENERATED / f"{scenario}.json.gz"),
        tv.AnalysisConfig(model=tv.load_model(CONFIGS / f"{config}.json")),
    )
    assert not any("above 1" in w for w in plain.warnings)


def test_the_docs_state_the_bounds_the_code_holds() -> None:
    from traceview.analysis.work.devices import PEAK_BYTES_PER_S, PEAK_FLOPS
    from traceview.analysis.work.model_config import LIMITS, MAX_PARAMS

    text = (ROOT / "docs" / "metrics.md").read_text()
    for bound in LIMITS.values():
        assert f"| {bound:,} |" in text
    assert MAX_PARAMS == 10**15 and "at most 10^15 parameters" in text
    assert (PEAK_FLOPS, PEAK_BYTES_PER_S) == ((1e6, 1e18), (1e6, 1e16))
    assert "from 1e6 to 1e18 FLOP/s" in text and "from 1e6 to 1e16 B/s" in text


@pytest.mark.parametrize(
    ("quantization", "weights", "compute"),
    [
        ({"quant_method": "fp8"}, "fp8", "fp8"),
        ({"quant_method": "mxfp4"}, "fp4", "fp4"),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8", "fp8"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "fp4", "fp4"),
        ({"quant_method": "awq", "bits": 4}, "int4", "bf16"),
        ({"quant_method": "gptq", "bits": 4}, "int4", "bf16"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "int4", "bf16"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            "fp8",
            "fp8",
        ),
    ],
)
def test_a_known_quantization_is_read(
    tmp_path: Path, quantization: dict, weights: str, compute: str
) -> None:
    m = tv.load_model(_write(tmp_path, DENSE, "quantization_config", quantization))
    assert (m.weight_dtype, m.compute_dtype) == (weights, compute)


@pytest.mark.parametrize(
    "quantization",
    [
        {"bits": 3},
        {"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"},
        {"quant_method": "hqq", "nbits": 4},
        {"quant_method": "bitsandbytes", "load_in_8bit": True},
    ],
)
def test_an_unknown_quantization_is_named_never_taken_for_bf16(
    tmp_path: Path, quantization: dict
) -> None:
    with pytest.raises(tv.EfficiencyInputError, match="quantization_config"):
        tv.load_model(_write(tmp_path, DENSE, "quantization_config", quantization))
