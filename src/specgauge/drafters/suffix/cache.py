"""The suffix cache: what the ``suffix`` drafter drafts from, behind one protocol with two backends.

ArcticInference's ``SuffixDecodingCache`` (vLLM 0.32's ``SuffixDecodingProposer`` drives it) keeps a
*local* trie per active request over its prompt and output so far, and one *global* trie over the
outputs of started requests, each its own sequence, in at most ``max_cached_requests`` slots (FIFO
eviction of the oldest-started; 0 disables the global trie). ``SuffixCache`` is that interface;
``PythonCache`` (here) and ``native.NativeCache`` (the C++ cache itself) implement it and draft alike
(``tests/unit/test_suffix.py``).

A replay owns the whole history, so it takes two shortcuts no live server can (``PythonCache.replay``):

* no walks in the local trie: its cursor (``SuffixTree.active_nodes``) already holds the node of every
  suffix of the history up to ``max_tree_depth`` tokens, since the local trie is the history;
* in the global trie the request's own sequence holds its output so far, so its cursor gives every
  match inside the output; only longer matches (reaching back into the prompt, in the first
  ``max_tree_depth`` output tokens) are walked from the root.

Draft selection is ``trie.best_draft`` either way: longest match first, stopping as soon as no shorter
match can win; the global trie's draft must beat the local one's score to win, as in C++.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from specgauge.drafters.base import accepted_prefix
from specgauge.drafters.suffix.positions import Positions
from specgauge.drafters.suffix.trie import SuffixTree, best_draft, f32, spec_limits
from specgauge.drafters.suffix.unknown import UnknownTails, global_draft_certain


@dataclass
class Steps:
    """The decode steps of one replayed request: ``drafted[s]`` / ``accepted[s]`` per step, the final
    step's draft, the tokens of the history learned so far (``seen``), and the index of the first step
    whose draft could differ because of unknown tokens in the cache (None: every step is certain, or
    that was not checked)."""

    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    final_draft: list[int] = field(default_factory=list)
    seen: int = 0
    first_uncertain: int | None = None


class SuffixCache(Protocol):
    """``SuffixDecodingCache``'s calls as the drafter makes them (request ids are the caller's)."""

    def start(self, request_id: str, prompt: list[int]) -> None:
        """A local trie over the prompt; a global slot (a reused id's cached output is evicted first)."""

    def extend(self, request_id: str, tokens: list[int]) -> None:
        """Append tokens to the request's history (both tries) (``add_active_response``)."""

    def speculate(self, request_id: str, context: list[int], k: int) -> list[int]:
        """The draft for the last tokens ``context``: the local trie's unless the global one scores more."""

    def stop(self, request_id: str) -> None:
        """Drop the local trie; the output stays cached until evicted."""

    def is_cached(self, request_id: str) -> bool:
        """Whether the request's output is still in the global trie."""

    def replay(self, request_id: str, tokens: list[int], prompt_len: int, seen: int, k: int,
               max_model_len: int | None, check: bool) -> Steps:
        """The decode steps of a started request whose prompt + whole output is ``tokens`` (``seen`` of
        them already learned), each step exactly learn-then-``speculate`` and accept the matching prefix
        (``base.replay_by_stepping``), without its per-step overhead. ``check``: find the first step that
        unknown tokens in the cache could change (``PythonCache`` only)."""


class PythonCache:
    """The cache in pure Python (``trie.SuffixTree``). ``track_unknown``: record the unknown tokens a
    live server learned past logged outputs (``unknown.UnknownTails``), so a replay can say which
    drafts they could change."""

    def __init__(self, max_tree_depth: int, max_cached_requests: int, max_spec_factor: float, min_token_prob: float,
                 track_unknown: bool = False) -> None:
        self.max_tree_depth, self.max_cached_requests = max_tree_depth, max_cached_requests
        self.global_tree = SuffixTree(max_tree_depth)
        self.unknown = UnknownTails() if track_unknown else None
        self._limits = spec_limits(max_tree_depth, max_spec_factor, 0.0)
        self._min_prob = f32(min_token_prob)
        self._local: dict[str, SuffixTree] = {}
        self._req_to_seq: dict[str, int] = {}  # insertion order = FIFO eviction order
        self._seq_to_req: dict[int, str] = {}
        self._next_seq = 0

    # -- SuffixCache ------------------------------------------------------------------------------
    def start(self, request_id: str, prompt: list[int]) -> None:
        if request_id in self._req_to_seq:  # vLLM's proposer evicts a reused id's cached response
            self._evict(request_id)
        tree = SuffixTree(self.max_tree_depth)
        tree.extend(0, prompt)
        self._local[request_id] = tree
        if self.max_cached_requests != 0:
            self._allocate(request_id)

    def extend(self, request_id: str, tokens: list[int]) -> None:
        self._local[request_id].extend(0, tokens)
        seq = self._req_to_seq.get(request_id)
        if seq is not None:
            self.global_tree.extend(seq, tokens)

    def speculate(self, request_id: str, context: list[int], k: int) -> list[int]:
        limits, min_prob = self._limits, self._min_prob
        l_score, local, _, _ = best_draft(self._local[request_id].root, context, (), k, limits, min_prob, -1.0)
        _, glob, _, _ = best_draft(self.global_tree.root, context, (), k, limits, min_prob, max(l_score, 0.0))
        return glob if glob else local  # the global draft won only if it scored more (C++: local on ties)

    def stop(self, request_id: str) -> None:
        del self._local[request_id]

    def is_cached(self, request_id: str) -> bool:
        return request_id in self._req_to_seq

    def add_unknown(self, request_id: str, length: int) -> None:
        """``length`` unknown tokens follow the request's cached output (tracked only with ``track_unknown``)."""
        seq = self._req_to_seq.get(request_id)
        if seq is not None and self.unknown is not None:
            self.unknown.add(self.global_tree, seq, length=length)

    def replay(self, request_id: str, tokens: list[int], prompt_len: int, seen: int, k: int,
               max_model_len: int | None, check: bool) -> Steps:
        tails = self.unknown if check else None
        learned = [seen]

        def draft_at(n: int, kk: int, checking: bool) -> tuple[list[int], bool]:
            draft, certain, learned[0] = self._draft_at(request_id, tokens, n, learned[0], kk, tails if checking else None)
            return draft, certain

        out = walk_steps(tokens, prompt_len, k, max_model_len, draft_at)
        out.seen = learned[0]
        return out

    def replay_positions(self, request_id: str, tokens: list[int], prompt_len: int, seen: int, k: int,
                         max_model_len: int | None, check: bool) -> tuple[Positions, int]:
        """The draft at every output position (``positions.Positions``) of a started request whose
        prompt + output is ``tokens`` (arguments as ``replay``): a step that starts at p drafts from the
        cache as it is once the tokens before p are learned, whatever steps came before. Returns the
        table and the tokens learned."""
        tails = self.unknown if check else None
        pos = Positions([[]], [0], [True], [0])
        for n in range(prompt_len + 1, len(tokens)):
            draft: list[int] = []
            certain = True
            kk = 0
            if max_model_len is None or n < max_model_len:  # else vLLM skips the request, learning nothing
                kk = k if max_model_len is None else min(k, max_model_len - n - 1)
                draft, certain, seen = self._draft_at(request_id, tokens, n, seen, kk, tails)
            pos.drafts.append(draft)
            pos.matched.append(accepted_prefix(draft, tokens, n))
            pos.certain.append(certain)
            pos.cap.append(max(kk, 0))
        assert len(pos.drafts) == max(1, len(tokens) - prompt_len)
        return pos, seen

    # -- internals --------------------------------------------------------------------------------
    def _draft_at(self, request_id: str, tokens: list[int], n: int, seen: int, k: int,
                  tails: UnknownTails | None) -> tuple[list[int], bool, int]:
        """Learn ``tokens[seen:n]`` (both tries), then draft at position n as vLLM does: the local trie's
        draft unless the global one scores more. Returns (draft, whether the unknown tokens in the cache
        can change it, tokens learned)."""
        local, glob = self._local[request_id], self.global_tree
        seq = self._req_to_seq.get(request_id)
        for i in range(seen, n):
            t = tokens[i]
            local.append(0, t)
            if seq is not None:
                glob.append(seq, t)
        depth = local.max_depth
        context = tokens[n - depth : n] if n > depth else tokens[:n]
        limits, min_prob = self._limits, self._min_prob
        l_score, draft, _, _ = best_draft(local.root, context, local.active_nodes(0), k, limits, min_prob, -1.0)
        groot = glob.root
        if groot.children:
            g_active = glob.active_nodes(seq) if seq is not None else ()
            _, g_draft, _, _ = best_draft(groot, context, g_active, k, limits, min_prob, max(l_score, 0.0))
            if g_draft:
                draft = g_draft
        certain = tails is None or not tails.total or global_draft_certain(
            groot, context, k, limits, min_prob, max(l_score, 0.0), tails)
        return draft, certain, n

    def _allocate(self, request_id: str) -> None:
        while True:
            seq = self._next_seq
            self._next_seq = (self._next_seq + 1) & 0x7FFFFFFF
            if seq not in self._seq_to_req or self._seq_to_req[seq] not in self._local:
                break
        if seq in self._seq_to_req:  # wrapped around onto an inactive cached request
            self._evict(self._seq_to_req[seq])
        self._req_to_seq[request_id] = seq
        self._seq_to_req[seq] = request_id
        while len(self._req_to_seq) > self.max_cached_requests:
            oldest = next(r for r, s in self._req_to_seq.items() if s != seq)
            self._evict(oldest)

    def _evict(self, request_id: str) -> None:
        seq = self._req_to_seq.pop(request_id)
        del self._seq_to_req[seq]
        self.global_tree.remove(seq)
        if self.unknown is not None:
            self.unknown.forget(seq)


def walk_steps(tokens: list[int], prompt_len: int, k: int, max_model_len: int | None,
               draft_at: Callable[[int, int, bool], tuple[list[int], bool]]) -> Steps:
    """The decode steps over a logged prompt + output ``tokens``: a step at output position n (the first
    at 1: output token 0 came from the prefill) calls ``draft_at(n, cap, checking)``, which learns the
    history up to n, drafts at most ``cap`` tokens and says whether they are certain (``checking``: no
    step was uncertain yet); the prefix the output continues with is accepted and one more token emitted,
    so the next step starts at n + accepted + 1. vLLM caps a draft at ``max_model_len - n - 1`` and skips
    (drafts nothing, learns nothing) a request at ``max_model_len``."""
    out = Steps()
    n = prompt_len + 1
    while n < len(tokens):
        draft: list[int] = []
        if max_model_len is None or n < max_model_len:
            kk = k if max_model_len is None else min(k, max_model_len - n - 1)
            draft, certain = draft_at(n, kk, out.first_uncertain is None)
            if not certain and out.first_uncertain is None:  # from here on the rest of the request is uncertain
                out.first_uncertain = len(out.drafted)
        a = accepted_prefix(draft, tokens, n)
        out.drafted.append(len(draft))
        out.accepted.append(a)
        out.final_draft = draft
        n += a + 1
    return out


def learn_new(cache: SuffixCache, request_id: str, tokens: Sequence[int], seen: int, offset: int = 0) -> int:
    """Extend the request's history with ``tokens[seen - offset:]`` (``tokens`` hold it from position
    ``offset`` on); returns the tokens learned so far."""
    new = [int(t) for t in tokens[seen - offset :]]
    if new:
        cache.extend(request_id, new)
    return seen + len(new)
