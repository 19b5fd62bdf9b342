"""The lab engine: a small hybrid LLM in plain torch behind a continuous-batching scheduler.

Full-attention layers use SDPA with a KV cache; linear-attention layers use the gated delta
rule, a chunk scan over the new tokens for prefill and the recurrent update for decode.
Weights are random, tokens are integers: the point is a real engine to capture, not text.

Each step runs inside a ``record_function`` range named as vLLM names its steps
(``execute_context_C(T)_generation_G(G)``) and each op inside one named like the GPU kernel
it stands for, so traceview's preset classifies a CPU capture as it would a GPU one. The
scheduler has a per-step token budget; with chunked prefill on, a long prompt is fed in
chunks that continue from the cached prefix (never from token 0 again).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from traceview.errors import MissingDependencyError


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingDependencyError(
            "the lab engine needs torch: pip install 'traceview[capture]' "
            "(CPU build: pip install torch)"
        ) from None
    return torch


@dataclass(frozen=True)
class LabConfig:
    layers: str = "LLLF" * 2  # L: gated-delta-rule linear attention, F: full attention
    d_model: int = 64
    heads: int = 4
    vocab: int = 512
    max_batch: int = 16  # running sequences
    max_waiting: int = 16  # queued requests beyond which new ones get 429
    token_budget: int = 64  # tokens per step (decodes first, then prefill)
    chunked_prefill: bool = True
    seed: int = 0


@dataclass
class Sequence:
    rid: int
    prompt: list[int]
    max_tokens: int
    emit: Callable[[int | None], None]  # called with each token, then None at the end
    computed: int = 0  # prompt tokens already in the cache (never fed again)
    generated: list[int] = field(default_factory=list)
    kv: list[Any] = field(default_factory=list)  # per full-attention layer: (k, v)
    state: list[Any] = field(default_factory=list)  # per linear layer: S (heads, dk, dv)
    cancelled: bool = False

    @property
    def prefilling(self) -> bool:
        return self.computed < len(self.prompt)


class LabModel:
    """Random-weight hybrid model (no training, no tokenizer)."""

    def __init__(self, cfg: LabConfig) -> None:
        torch = _torch()
        self.torch = torch
        self.cfg = cfg
        g = torch.Generator().manual_seed(cfg.seed)
        d, h = cfg.d_model, cfg.heads
        self.dh = d // h

        def w(*shape: int) -> Any:
            return torch.randn(*shape, generator=g) / math.sqrt(shape[0])

        self.embed = w(cfg.vocab, d) * math.sqrt(cfg.vocab)
        self.layers = []
        for kind in cfg.layers:
            self.layers.append(
                {
                    "kind": kind,
                    "qkv": w(d, 3 * d),
                    "o": w(d, d),
                    "up": w(d, 4 * d),
                    "down": w(2 * d, d),
                    "gates": w(d, 2 * h),
                }
            )
        self.head = w(d, cfg.vocab)

    # - ops, each in a range named like the kernel it stands for -

    def _rms(self, x: Any) -> Any:
        with self.torch.profiler.record_function("vllm::rms_norm_kernel"):
            return x * self.torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)

    def step(self, batch: list[tuple[Sequence, list[int]]]) -> list[int]:
        """One forward over every sequence's new tokens; the next token of each."""
        torch = self.torch
        rf = torch.profiler.record_function
        sizes = [len(toks) for _, toks in batch]
        with rf("at::native::embedding_index_select"):
            x = self.embed[torch.tensor([t for _, toks in batch for t in toks])]
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        fa = la = 0
        for layer in self.layers:
            h = self._rms(x)
            with rf("nvjet_tst_lab_qkv_gemm"):
                qkv = h @ layer["qkv"]
            q, k, v = qkv.chunk(3, dim=-1)
            if layer["kind"] == "F":
                out = self._full_attention(batch, starts, sizes, q, k, v, fa)
                fa += 1
            else:
                with rf("lab_gate_proj_gemm"):
                    gates = h @ layer["gates"]
                out = self._linear_attention(batch, starts, sizes, q, k, v, gates, la)
                la += 1
            with rf("nvjet_tst_lab_o_gemm"):
                x = x + out @ layer["o"]
            h = self._rms(x)
            with rf("nvjet_tst_lab_up_gemm"):
                up = h @ layer["up"]
            with rf("vllm::silu_and_mul_kernel"):
                a, b = up.chunk(2, dim=-1)
                act = torch.nn.functional.silu(a) * b
            with rf("nvjet_tst_lab_down_gemm"):
                x = x + act @ layer["down"]
        last = torch.stack([x[s + n - 1] for s, n in zip(starts, sizes, strict=True)])
        with rf("nvjet_tst_lab_lm_head_gemm"):
            logits = self._rms(last) @ self.head
        with rf("argmax_sampling"):
            return [int(t) for t in logits.argmax(-1).tolist()]

    def _heads(self, t: Any) -> Any:
        return t.view(t.shape[0], self.cfg.heads, self.dh).transpose(0, 1)  # (h, T, dh)

    def _full_attention(
        self,
        batch: list[tuple[Sequence, list[int]]],
        starts: list[int],
        sizes: list[int],
        q: Any,
        k: Any,
        v: Any,
        idx: int,
    ) -> Any:
        torch = self.torch
        rf = torch.profiler.record_function
        outs = [None] * len(batch)
        # the step's anchor is its first full-attention op, as traceview defines it: read the
        # clock on both sides of entering the range, so the log brackets the profiler's own
        # timestamp even when another thread holds the GIL in between
        before = time.perf_counter_ns()
        with rf("vllm::reshape_and_cache_flash_kernel"):
            if idx == 0:
                self.anchor_ns = (before, time.perf_counter_ns())
            for i, (seq, _) in enumerate(batch):
                kk, vv = (
                    self._heads(k[starts[i] : starts[i] + sizes[i]]),
                    self._heads(v[starts[i] : starts[i] + sizes[i]]),
                )
                if len(seq.kv) <= idx:
                    seq.kv.append((kk, vv))
                else:
                    pk, pv = seq.kv[idx]
                    seq.kv[idx] = (torch.cat([pk, kk], 1), torch.cat([pv, vv], 1))
        for name, want_prefill in (
            ("flash::flash_fwd_kernel<lab_prefill>", True),
            ("flash::flash_fwd_splitkv_kernel<lab_decode>", False),
        ):
            members = [i for i, (seq, _t) in enumerate(batch) if seq.prefilling == want_prefill]
            if not members:
                continue
            with rf(name):
                for i in members:
                    seq = batch[i][0]
                    kk, vv = seq.kv[idx]
                    qq = self._heads(q[starts[i] : starts[i] + sizes[i]])
                    total, new = kk.shape[1], qq.shape[1]
                    # causal over the cached prefix plus the new tokens
                    mask = torch.ones(new, total, dtype=torch.bool).tril(total - new)
                    o = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask)
                    outs[i] = o.transpose(0, 1).reshape(new, -1)
        return torch.cat(outs)

    def _linear_attention(
        self,
        batch: list[tuple[Sequence, list[int]]],
        starts: list[int],
        sizes: list[int],
        q: Any,
        k: Any,
        v: Any,
        gates: Any,
        idx: int,
    ) -> Any:
        torch = self.torch
        rf = torch.profiler.record_function
        h, dh = self.cfg.heads, self.dh
        outs: list[Any] = [None] * len(batch)
        for name, want_prefill in (
            ("chunk_gated_delta_rule_fwd_kernel_h", True),
            ("fused_recurrent_gated_delta_rule_fwd_kernel", False),
        ):
            members = [i for i, (seq, _t) in enumerate(batch) if seq.prefilling == want_prefill]
            if not members:
                continue
            with rf(name):
                for i in members:
                    seq = batch[i][0]
                    sl = slice(starts[i], starts[i] + sizes[i])
                    qq, kk, vv = self._heads(q[sl]), self._heads(k[sl]), self._heads(v[sl])
                    kk = torch.nn.functional.normalize(kk, dim=-1)
                    beta = torch.sigmoid(gates[sl, :h]).T  # (h, T)
                    decay = torch.exp(-torch.nn.functional.softplus(gates[sl, h:])).T
                    if len(seq.state) <= idx:
                        seq.state.append(torch.zeros(h, dh, dh))
                    s = seq.state[idx]
                    o = torch.empty_like(vv)
                    for t in range(kk.shape[1]):  # gated delta rule, token by token
                        kt, vt = kk[:, t], vv[:, t]
                        s = s * decay[:, t, None, None]
                        err = vt - torch.einsum("hk,hkv->hv", kt, s)
                        s = s + beta[:, t, None, None] * torch.einsum("hk,hv->hkv", kt, err)
                        o[:, t] = torch.einsum("hk,hkv->hv", qq[:, t], s)
                    seq.state[idx] = s
                    outs[i] = o.transpose(0, 1).reshape(sizes[i], -1)
        return torch.cat(outs)


