"""Each step's kind: ``decode``, ``mixed`` or ``prefill``.

A step's **kind** is decided by the strongest evidence there is (``kind_source``):

- ``annotation``: the engine's annotation states the batch's composition (vLLM's
  ``execute_context_C(Ct)_generation_…``, SGLang's forward mode, or new requests in the
  older ``execute_new_N_cached_M``): prompt work and no decode work is ``prefill``, both
  ``mixed``, no prompt work ``decode``, whatever the kernel names say
  (:func:`~traceview.analysis.steps.records.stated_composition`).
- ``shapes``: otherwise, query tokens read from ``record_shapes`` above
  :data:`DECODE_QUERY_PER_REQUEST` per request rule out decode: ``mixed``.
- ``kernels``: otherwise a step is ``mixed`` when a prefill-only kernel starts in its span
  (the preset's ``prefill_family`` and ``prefill`` roles: linear-attention chunk kernels,
  attention kernels that never run decode), else ``decode``. A kernel name engines use for
  both (FlashInfer's ``BatchPrefillWith…``, Triton unified attention, FlashAttention varlen)
  never decides.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceview.analysis.classify.families import Rules
from traceview.analysis.steps.candidates import DeviceKernels
from traceview.analysis.steps.records import StepRecord, stated_composition, stated_requests

# A decode step runs one query token per request, or a few more under speculative decoding
# (draft tokens verified in the same step): more than this many per request is prompt work.
DECODE_QUERY_PER_REQUEST = 8


@dataclass(frozen=True)
class Kinds:
    """Each step's kind and the evidence that decided it (``kind``, ``source``), and how
    many steps the weaker evidence contradicted, by source (``disagreements``)."""

    kind: list[str]
    source: list[str]
    disagreements: dict[str, int]


def step_kinds(
    prefill_kernel: list[bool],
    recs: list[StepRecord],
    tokens: list[int | None],
    requests: list[int | None],
) -> Kinds:
    """Each step's kind by the strongest evidence there is (the module docstring): the
    annotation where it states the batch's composition; else the query tokens read from
    ``record_shapes`` where they rule decode out (more than
    :data:`DECODE_QUERY_PER_REQUEST` per request, the request count stated by the
    annotation or the op's layout); else the prefill-only kernels. Where the annotation
    states a decode-only step but the shapes or kernels show prompt work, the annotation
    wins and the disagreement is counted."""
    kind, source = [], []
    disagreements = {"kernels": 0, "shapes": 0}
    for has_prefill_kernel, rec, t, r in zip(prefill_kernel, recs, tokens, requests, strict=True):
        prompt, decode = stated_composition(rec)
        n = stated_requests(rec) if r is None else r
        too_many = t is not None and n is not None and t > DECODE_QUERY_PER_REQUEST * max(n, 1)
        if prompt is not None:
            kind.append(
                "mixed" if prompt and decode is not False else "prefill" if prompt else "decode"
            )
            source.append("annotation")
            if not prompt:
                disagreements["kernels"] += has_prefill_kernel
                disagreements["shapes"] += too_many
        elif too_many:
            kind.append("mixed")
            source.append("shapes")
        else:
            kind.append("mixed" if has_prefill_kernel else "decode")
            source.append("kernels")
    return Kinds(kind, source, {k: v for k, v in disagreements.items() if v})


def prefill_only(rules: Rules, k: DeviceKernels) -> np.ndarray:
    """Per kernel: it means prompt work, being of a ``prefill_family`` family or matching
    a ``prefill`` pattern (attention kernels that never run decode)."""
    mask = k.family.mask(rules.prefill_family)
    if rules.prefill:  # matched once per distinct (name, cat), then looked up per kernel
        names = k.family.pairs["name"].to_list()
        by_pair = [n is not None and rules.matches_any(str(n), rules.prefill) for n in names]
        mask |= np.array(by_pair, dtype=bool)[k.family.pair_of]
    return mask
