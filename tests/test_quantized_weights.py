"""The weights a decode step reads of a quantized model (issue 52): each weight at the bytes
it is stored in. A 4-bit AWQ/GPTQ weight is half a byte plus its share of its group's fp16
scale and zero point; lm_head, the norms, biases and routers stay in the model's own dtype,
and so does every module the config's ``modules_to_not_convert`` (or ``ignore``,
``exclude_modules``, ``llm_int8_skip_modules``) names, matched as the engines match it. The
expected bytes are worked by hand from Llama-3.1-8B's published shapes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

import traceview as tv
from traceview.analysis.work.model_config import model_spec

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
LLAMA = json.loads((CONFIGS / "llama-3.1-8b.json").read_text())
MOE = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())

# Llama-3.1-8B by hand: h 4096, 32 heads of 128, 8 KV heads, MLP 14,336, vocab 128,256
H, LAYERS, VOCAB = 4096, 32, 128_256
ATTENTION = H * 4096 + 2 * H * 1024 + 4096 * H  # q, k, v, o: 41,943,040
MLP = 3 * H * 14_336  # 176,160,768
NORMS = 2 * H
LM_HEAD = VOCAB * H  # 525,336,576
AWQ_WEIGHT = 0.5 + (2 + 0.5) / 128  # 4 bits, and a group of 128 shares an fp16 scale and a zero


def _awq(**extra: object) -> dict[str, object]:
    doc = copy.deepcopy(LLAMA)
    doc["torch_dtype"] = "float16"
    doc["quantization_config"] = {
        "quant_method": "awq",
        "bits": 4,
        "group_size": 128,
        "zero_point": True,
        **extra,
    }
    return doc


def _read(doc: dict[str, object], tokens: int = 1) -> float:
    return float(model_spec(doc).weight_bytes(np.array([tokens]))[0])


def test_an_awq_llama_keeps_lm_head_and_norms_in_fp16() -> None:
    quantized = LAYERS * (ATTENTION + MLP)
    expected = quantized * AWQ_WEIGHT + (LAYERS * NORMS + LM_HEAD) * 2
    assert _read(_awq()) == pytest.approx(expected, rel=1e-12)
    # every weight at half a byte, lm_head and norms too, is 19.8% short
    every_weight_int4 = (quantized + LAYERS * NORMS + LM_HEAD) * 0.5
    assert every_weight_int4 / expected == pytest.approx(0.8023, abs=1e-4)


def test_the_unquantized_model_reads_every_weight_in_its_dtype() -> None:
    doc = copy.deepcopy(LLAMA)  # bf16
    expected = (LAYERS * (ATTENTION + MLP + NORMS) + LM_HEAD) * 2
    assert _read(doc) == pytest.approx(expected, rel=1e-12)


def test_modules_to_not_convert_keep_the_model_dtype() -> None:
    quantized = LAYERS * (ATTENTION + MLP)
    base = quantized * AWQ_WEIGHT + (LAYERS * NORMS + LM_HEAD) * 2
    # a name that holds an entry is left alone: every attention projection
    attention_left = _read(_awq(modules_to_not_convert=["self_attn"]))
    assert attention_left == pytest.approx(base + LAYERS * ATTENTION * (2 - AWQ_WEIGHT), rel=1e-12)
    # the first block only ("model.layers.0." is not inside "model.layers.10.")
    first = _read(_awq(modules_to_not_convert=["model.layers.0."]))
    assert first == pytest.approx(base + (ATTENTION + MLP) * (2 - AWQ_WEIGHT), rel=1e-12)
    # gpt-oss writes wildcards; compressed-tensors writes re: patterns
    wild = _read(_awq(modules_to_not_convert=["model.layers.*.self_attn"]))
    assert wild == pytest.approx(attention_left, rel=1e-12)
    regex = _read(_awq(modules_to_not_convert=[r"re:.*\.mlp\.down_proj$"]))
    assert regex == pytest.approx(base + LAYERS * (H * 14_336) * (2 - AWQ_WEIGHT), rel=1e-12)


def test_gptq_quantizes_lm_head_only_when_it_says_so() -> None:
    doc = _awq()
    doc["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    gptq_weight = 0.5 + 2 / 128  # symmetric: a scale per group, no zero point read
    quantized = LAYERS * (ATTENTION + MLP)
    plain_head = quantized * gptq_weight + (LAYERS * NORMS + LM_HEAD) * 2
    assert _read(doc) == pytest.approx(plain_head, rel=1e-12)
    doc["quantization_config"]["lm_head"] = True  # type: ignore[index]
    assert _read(doc) == pytest.approx(
        (quantized + LM_HEAD) * gptq_weight + LAYERS * NORMS * 2, rel=1e-12
    )


def test_experts_named_by_the_skip_list_stay_in_the_model_dtype() -> None:
    doc = copy.deepcopy(MOE)
    doc["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}
    quantized = model_spec(doc)
    doc["quantization_config"]["modules_to_not_convert"] = ["mlp.experts"]
    kept = model_spec(doc)
    layer = quantized.layers[0]
    assert (
        layer.plain_expert_params == 0 and kept.layers[0].plain_expert_params == layer.expert_params
    )
    # one token reaches k experts per block: their bytes move from 4-bit to bf16
    k, experts = layer.experts_per_token, len(quantized.layers)
    moved = experts * k * layer.expert_params * (2 - quantized.weight_bytes_per_param)
    one = np.array([1])
    assert kept.weight_bytes(one)[0] - quantized.weight_bytes(one)[0] == pytest.approx(
        moved, rel=1e-12
    )
    # the router never is quantized
    assert layer.plain_params >= layer.experts * 2048


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"modules_to_not_convert": "lm_head"}, "modules_to_not_convert"),
        ({"modules_to_not_convert": [3]}, "modules_to_not_convert"),
        ({"ignore": ["re:("]}, "ignore"),
        ({"group_size": 0}, "group_size"),
        ({"group_size": 64.0}, "group_size"),
        ({"zero_point": "yes"}, "zero_point"),
    ],
)
def test_a_careless_quantization_config_is_named(extra: dict[str, object], key: str) -> None:
    with pytest.raises(tv.EfficiencyInputError, match=key):
        model_spec(_awq(**extra), "cfg.json")