@dataclass
class StepRecord:
    index: int
    start_ns: int  # time.perf_counter_ns()
    end_ns: int
    anchor_ns: tuple[int, int]  # clock just before and after the first full-attention op began
    batch: int
    prefill_tokens: int
    decode_tokens: int
    profiled: bool
    name: str


class LabEngine:
    """Continuous batching on a background thread: admit, schedule a step, run it, emit."""

    def __init__(self, cfg: LabConfig) -> None:
        self.cfg = cfg
        self.model = LabModel(cfg)
        self.lock = threading.Condition()
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.steps: list[StepRecord] = []
        self.metrics = {
            "steps": 0,
            "prefilled_tokens": 0,
            "generated_tokens": 0,
            "requests": 0,
            "rejected": 0,
            "batch_size": 0,
        }
        self.errors: list[str] = []
        self._next_id = 0
        self._stop = False
        self._profile_request: tuple[str, Any] | None = None
        self._profiler: Any = None
        self.thread = threading.Thread(target=self._loop, name="lab-engine", daemon=True)
        self.thread.start()

    # - requests -

    def submit(
        self, prompt: list[int], max_tokens: int, emit: Callable[[int | None], None]
    ) -> Sequence | None:
        """Queue a request; None when the queue is full (the caller answers 429)."""
        with self.lock:
            if len(self.waiting) >= self.cfg.max_waiting:
                self.metrics["rejected"] += 1
                return None
            self._next_id += 1
            seq = Sequence(self._next_id, list(prompt), max_tokens, emit)
            self.waiting.append(seq)
            self.metrics["requests"] += 1
            self.lock.notify()
            return seq

    def cancel(self, seq: Sequence) -> None:
        seq.cancelled = True

    # - profiling, done on the engine thread as vLLM's workers do -

    def start_profile(self, out_dir: str, name: str) -> None:
        self._profile_call(("start", (out_dir, name)))

    def stop_profile(self) -> str:
        return str(self._profile_call(("stop", None)))

    def _profile_call(self, request: tuple[str, Any]) -> Any:
        done = threading.Event()
        result: dict[str, Any] = {}
        with self.lock:
            self._profile_request = (request[0], (request[1], done, result))
            self.lock.notify()
        if not done.wait(timeout=600):
            raise TimeoutError("the engine did not answer the profile request")
        if "error" in result:
            raise result["error"]
        return result.get("value")

    def _handle_profile(self) -> None:
        assert self._profile_request is not None
        kind, (arg, done, result) = self._profile_request
        self._profile_request = None
        try:
            if kind == "start":
                from traceview.capture.recorder import start_profiler

                if self._profiler is None:
                    self._profiler = start_profiler(*arg)
            elif self._profiler is not None:
                from traceview.capture.recorder import stop_profiler

                result["value"] = stop_profiler(self._profiler)
                self._profiler = None
            else:
                result["error"] = RuntimeError("profiling was not started")
        except Exception as exc:  # reported to the caller, the engine keeps running
            result["error"] = exc
        done.set()

    def shutdown(self) -> None:
        with self.lock:
            self._stop = True
            self.lock.notify()
        self.thread.join(timeout=10)

    # - the loop -

    def _schedule(self) -> list[tuple[Sequence, list[int]]]:
        cfg = self.cfg
        self.running = [s for s in self.running if not s.cancelled]
        while self.waiting and len(self.running) < cfg.max_batch:
            seq = self.waiting.popleft()
            if not seq.cancelled:
                self.running.append(seq)
        budget = cfg.token_budget
        batch: list[tuple[Sequence, list[int]]] = []
        for seq in self.running:  # decodes first: one token each
            if not seq.prefilling and budget > 0:
                batch.append((seq, [seq.generated[-1]]))
                budget -= 1
        for seq in self.running:  # then prompt work, from where the cache ends
            if seq.prefilling:
                remaining = len(seq.prompt) - seq.computed
                take = min(remaining, budget) if cfg.chunked_prefill else remaining
                if take <= 0:
                    continue
                batch.append((seq, seq.prompt[seq.computed : seq.computed + take]))
                budget -= take
                if cfg.chunked_prefill and budget <= 0:
                    break
                if not cfg.chunked_prefill:
                    break  # one whole prompt per step when chunking is off
        return batch

    def _loop(self) -> None:
        torch = self.model.torch
        while True:
            with self.lock:
                while (
                    not self._stop
                    and self._profile_request is None
                    and not (self.waiting or any(not s.cancelled for s in self.running))
                ):
                    self.lock.wait(timeout=0.5)
                if self._stop:
                    break
                if self._profile_request is not None:
                    self._handle_profile()
                    continue
                batch = self._schedule()
            if not batch:
                continue
            prefill = sum(len(t) for s, t in batch if s.prefilling)
            decode = len(batch) - sum(1 for s, _ in batch if s.prefilling)
            ctx = sum(1 for s, _ in batch if s.prefilling)
            name = f"execute_context_{ctx}({prefill})_generation_{decode}({decode})"
            start = time.perf_counter_ns()
            try:
                with torch.inference_mode(), torch.profiler.record_function(name):
                    tokens = self.model.step(batch)
            except Exception as exc:  # fail this step's requests, keep serving
                self.errors.append(f"step {len(self.steps)}: {type(exc).__name__}: {exc}")
                for seq, _ in batch:
                    seq.cancelled = True
                    seq.emit(None)
                continue
            end = time.perf_counter_ns()
            self.steps.append(
                StepRecord(
                    len(self.steps),
                    start,
                    end,
                    self.model.anchor_ns,
                    len(batch),
                    prefill,
                    decode,
                    self._profiler is not None,
                    name,
                )
            )
            self.metrics["steps"] += 1
            self.metrics["batch_size"] = len(batch)
            self.metrics["prefilled_tokens"] += prefill
            for (seq, toks), token in zip(batch, tokens, strict=True):
                if seq.prefilling:
                    seq.computed += len(toks)
                    if seq.prefilling:
                        continue  # more prompt to come: no token yet
                seq.generated.append(token)
                self.metrics["generated_tokens"] += 1
                seq.emit(token)
                if len(seq.generated) >= seq.max_tokens:
                    seq.emit(None)
                    seq.cancelled = True
        if self._profiler is not None:
            from traceview.capture.recorder import stop_profiler

            stop_profiler(self._profiler)
