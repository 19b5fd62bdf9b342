"""A model from its Hugging Face ``config.json``: parameters per layer and in total, the
active parameters of a mixture of experts, the layer types of hybrid models, the KV-cache
bytes per token of a full-attention layer, and the weights' dtype (docs/metrics.md, "How
close to the hardware", where each formula is written out with a worked example).

The config is read as data, never fetched: a path to the file (or a folder holding one).
A field the formulas need and the config lacks is one :class:`EfficiencyInputError` naming
it. Every layer is taken as a pre-norm transformer block: an attention (or linear-attention,
or Mamba) mixer, then a gated MLP (three matrices: gate, up, down) or a mixture of gated
experts, each with its norm.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from traceview.analysis.base.document import ModelFacts
from traceview.errors import EfficiencyInputError

FULL, LINEAR, MAMBA = "full_attention", "linear_attention", "mamba"
BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5, "int4": 0.5}
_TORCH_DTYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
}


@dataclass(frozen=True)
class Layer:
    """One block: its mixer kind, its parameters, those of its experts (all, and each), the
    experts per token, and whether it is a mixture of experts."""

    kind: str  # full_attention | linear_attention | mamba (sliding windows count as full)
    params: int  # every parameter of the block
    expert_params: int  # one routed expert's parameters (0 for a dense MLP)
    experts: int  # routed experts (0 for a dense MLP)
    experts_per_token: int


@dataclass(frozen=True)
class ModelSpec:
    """What MFU and MBU need of a model (docs/metrics.md).

    Attributes:
        name: the config's ``model_type`` (or the file's folder).
        layers: the blocks, in order.
        embedding_params, lm_head_params: the input embedding and the output projection
            (the same matrix where the config ties them; counted once in ``params``).
        params: every parameter.
        active_params: the parameters one token runs through: the blocks with only
            ``experts_per_token`` routed experts each, plus embedding and lm_head.
        heads, head_dim: the full-attention query heads and their width (attention FLOPs).
        qk_dim, v_dim: per head, the widths of the query-key and the value products.
        kv_bytes_per_token: the KV cache of one token in one full-attention layer.
        weight_dtype: the weights' dtype (bf16, fp16, fp32, fp8, fp4 or int4), and
            ``compute_dtype`` the dtype whose peak the GEMMs run at.
    """

    name: str
    layers: tuple[Layer, ...]
    embedding_params: int
    lm_head_params: int
    tied: bool
    heads: int
    qk_dim: int
    v_dim: int
    kv_bytes_per_token: float
    weight_dtype: str
    compute_dtype: str

    @property
    def block_params(self) -> int:
        return sum(x.params for x in self.layers)

    @property
    def params(self) -> int:
        return self.block_params + self.embedding_params + (0 if self.tied else self.lm_head_params)

    @property
    def active_block_params(self) -> int:
        """N of ``flops = 2·N·tokens``: the blocks' parameters a token runs through."""
        return sum(
            x.params - (x.experts - x.experts_per_token) * x.expert_params for x in self.layers
        )

    @property
    def active_params(self) -> int:
        return (
            self.active_block_params
            + self.embedding_params
            + (0 if self.tied else self.lm_head_params)
        )

    @property
    def full_attention_layers(self) -> int:
        return sum(1 for x in self.layers if x.kind == FULL)

    @property
    def weight_bytes_per_param(self) -> float:
        return BYTES[self.weight_dtype]

    def to_dict(self) -> ModelFacts:
        return {
            "name": self.name,
            "params": self.params,
            "active_params": self.active_params,
            "layers": len(self.layers),
        }


