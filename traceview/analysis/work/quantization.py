"""How a ``quantization_config`` stores the weights (docs/metrics.md, "How close to the
hardware"): their dtype and the one the GEMMs run at, the bytes each quantized weight's
group adds (its scale and zero point), the modules left in the model's own dtype, and
whether lm_head is quantized too. A quantization not known here is refused, never taken
for the model's own dtype.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from traceview.analysis.work.config_fields import BYTES, LIMITS, Fields, activation_dtype, show
from traceview.errors import EfficiencyInputError

_QUANTIZATIONS = (
    "fp8 or fbgemm_fp8; mxfp4, nvfp4 or modelopt_fp4; modelopt FP8 or NVFP4; "
    "compressed-tensors with 8-bit float or 4-bit weights; 4-bit weights (bits or w_bit 4, "
    "load_in_4bit)"
)


@dataclass(frozen=True)
class Quantization:
    """How a ``quantization_config`` stores the weights: their dtype and the GEMMs'; the
    bytes per quantized weight its group's scale and zero point add; the module-name
    patterns it leaves in the model's own dtype; whether lm_head is quantized too."""

    weight_dtype: str
    compute_dtype: str
    active: bool = False  # a quantization_config is given
    group_overhead: float = 0.0
    skip: tuple[re.Pattern[str], ...] = ()
    lm_head: bool = False

    def plain(self, module: str) -> bool:
        """Whether the module of this dotted name keeps the model's own dtype: every one
        without a quantization, else those the config's skip list names (a name that
        holds an entry, as vLLM and SGLang match ``modules_to_not_convert``; ``*`` a
        wildcard; ``re:`` a regular expression, compressed-tensors' ``ignore``)."""
        return not self.active or any(p.search(module) for p in self.skip)


# the keys that list the modules a quantization leaves alone, by quantization library
_SKIP_KEYS = (
    "modules_to_not_convert",  # AWQ, GPTQ, fp8, mxfp4 (transformers and the engines)
    "ignore",  # compressed-tensors
    "exclude_modules",  # ModelOpt
    "llm_int8_skip_modules",  # bitsandbytes
)


def _skip_patterns(c: Fields, q: dict[str, object]) -> tuple[re.Pattern[str], ...]:
    """The config's modules left unquantized, as patterns over dotted module names."""
    out = []
    for key in _SKIP_KEYS:
        value = q.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise EfficiencyInputError(
                f"{c.where}: quantization_config.{key} = {show(value)} is not a list of "
                "module names"
            )
        for entry in value:
            if entry.startswith("re:"):
                text = entry[3:]
            else:
                text = ".*".join(re.escape(part) for part in entry.split("*"))
            try:
                out.append(re.compile(text))
            except re.error as exc:
                raise EfficiencyInputError(
                    f"{c.where}: quantization_config.{key} holds {show(entry)}, not a "
                    f"regular expression ({exc})"
                ) from None
    return tuple(out)


def _group_size(c: Fields, q: dict[str, object], *keys: str, default: int) -> int:
    """A quantization's group size: a whole number of weights sharing a scale, or -1 for
    one scale per output channel."""
    value = next((q[k] for k in keys if q.get(k) is not None), default)
    if type(value) is not int or not (value == -1 or 1 <= value <= LIMITS["width"]):
        key = next((k for k in keys if q.get(k) is not None), keys[0])
        raise EfficiencyInputError(
            f"{c.where}: quantization_config.{key} = {show(value)} is not a group size "
            f"(a whole number from 1 to {LIMITS['width']:,}, or -1)"
        )
    return value


def _flag(c: Fields, q: dict[str, object], key: str, default: bool) -> bool:
    value = q.get(key, default)
    if not isinstance(value, bool):
        raise EfficiencyInputError(
            f"{c.where}: quantization_config.{key} = {show(value)} is not true or false "
            "(a JSON boolean)"
        )
    return value


def _per_group(scale_bytes: float, zero_bytes: float, group: int) -> float:
    """Bytes per weight of its group's scale and zero point (none per output channel)."""
    return (scale_bytes + zero_bytes) / group if group > 0 else 0.0


