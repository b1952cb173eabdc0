"""Which suffix drafts a replay can vouch for when the global tree lacks tokens a live server learned.

vLLM's ``SuffixDecodingProposer`` adds every token of a step to the cache, including the final step's
tokens past the logged output: draft tokens it accepted past ``max_tokens`` or after the EOS, and
the bonus token it sampled after them. The accepted ones are known when the server reports its
final step's accepted count (they are the replay's own draft); the bonus token is not in any log.
So the replay's global tree may lack one token at the end of such a request's sequence.

``UnknownTails`` records where those unknown tokens sit (which tree nodes they would hang under) and
``global_draft_certain`` decides whether a step's draft is the same for *every* possible value of
them. A sound test, by interval arithmetic over the counts an unknown token can change:

* an unknown token ``b`` appended after sequence s adds 1 to the count of the root's child ``b``
  and of the child ``b`` of every node on s's tail (the suffixes of s shorter than the tree depth);
  ``b`` may be any token, so any child of the root, and any child of a tail node, may be 1 higher
  per unknown token (``Δ``), and a tail node may gain a new child;
* along a draft walk: the top child is certain when it leads its next sibling by more than the
  unknowns that can land under that node; each probability ratio lies in
  ``[c / (n + Δ(node)), (c + u(node)) / n]``; the ``min_token_prob`` cut and every score comparison
  (between match lengths, and against the local tree, whose draft is exact) must come out the same
  at both ends of the intervals;
* a match that does not exist in the replay's tree can exist in the server's only as a node made by
  an unknown token, which has no children: its draft is empty and never wins.

A step that fails the test is *uncertain*: the server may have drafted otherwise, and every later
step of that request with it. Floating point follows ``trie.f32`` (monotone, so intervals hold).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from specgauge.drafters.suffix.trie import f32

if TYPE_CHECKING:
    from specgauge.drafters.suffix.trie import SuffixTree, _Node


class UnknownTails:
    """Unknown tokens at the ends of cached sequences of one global tree: ``u[node]`` = single unknown
    tokens that would be appended right after a path ending at ``node``; ``runs``: runs of up to L
    unknown tokens in a row (a tail of unknown length and content); ``total`` = all unknown tokens
    (each also raises a child of the root).

    A run of L tokens after sequence s adds its j-th token under every node the previous j − 1 tokens
    lead to from s's tail nodes and from the root: any node at depth < L, and any node less than L
    below one of s's tail nodes, may gain up to L in its children's counts (each token adds at most one
    to a node's children), and a missing node there may exist in the server's tree, with children."""

    def __init__(self) -> None:
        self.u: dict[_Node, int] = {}
        self.total = 0
        self.runs: list[tuple[frozenset[int], int]] = []  #: (ids of the tail nodes, L)
        self._by_seq: dict[int, list[list[_Node]]] = {}
        self._runs_by_seq: dict[int, list[tuple[frozenset[int], int]]] = {}

    def add(self, tree: SuffixTree, seq: int, length: int = 1) -> None:
        """``length`` unknown tokens after sequence ``seq``'s last token (as ``tree.append`` would add
        them: under each suffix node shorter than the tree depth, and under the root)."""
        active = tree.active_nodes(seq)
        nodes = list(active[1:] if len(active) >= tree.max_depth else active)
        if length > 1:
            run = (frozenset(id(n) for n in nodes), int(length))
            self.runs.append(run)
            self._runs_by_seq.setdefault(seq, []).append(run)
            self.total += int(length)
            return
        for node in nodes:
            self.u[node] = self.u.get(node, 0) + 1
        self._by_seq.setdefault(seq, []).append(nodes)
        self.total += 1

    def forget(self, seq: int) -> None:
        """The sequence left the tree (evicted): its unknown tokens left with it."""
        for nodes in self._by_seq.pop(seq, ()):
            for node in nodes:
                left = self.u[node] - 1
                if left:
                    self.u[node] = left
                else:
                    del self.u[node]
            self.total -= 1
        for run in self._runs_by_seq.pop(seq, ()):
            self.runs.remove(run)
            self.total -= run[1]

    # -- where runs reach: a state per path from the root (None without runs) ------------------------
    def start(self) -> tuple[int, tuple[int | None, ...]] | None:
        """The root's state: (depth, per run the distance below its nearest tail node, or None)."""
        return (0, tuple(None for _ in self.runs)) if self.runs else None

    def down(self, state: tuple[int, tuple[int | None, ...]] | None, child: _Node
             ) -> tuple[int, tuple[int | None, ...]] | None:
        if state is None:
            return None
        depth, dist = state
        return depth + 1, tuple(0 if id(child) in nodes else (None if d is None else d + 1)
                                for (nodes, _), d in zip(self.runs, dist, strict=True))

    def _reach(self, state: tuple[int, tuple[int | None, ...]] | None, spare: int) -> int:
        """Run tokens that may land among this node's children (``spare``: that many more run tokens
        must follow them)."""
        if state is None:
            return 0
        depth, dist = state
        return sum(L for (_, L), d in zip(self.runs, dist, strict=True)
                   if depth <= L - 1 - spare or (d is not None and d <= L - 1 - spare))

    def at(self, node: _Node, state: tuple[int, tuple[int | None, ...]] | None) -> int:
        """Unknown tokens that may be appended as children of ``node`` (reached with ``state``)."""
        return self.u.get(node, 0) + self._reach(state, 0)

    def grows_below(self, state: tuple[int, tuple[int | None, ...]] | None) -> bool:
        """Whether a child a run adds under this node may have children of its own."""
        return self._reach(state, 1) > 0