class _Config:
    """The config's fields, read with the path in every error."""

    def __init__(self, doc: dict[str, object], where: str) -> None:
        text = doc.get("text_config")  # multimodal wrappers keep the language model here
        self.doc = {**doc, **cast(dict[str, object], text)} if isinstance(text, dict) else doc
        self.where = where

    def has(self, *keys: str) -> bool:
        return any(self.doc.get(k) is not None for k in keys)

    def get(self, *keys: str, default: object = None) -> object:
        for k in keys:
            if self.doc.get(k) is not None:
                return self.doc[k]
        return default

    def int(self, *keys: str, default: int | None = None) -> int:
        value = self.get(*keys)
        if value is None:
            if default is not None:
                return default
            raise EfficiencyInputError(
                f"{self.where}: model not understood: no {' or '.join(keys)} in the config"
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise EfficiencyInputError(f"{self.where}: {keys[0]} = {value!r} is not a count")
        return int(value)


def activation_dtype(c: _Config) -> str:
    """The model's own dtype (``torch_dtype``, or ``dtype``): its activations' and its KV
    cache's, whatever the weights are quantized to."""
    raw = str(c.get("torch_dtype", "dtype", default="bfloat16")).removeprefix("torch.")
    base = _TORCH_DTYPES.get(raw)
    if base is None:
        raise EfficiencyInputError(f"{c.where}: torch_dtype {raw!r} is not understood")
    return base


def _dtypes(c: _Config) -> tuple[str, str]:
    """The weights' dtype and the dtype their GEMMs run at."""
    base = activation_dtype(c)
    q = c.get("quantization_config")
    if not isinstance(q, dict):
        return base, base
    method = str(q.get("quant_method", "")).lower()
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8", "fp8"
    if method in ("mxfp4", "nvfp4", "modelopt_fp4"):
        return "fp4", "fp4"
    bits = q.get("bits", q.get("w_bit"))
    if method == "compressed-tensors":
        groups = q.get("config_groups")
        first: object = next(iter(groups.values()), None) if isinstance(groups, dict) else None
        weights = first.get("weights") if isinstance(first, dict) else None
        if isinstance(weights, dict):
            bits, kind = weights.get("num_bits"), weights.get("type")
        else:
            bits, kind = None, None
        if bits == 8 and kind == "float":
            return "fp8", "fp8"
    if bits == 4 or q.get("load_in_4bit"):
        return "int4", base  # weight-only: dequantized into the activations' dtype
    if bits == 8 or q.get("load_in_8bit"):
        raise EfficiencyInputError(
            f"{c.where}: 8-bit integer weights ({method or 'quantization_config'}) are not "
            "understood; give --gpu a spec whose peak fits them"
        )
    return base, base


def _attention(c: _Config, hidden: int) -> tuple[int, int, int, int, float]:
    """A full-attention block's mixer: its parameters, query heads, per-head query-key and
    value widths, and the KV cache elements per token (keys and values, every KV head)."""
    heads = c.int("num_attention_heads", "n_head")
    if c.has("kv_lora_rank"):  # multi-head latent attention (DeepSeek-V2/V3)
        rank, rope = c.int("kv_lora_rank"), c.int("qk_rope_head_dim")
        nope, v = c.int("qk_nope_head_dim"), c.int("v_head_dim")
        q_rank = c.int("q_lora_rank", default=0)
        if q_rank:
            q = hidden * q_rank + q_rank + q_rank * heads * (nope + rope)
        else:
            q = hidden * heads * (nope + rope)
        kv = hidden * (rank + rope) + rank + rank * heads * (nope + v)
        return q + kv + heads * v * hidden, heads, nope + rope, v, float(rank + rope)
    kv_heads = c.int("num_key_value_heads", default=heads)
    head_dim = c.int("head_dim", default=hidden // heads)
    q, kv = heads * head_dim, kv_heads * head_dim
    params = hidden * q + 2 * hidden * kv + q * hidden
    if c.get("attention_bias", "qkv_bias", default=c.get("model_type") == "qwen2"):
        params += q + 2 * kv + (hidden if c.get("attention_bias") else 0)
    if c.get("model_type") in ("qwen3", "qwen3_moe", "qwen3_next", "gemma3", "olmo2"):
        params += 2 * head_dim  # q_norm and k_norm
    return params, heads, head_dim, head_dim, float(2 * kv)


def _linear_attention(c: _Config, hidden: int) -> int:
    """A Gated DeltaNet mixer (Qwen3-Next's ``linear_attention`` layers)."""
    nk, dk = c.int("linear_num_key_heads"), c.int("linear_key_head_dim")
    nv, dv = c.int("linear_num_value_heads"), c.int("linear_value_head_dim")
    kernel = c.int("linear_conv_kernel_dim", default=4)
    conv = 2 * nk * dk + nv * dv
    return (
        hidden * (2 * nk * dk + 2 * nv * dv)  # in_proj_qkvz
        + hidden * 2 * nv  # in_proj_ba
        + conv * kernel  # the depthwise convolution
        + 2 * nv  # dt_bias, A_log
        + dv  # the gated norm
        + nv * dv * hidden  # out_proj
    )


def _mamba(c: _Config, hidden: int) -> int:
    """A Mamba-2 mixer (its in_proj, depthwise convolution, per-head A, D and dt bias, the
    gated norm and out_proj)."""
    state = c.int("mamba_d_state", "ssm_state_size", "state_size")
    inner = c.int("mamba_d_inner", default=c.int("mamba_expand", "expand", default=2) * hidden)
    groups = c.int("mamba_n_groups", "n_groups", default=1)
    nheads = c.int("mamba_n_heads", "mamba_num_heads", default=inner // 64)
    kernel = c.int("mamba_d_conv", "conv_kernel", default=4)
    conv = inner + 2 * groups * state
    return (
        hidden * (2 * inner + 2 * groups * state + nheads)
        + conv * kernel
        + conv
        + 3 * nheads
        + inner
        + inner * hidden
    )


def _layer_kinds(c: _Config, n: int) -> list[str]:
    """Each block's mixer, from ``layer_types``, ``layers_block_type`` or the hybrid's own
    pattern field; full attention where the config names none."""
    named = c.get("layer_types", "layers_block_type")
    if isinstance(named, list):
        if len(named) != n:
            raise EfficiencyInputError(
                f"{c.where}: layer_types lists {len(named)} layers, num_hidden_layers is {n}"
            )
        kinds = []
        for t in named:
            t = str(t).lower()
            if "linear" in t:
                kinds.append(LINEAR)
            elif "mamba" in t or "ssm" in t:
                kinds.append(MAMBA)
            elif "attention" in t or t in ("attn", "full", "sliding", "global", "local"):
                kinds.append(FULL)
            else:
                raise EfficiencyInputError(f"{c.where}: layer type {t!r} is not understood")
        return kinds
    pattern = c.get("hybrid_override_pattern")  # Nemotron-H: M mamba, * attention, - MLP
    if isinstance(pattern, str):
        raise EfficiencyInputError(
            f"{c.where}: hybrid_override_pattern (Nemotron-H) is not understood yet"
        )
    interval = c.int("full_attention_interval", default=0)
    if interval:
        return [FULL if (i + 1) % interval == 0 else LINEAR for i in range(n)]
    return [FULL] * n


def _moe_layers(c: _Config, n: int) -> list[bool]:
    """Which blocks carry a mixture of experts."""
    experts = c.int("num_experts", "n_routed_experts", "num_local_experts", default=0)
    if experts == 0:
        return [False] * n
    first_dense = c.int("first_k_dense_replace", default=0)
    step = c.int("decoder_sparse_step", "moe_layer_freq", default=1)
    listed = c.get("mlp_only_layers")
    dense_only = set(listed) if isinstance(listed, list) else set()
    if c.has("decoder_sparse_step"):  # Qwen-MoE: every step-th block, 1-based
        return [(i + 1) % max(step, 1) == 0 and i not in dense_only for i in range(n)]
    # DeepSeek: after the first dense blocks, every freq-th; Mixtral and gpt-oss: all
    return [i >= first_dense and i % max(step, 1) == 0 and i not in dense_only for i in range(n)]


def model_spec(doc: dict[str, object], where: str = "config.json") -> ModelSpec:
    """A :class:`ModelSpec` from a parsed config.

    Raises:
        EfficiencyInputError: a field the formulas need is missing or not understood.
    """
    c = _Config(doc, where)
    hidden = c.int("hidden_size", "d_model", "n_embd")
    n = c.int("num_hidden_layers", "n_layer", "num_layers")
    vocab = c.int("vocab_size")
    weight_dtype, compute_dtype = _dtypes(c)
    kinds, moe = _layer_kinds(c, n), _moe_layers(c, n)
    attn, heads, qk, v, kv_elems = _attention(c, hidden) if FULL in kinds else (0, 0, 0, 0, 0.0)
    experts = c.int("num_experts", "n_routed_experts", "num_local_experts", default=0)
    per_token = c.int("num_experts_per_tok", "experts_per_token", "moe_top_k", default=0)
    if experts and not per_token:
        raise EfficiencyInputError(f"{where}: model not understood: no num_experts_per_tok")
    if any(moe):
        # Mixtral and gpt-oss give the expert's width as intermediate_size
        expert_inter = c.int("moe_intermediate_size", default=c.int("intermediate_size"))
    else:
        expert_inter = 0
    layers = []
    for i, kind in enumerate(kinds):
        if kind == FULL:
            mixer = attn
        elif kind == LINEAR:
            mixer = _linear_attention(c, hidden)
        else:
            mixer = _mamba(c, hidden)
        norms = 2 * hidden
        if moe[i]:
            expert = 3 * hidden * expert_inter
            shared = c.int("shared_expert_intermediate_size", default=0)
            shared_params = 3 * hidden * shared + (hidden if shared else 0)  # its gate
            shared_params += c.int("n_shared_experts", default=0) * expert
            router = hidden * experts
            mlp = experts * expert + shared_params + router
            layers.append(Layer(kind, mixer + mlp + norms, expert, experts, per_token))
        else:
            inter = c.int("intermediate_size", "ffn_dim", "n_inner")
            layers.append(Layer(kind, mixer + 3 * hidden * inter + norms, 0, 0, 0))
    tied = bool(c.get("tie_word_embeddings", default=True))
    kv_bytes = kv_elems * BYTES[activation_dtype(c)]
    return ModelSpec(
        name=str(c.get("model_type", default=Path(where).parent.name or "model")),
        layers=tuple(layers),
        embedding_params=vocab * hidden + hidden,  # the table and the final norm
        lm_head_params=vocab * hidden,
        tied=tied,
        heads=heads,
        qk_dim=qk,
        v_dim=v,
        kv_bytes_per_token=kv_bytes,
        weight_dtype=weight_dtype,
        compute_dtype=compute_dtype,
    )


def load_model(path: str | Path) -> ModelSpec:
    """``--model``: a Hugging Face ``config.json`` (or a folder holding one).

    Raises:
        EfficiencyInputError: unreadable, not JSON, or a model not understood.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        doc = json.loads(p.read_text())
    except OSError as exc:
        raise EfficiencyInputError(f"{p}: cannot read model config: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EfficiencyInputError(f"{p}: not a JSON model config: {exc}") from None
    if not isinstance(doc, dict):
        raise EfficiencyInputError(f"{p}: not a model config (a JSON object)")
    return model_spec(doc, str(p))