FP16_SCALE = 2.0  # AWQ and GPTQ keep their scales in fp16


def quantization(c: Fields) -> Quantization:
    """The weights' storage (see :class:`Quantization`); a quantization not known here
    is refused, never taken for the model's own dtype."""
    base = activation_dtype(c)
    q = c.get("quantization_config")
    if q is None:
        return Quantization(base, base)
    if not isinstance(q, dict):
        raise EfficiencyInputError(
            f"{c.where}: quantization_config = {show(q)} is not a table of the quantization"
        )
    raw_method = q.get("quant_method", "")
    if not isinstance(raw_method, str):
        raise EfficiencyInputError(
            f"{c.where}: quantization_config.quant_method = {show(raw_method)} is not a name"
        )
    method = raw_method.lower()
    skip = _skip_patterns(c, q)

    def made(
        weights: str, compute: str, overhead: float = 0.0, lm_head: bool = False
    ) -> Quantization:
        return Quantization(weights, compute, True, overhead, skip, lm_head)

    if method in ("fp8", "fbgemm_fp8"):
        return made("fp8", "fp8")
    algo = q.get("quant_algo")
    nvfp4 = method in ("nvfp4", "modelopt_fp4") or (
        method == "modelopt" and isinstance(algo, str) and algo.upper() == "NVFP4"
    )
    if nvfp4:  # a 1-byte (fp8) scale per 16 weights
        return made("fp4", "fp4", 1 / 16)
    if method == "mxfp4":  # a 1-byte (e8m0) scale per 32 weights
        return made("fp4", "fp4", 1 / 32)
    if method == "modelopt" and isinstance(algo, str) and algo.upper() == "FP8":
        return made("fp8", "fp8")
    bits = q.get("bits", q.get("w_bit"))
    group, zero = -1, 0.0
    if method == "compressed-tensors":
        groups = q.get("config_groups")
        first: object = next(iter(groups.values()), None) if isinstance(groups, dict) else None
        weights = first.get("weights") if isinstance(first, dict) else None
        if isinstance(weights, dict):
            bits, kind = weights.get("num_bits"), weights.get("type")
            if bits == 8 and kind == "float":
                return made("fp8", "fp8")
            group = _group_size(c, weights, "group_size", default=-1)
            if not _flag(c, weights, "symmetric", True) and type(bits) is int:
                zero = bits / 8
            scale = BYTES[base]
        else:
            bits, kind, scale = None, None, BYTES[base]
    elif method == "awq":
        group = _group_size(c, q, "group_size", "q_group_size", default=128)
        zero = 0.5 if _flag(c, q, "zero_point", True) else 0.0
        scale = FP16_SCALE
    elif method in ("gptq", "gptq_marlin", "auto-round"):
        group = _group_size(c, q, "group_size", default=128)
        zero = 0.5 if not _flag(c, q, "sym", True) else 0.0
        scale = FP16_SCALE
    else:
        scale = 0.0
    flags = {key: _flag(c, q, key, False) for key in ("load_in_4bit", "load_in_8bit")}
    if (type(bits) is int and bits == 4) or flags["load_in_4bit"]:
        lm_head = _flag(c, q, "lm_head", False)
        if flags["load_in_4bit"] and method in ("", "bitsandbytes"):
            # an fp32 absmax per block of 64; double quantization: 1 byte per block and an
            # fp32 per 256 blocks
            double = _flag(c, q, "bnb_4bit_use_double_quant", False)
            overhead = (1 + 4 / 256) / 64 if double else 4 / 64
        else:
            overhead = _per_group(scale, zero, group)
        # weight-only: dequantized into the activations' dtype
        return made("int4", base, overhead, lm_head)
    if (type(bits) is int and bits == 8) or flags["load_in_8bit"]:
        raise EfficiencyInputError(
            f"{c.where}: quantization_config: 8-bit integer weights "
            f"({show(method or 'no quant_method')}) are not understood"
        )
    named = f"quant_method {show(raw_method)}" if raw_method else "no quant_method"
    raise EfficiencyInputError(
        f"{c.where}: quantization_config ({named}, bits {show(bits)}) is not understood; "
        f"known: {_QUANTIZATIONS}"
    )
