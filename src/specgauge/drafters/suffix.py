"""``suffix`` drafter: vLLM v0.32.0's suffix decoding (``vllm/v1/spec_decode/suffix_decoding.py``), which
calls ArcticInference 0.3.0's ``SuffixDecodingCache``; both mirrored here in pure Python.

What vLLM + ArcticInference do (and this module does):

* Per request, a *local* tree over prompt + output so far (one sequence); one *global* tree over the
  outputs of requests, each its own sequence. A request's output enters the global tree token by
  token while it runs (``add_active_response``), not only when it ends, so running requests and the
  request itself are visible to every request. Suffixes are cut at ``max_tree_depth`` tokens.
* ``max_cached_requests``: each started request takes a global slot; when more than that many are
  cached the oldest-started one (FIFO) is removed from the global tree. 0 disables the global tree.
* Each step: the context is the last ``max_tree_depth`` tokens of the history. For every match length
  m = 1, 2, ... < len(context) whose last-m-token context occurs in a tree, a draft is grown greedily
  down the highest-count child, at most ``min(k, int(max_spec_factor * m + 1e-6))`` tokens, stopping
  when the path probability (product of count ratios) drops below ``min_token_prob``; its score is
  the sum of those probabilities. The highest score wins (ties: the longer match), and the local
  tree's draft wins ties with the global tree's. So the draft length varies per step, 0..k.
* vLLM caps k at ``max_model_len - L - 1`` and skips requests with ``L >= max_model_len``.

The tree below is a twin of ArcticInference's ``SuffixTree`` (``csrc/suffix_decoding/suffix_tree.cc``).

The C++ tree is path-compressed; this one is an uncompressed trie with the same counts. Every
observable of speculation is identical: a compressed node's inner positions have a single child
and the same count (so the probability ratio there is exactly 1.0), and branching happens only at
node ends, where both keep children in the same order.

Each node keeps its children in a list ordered by decreasing count, moved exactly as the C++
sibling/group linked lists move them (ties are NOT broken by token or age alone, so this matters
for which continuation is drafted):

* a new child goes to the tail;
* on increment, a node whose previous sibling has count ``c`` (its own) or ``c+1`` moves in front
  of the first node of that sibling's equal-count run;
* on decrement (eviction), a node whose next sibling has its count ``c`` moves in front of the
  first node with a smaller count (or to the tail).

Floating point follows the C++ ``float`` arithmetic: every product/quotient/sum is rounded to
float32 (exact here: double results rounded once to float32 equal float32 arithmetic for these ops).
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from specgauge.drafters.base import ReplayTrace, register_drafter, replay_by_stepping

_F32 = struct.Struct("f")


def f32(x: float) -> float:
    """Round to the nearest float32, as C++ ``float`` arithmetic does."""
    return _F32.unpack(_F32.pack(x))[0]


_NO_CHILDREN: dict[int, _Node] = {}  # shared by leaves, never mutated (replaced on the first child)
_NO_ORDER: list[_Node] = []


class _Node:
    __slots__ = ("count", "token", "parent", "children", "order")

    def __init__(self, token: int, parent: _Node | None, count: int = 0) -> None:
        self.count = count
        self.token = token
        self.parent = parent
        self.children: dict[int, _Node] = _NO_CHILDREN
        self.order: list[_Node] = _NO_ORDER  # children by decreasing count, C++ sibling-list order


def _neg_count(n: _Node) -> int:
    return -n.count


def _run_start(sib: list[_Node], count: int) -> int:
    """Index of the first sibling whose count is <= ``count`` (siblings are sorted by decreasing count)."""
    return bisect_left(sib, -count, key=_neg_count)


def _increment(node: _Node) -> None:
    sib = node.parent.order  # type: ignore[union-attr]
    c = node.count
    i = _run_start(sib, c)
    while sib[i] is not node:  # find node inside its equal-count run
        i += 1
    if i == 0 or sib[i - 1].count > c + 1:
        node.count = c + 1
        return
    j = _run_start(sib, sib[i - 1].count)  # head of the previous sibling's run
    del sib[i]
    node.count = c + 1
    sib.insert(j, node)


def _decrement(node: _Node) -> None:
    sib = node.parent.order  # type: ignore[union-attr]
    c = node.count
    i = _run_start(sib, c)
    while sib[i] is not node:
        i += 1
    if i == len(sib) - 1 or sib[i + 1].count < c:
        node.count = c - 1
        return
    j = _run_start(sib, c - 1)  # first node of the next (smaller-count) run
    del sib[i]
    node.count = c - 1
    sib.insert(j - 1, node)


@dataclass
class Draft:
    token_ids: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0
    match_len: int = 0


class SuffixTree:
    """Suffix trie over several sequences, each suffix truncated to ``max_depth`` tokens."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.root = _Node(-1, None)
        self._seqs: dict[int, list[int]] = {}
        self._active: dict[int, deque[_Node]] = {}

    def num_seqs(self) -> int:
        return len(self._seqs)

    def append(self, seq_id: int, token: int) -> None:
        seq = self._seqs.setdefault(seq_id, [])
        active = self._active.setdefault(seq_id, deque())
        root = self.root
        active.append(root)
        root.count += 1
        if len(active) > self.max_depth:
            active.popleft()
        seq.append(token)
        for i, node in enumerate(active):
            child = node.children.get(token)
            if child is None:
                child = _Node(token, node, 1)
                if node.children is _NO_CHILDREN:
                    node.children, node.order = {token: child}, [child]
                else:
                    node.children[token] = child
                    node.order.append(child)
            else:
                _increment(child)
            active[i] = child

    def extend(self, seq_id: int, tokens: Sequence[int]) -> None:
        for t in tokens:
            self.append(seq_id, int(t))

    def remove(self, seq_id: int) -> None:
        seq = self._seqs.pop(seq_id, [])
        self._active.pop(seq_id, None)
        root = self.root
        for start in range(len(seq)):
            node = root
            node.count -= 1
            for idx in range(start, min(len(seq), start + self.max_depth)):
                child = node.children.get(seq[idx])
                if child is None:
                    break
                if child.count > 1:
                    _decrement(child)
                else:
                    node.order.remove(child)
                    del node.children[seq[idx]]
                    break
                node = child

    def _match(self, context: Sequence[int]) -> _Node | None:
        node = self.root
        for t in context:
            node = node.children.get(t)  # type: ignore[assignment]
            if node is None:
                return None
        return node

    def speculate(
        self,
        context: Sequence[int],
        max_spec_tokens: int,
        max_spec_factor: float,
        max_spec_offset: float,
        min_token_prob: float,
    ) -> Draft:
        """``SuffixTree::speculate`` with ``use_tree_spec=False`` (the path vLLM uses)."""
        best = Draft()
        factor, offset, min_prob = f32(max_spec_factor), f32(max_spec_offset), f32(min_token_prob)
        n = len(context)
        for match_len in range(1, n):  # the whole context is never matched (C++: match_len < size)
            node = self._match(context[n - match_len :])
            if node is None:
                break
            limit = int(f32(f32(match_len * factor) + offset) + 1e-6)
            max_tokens = max(min(max_spec_tokens, limit), 0)
            draft = _speculate_path(node, max_tokens, min_prob)
            if draft.score >= best.score:
                best = draft
                best.match_len = match_len
        return best


