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

Backends: this module's trees (``backend="python"``) or ArcticInference's own C++ cache
(``"native"``, ``_suffix_native.py``, optional extra ``specgauge[suffix]``); ``"auto"`` takes native
when importable. ``replay`` gives ``replay_by_stepping``'s trace without its per-step overhead
(``_suffix_replay.py`` for the python trees). Drafts are searched longest match first with an exact
early stop (``best_draft``), which returns C++'s ascending-search result.

Floating point follows the C++ ``float`` arithmetic: every product/quotient/sum is rounded to
float32 (exact here: double results rounded once to float32 equal float32 arithmetic for these ops).
"""

from __future__ import annotations

import gc
import struct
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from specgauge.drafters._suffix_native import NativeSuffixCache, resolve_backend
from specgauge.drafters.base import ReplayTrace, register_drafter

_F32 = struct.Struct("f")


def f32(x: float) -> float:
    """Round to the nearest float32, as C++ ``float`` arithmetic does."""
    return _F32.unpack(_F32.pack(x))[0]


_NO_TOKENS: list[int] = []
_NO_PROBS: list[float] = []


_NO_CHILDREN: dict[int, _Node] = {}  # shared by leaves, never mutated (replaced on the first child)
_NO_ORDER: list[_Node] = []


class _Node:
    """A trie node. No parent pointer: the trie holds no reference cycles, so evicted subtrees are
    freed by reference counting and the cyclic garbage collector has nothing to find in it."""

    __slots__ = ("count", "token", "children", "order")

    def __init__(self, token: int, count: int = 0) -> None:
        self.count = count
        self.token = token
        self.children: dict[int, _Node] = _NO_CHILDREN
        self.order: list[_Node] = _NO_ORDER  # children by decreasing count, C++ sibling-list order


def _neg_count(n: _Node) -> int:
    return -n.count


def _run_start(sib: list[_Node], count: int) -> int:
    """Index of the first sibling whose count is <= ``count`` (siblings are sorted by decreasing count)."""
    return bisect_left(sib, -count, key=_neg_count)


def _increment(sib: list[_Node], node: _Node) -> None:
    """``node.count += 1`` among its siblings ``sib`` (its parent's ``order``), moved as C++ moves it."""
    c = node.count
    i = sib.index(node, _run_start(sib, c))  # node inside its equal-count run
    if i == 0 or sib[i - 1].count > c + 1:
        node.count = c + 1
        return
    j = _run_start(sib, sib[i - 1].count)  # head of the previous sibling's run
    del sib[i]
    node.count = c + 1
    sib.insert(j, node)


def _decrement(sib: list[_Node], node: _Node) -> None:
    c = node.count
    i = sib.index(node, _run_start(sib, c))
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
        # the root keeps ``children`` only: its sibling order is never read (drafts start at a match
        # of >= 1 token), and keeping it would cost a scan of the root's huge count-1 run per token
        self.root = _Node(-1)
        self.root.children = {}
        self._seqs: dict[int, list[int]] = {}
        # per sequence: the nodes of its last min(len, max_depth) suffixes, longest first, so
        # active[-m] is the node of the sequence's last m tokens
        self._active: dict[int, list[_Node]] = {}

    def num_seqs(self) -> int:
        return len(self._seqs)

    def active_nodes(self, seq_id: int) -> list[_Node]:
        """Nodes of the last 1..min(len, max_depth) tokens of ``seq_id`` (``[-m]``: the last m); live view."""
        return self._active.get(seq_id, _NO_ORDER)

    def append(self, seq_id: int, token: int) -> None:
        seq = self._seqs.get(seq_id)
        if seq is None:
            seq = self._seqs[seq_id] = []
            self._active[seq_id] = []
        active = self._active[seq_id]
        root = self.root
        root.count += 1
        if len(active) >= self.max_depth:
            del active[0]
        seq.append(token)
        child = root.children.get(token)
        if child is None:
            child = root.children[token] = _Node(token, 1)
        else:
            child.count += 1
        active.append(child)
        for i in range(len(active) - 1):
            node = active[i]
            child = node.children.get(token)
            if child is None:
                child = _Node(token, 1)
                if node.children is _NO_CHILDREN:
                    node.children, node.order = {token: child}, [child]
                else:
                    node.children[token] = child
                    node.order.append(child)
            elif node.order[0] is child:  # already first: no sibling moves
                child.count += 1
            else:
                _increment(node.order, child)
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
                if node is root:
                    if child.count > 1:
                        child.count -= 1
                    else:
                        del root.children[seq[idx]]
                        break
                elif child.count > 1:
                    _decrement(node.order, child)
                else:
                    node.order.remove(child)
                    del node.children[seq[idx]]
                    break
                node = child

    def speculate(
        self,
        context: Sequence[int],
        max_spec_tokens: int,
        max_spec_factor: float,
        max_spec_offset: float,
        min_token_prob: float,
    ) -> Draft:
        """``SuffixTree::speculate`` with ``use_tree_spec=False`` (the path vLLM uses)."""
        limits = spec_limits(len(context), max_spec_factor, max_spec_offset)
        score, tokens, probs, match_len = best_draft(
            self.root, context, _NO_ORDER, max(max_spec_tokens, 0), limits, f32(min_token_prob), -1.0
        )
        return Draft(tokens, probs, max(score, 0.0), match_len)


def spec_limits(n: int, max_spec_factor: float, max_spec_offset: float) -> list[int]:
    """``limits[m]``: C++'s token cap for match length m (before the ``max_spec_tokens`` cap), in float32."""
    factor, offset = f32(max_spec_factor), f32(max_spec_offset)
    return [int(f32(f32(m * factor) + offset) + 1e-6) for m in range(n + 1)]


def best_draft(
    root: _Node,
    context: Sequence[int],
    active: Sequence[_Node],
    max_spec_tokens: int,
    limits: Sequence[int],
    min_prob: float,
    beat: float,
) -> tuple[float, list[int], list[float], int]:
    """C++ ``speculate``'s result, found from the longest match down instead of the shortest up.

    C++ tries match lengths m = 1, 2, ... < len(context) while the last m context tokens occur in
    the tree, and keeps a draft when ``score >= best``: the winner is the longest m among those with
    the highest score. Matches are closed under taking suffixes (a suffix trie holds every substring
    up to its depth), so the present m form 1..M; scanning m = M, M-1, ... and keeping a draft only
    when ``score > best`` gives the same winner, and as a draft of at most t tokens scores at most t
    (every probability is <= 1) and the cap ``min(max_spec_tokens, limits[m])`` does not grow as m
    falls, the scan stops as soon as the cap cannot beat the best score. Usually the longest match
    already scores the cap, and one short greedy walk decides the step.

    ``active[-m]``, when ``m <= len(active)``, must be the node of the last m context tokens (the
    caller's cursor); longer matches are walked from the root. A draft must score more than ``beat``
    (-1.0: any). Returns (score, tokens, probs, match_len), score ``beat`` and no tokens if none won.
    """
    pack, unpack = _F32.pack, _F32.unpack
    n = len(context)
    n_active = len(active)
    best_score, best_tokens, best_probs, best_m = beat, _NO_TOKENS, _NO_PROBS, 0
    m = n - 1
    while m >= 1:
        max_tokens = limits[m]
        if max_tokens > max_spec_tokens:
            max_tokens = max_spec_tokens
        if max_tokens <= best_score:
            break
        if m <= n_active:
            node = active[-m]
        else:
            node = root
            for t in context[n - m :]:
                node = node.children.get(t)  # type: ignore[assignment]
                if node is None:
                    break
            if node is None:
                m -= 1
                continue
        # _speculate_path: greedy walk down the highest-count child while the path probability (the
        # product of count ratios, in float32) stays >= min_prob
        tokens: list[int] = []
        probs: list[float] = []
        prob, score = 1.0, 0.0
        while len(tokens) < max_tokens:
            order = node.order
            if not order:
                break
            child = order[0]
            c = child.count
            if c != node.count:  # a ratio of 1 leaves prob as it is
                prob = unpack(pack(prob * unpack(pack(c / node.count))[0]))[0]
                if prob < min_prob:
                    break
            tokens.append(child.token)
            probs.append(prob)
            # a prob of 1.0 means every earlier one was 1.0 too (ratios are <= 1): score is a small integer
            score = score + 1.0 if prob == 1.0 else unpack(pack(score + prob))[0]
            node = child
        if score > best_score:
            best_score, best_tokens, best_probs, best_m = score, tokens, probs, m
        m -= 1
    return best_score, list(best_tokens), list(best_probs), best_m
def _check(name: str, value: object, lo: float, hi: float | None = None, integer: bool = True) -> float:
    ok_type = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.number))
    if isinstance(value, bool) or not ok_type or value < lo or (hi is not None and value > hi):  # type: ignore[operator]
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        kind = "an integer" if integer else "a number"
        raise ValueError(f"suffix drafter: {name} must be {kind} {bound}, got {value!r}")
    return value  # type: ignore[return-value]


