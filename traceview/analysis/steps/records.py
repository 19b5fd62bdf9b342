"""The engine's own record of each step, read from its per-step annotation names.

Engines name the range around each step after the batch it ran (FIELD.md):

- vLLM, newer: ``execute_context_{C}({Ct})_generation_{G}({Gt})``, and the detailed variant
  ``execute_{N}_context_{C}(sq{Ct}sk…)_generation_{G}(sq{Gt}sk…)``. C counts context
  requests (no token produced yet: a prompt, or a later chunk of one) and Ct their tokens in
  this step; G and Gt the same for generation (decode) requests. A token field may carry
  more than the count (``888_788544`` is 888 tokens and 888²): its first integer is the count.
  The detailed field ``sq{Q}sk{K}sqsq{Q2}sqsk{QK}`` states, over its requests, the query
  tokens Q, the key (context) lengths K, and the sums of sq² and sq·sk: the step's
  ``kv_tokens`` are K over both fields, its ``attention_pairs`` the causal (query, key)
  pairs, QK − (Q2 − Q)/2 (each request's sq new tokens see sk − sq earlier keys and the
  new ones before them).
- vLLM V1, older: ``execute_new_{N}_cached_{M}``: N requests scheduled for the first time, M
  continuing ones (which may still be mid-prefill under chunking).
- SGLang: ``step[{MODE} bs={B} …]`` with the forward mode ``EXTEND``, ``MIXED``, ``DECODE``
  or ``IDLE``; newer builds wrap it in vLLM's detailed form.
- torch.profiler's own ``ProfilerStep#N`` marks an iteration and says nothing of the batch.

A step may carry several of these (SGLang's ``execute_…`` around ``step[…]``); their records
merge, the first to state a field winning.
"""

from __future__ import annotations

import re
from typing import TypedDict

STEP_ANNOTATION = re.compile(
    r"^(execute_(\d+_)?context_\d+\(.*\)_generation_\d+\(.*\)"  # vLLM (and newer SGLang)
    r"|execute_new_\d+_cached_\d+$"  # vLLM V1, older
    r"|step\[[A-Z_]+[ \]]"  # SGLang: step[DECODE bs=…], step[EXTEND …], step[MIXED …]
    r"|ProfilerStep#\d+$)"  # torch.profiler's own iterations
)

_CONTEXT_FORM = re.compile(r"^execute_(?:(\d+)_)?context_(\d+)\((.*)\)_generation_(\d+)\((.*)\)$")
_CACHED_FORM = re.compile(r"^execute_new_(\d+)_cached_(\d+)$")
_SGLANG_FORM = re.compile(r"^step\[([A-Z_]+)(.*)\]")
_LEADING_INT = re.compile(r"^(?:sq)?(\d+)")
_FIELD = re.compile(r"\b(bs|toks)=(\d+)")
_DETAILED = re.compile(r"^sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)")

# Columns of the step record, in the order the steps table shows them (all nullable).
RECORD_COLUMNS = (
    "context_requests",
    "context_tokens",
    "generation_requests",
    "generation_tokens",
    "new_requests",
    "cached_requests",
    "kv_tokens",
    "attention_pairs",
    "forward_mode",
)


class StepRecord(TypedDict, total=False):
    """What the engine's annotations state about one step (a field is absent, or None in a
    full record, where no annotation states it)."""

    context_requests: int | None
    context_tokens: int | None
    generation_requests: int | None
    generation_tokens: int | None
    new_requests: int | None
    cached_requests: int | None
    kv_tokens: int | None
    attention_pairs: int | None
    forward_mode: str | None


NO_PROMPT_MODES = ("DECODE", "IDLE", "TARGET_VERIFY", "DRAFT_EXTEND_V2")


def _tokens(field: str) -> int | None:
    m = _LEADING_INT.match(field)
    return int(m.group(1)) if m else None


