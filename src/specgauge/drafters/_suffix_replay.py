"""Fast pure-Python replay of one request through the ``suffix`` drafter's trees.

Gives exactly the steps ``base.replay_by_stepping`` gives (one ``propose`` per decode step), with
two shortcuts that only a replay can take, because it owns the whole history:

* no tree walks for the local tree: its cursor (``SuffixTree.active_nodes``) already holds the node
  of every suffix of the history up to ``max_tree_depth`` tokens, since the local tree is the history;
* in the global tree the request's own sequence holds its output so far, so its cursor gives every
  match that lies inside the output; only longer matches (reaching back into the prompt, in the
  first ``max_tree_depth`` output tokens) are walked from the root.

Draft selection is ``suffix.best_draft`` in both cases: longest match first, stopping as soon as
no shorter match can win; the global tree must beat the local tree's score to win, as in C++.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specgauge.drafters._suffix_bounds import global_draft_certain
from specgauge.drafters._suffix_tree import best_draft

if TYPE_CHECKING:
    from specgauge.drafters._suffix_bounds import UnknownTails
    from specgauge.drafters._suffix_tree import SuffixTree


def replay_steps(
    local: SuffixTree,
    glob: SuffixTree,
    seq: int | None,
    tokens: list[int],
    prompt_len: int,
    seen: int,
    k: int,
    limits: list[int],
    min_prob: float,
    max_model_len: int | None,
    tails: UnknownTails | None = None,
) -> tuple[list[int], list[int], int, list[int], int | None]:
    """Decode steps of a begun request whose prompt + whole output is ``tokens``; ``seen`` tokens are
    already in the trees (``seq``: its global sequence, None without a global slot). ``limits`` from
    ``suffix.spec_limits``; ``min_prob`` already float32. With ``tails`` (unknown tokens in the global
    tree), each step's draft is checked with ``_suffix_bounds.global_draft_certain``. Returns
    (drafted, accepted, seen, the final step's draft, index of the first uncertain step or None)."""
    total = len(tokens)
    drafted: list[int] = []
    accepted: list[int] = []
    groot = glob.root
    n = prompt_len + 1  # output token 0 came from the prefill
    draft: list[int] = []
    first_uncertain: int | None = None
    while n < total:
        if max_model_len is not None and n >= max_model_len:
            draft = []  # vLLM skips the request, learning nothing
        else:
            kk = k if max_model_len is None else min(k, max_model_len - n - 1)
            draft, context, l_score, seen = draft_at(local, glob, seq, tokens, n, seen, kk, limits, min_prob)
            if (first_uncertain is None and tails is not None and tails.total
                    and not global_draft_certain(groot, context, kk, limits, min_prob, max(l_score, 0.0), tails)):
                first_uncertain = len(drafted)
        a = accepted_prefix(draft, tokens, n)
        drafted.append(len(draft))
        accepted.append(a)
        n += a + 1
    return drafted, accepted, seen, draft, first_uncertain


def draft_at(local: SuffixTree, glob: SuffixTree, seq: int | None, tokens: list[int], n: int, seen: int, k: int,
             limits: list[int], min_prob: float) -> tuple[list[int], list[int], float, int]:
    """Learn ``tokens[seen:n]`` (both trees), then draft at position n as vLLM does: the local tree's
    draft unless the global tree's scores more. Returns (draft, context, local score, tokens learned)."""
    for i in range(seen, n):
        t = tokens[i]
        local.append(0, t)
        if seq is not None:
            glob.append(seq, t)
    depth = local.max_depth
    context = tokens[n - depth : n] if n > depth else tokens[:n]
    l_score, draft, _, _ = best_draft(local.root, context, local.active_nodes(0), k, limits, min_prob, -1.0)
    groot = glob.root
    if groot.children:
        g_active = glob.active_nodes(seq) if seq is not None else ()
        _, g_draft, _, _ = best_draft(groot, context, g_active, k, limits, min_prob, max(l_score, 0.0))
        if g_draft:
            draft = g_draft
    return draft, context, l_score, n


def accepted_prefix(draft: list[int], tokens: list[int], n: int) -> int:
    """How many of ``draft`` a greedy verifier accepts at position ``n`` of ``tokens`` (the logged
    sequence): the length of the prefix that matches, never past its end."""
    a, total = 0, len(tokens)
    for t in draft:
        if n + a >= total or t != tokens[n + a]:
            break
        a += 1
    return a