def _speculate_path(node: _Node, max_tokens: int, min_prob: float) -> Draft:
    """Greedy walk down the highest-count child; stop at max_tokens or when the estimated probability
    (product of count ratios along the path) falls below min_prob."""
    ret = Draft()
    prob = 1.0
    score = 0.0
    while len(ret.token_ids) < max_tokens and prob >= min_prob:
        if not node.order:
            break
        child = node.order[0]
        prob = f32(prob * f32(child.count / node.count))
        if prob < min_prob:
            break
        ret.token_ids.append(child.token)
        ret.probs.append(prob)
        score = f32(score + prob)
        node = child
    ret.score = score
    return ret


def _check(name: str, value: object, lo: float, hi: float | None = None, integer: bool = True) -> float:
    ok_type = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.number))
    if isinstance(value, bool) or not ok_type or value < lo or (hi is not None and value > hi):  # type: ignore[operator]
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        kind = "an integer" if integer else "a number"
        raise ValueError(f"suffix drafter: {name} must be {kind} {bound}, got {value!r}")
    return value  # type: ignore[return-value]


class _Request:
    __slots__ = ("tree", "prompt_len", "seen")

    def __init__(self, tree: SuffixTree, prompt_len: int) -> None:
        self.tree, self.prompt_len = tree, prompt_len
        self.seen = prompt_len  # history tokens already in the trees


