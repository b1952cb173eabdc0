"""The speculative-decoding engine: continuous batching over token ids, one step at a time.

Knows nothing about tokenisation, HTTP or wall-clock timing: callers add requests (token ids +
:class:`SamplingParams`), call :meth:`Engine.step` in a loop and time the events it returns
(nanochat ``engine.py`` style). Requests join and leave between steps. Each step

1. prefills newly admitted requests (one flat target forward over their prompts, no padding) and
   samples their first token, then
2. for every other running request: one batched draft (the drafter proposes up to k tokens each) and
   ONE target forward over all requests' [last token, drafts], *flattened* as vLLM does: request b
   contributes 1 + k_b tokens, so the forward costs what was actually drafted, not B·(k+1)
   (``verify_layout="padded"`` pads every request to the longest proposal instead, kept for the
   benchmark's comparison). Then :class:`~specgauge.engine.batch_verify.BatchVerifier` per request
   (:func:`~specgauge.engine.verify.rejection_sample`; all-greedy rows take an argmax fast path with the same result).

The records it keeps and returns are in ``step_records.py``.

``add_request`` and ``abort`` may be called from another thread; they take effect at the next step.
"""

from __future__ import annotations

import heapq
import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from specgauge.config import SpeculativeConfig, conditional_rates
from specgauge.drafters.base import Drafter, make_drafter
from specgauge.engine.batch_verify import BatchVerifier
from specgauge.engine.sampling import SamplingParams, make_generator
from specgauge.engine.spec_stats import SpecStats
from specgauge.engine.step_records import EngineRequest, FinishReason, StepOutput, StepTiming
from specgauge.nn.transformer import ModelArgs
from specgauge.nn.weights import load_model, torch_device, torch_dtype

_log = logging.getLogger("specgauge.engine")


class RequestError(ValueError):
    """A request the engine cannot serve (too long, bad token ids, duplicate id)."""


