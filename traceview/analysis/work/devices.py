"""GPU peaks for MFU and MBU: the built-in table (``traceview/presets/devices.toml``),
matched by the trace's ``deviceProperties``, or a part named or described with ``--gpu``
(``AnalysisConfig.gpu``; ``device`` is which device of the trace is analysed).

A peak is the vendor's dense datasheet figure, per dtype (``fp32``, ``tf32``, ``bf16``,
``fp16``, ``fp8``, ``fp4``), in FLOP/s, and the memory bandwidth in bytes/s
(docs/metrics.md, "How close to the hardware").
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from traceview._io import read_toml
from traceview.analysis.base.document import GpuPeaks
from traceview.errors import EfficiencyInputError

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
GIB = 1 << 30
# A peak a spec may give (docs/metrics.md): finite, and within these bounds, far outside
# any real part's; a figure beyond them is a typo (or 1e-300), not a device.
PEAK_FLOPS = (1e6, 1e18)  # FLOP/s
PEAK_BYTES_PER_S = (1e6, 1e16)  # B/s


def _peak(value: object, key: str, bounds: tuple[float, float], where: str) -> float:
    """A peak: a finite number within ``bounds``; else one error naming the key."""
    low, high = bounds
    # nan and inf fail the comparison, a huge integer too (no float conversion)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        if isinstance(value, int) and not isinstance(value, bool):
            shown = f"{value:.3g}" if abs(value) < 10**300 else "a huge integer"
        else:
            shown = ascii(value) if isinstance(value, bool | float | str) else type(value).__name__
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise EfficiencyInputError(
            f"{where}: {key} = {shown} is not a peak (a number from {low:.0e} to {high:.0e})"
        )
    return float(value)


@dataclass(frozen=True)
class GpuSpec:
    """A GPU part's peaks: ``peak_flops`` by dtype (FLOP/s; a dtype the part has no figure
    for is absent), ``peak_bytes_per_s`` (memory bandwidth) and where they come from."""

    name: str
    peak_flops: dict[str, float] = field(default_factory=dict)
    peak_bytes_per_s: float | None = None
    source: str | None = None

    def to_dict(self) -> GpuPeaks:
        return {
            "name": self.name,
            "peak_flops": {d: self.peak_flops[d] for d in DTYPES if d in self.peak_flops},
            "peak_bytes_per_s": self.peak_bytes_per_s,
            "source": self.source,
        }


@dataclass(frozen=True)
class _Entry:
    spec: GpuSpec
    match: re.Pattern[str] | None
    match_empty: bool
    compute: str | None
    memory_gib: tuple[float, float] | None


def _spec(table: Mapping[str, object], where: str) -> GpuSpec:
    """A :class:`GpuSpec` from one TOML table (``name``, ``peak_bytes_per_s``,
    ``source``, ``[peak_flops]``)."""
    name = table.get("name")
    if not isinstance(name, str) or not name:
        raise EfficiencyInputError(f"{where}: a GPU spec needs a name")
    flops = table.get("peak_flops", {})
    if not isinstance(flops, dict):
        raise EfficiencyInputError(f"{where}: [peak_flops] must be a table of dtype = FLOP/s")
    unknown = set(flops) - set(DTYPES)
    if unknown:
        raise EfficiencyInputError(
            f"{where}: unknown dtype(s) {', '.join(sorted(unknown))} in [peak_flops] "
            f"(use {', '.join(DTYPES)})"
        )
    peaks = {
        dtype: _peak(value, f"peak_flops.{dtype}", PEAK_FLOPS, where)
        for dtype, value in flops.items()
    }
    raw_bandwidth = table.get("peak_bytes_per_s")
    bandwidth = (
        None
        if raw_bandwidth is None
        else _peak(raw_bandwidth, "peak_bytes_per_s", PEAK_BYTES_PER_S, where)
    )
    if not peaks and bandwidth is None:
        raise EfficiencyInputError(f"{where}: neither [peak_flops] nor peak_bytes_per_s given")
    source = table.get("source")
    return GpuSpec(name, peaks, bandwidth, str(source) if source is not None else None)


@cache
def builtin_devices() -> tuple[_Entry, ...]:
    """The built-in table, in match order."""
    text = (resources.files("traceview") / "presets" / "devices.toml").read_text()
    out = []
    for i, table in enumerate(tomllib.loads(text)["device"]):
        memory = table.get("memory_gib")
        pattern = table.get("match")
        out.append(
            _Entry(
                _spec(table, f"devices.toml entry {i}"),
                None if pattern is None else re.compile(pattern, re.IGNORECASE),
                bool(table.get("match_empty", False)),
                table.get("compute"),
                None if memory is None else (float(memory[0]), float(memory[1])),
            )
        )
    return tuple(out)


def match_device(properties: Mapping[str, object] | None) -> GpuSpec | None:
    """The built-in entry for a trace's ``deviceProperties`` entry (its ``name``,
    ``totalGlobalMem``, ``computeMajor``/``computeMinor``), or None where none matches."""
    if not properties:
        return None
    name = str(properties.get("name") or "").strip()
    memory = properties.get("totalGlobalMem")
    gib = float(memory) / GIB if isinstance(memory, int | float) else None
    major, minor = properties.get("computeMajor"), properties.get("computeMinor")
    compute = f"{major}.{minor}" if major is not None and minor is not None else None
    for e in builtin_devices():
        if name:
            if e.match is None or not e.match.search(name):
                continue
        elif not e.match_empty:
            continue
        if e.compute is not None and e.compute != compute:
            continue
        if e.memory_gib is not None and (
            gib is None or not e.memory_gib[0] <= gib <= e.memory_gib[1]
        ):
            continue
        return e.spec
    return None


def load_gpu(text: str) -> GpuSpec:
    """A GPU part's peaks (``--gpu``, ``AnalysisConfig.gpu``): a spec file (``*.toml``:
    ``name``, ``peak_bytes_per_s``, ``source``, ``[peak_flops]``) or a built-in part, by its
    name (any case) or by a name its pattern matches (``"NVIDIA H100 80GB HBM3"``).

    Raises:
        EfficiencyInputError: an unreadable or malformed spec file, or an unknown part.
    """
    if text.endswith(".toml") or Path(text).is_file():
        return _spec(read_toml(text, "GPU spec", EfficiencyInputError), text)
    for e in builtin_devices():
        if e.spec.name.lower() == text.strip().lower():
            return e.spec
    for e in builtin_devices():
        if e.match is not None and e.match.search(text):
            return e.spec
    names = sorted({e.spec.name for e in builtin_devices()})
    raise EfficiencyInputError(
        f"--gpu {text!r}: unknown GPU (built-in: {', '.join(names)}; or give a SPEC.toml)"
    )