@register_drafter("suffix")
class SuffixDrafter:
    """Suffix decoding with vLLM's ``suffix_decoding_*`` options and defaults.

    Stateful across requests (the global tree learns every output), so replaying a workload must
    feed requests in arrival order through one drafter, and a sweep over k needs one drafter per k.
    """

    kind: ClassVar[str] = "suffix"
    deterministic: ClassVar[bool] = True

    def __init__(
        self,
        num_speculative_tokens: int | None = None,
        suffix_decoding_max_tree_depth: int = 24,
        suffix_decoding_max_cached_requests: int = 10000,
        suffix_decoding_max_spec_factor: float = 1.0,
        suffix_decoding_min_token_prob: float = 0.1,
        max_model_len: int | None = None,
    ) -> None:
        self.max_tree_depth = int(_check("suffix_decoding_max_tree_depth", suffix_decoding_max_tree_depth, 1))
        # vLLM: k defaults to the max tree depth
        k = self.max_tree_depth if num_speculative_tokens is None else num_speculative_tokens
        self.k = int(_check("num_speculative_tokens", k, 1))
        self.max_cached_requests = int(_check("suffix_decoding_max_cached_requests", suffix_decoding_max_cached_requests, 0))
        self.max_spec_factor = float(_check("suffix_decoding_max_spec_factor", suffix_decoding_max_spec_factor, 0, integer=False))
        self.min_token_prob = float(_check("suffix_decoding_min_token_prob", suffix_decoding_min_token_prob, 0, 1, integer=False))
        self.max_model_len = None if max_model_len is None else int(_check("max_model_len", max_model_len, 1))
        self.global_tree = SuffixTree(self.max_tree_depth)
        self._active: dict[str, _Request] = {}
        self._req_to_seq: dict[str, int] = {}  # insertion order = FIFO eviction order
        self._seq_to_req: dict[int, str] = {}
        self._next_seq = 0

    # -- Drafter protocol -------------------------------------------------------------------------
    def begin(self, request_id: str, prompt_ids: Sequence[int]) -> None:
        """``start_request``: a local tree over the prompt; a global slot (FIFO eviction)."""
        if request_id in self._active:
            raise ValueError(f"suffix drafter: request {request_id!r} is already active")
        if request_id in self._req_to_seq:  # vLLM's proposer evicts a reused id's cached response
            self._evict(request_id)
        tree = SuffixTree(self.max_tree_depth)
        tree.extend(0, prompt_ids)
        self._active[request_id] = _Request(tree, len(prompt_ids))
        if self.max_cached_requests != 0:
            self._allocate(request_id)

    def propose(self, request_id: str, history: Sequence[int], k: int) -> list[int]:
        """Learn the tokens added since the last call, then speculate from the last tokens."""
        req = self._request(request_id)
        k = int(_check("k", k, 1))
        n = len(history)
        if self.max_model_len is not None:
            if n >= self.max_model_len:  # vLLM skips the request before learning its new tokens
                return []
            k = min(k, self.max_model_len - n - 1)
        self._learn(request_id, req, history)
        context = list(history[max(0, n - self.max_tree_depth) :])
        local = req.tree.speculate(context, k, self.max_spec_factor, 0.0, self.min_token_prob)
        glob = self.global_tree.speculate(context, k, self.max_spec_factor, 0.0, self.min_token_prob)
        return (local if local.score >= glob.score else glob).token_ids

    def end(self, request_id: str, output_ids: Sequence[int]) -> None:
        """The rest of the output enters the global tree; the local tree is dropped (``stop_request``).

        In vLLM the final step's tokens reach the trees through one last propose call, which skips a
        request that has reached ``max_model_len``: then they are not learned here either."""
        req = self._request(request_id)
        if self.max_model_len is None or req.prompt_len + len(output_ids) < self.max_model_len:
            self._learn(request_id, req, output_ids, offset=req.prompt_len)
        del self._active[request_id]

    def replay(self, request_id: str, prompt_ids: Sequence[int], output_ids: Sequence[int], k: int) -> ReplayTrace:
        """The whole lifecycle of one request (begin, one propose per step, end). The trees are
        incremental, so each step costs O(max_tree_depth^2) dictionary steps, never a rescan."""
        _check("k", k, 1)
        return replay_by_stepping(self, request_id, prompt_ids, output_ids, k)

    # -- internals --------------------------------------------------------------------------------
    def _request(self, request_id: str) -> _Request:
        try:
            return self._active[request_id]
        except KeyError:
            raise ValueError(f"suffix drafter: request {request_id!r} was not begun (or already ended)") from None

    def _learn(self, request_id: str, req: _Request, tokens: Sequence[int], offset: int = 0) -> None:
        """Add ``tokens[req.seen - offset:]`` (tokens hold history from position ``offset`` on)."""
        new = [int(t) for t in tokens[req.seen - offset :]]
        if not new:
            return
        req.tree.extend(0, new)
        seq = self._req_to_seq.get(request_id)
        if seq is not None:
            self.global_tree.extend(seq, new)
        req.seen += len(new)

    def _allocate(self, request_id: str) -> None:
        while True:
            seq = self._next_seq
            self._next_seq = (self._next_seq + 1) & 0x7FFFFFFF
            if seq not in self._seq_to_req or self._seq_to_req[seq] not in self._active:
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