def _walk(node: _Node, delta: int, cap: int, min_prob: float, tails: UnknownTails,
          state: tuple[int, tuple[int | None, ...]] | None) -> tuple[float, float, bool]:
    """Score interval of the greedy walk from ``node`` (whose count may be ``delta`` higher; ``state``:
    where runs reach it) and whether its tokens are certain. Mirrors ``trie.best_draft``'s inner loop.
    Where the walk becomes uncertain, the tokens so far stand and each further one adds at most 1 to
    the score."""
    lo = hi = 1.0
    s_lo = s_hi = 0.0
    taken = 0
    while taken < cap:
        uc = tails.at(node, state)
        order = node.order
        if not order:
            if uc:  # an unknown token may be a child here: the server's walk may go on
                return s_lo, s_hi + (cap - taken), False
            break
        c1 = order[0].count
        c2 = order[1].count if len(order) > 1 else 0
        if uc and c1 <= c2 + uc:  # an unknown token could put another child first
            return s_lo, s_hi + (cap - taken), False
        n = node.count
        if c1 != n or uc or delta:
            r_lo = f32(c1 / (n + delta))
            r_hi = f32(min(1.0, (c1 + uc) / n))
            lo, hi = f32(lo * r_lo), f32(hi * r_hi)
        if hi < min_prob:  # the walk stops here whatever the unknown tokens are
            break
        if lo < min_prob:  # it may or may not stop here
            return s_lo, s_hi + (cap - taken), False
        s_lo = s_lo + 1.0 if lo == 1.0 else f32(s_lo + lo)
        s_hi = s_hi + 1.0 if hi == 1.0 else f32(s_hi + hi)
        taken += 1
        node, delta = order[0], uc
        state = tails.down(state, node)
    return s_lo, s_hi, True


def global_draft_certain(
    root: _Node,
    context: Sequence[int],
    max_spec_tokens: int,
    limits: Sequence[int],
    min_prob: float,
    beat: float,
    tails: UnknownTails,
) -> bool:
    """True when the global tree's contribution to this step (its draft, or that the local draft
    wins) is the same for every value of the unknown tokens. ``beat``: the local tree's score
    (floored at 0), which the global draft must exceed; ``limits``/``min_prob`` as ``best_draft``."""
    if tails.total == 0:
        return True
    n = len(context)
    cands: list[tuple[float, float, bool]] = []  # longest match first
    floor = beat
    for m in range(n - 1, 0, -1):
        cap = min(max_spec_tokens, limits[m])
        if cap <= floor:
            break
        parent, node = root, root
        p_state = state = tails.start()
        for t in context[n - m :]:
            parent, node, p_state = node, node.children.get(t), state  # type: ignore[assignment]
            if node is None:
                break
            state = tails.down(state, node)
        if node is None:
            if tails.grows_below(p_state):  # a run may have made the match, and its draft too
                cands.append((0.0, float(cap), False))
            continue  # else absent in the server too, or a childless node made by an unknown token
        delta = tails.total if parent is root else tails.at(parent, p_state)
        lo, hi, certain = _walk(node, delta, cap, min_prob, tails, state)
        cands.append((lo, hi, certain))
        if certain and lo > floor:
            floor = lo
    if all(hi <= beat for _, hi, _ in cands):
        return True  # no global draft can beat the local one
    for w, (lo_w, _, certain_w) in enumerate(cands):
        if not certain_w or lo_w <= beat:
            continue
        if all(hi < lo_w for _, hi, _ in cands[:w]) and all(hi <= lo_w for _, hi, _ in cands[w + 1 :]):
            return True
    return False
