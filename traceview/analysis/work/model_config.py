"""A model from its Hugging Face ``config.json``: parameters per layer and in total, the
active parameters of a mixture of experts, the layer types of hybrid models, the KV-cache
bytes per token of a full-attention layer, and the weights' dtype (docs/metrics.md, "How
close to the hardware", where each formula is written out with a worked example).

The config is read as data, never fetched: a path to the file (or a folder holding one),
at most :data:`~traceview._io.MAX_INPUT_BYTES`. A field the formulas need and the config
lacks is one :class:`EfficiencyInputError` naming it, and so is one that is not what it
claims: every count a JSON integer within its bound in :data:`LIMITS` (zero only where it
means "none"), every flag a JSON boolean, a quantization traceview knows. Every layer is
taken as a pre-norm transformer block: an attention (or linear-attention, or Mamba) mixer,
then a gated MLP (three matrices: gate, up, down) or a mixture of gated experts, each with
its norm.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from traceview._io import read_capped
from traceview.analysis.base.document import ModelFacts
from traceview.analysis.work.config_fields import BYTES, Fields, activation_dtype, parse_int, show
from traceview.analysis.work.config_fields import LIMITS as LIMITS  # the bounds, read here
from traceview.analysis.work.quantization import quantization
from traceview.errors import EfficiencyInputError

FULL, LINEAR, MAMBA = "full_attention", "linear_attention", "mamba"
MAX_PARAMS = 10**15  # the whole model: a config counting more is refused


@dataclass(frozen=True)
class Layer:
    """One block: its mixer kind, its parameters, those of its experts (all, and each), the
    experts per token, and of these the parameters a quantization leaves in the model's own
    dtype (norms, biases, the router, and the modules the config names)."""

    kind: str  # full_attention | linear_attention | mamba (sliding windows count as full)
    params: int  # every parameter of the block
    expert_params: int  # one routed expert's parameters (0 for a dense MLP)
    experts: int  # routed experts (0 for a dense MLP)
    experts_per_token: int
    # of the parameters outside the routed experts, those held in the model's own dtype
    plain_params: int = 0
    plain_expert_params: int = 0  # of one routed expert's, those held in the model's dtype


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
        plain_dtype: the model's own dtype, which the weights a quantization leaves alone
            keep (``""``: ``weight_dtype``).
        group_overhead: bytes per quantized weight added by its group's scale and zero
            point (``scale + zero point`` over ``group_size``; 0 without groups).
        lm_head_quantized: whether lm_head is quantized with the blocks (GPTQ's
            ``lm_head: true``); engines keep it in the model's dtype otherwise.
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
    windowed_layers: int = 0  # full-attention layers that attend over a sliding window
    plain_dtype: str = ""
    group_overhead: float = 0.0
    lm_head_quantized: bool = False

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
        """A quantized weight's bytes, its share of its group's scale and zero point
        included (a weight in an unquantized model: its dtype's bytes)."""
        return BYTES[self.weight_dtype] + self.group_overhead

    @property
    def plain_bytes_per_param(self) -> float:
        """The bytes of a weight held in the model's own dtype."""
        return BYTES[self.plain_dtype or self.weight_dtype]

    def weight_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """Per step of ``tokens`` tokens, the bytes of the weights it reads (float64):
        every block's part outside the routed experts and lm_head, and per
        mixture-of-experts block ``min(E, k·T)`` routed experts (an upper bound on the
        experts its tokens touch); each parameter at its dtype's bytes (quantized, or the
        model's own where the quantization leaves it)."""
        q, p = self.weight_bytes_per_param, self.plain_bytes_per_param
        dense = self.lm_head_params * (q if self.lm_head_quantized else p)
        moe: dict[tuple[int, int, float], int] = {}  # (E, k, one expert's bytes) -> layers
        for layer in self.layers:
            outside = layer.params - layer.experts * layer.expert_params
            dense += (outside - layer.plain_params) * q + layer.plain_params * p
            if layer.experts:
                expert = (
                    layer.expert_params - layer.plain_expert_params
                ) * q + layer.plain_expert_params * p
                key = (layer.experts, layer.experts_per_token, expert)
                moe[key] = moe.get(key, 0) + 1
        out = np.full(tokens.size, float(dense))
        reach = tokens.astype(np.float64)  # k·T in floats: a trace's T never wraps around
        for (experts, per_token, expert), layers in moe.items():
            out += layers * np.minimum(float(experts), per_token * reach) * expert
        return out

    def to_dict(self) -> ModelFacts:
        return {
            "name": self.name,
            "params": self.params,
            "active_params": self.active_params,
            "layers": len(self.layers),
        }


Part = tuple[str, int, bool]  # a module's name below its block, its parameters, a linear


def _attention(c: Fields, hidden: int) -> tuple[list[Part], int, int, int, float]:
    """A full-attention block's mixer: its modules (name, parameters, whether it is a
    linear layer a quantization may convert), query heads, per-head query-key and value
    widths, and the KV cache elements per token (keys and values, every KV head)."""
    heads = c.int("num_attention_heads", "n_head", kind="heads")
    at = "self_attn."
    if c.has("kv_lora_rank"):  # multi-head latent attention (DeepSeek-V2/V3)
        rank, rope = c.int("kv_lora_rank", kind="width"), c.int("qk_rope_head_dim", kind="head_dim")
        nope, v = c.int("qk_nope_head_dim", kind="head_dim"), c.int("v_head_dim", kind="head_dim")
        q_rank = c.int("q_lora_rank", kind="width", default=0, zero=True)
        if q_rank:
            q: list[Part] = [
                (at + "q_a_proj", hidden * q_rank, True),
                (at + "q_a_layernorm", q_rank, False),
                (at + "q_b_proj", q_rank * heads * (nope + rope), True),
            ]
        else:
            q = [(at + "q_proj", hidden * heads * (nope + rope), True)]
        kv: list[Part] = [
            (at + "kv_a_proj_with_mqa", hidden * (rank + rope), True),
            (at + "kv_a_layernorm", rank, False),
            (at + "kv_b_proj", rank * heads * (nope + v), True),
        ]
        parts = [*q, *kv, (at + "o_proj", heads * v * hidden, True)]
        return parts, heads, nope + rope, v, float(rank + rope)
    kv_heads = c.int("num_key_value_heads", kind="heads", default=heads)
    if heads % kv_heads:
        raise EfficiencyInputError(
            f"{c.where}: num_key_value_heads = {kv_heads} does not divide "
            f"{c.key('num_attention_heads', 'n_head')} = {heads}"
        )
    if not c.has("head_dim") and hidden % heads:
        raise EfficiencyInputError(
            f"{c.where}: no head_dim, and {c.key('hidden_size', 'd_model', 'n_embd')} = "
            f"{hidden} is not a multiple of {c.key('num_attention_heads', 'n_head')} = {heads}"
        )
    head_dim = c.int("head_dim", kind="head_dim", default=hidden // heads)
    qw, kvw = heads * head_dim, kv_heads * head_dim
    parts = [
        (at + "q_proj", hidden * qw, True),
        (at + "k_proj", hidden * kvw, True),
        (at + "v_proj", hidden * kvw, True),
        (at + "o_proj", qw * hidden, True),
    ]
    qwen2 = c.get("model_type") == "qwen2"
    bias = c.flag("attention_bias", c.flag("qkv_bias", qwen2))
    if bias:
        parts.append(
            (at + "bias", qw + 2 * kvw + (hidden if c.flag("attention_bias", False) else 0), False)
        )
    if c.get("model_type") in ("qwen3", "qwen3_moe", "qwen3_next", "gemma3", "olmo2"):
        parts.append((at + "qk_norm", 2 * head_dim, False))  # q_norm and k_norm
    return parts, heads, head_dim, head_dim, float(2 * kvw)


def _linear_attention(c: Fields, hidden: int) -> list[Part]:
    """A Gated DeltaNet mixer (Qwen3-Next's ``linear_attention`` layers)."""
    nk, dk = (
        c.int("linear_num_key_heads", kind="heads"),
        c.int("linear_key_head_dim", kind="head_dim"),
    )
    nv = c.int("linear_num_value_heads", kind="heads")
    dv = c.int("linear_value_head_dim", kind="head_dim")
    kernel = c.int("linear_conv_kernel_dim", kind="factor", default=4)
    conv = 2 * nk * dk + nv * dv
    at = "linear_attn."
    return [
        (at + "in_proj_qkvz", hidden * (2 * nk * dk + 2 * nv * dv), True),
        (at + "in_proj_ba", hidden * 2 * nv, True),
        (at + "conv1d", conv * kernel, False),  # the depthwise convolution
        (at + "dt_bias", 2 * nv, False),  # dt_bias, A_log
        (at + "norm", dv, False),  # the gated norm
        (at + "out_proj", nv * dv * hidden, True),
    ]


def _mamba(c: Fields, hidden: int) -> list[Part]:
    """A Mamba-2 mixer (its in_proj, depthwise convolution, per-head A, D and dt bias, the
    gated norm and out_proj)."""
    state = c.int("mamba_d_state", "ssm_state_size", "state_size", kind="width")
    expand = c.int("mamba_expand", "expand", kind="factor", default=2)
    inner = c.int("mamba_d_inner", kind="width", default=expand * hidden)
    groups = c.int("mamba_n_groups", "n_groups", kind="heads", default=1)
    if not c.has("mamba_n_heads", "mamba_num_heads") and inner < 64:
        raise EfficiencyInputError(
            f"{c.where}: no mamba_n_heads, and the inner width {inner} holds no head of 64"
        )
    nheads = c.int("mamba_n_heads", "mamba_num_heads", kind="heads", default=inner // 64)
    kernel = c.int("mamba_d_conv", "conv_kernel", kind="factor", default=4)
    conv = inner + 2 * groups * state
    at = "mixer."
    return [
        (at + "in_proj", hidden * (2 * inner + 2 * groups * state + nheads), True),
        (at + "conv1d", conv * kernel + conv, False),
        (at + "A_log", 3 * nheads, False),  # A, D and dt_bias
        (at + "norm", inner, False),
        (at + "out_proj", inner * hidden, True),
    ]


def _layer_kinds(c: Fields, n: int) -> list[str]:
    """Each block's mixer, from ``layer_types``, ``layers_block_type`` or the hybrid's own
    pattern field; full attention where the config names none."""
    named = c.get("layer_types", "layers_block_type")
    if isinstance(named, list):
        key = c.key("layer_types", "layers_block_type")
        if len(named) != n:
            raise EfficiencyInputError(
                f"{c.where}: {key} lists {len(named)} layers, num_hidden_layers is {n}"
            )
        kinds = []
        for t in named:
            if not isinstance(t, str):
                raise EfficiencyInputError(f"{c.where}: {key} holds {show(t)}, not a name")
            t = t.lower()
            if "linear" in t:
                kinds.append(LINEAR)
            elif "mamba" in t or "ssm" in t:
                kinds.append(MAMBA)
            elif "attention" in t or t in ("attn", "full", "sliding", "global", "local"):
                kinds.append(FULL)
            else:
                raise EfficiencyInputError(f"{c.where}: layer type {show(t)} is not understood")
        return kinds
    if named is not None:
        key = c.key("layer_types", "layers_block_type")
        raise EfficiencyInputError(f"{c.where}: {key} = {show(named)} is not a list of names")
    pattern = c.get("hybrid_override_pattern")  # Nemotron-H: M mamba, * attention, - MLP
    if isinstance(pattern, str):
        raise EfficiencyInputError(
            f"{c.where}: hybrid_override_pattern (Nemotron-H) is not understood yet"
        )
    interval = c.int("full_attention_interval", kind="layers", default=0, zero=True)
    if interval:
        return [FULL if (i + 1) % interval == 0 else LINEAR for i in range(n)]
    return [FULL] * n


def _windowed_layers(c: Fields) -> int:
    """The attention layers ``layer_types`` names as attending over a sliding window
    (gpt-oss, Gemma 2 and 3: ``sliding_attention``, ``local``): counted as full attention,
    which reads their KV cache over the whole context (:func:`_layer_kinds` has checked the
    names)."""
    named = c.get("layer_types", "layers_block_type")
    if not isinstance(named, list):
        return 0
    names = [t.lower() for t in named if isinstance(t, str)]
    return sum(1 for t in names if "sliding" in t or t == "local")


_EXPERTS = ("num_experts", "n_routed_experts", "num_local_experts")
_PER_TOKEN = ("num_experts_per_tok", "experts_per_token", "moe_top_k")


def _moe_layers(c: Fields, n: int) -> list[bool]:
    """Which blocks carry a mixture of experts."""
    experts = c.int(*_EXPERTS, kind="experts", default=0, zero=True)
    if experts == 0:
        return [False] * n
    first_dense = c.int("first_k_dense_replace", kind="layers", default=0, zero=True)
    step = c.int("decoder_sparse_step", "moe_layer_freq", kind="layers", default=1)
    listed = c.get("mlp_only_layers")
    if listed is None:
        listed = []
    if not isinstance(listed, list) or not all(type(i) is int and 0 <= i < n for i in listed):
        raise EfficiencyInputError(
            f"{c.where}: mlp_only_layers = {show(listed)} is not a list of layer indices "
            f"(whole numbers from 0 to {n - 1})"
        )
    dense_only = set(listed)
    if c.has("decoder_sparse_step"):  # Qwen-MoE: every step-th block, 1-based
        return [(i + 1) % step == 0 and i not in dense_only for i in range(n)]
    # DeepSeek: after the first dense blocks, every freq-th; Mixtral and gpt-oss: all
    return [i >= first_dense and i % step == 0 and i not in dense_only for i in range(n)]


def model_spec(doc: dict[str, object], where: str = "config.json") -> ModelSpec:
    """A :class:`ModelSpec` from a parsed config.

    Raises:
        EfficiencyInputError: a field the formulas need is missing or not understood, a
            count is not a whole number within its bound (:data:`LIMITS`), a flag is not
            a boolean, more experts per token than experts, or more than
            :data:`MAX_PARAMS` parameters in all.
    """
    c = Fields(doc, where)
    hidden = c.int("hidden_size", "d_model", "n_embd", kind="width")
    n = c.int("num_hidden_layers", "n_layer", "num_layers", kind="layers")
    vocab = c.int("vocab_size", kind="vocab")
    quant = quantization(c)
    kinds, moe = _layer_kinds(c, n), _moe_layers(c, n)
    attn: list[Part] = []
    heads = qk = v = 0
    kv_elems = 0.0
    if FULL in kinds:
        attn, heads, qk, v, kv_elems = _attention(c, hidden)
    experts = c.int(*_EXPERTS, kind="experts", default=0, zero=True)
    per_token = c.int(*_PER_TOKEN, kind="experts", default=0, zero=True)
    if experts and not per_token:
        raise EfficiencyInputError(f"{where}: model not understood: no num_experts_per_tok")
    if experts and per_token > experts:
        raise EfficiencyInputError(
            f"{where}: {c.key(*_PER_TOKEN)} = {per_token} is more than {c.key(*_EXPERTS)} = "
            f"{experts}: a token cannot reach more experts than there are"
        )
    if any(moe):
        # Mixtral and gpt-oss give the expert's width as intermediate_size
        expert_inter = c.int(
            "moe_intermediate_size",
            kind="width",
            default=c.int("intermediate_size", kind="width"),
        )
        shared = c.int("shared_expert_intermediate_size", kind="width", default=0, zero=True)
        n_shared = c.int("n_shared_experts", kind="experts", default=0, zero=True)
    else:
        expert_inter = shared = n_shared = 0
    dense_inter = (
        c.int("intermediate_size", "ffn_dim", "n_inner", kind="width") if not all(moe) else 0
    )
    mixers = {
        FULL: attn,
        LINEAR: _linear_attention(c, hidden) if LINEAR in kinds else [],
        MAMBA: _mamba(c, hidden) if MAMBA in kinds else [],
    }
    gated = ("gate_proj", "up_proj", "down_proj")
    layers = []
    for i, kind in enumerate(kinds):
        at = f"model.layers.{i}."
        parts: list[Part] = [*mixers[kind], ("input_layernorm", 2 * hidden, False)]
        expert = 3 * hidden * expert_inter if moe[i] else 0
        if moe[i]:
            parts.append(("mlp.gate", hidden * experts, False))  # the router
            if shared:
                parts += [(f"mlp.shared_expert.{m}", hidden * shared, True) for m in gated]
                parts.append(("mlp.shared_expert_gate", hidden, False))
            parts += [
                (f"mlp.shared_experts.{m}", n_shared * hidden * expert_inter, True) for m in gated
            ]
        else:
            parts += [(f"mlp.{m}", hidden * dense_inter, True) for m in gated]
        params = sum(size for _, size, _ in parts) + experts * expert
        plain = sum(size for name, size, linear in parts if not linear or quant.plain(at + name))
        plain_expert = expert if moe[i] and quant.plain(at + "mlp.experts") else 0
        if moe[i]:
            layers.append(Layer(kind, params, expert, experts, per_token, plain, plain_expert))
        else:
            layers.append(Layer(kind, params, 0, 0, 0, plain, 0))
    tied = c.flag("tie_word_embeddings", True)
    kv_bytes = kv_elems * BYTES[activation_dtype(c)]
    spec = ModelSpec(
        name=str(c.get("model_type", default=Path(where).parent.name or "model")),
        layers=tuple(layers),
        embedding_params=vocab * hidden + hidden,  # the table and the final norm
        lm_head_params=vocab * hidden,
        tied=tied,
        heads=heads,
        qk_dim=qk,
        v_dim=v,
        kv_bytes_per_token=kv_bytes,
        weight_dtype=quant.weight_dtype,
        compute_dtype=quant.compute_dtype,
        windowed_layers=_windowed_layers(c),
        plain_dtype=activation_dtype(c),
        group_overhead=quant.group_overhead,
        # a tied lm_head is the embedding, which no quantization converts
        lm_head_quantized=quant.lm_head and not tied and not quant.plain("lm_head"),
    )
    if spec.params > MAX_PARAMS:
        raise EfficiencyInputError(
            f"{where}: the config's counts make {spec.params:.3g} parameters, more than "
            f"{MAX_PARAMS:.0e}: a count in it is not the model's"
        )
    return spec


def load_model(path: str | Path) -> ModelSpec:
    """``--model``: a Hugging Face ``config.json`` (or a folder holding one), at most
    :data:`~traceview._io.MAX_INPUT_BYTES` and nested no deeper than Python's JSON reader
    allows.

    Raises:
        EfficiencyInputError: unreadable, too large, not UTF-8 JSON, or a model not
            understood.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    data = read_capped(p, "model config", EfficiencyInputError)
    try:
        doc = json.loads(data.decode("utf-8"), parse_int=parse_int)
    except UnicodeDecodeError as exc:
        raise EfficiencyInputError(
            f"{p}: not a JSON model config: not UTF-8 ({exc.reason})"
        ) from None
    except RecursionError:
        raise EfficiencyInputError(f"{p}: not a model config: nested too deeply to read") from None
    except ValueError as exc:  # json.JSONDecodeError
        raise EfficiencyInputError(f"{p}: not a JSON model config: {exc}") from None
    if not isinstance(doc, dict):
        raise EfficiencyInputError(f"{p}: not a model config (a JSON object)")
    return model_spec(doc, str(p))
