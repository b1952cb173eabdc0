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
step of that request with it. Floating point follows ``suffix.f32`` (monotone, so intervals hold).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from specgauge.drafters._suffix_tree import f32

if TYPE_CHECKING:
    from specgauge.drafters._suffix_tree import SuffixTree, _Node


class UnknownTails:
    """Unknown tokens at the ends of cached sequences of one global tree: ``u[node]`` = unknown
    tokens that would be appended right after a path ending at ``node``; ``total`` = all of them
    (each also raises a child of the root)."""

    def __init__(self) -> None:
        self.u: dict[_Node, int] = {}
        self.total = 0
        self._by_seq: dict[int, list[list[_Node]]] = {}

    def add(self, tree: SuffixTree, seq: int) -> None:
        """One unknown token after sequence ``seq``'s last token (as ``tree.append`` would add it:
        under each suffix node shorter than the tree depth, and under the root)."""
        active = tree.active_nodes(seq)
        nodes = list(active[1:] if len(active) >= tree.max_depth else active)
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


def _walk(node: _Node, delta: int, cap: int, min_prob: float, u: dict[_Node, int]) -> tuple[float, float, bool]:
    """Score interval of the greedy walk from ``node`` (whose count may be ``delta`` higher) and
    whether its tokens are certain. Mirrors ``suffix.best_draft``'s inner loop. Where the walk
    becomes uncertain, the tokens so far stand and each further one adds at most 1 to the score."""
    lo = hi = 1.0
    s_lo = s_hi = 0.0
    taken = 0
    while taken < cap:
        uc = u.get(node, 0)
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
    u = tails.u
    n = len(context)
    cands: list[tuple[float, float, bool]] = []  # longest match first
    floor = beat
    for m in range(n - 1, 0, -1):
        cap = min(max_spec_tokens, limits[m])
        if cap <= floor:
            break
        parent, node = root, root
        for t in context[n - m :]:
            parent, node = node, node.children.get(t)  # type: ignore[assignment]
            if node is None:
                break
        if node is None:
            continue  # absent here; in the server at most a childless node made by an unknown token
        delta = tails.total if parent is root else u.get(parent, 0)
        lo, hi, certain = _walk(node, delta, cap, min_prob, u)
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
