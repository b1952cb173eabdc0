"""Draft-model drafter: a smaller causal LM proposes k tokens greedily (kind ``"draft_model"``).

Greedy drafting makes the proposal a deterministic function of the history, so q is one-hot and the
replay theorem applies (``deterministic = True``). Two users:

* the embedded engine calls ``propose_batch`` once per step for all running requests: one flat
  forward (no padding) catches each request's draft KV cache up with its history, then k-1
  single-token forwards extend every row; the drafts reach the host once, at the end. The cache keeps what it has computed; when the target rejects a draft the next
  history diverges and the cache is rolled back to the common prefix (no recomputation of the rest).
* offline replay (``specgauge.offline``) calls ``accept_runs`` (the ``WholeOutputReplay`` contract, from
  ``teacher_forced_argmax``) / ``teacher_forced_logprobs``: one forward pass over prompt + output gives
  the draft's prediction at every output position.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specgauge.drafters.base import register_drafter, runs_from_matches

if TYPE_CHECKING:  # torch is imported on first use, so registering this drafter costs nothing
    import torch

    from specgauge.nn.transformer import KVCache


class VocabMismatchError(ValueError):
    """Draft and target models do not share a vocabulary."""


@register_drafter("draft_model")
class DraftModelDrafter:
    kind = "draft_model"
    deterministic = True
    stateful = False  # each request's drafts read its own history only

    def __init__(
        self,
        model: str | Path,
        max_batch: int = 8,
        max_model_len: int = 2048,
        dtype: str | torch.dtype = "float32",
        target_vocab_size: int | None = None,
        num_speculative_tokens: int = 8,
    ) -> None:
        from specgauge.nn.transformer import ModelArgs
        from specgauge.nn.weights import load_model, torch_dtype

        args = ModelArgs.from_dir(model)
        if target_vocab_size is not None and args.vocab_size != target_vocab_size:
            raise VocabMismatchError(
                f"draft model {model} has vocab_size {args.vocab_size} but the target has {target_vocab_size}; "
                "a draft model must share the target's tokenizer"
            )
        self.model_dir = Path(model)
        self.model = load_model(model, torch_dtype(dtype))
        self.vocab_size = args.vocab_size
        self.max_batch, self.max_model_len = max_batch, max_model_len
        self._cache: KVCache | None = None  # allocated on first use (offline replay never needs it)
        self._cache_len = max_model_len + num_speculative_tokens + 2
        self._free = list(range(max_batch))  # a heap: lowest slot first (contiguous slots are read without a copy)
        self._slot: dict[str, int] = {}
        self._cached: dict[str, list[int]] = {}  # tokens whose keys/values are in the request's slot
        self._stable: dict[str, int] = {}  # length of the history last seen (histories only grow)

    # -- Drafter protocol ------------------------------------------------------------------------
    def begin(self, request_id: str, prompt_ids: Sequence[int]) -> None:
        if request_id in self._slot:
            raise ValueError(f"request {request_id!r} already begun")
        if not self._free:
            raise RuntimeError(f"draft model: all {self.max_batch} cache slots in use")
        self._slot[request_id] = heapq.heappop(self._free)
        self._cached[request_id] = []
        self._stable[request_id] = 0

    def propose(self, request_id: str, history: Sequence[int], k: int) -> list[int]:
        return self.propose_batch([request_id], [history], [k])[0]

    def end(self, request_id: str, output_ids: Sequence[int]) -> None:
        slot = self._slot.pop(request_id, None)
        self._cached.pop(request_id, None)
        self._stable.pop(request_id, None)
        if slot is not None:
            heapq.heappush(self._free, slot)

    # -- batched drafting for the engine ---------------------------------------------------------
    def propose_batch(
        self, request_ids: Sequence[str], histories: Sequence[Sequence[int]], ks: Sequence[int]
    ) -> list[list[int]]:
        """Greedy proposals of ``ks[i]`` tokens for each request, in 1 + (max k - 1) batched forwards.

        The first forward is flat (each request feeds only the tokens its draft cache lacks: the
        accepted drafts and the target's extra token, or the whole prompt on a request's first
        step); each later one feeds one token per request, its plan (positions, masks, RoPE) moved
        on from the last by tensor ops. The drafts stay tensors until one host read at the end."""
        import torch

        out: list[list[int]] = [[] for _ in request_ids]
        rows = [i for i, k in enumerate(ks) if k > 0]
        if not rows:
            return out
        if self._cache is None:
            self._cache = self.model.new_cache(self.max_batch, self._cache_len)
        kmax = max(ks[i] for i in rows)
        slots, starts, lens, flat = [], [], [], []
        for i in rows:
            rid, hist = request_ids[i], histories[i]
            cached, s = self._cached[rid], self._stable[rid]
            if len(hist) < s:
                s = 0
            c = s + _common_prefix(cached, hist, s)
            c = min(c, len(hist) - 1)  # always feed at least the last token, to get its logits
            del cached[c:]
            cached.extend(hist[c:])
            self._stable[rid] = len(hist)
            if len(cached) + kmax - 1 > self._cache_len:
                raise ValueError(f"draft model: sequence longer than max_model_len={self.max_model_len}")
            slots.append(self._slot[rid])
            starts.append(c)
            lens.append(len(hist) - c)
            flat.extend(hist[c:])
        last = torch.tensor(lens).cumsum(0) - 1
        tok = self.model.forward_flat(torch.tensor(flat), slots, starts, lens, self._cache, logits_at=last).argmax(-1)
        drafts = [tok]
        if kmax > 1:  # one token per request from here on: the plan moves on by tensor ops
            ones = [1] * len(rows)
            plan = self.model.plan(slots, [s + n for s, n in zip(starts, lens, strict=True)], ones, self._cache)
            for i in range(kmax - 1):
                if i:
                    plan = self.model.advance(plan, self._cache)
                tok = self.model.forward_flat(tok, slots, [], ones, self._cache, plan=plan).argmax(-1)  # [rows]
                drafts.append(tok)
        all_drafts = torch.stack(drafts, 1).tolist()  # [rows, kmax]: the one host read
        for j, i in enumerate(rows):
            out[i] = all_drafts[j][: ks[i]]
            self._cached[request_ids[i]].extend(all_drafts[j][: kmax - 1])  # their keys/values are cached
        return out

    # -- offline replay ---------------------------------------------------------------------------
    def teacher_forced_logits(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> torch.Tensor:
        """Logits [len(output_ids), V]: row i is the draft's prediction for output_ids[i] given
        prompt + output_ids[:i] (one forward pass)."""
        import torch

        if not prompt_ids:
            raise ValueError("teacher forcing needs a non-empty prompt")
        seq = list(prompt_ids) + list(output_ids)
        if not output_ids:
            return torch.zeros(0, self.vocab_size)
        bad = [t for t in seq if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]} outside the draft model's vocabulary (size {self.vocab_size})")
        cache = self.model.new_cache(1, len(seq))
        logits = self.model(torch.tensor([seq[:-1]]), torch.tensor([0]), torch.tensor([0]), cache)
        return logits[0, len(prompt_ids) - 1 :]

    def teacher_forced_argmax(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> np.ndarray:
        """The greedy draft token for every output position: int64 array [len(output_ids)]."""
        return self.teacher_forced_logits(prompt_ids, output_ids).argmax(-1).numpy().astype(np.int64)

    def accept_runs(self, prompt_ids: Sequence[int], output_ids: Sequence[int], kmax: int) -> np.ndarray:
        """``WholeOutputReplay``: per output position, the draft tokens a greedy step there accepts
        (capped at ``kmax``), from one teacher-forced pass: the draft's argmax matches the logged
        token for a run of positions (after a mismatch the history diverges, but those tokens are
        rejected anyway), so a chain of k tokens is accepted up to that run."""
        match = self.teacher_forced_argmax(prompt_ids, output_ids) == np.asarray(output_ids, dtype=np.int64)
        return np.minimum(runs_from_matches(match), kmax)

    def teacher_forced_logprobs(
        self, prompt_ids: Sequence[int], output_ids: Sequence[int], temperature: float = 1.0
    ) -> np.ndarray:
        """log q for every output position: float32 array [len(output_ids), V] at ``temperature``."""
        if temperature <= 0:
            raise ValueError("temperature must be > 0 for log-probabilities (greedy q is one-hot)")
        lg = self.teacher_forced_logits(prompt_ids, output_ids) / temperature
        return lg.log_softmax(-1).numpy().astype(np.float32)


def _common_prefix(a: Sequence[int], b: Sequence[int], start: int = 0) -> int:
    """Length of the common prefix of ``a[start:]`` and ``b[start:]`` (no copies)."""
    n = min(len(a), len(b))
    i = start
    while i < n and a[i] == b[i]:
        i += 1
    return i - start
