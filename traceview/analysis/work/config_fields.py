"""Reading a Hugging Face ``config.json``'s fields as data: each count a JSON integer within
its bound (:data:`LIMITS`), each flag a JSON boolean, each error one line naming the file
and the key (docs/metrics.md, "What a config and a spec must hold"). The model's own dtype
is read here too; :mod:`.model_config` and :mod:`.quantization` read through it.
"""

from __future__ import annotations

from typing import cast

from traceview.errors import EfficiencyInputError

BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5, "int4": 0.5}
TORCH_DTYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
}

# The bound on every count a config gives, by what it counts (docs/metrics.md, "The
# model's config"): far above any published model, low enough that no figure overflows.
LIMITS = {
    "layers": 10_000,  # num_hidden_layers, and the layer indices and intervals
    "width": 1_000_000,  # hidden_size, intermediate sizes, LoRA ranks, state sizes
    "heads": 100_000,  # attention, key-value, linear-attention and Mamba heads, groups
    "head_dim": 100_000,  # head_dim and every per-head width
    "experts": 100_000,  # num_experts, num_experts_per_tok, n_shared_experts
    "vocab": 100_000_000,  # vocab_size
    "factor": 1_000,  # mamba_expand, convolution kernels
}


class Digits(str):
    """An integer too long to be a count (JSON allows any length), kept as its digits so
    that the key holding it is named (Python refuses to read over 4300 digits)."""


def parse_int(text: str) -> int | Digits:
    return int(text) if len(text) <= 30 else Digits(text)


def show(value: object) -> str:
    """A config's value as an error shows it: ASCII, escaped, at most 40 characters."""
    if isinstance(value, Digits):
        return f"a {len(value.lstrip('-'))}-digit integer"
    text = ascii(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Fields:
    """The config's fields, read with the path in every error."""

    def __init__(self, doc: dict[str, object], where: str) -> None:
        text = doc.get("text_config")  # multimodal wrappers keep the language model here
        self.doc = {**doc, **cast(dict[str, object], text)} if isinstance(text, dict) else doc
        self.where = where

    def key(self, *keys: str) -> str:
        """The first of ``keys`` the config gives (else the first)."""
        return next((k for k in keys if self.doc.get(k) is not None), keys[0])

    def has(self, *keys: str) -> bool:
        return any(self.doc.get(k) is not None for k in keys)

    def get(self, *keys: str, default: object = None) -> object:
        for k in keys:
            if self.doc.get(k) is not None:
                return self.doc[k]
        return default

    def int(self, *keys: str, kind: str, default: int | None = None, zero: bool = False) -> int:
        """The count at the first of ``keys`` given: a JSON integer from 1 (0 where
        ``zero``: it means none) to ``LIMITS[kind]``; ``default`` where none is given."""
        value = self.get(*keys)
        if value is None:
            if default is not None:
                return default
            raise EfficiencyInputError(
                f"{self.where}: model not understood: no {' or '.join(keys)} in the config"
            )
        low, high = (0 if zero else 1), LIMITS[kind]
        if type(value) is not int or not low <= value <= high:
            raise EfficiencyInputError(
                f"{self.where}: {self.key(*keys)} = {show(value)} is not a count "
                f"(a whole number from {low} to {high:,})"
            )
        return value

    def flag(self, key: str, default: bool) -> bool:
        """A JSON boolean (``"false"``, a string, is not one)."""
        value = self.doc.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise EfficiencyInputError(
                f"{self.where}: {key} = {show(value)} is not true or false (a JSON boolean)"
            )
        return value


def activation_dtype(c: Fields) -> str:
    """The model's own dtype (``torch_dtype``, or ``dtype``): its activations' and its KV
    cache's, whatever the weights are quantized to."""
    value = c.get("torch_dtype", "dtype", default="bfloat16")
    raw = value.removeprefix("torch.") if isinstance(value, str) else None
    base = TORCH_DTYPES.get(raw) if raw is not None else None
    if base is None:
        raise EfficiencyInputError(
            f"{c.where}: {c.key('torch_dtype', 'dtype')} = {show(value)} is not understood "
            f"(known: {', '.join(TORCH_DTYPES)})"
        )
    return base