def parse(name: str) -> StepRecord:
    """The fields one annotation name states (an empty dict when it states none)."""
    m = _CONTEXT_FORM.match(name)
    if m:
        out: StepRecord = {
            "context_requests": int(m.group(2)),
            "context_tokens": _tokens(m.group(3)),
            "generation_requests": int(m.group(4)),
            "generation_tokens": _tokens(m.group(5)),
        }
        both = [_DETAILED.match(m.group(3)), _DETAILED.match(m.group(5))]
        if all(both):
            q, k, q2, qk = (sum(int(d.group(i)) for d in both if d) for i in (1, 2, 3, 4))
            out["kv_tokens"], out["attention_pairs"] = k, qk - (q2 - q) // 2
        return out
    m = _CACHED_FORM.match(name)
    if m:
        return {"new_requests": int(m.group(1)), "cached_requests": int(m.group(2))}
    m = _SGLANG_FORM.match(name)
    if m:
        mode = m.group(1)
        fields = {k: int(v) for k, v in _FIELD.findall(m.group(2))}
        sglang: StepRecord = {"forward_mode": mode}
        bs = fields.get("bs")
        if mode == "DECODE" and bs is not None:  # one token per request
            sglang["context_requests"], sglang["context_tokens"] = 0, 0
            sglang["generation_requests"], sglang["generation_tokens"] = bs, bs
        elif mode == "EXTEND" and bs is not None:  # every request extends its prompt
            sglang["context_requests"], sglang["context_tokens"] = bs, fields.get("toks")
            sglang["generation_requests"], sglang["generation_tokens"] = 0, 0
        return sglang
    return {}


def record(names: list[str]) -> StepRecord:
    """One step's record from the names of its annotations: every column of
    :data:`RECORD_COLUMNS`, null where no annotation states it (the first name that states
    a field gives it)."""
    out: StepRecord = {
        "context_requests": None,
        "context_tokens": None,
        "generation_requests": None,
        "generation_tokens": None,
        "new_requests": None,
        "cached_requests": None,
        "kv_tokens": None,
        "attention_pairs": None,
        "forward_mode": None,
    }
    for name in names:
        for key, value in parse(name).items():
            if out.get(key) is None:
                out[key] = value  # type: ignore[literal-required]
    return out


def stated_composition(rec: StepRecord) -> tuple[bool | None, bool | None]:
    """What the step's record states about its batch: (prompt work, decode work), each
    True, False or None where the record does not say.

    - vLLM's context form: prompt work iff context requests or tokens; decode work iff
      generation requests or tokens.
    - vLLM's older form: ``new_N`` with N > 0 is prompt work; with ``cached_0`` beside it
      there is no decode work (no request was running). ``new_0`` proves nothing (a cached
      request can be mid-prefill), nor does ``cached_M`` with M > 0 prove decode.
    - SGLang's forward mode: ``EXTEND``/``PREFILL`` is prompt work alone, ``MIXED`` both,
      ``DECODE`` (and the other decode modes) decode alone, ``IDLE`` neither.
    """
    mode = rec.get("forward_mode")
    if mode in ("EXTEND", "PREFILL"):
        return True, False
    if mode == "MIXED":
        return True, True
    if mode in NO_PROMPT_MODES:
        return False, mode != "IDLE"
    ctx, ctx_tokens = rec.get("context_requests"), rec.get("context_tokens")
    gen, gen_tokens = rec.get("generation_requests"), rec.get("generation_tokens")
    if ctx is not None or gen is not None:
        prompt = (ctx or 0) > 0 or (ctx_tokens or 0) > 0
        return prompt, (gen or 0) > 0 or (gen_tokens or 0) > 0
    new, cached = rec.get("new_requests"), rec.get("cached_requests")
    if new is not None and new > 0:
        return True, (False if cached == 0 else None)
    return None, None


def stated_requests(rec: StepRecord) -> int | None:
    """The step's request count, where its record states it (context plus generation
    requests, or new plus cached ones)."""
    ctx, gen = rec.get("context_requests"), rec.get("generation_requests")
    if ctx is not None and gen is not None:
        return ctx + gen
    new, cached = rec.get("new_requests"), rec.get("cached_requests")
    if new is not None and cached is not None:
        return new + cached
    return None