class _Request:
    __slots__ = ("tree", "prompt_len", "seen")

    def __init__(self, tree: SuffixTree | None, prompt_len: int) -> None:
        self.tree, self.prompt_len = tree, prompt_len  # tree: None with the native backend
        self.seen = prompt_len  # history tokens already in the trees





@register_drafter("suffix")
class SuffixDrafter:
    """Suffix decoding with vLLM's ``suffix_decoding_*`` options and defaults.

    Stateful across requests (the global tree learns every output), so replaying a workload must
    feed requests in arrival order through one drafter, and a sweep over k needs one drafter per k.

    ``backend``: ``"python"`` (the trees in this module), ``"native"`` (ArcticInference's own C++
    ``SuffixDecodingCache``, the optional extra ``specgauge[suffix]``), or ``"auto"`` (native when
    importable; ``SPECGAUGE_SUFFIX_BACKEND`` overrides it). Both give identical drafts.
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
        backend: str = "auto",
    ) -> None:
        self.max_tree_depth = int(_check("suffix_decoding_max_tree_depth", suffix_decoding_max_tree_depth, 1))
        # vLLM: k defaults to the max tree depth
        k = self.max_tree_depth if num_speculative_tokens is None else num_speculative_tokens
        self.k = int(_check("num_speculative_tokens", k, 1))
        self.max_cached_requests = int(_check("suffix_decoding_max_cached_requests", suffix_decoding_max_cached_requests, 0))
        self.max_spec_factor = float(_check("suffix_decoding_max_spec_factor", suffix_decoding_max_spec_factor, 0, integer=False))
        self.min_token_prob = float(_check("suffix_decoding_min_token_prob", suffix_decoding_min_token_prob, 0, 1, integer=False))
        self.max_model_len = None if max_model_len is None else int(_check("max_model_len", max_model_len, 1))
        self.backend = resolve_backend(backend)
        self._native = NativeSuffixCache(self.max_tree_depth, self.max_cached_requests) if self.backend == "native" else None
        self.global_tree = SuffixTree(self.max_tree_depth)
        self._limits = spec_limits(self.max_tree_depth, self.max_spec_factor, 0.0)
        self._min_prob = f32(self.min_token_prob)
        self._active: dict[str, _Request] = {}
        self._req_to_seq: dict[str, int] = {}  # insertion order = FIFO eviction order
        self._seq_to_req: dict[int, str] = {}
        self._next_seq = 0

    # -- Drafter protocol -------------------------------------------------------------------------
    def begin(self, request_id: str, prompt_ids: Sequence[int]) -> None:
        """``start_request``: a local tree over the prompt; a global slot (FIFO eviction)."""
        if request_id in self._active:
            raise ValueError(f"suffix drafter: request {request_id!r} is already active")
        if self._native is not None:
            self._native.start(request_id, [int(t) for t in prompt_ids])
            self._active[request_id] = _Request(None, len(prompt_ids))
            return
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
        context = [int(t) for t in history[max(0, n - self.max_tree_depth) :]]
        if self._native is not None:
            return self._native.speculate(request_id, context, k, self.max_spec_factor, self.min_token_prob)
        limits = self._limits
        l_score, local, _, _ = best_draft(req.tree.root, context, (), k, limits, self._min_prob, -1.0)  # type: ignore[union-attr]
        g_score, glob, _, _ = best_draft(self.global_tree.root, context, (), k, limits, self._min_prob, max(l_score, 0.0))
        return glob if glob else local  # the global draft won only if it scored more (C++: local on ties)

    def end(self, request_id: str, output_ids: Sequence[int]) -> None:
        """The rest of the output enters the global tree; the local tree is dropped (``stop_request``).

        In vLLM the final step's tokens reach the trees through one last propose call, which skips a
        request that has reached ``max_model_len``: then they are not learned here either."""
        req = self._request(request_id)
        if self.max_model_len is None or req.prompt_len + len(output_ids) < self.max_model_len:
            self._learn(request_id, req, output_ids, offset=req.prompt_len)
        del self._active[request_id]
        if self._native is not None:
            self._native.stop(request_id)

    def replay(self, request_id: str, prompt_ids: Sequence[int], output_ids: Sequence[int], k: int) -> ReplayTrace:
        """The whole lifecycle of one request: the same steps and numbers as ``replay_by_stepping``
        (begin, one propose per decode step, end), without its per-step overhead. The python backend
        reads match nodes off the trees' cursors instead of walking from the root."""
        k = int(_check("k", k, 1))
        tokens = [int(t) for t in prompt_ids] + [int(t) for t in output_ids]
        if self._native is not None:
            return self._replay(request_id, tokens, len(prompt_ids), k)
        # the trie holds no reference cycles, so pausing the cyclic collector loses nothing; it would
        # otherwise rescan the millions of tree nodes as they are allocated (3x slower)
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            return self._replay(request_id, tokens, len(prompt_ids), k)
        finally:
            if gc_was_on:
                gc.enable()

    def _replay(self, request_id: str, tokens: list[int], prompt_len: int, k: int) -> ReplayTrace:
        self.begin(request_id, tokens[:prompt_len])
        req = self._active[request_id]
        drafted: list[int] = []
        accepted: list[int] = []
        if len(tokens) - prompt_len > 1:
            if self._native is not None:
                drafted, accepted, req.seen = self._native.replay_steps(
                    request_id, tokens, prompt_len, req.seen, k, self.max_spec_factor, self.min_token_prob,
                    self.max_model_len)
            else:
                from specgauge.drafters._suffix_replay import replay_steps

                drafted, accepted, req.seen = replay_steps(
                    req.tree, self.global_tree, self._req_to_seq.get(request_id), tokens, prompt_len,  # type: ignore[arg-type]
                    req.seen, k, self._limits, self._min_prob, self.max_model_len)
        self.end(request_id, tokens[prompt_len:])
        return ReplayTrace(np.asarray(drafted, dtype=np.int64), np.asarray(accepted, dtype=np.int64))

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
        if self._native is not None:
            self._native.learn(request_id, new)
        else:
            req.tree.extend(0, new)  # type: ignore[union-attr]
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
