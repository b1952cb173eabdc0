"""The suffix trie: a pure-Python twin of ArcticInference 0.3.0's ``SuffixTree``
(``csrc/suffix_decoding/suffix_tree.cc``) and its greedy draft search.

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

Drafts are searched longest match first with an exact early stop (``best_draft``), which returns
C++'s ascending-search result. Floating point follows the C++ ``float`` arithmetic: every
product/quotient/sum is rounded to float32 (exact here: double results rounded once to float32 equal
float32 arithmetic for these ops).
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

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

    __slots__ = ("children", "count", "order", "token")

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
        max_tokens = min(max_tokens, max_spec_tokens)
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