class Engine:
    def __init__(
        self,
        target_dir: str | Path,
        speculative_config: SpeculativeConfig | None = None,
        max_batch: int = 8,
        max_model_len: int = 2048,
        dtype: str | torch.dtype = "float32",
        drafter: Drafter | None = None,
        verify_layout: Literal["flat", "padded"] = "flat",
        device: str = "cpu",
    ) -> None:
        #: where the models, caches and every step's tensors live (``cuda``: the step runs inside
        #: ``with torch.device(...)``, so the forward's index tensors are made there; the per-request
        #: generators stay on the CPU: a seed draws the same numbers on any device)
        self.device = torch_device(device)
        with torch.device(self.device):
            self._init(target_dir, speculative_config, max_batch, max_model_len, dtype, drafter, verify_layout)

    def _init(self, target_dir: str | Path, speculative_config: SpeculativeConfig | None, max_batch: int, max_model_len: int,
              dtype: str | torch.dtype, drafter: Drafter | None, verify_layout: str) -> None:
        self.args = ModelArgs.from_dir(target_dir)
        self.model = load_model(target_dir, torch_dtype(dtype))
        self.spec = speculative_config if speculative_config and speculative_config.method else None
        self.k = int(self.spec.num_speculative_tokens or 0) if self.spec else 0
        #: synthetic acceptance (vLLM's ``rejection_sample_method: synthetic``) when the config asks for it:
        #: for measuring a step's cost at a chosen size
        rates = self.spec.synthetic_rates() if self.spec else []
        self.verifier = BatchVerifier(conditional_rates(rates) if rates else None)
        if drafter is not None and not self.k:
            raise ValueError("a drafter needs a speculative_config with num_speculative_tokens")
        if verify_layout not in ("flat", "padded"):
            raise ValueError(f"verify_layout must be 'flat' or 'padded', got {verify_layout!r}")
        self.verify_layout = verify_layout
        self.max_batch, self.max_model_len = max_batch, max_model_len
        self.drafter = drafter or (self._build_drafter(dtype) if self.spec else None)
        self.cache = self.model.new_cache(max_batch, max_model_len + self.k + 2)
        self.eos = set(self.args.eos_token_ids)
        self._free = list(range(max_batch))  # a heap: the lowest free slot first keeps running slots contiguous
        self._waiting: deque[EngineRequest] = deque()
        self._running: dict[str, EngineRequest] = {}
        self._incoming: deque[EngineRequest] = deque()
        self._aborts: set[str] = set()
        self._ids: set[str] = set()
        self._lock = threading.Lock()
        self.last_timing = StepTiming()
        #: steps taken and requests admitted so far: each request's (prefill step, admission number) fixes the
        #: order of every drafter call across requests, which a stateful drafter's replay needs (suffix)
        self.steps_taken = self.admitted = 0

    def _build_drafter(self, dtype: str | torch.dtype) -> Drafter:
        assert self.spec is not None
        method = self.spec.method or ""
        options: dict[str, Any] = {k: v for k, v in self.spec.model_dump().items() if v is not None}
        options.pop("method", None)
        options.update(
            max_batch=self.max_batch, max_model_len=self.max_model_len, dtype=dtype,
            target_vocab_size=self.args.vocab_size, config=self.spec, speculative_config=self.spec,
            target_model=self.model,  # hidden-state heads share the target's embeddings
        )
        from specgauge.drafters.base import _REGISTRY, _load_plugins

        _load_plugins()
        factory = _REGISTRY.get(method)
        if factory is None:
            return make_drafter(method)  # raises, naming the known kinds
        params = inspect.signature(factory).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            options = {k: v for k, v in options.items() if k in params}
        return make_drafter(method, **options)

    # -- requests --------------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt_ids: Sequence[int], params: SamplingParams) -> None:
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise RequestError("the prompt is empty")
        if any(not 0 <= t < self.args.vocab_size for t in prompt):
            raise RequestError(f"prompt token ids must lie in [0, {self.args.vocab_size})")
        if len(prompt) + params.max_tokens > self.max_model_len:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens; the request has "
                f"{len(prompt)} prompt tokens and asks for max_tokens={params.max_tokens}"
            )
        with self._lock:
            if request_id in self._ids:
                raise RequestError(f"request id {request_id!r} is already in use")
            self._ids.add(request_id)
            stats = SpecStats(self.k) if self.k else None
            self._incoming.append(EngineRequest(id=request_id, prompt=prompt, params=params, gen=make_generator(params.seed),
                                                stats=stats, hist=list(prompt)))

    def abort(self, request_id: str) -> None:
        """Drop a request at the next step; its slot is freed then."""
        with self._lock:
            if request_id in self._ids:
                self._aborts.add(request_id)

    def has_unfinished(self) -> bool:
        with self._lock:
            return bool(self._incoming or self._waiting or self._running)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting) + len(self._incoming)

    def memory_bytes(self) -> dict[str, dict[str, int]]:
        """What this engine holds, by role: model weights and KV-cache capacity (bytes; tokens for the
        capacity the usage gauge divides by). The draft model's entries exist only with a draft model."""
        def weights(model: Any) -> int:
            return sum(p.numel() * p.element_size() for p in model.parameters())

        def kv(args: ModelArgs, slots: int, length: int, elem: int) -> int:
            return 2 * args.num_layers * slots * length * args.num_kv_heads * args.head_dim * elem

        elem = self.cache.k[0].element_size()
        out = {"target": {"weight_bytes": weights(self.model),
                          "kv_capacity_bytes": kv(self.args, self.cache.num_slots, self.cache.max_len, elem),
                          "kv_capacity_tokens": self.max_batch * self.max_model_len}}
        draft = getattr(self.drafter, "model", None)
        if draft is not None and hasattr(draft, "parameters"):
            d: dict[str, int] = {"weight_bytes": weights(draft)}
            dargs, cache_len = getattr(draft, "args", None), getattr(self.drafter, "_cache_len", None)
            if isinstance(dargs, ModelArgs) and isinstance(cache_len, int):
                d["kv_capacity_bytes"] = kv(dargs, self.max_batch, cache_len, elem)
            out["draft"] = d
        return out

    def kv_cache_usage(self) -> float:
        """Fraction of the target KV cache (max_batch x max_model_len tokens) holding live tokens."""
        used = sum(r.cached for r in list(self._running.values()))
        return used / (self.max_batch * self.max_model_len)

    # -- the step --------------------------------------------------------------------------------
    def step(self) -> list[StepOutput]:
        with torch.device(self.device):
            return self._step()

    def _step(self) -> list[StepOutput]:
        outs: list[StepOutput] = []
        with self._lock:
            self._waiting.extend(self._incoming)
            self._incoming.clear()
            aborts, self._aborts = self._aborts, set()
        for rid in aborts:
            outs += self._finish_aborted(rid)
        admitted: list[EngineRequest] = []
        step_no, self.steps_taken = self.steps_taken, self.steps_taken + 1
        while self._waiting and self._free:
            r = self._waiting.popleft()
            r.slot = heapq.heappop(self._free)
            if r.stats is not None:
                r.stats.schedule = (step_no, self.admitted)
            self.admitted += 1
            self._running[r.id] = r
            admitted.append(r)
        decoding = [r for r in self._running.values() if r not in admitted]
        timing = StepTiming(num_prefill=len(admitted), num_decode=len(decoding))
        if decoding:
            outs += self._contained(lambda rs: self._decode(rs, timing), decoding)
        if admitted:
            t0 = time.perf_counter()
            outs += self._contained(self._prefill, admitted, restart=True)
            timing.prefill_s = time.perf_counter() - t0
        self.last_timing = timing
        return outs

    def _contained(self, phase: Callable[[list[EngineRequest]], list[StepOutput]], reqs: list[EngineRequest],
                   restart: bool = False) -> list[StepOutput]:
        """Run one phase of the step (decode or prefill). When it raises, each request runs it alone, and
        the ones that fail again finish with ``finish_reason="error"``: an engine failure inside one
        request fails that request, never the engine (the others' retry re-reads the same cache slots;
        a failed step advanced nobody). ``restart``: the drafter's ``begin`` is undone before the retry."""
        before = {r.id: len(r.output) for r in reqs}
        try:
            return phase(reqs)
        except Exception as e:
            if len(reqs) == 1:
                return [self._fail_request(reqs[0], e)]
        outs: list[StepOutput] = []
        for r in reqs:
            if r.id not in self._running or len(r.output) != before[r.id]:  # emitted before the failure
                outs.append(self._fail_request(r, RuntimeError("the batched step failed after this request advanced")))
                continue
            if restart and self.drafter is not None:
                try:
                    self.drafter.end(r.id, [])
                except Exception:  # noqa: BLE001 - a drafter that kept nothing for it
                    pass
            try:
                outs += phase([r])
            except Exception as e:
                outs.append(self._fail_request(r, e))
        return outs

    def _fail_request(self, r: EngineRequest, e: BaseException) -> StepOutput:
        """Finish ``r`` with ``finish_reason="error"``, its slot freed, and say so in one log line."""
        _log.error("request %s failed inside the engine step (%s: %s); it gets an error, the engine goes on",
                   r.id, type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        if self._running.pop(r.id, None) is not None:
            heapq.heappush(self._free, r.slot)
            if self.drafter is not None:
                try:
                    self.drafter.end(r.id, r.output)
                except Exception:  # noqa: BLE001 - the request is gone either way
                    pass
        with self._lock:
            self._ids.discard(r.id)
        return r.step_output([], finish_reason="error")

    def _finish_aborted(self, rid: str) -> list[StepOutput]:
        r = self._running.pop(rid, None)
        if r is None:
            r = next((w for w in self._waiting if w.id == rid), None)
            if r is None:
                return []
            self._waiting.remove(r)
        else:
            self._release(r)
        with self._lock:
            self._ids.discard(rid)
        return [r.step_output([], finish_reason="abort")]

    def _release(self, r: EngineRequest) -> None:
        heapq.heappush(self._free, r.slot)
        if self.drafter is not None:
            self.drafter.end(r.id, r.output)

    def _prefill(self, reqs: list[EngineRequest]) -> list[StepOutput]:
        lens = [len(r.prompt) for r in reqs]
        tokens = torch.tensor([t for r in reqs for t in r.prompt])
        if self.drafter is not None:
            for r in reqs:
                self.drafter.begin(r.id, r.prompt)
        last = torch.tensor(lens).cumsum(0) - 1
        logits, hidden = self._target_forward(tokens, [r.slot for r in reqs], [0] * len(reqs), lens, last)  # [B, V]
        if hidden is not None:  # a hidden-state drafter reads every prompt position's hidden state
            for r, h in zip(reqs, hidden.split(lens), strict=True):
                self.drafter.observe_hidden(r.id, h)  # type: ignore[union-attr]
        for r in reqs:
            r.cached = len(r.prompt)
        no_drafts: list[list[int]] = [[] for _ in reqs]
        toks, _ = self.verifier.verify(reqs, no_drafts, logits, list(range(len(reqs))))
        return [self._emit(r, toks[i], 0, 0) for i, r in enumerate(reqs)]

    def _decode(self, reqs: list[EngineRequest], timing: StepTiming) -> list[StepOutput]:
        t0 = time.perf_counter()
        drafts = self._propose(reqs)
        t1 = time.perf_counter()
        if self.verify_layout == "flat":  # request b feeds [last token, its k_b drafts]: sum(1 + k_b) tokens
            lens = [1 + len(d) for d in drafts]
            flat = [t for r, d in zip(reqs, drafts, strict=True) for t in (r.output[-1], *d)]
        else:  # padded: every request feeds K + 1 tokens (K = longest proposal), padding ignored
            K1 = 1 + max(len(d) for d in drafts)
            lens = [K1] * len(reqs)
            flat = [t for r, d in zip(reqs, drafts, strict=True) for t in (r.output[-1], *d, *[0] * (K1 - 1 - len(d)))]
        logits, hidden = self._target_forward(torch.tensor(flat), [r.slot for r in reqs], [r.cached for r in reqs],
                                              lens, None)  # [N, V]
        first = [0] * len(reqs)  # flat index of each request's first row
        for i in range(1, len(reqs)):
            first[i] = first[i - 1] + lens[i - 1]
        toks, n_acc = self.verifier.verify(reqs, drafts, logits, first)
        if hidden is not None:  # the verified positions only: last token + accepted drafts (rejected ones never reach the head)
            for i, r in enumerate(reqs):
                self.drafter.observe_hidden(r.id, hidden[first[i] : first[i] + 1 + n_acc[i]])  # type: ignore[union-attr]
        timing.verify_tokens = len(flat)
        timing.draft_s, timing.verify_s = t1 - t0, time.perf_counter() - t1
        outs = []
        for i, (r, d) in enumerate(zip(reqs, drafts, strict=True)):
            r.cached += 1 + n_acc[i]  # last token + accepted drafts; rejected ones are rolled back
            if r.stats is not None:
                r.stats.observe(len(d), n_acc[i])
            outs.append(self._emit(r, toks[i], len(d), n_acc[i]))
        return outs

    def _target_forward(
        self, tokens: Tensor, slots: list[int], starts: list[int], lens: list[int], logits_at: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        """The target forward; with a hidden-state drafter (``hidden_layers``) also the hidden states it reads."""
        layers = getattr(self.drafter, "hidden_layers", None)
        if layers is None:
            return self.model.forward_flat(tokens, slots, starts, lens, self.cache, logits_at=logits_at), None
        return self.model.forward_flat_hidden(tokens, slots, starts, lens, self.cache, layers, logits_at=logits_at)

    def _propose(self, reqs: list[EngineRequest]) -> list[list[int]]:
        if self.drafter is None:
            return [[] for _ in reqs]
        ids = [r.id for r in reqs]
        hists = [r.hist for r in reqs]
        ks = [min(self.k, self.max_model_len - len(h)) for h in hists]
        batch = getattr(self.drafter, "propose_batch", None)
        if batch is not None:
            drafts = batch(ids, hists, ks)
        else:
            drafts = [self.drafter.propose(i, h, k) if k > 0 else [] for i, h, k in zip(ids, hists, ks, strict=True)]
        return [list(d)[:k] for d, k in zip(drafts, ks, strict=True)]

    def _emit(self, r: EngineRequest, toks: list[int], drafted: int, accepted: int) -> StepOutput:
        new: list[int] = []
        reason: FinishReason | None = None
        for t in toks:  # clip at max_tokens and at the first stop / EOS token
            new.append(t)
            r.output.append(t)
            r.hist.append(t)
            if t in r.params.stop_token_ids or (not r.params.ignore_eos and t in self.eos):
                reason = "stop"
            elif len(r.output) >= r.params.max_tokens:
                reason = "length"
            if reason:
                break
        if reason:
            del self._running[r.id]
            self._release(r)
            with self._lock:
                self._ids.discard(r.id)
        return r.step_output(new, drafted=drafted, accepted=accepted, finish_reason=reason)


def generate(engine: Engine, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[int]]:
    """Run ``prompts`` to completion (all submitted at once) and return their output ids, in order."""
    ids = [f"gen-{i}-{time.monotonic_ns()}" for i in range(len(prompts))]
    for rid, p in zip(ids, prompts, strict=True):
        engine.add_request(rid, p, params)
    outputs: dict[str, list[int]] = {rid: [] for rid in ids}
    while engine.has_unfinished():
        for o in engine.step():
            outputs[o.request_id] += o.new_token_ids
    return [outputs[rid] for rid in ids]
