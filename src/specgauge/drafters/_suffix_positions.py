"""Suffix replay at every output position, for sound per-request bounds (``SuffixDrafter(bounds=True)``).

A step that starts at output position p drafts from the cache as it is once the request's own tokens
before p are learned, whatever steps came before: so the draft at p is a function of p alone. This
module computes, for every p, that draft and whether it is certain (``_suffix_bounds.
global_draft_certain``: the same for every value of the unknown tokens in the cache). The replay's
own steps follow from the table (start at 1, go to p + accepted + 1), and so does every path a server
could have taken where a draft was uncertain (``path_bounds``): the server's counts lie between the
least and the most over those paths. ``CountBounds``: a request's bounds, as the replay reports them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specgauge.drafters._suffix_bounds import global_draft_certain
from specgauge.drafters._suffix_replay import draft_at

if TYPE_CHECKING:
    from collections.abc import Sequence

    from specgauge.drafters._suffix_bounds import UnknownTails
    from specgauge.drafters._suffix_tree import SuffixTree
    from specgauge.drafters.suffix import SuffixTrace


@dataclass
class Positions:
    """Per output position p (index 0 unused: the prefill's token): the draft there, tokens of it the
    output continues with, and whether the draft is certain; ``cap[p]``: the most tokens it may hold."""

    drafts: list[list[int]]
    matched: list[int]
    certain: list[bool]
    cap: list[int]


def replay_positions(local: SuffixTree, glob: SuffixTree, seq: int | None, tokens: list[int], prompt_len: int,
                     seen: int, k: int, limits: list[int], min_prob: float, max_model_len: int | None,
                     tails: UnknownTails | None) -> tuple[Positions, int]:
    """The table for a begun request whose prompt + output is ``tokens`` (arguments as
    ``_suffix_replay.replay_steps``); returns it and the tokens learned."""
    total = len(tokens)
    n_out = total - prompt_len
    pos = Positions([[]], [0], [True], [0])
    groot = glob.root
    for n in range(prompt_len + 1, total):
        draft: list[int] = []
        certain = True
        kk = 0
        if max_model_len is None or n < max_model_len:  # else vLLM skips the request, learning nothing
            kk = k if max_model_len is None else min(k, max_model_len - n - 1)
            draft, context, l_score, seen = draft_at(local, glob, seq, tokens, n, seen, kk, limits, min_prob)
            if tails is not None and tails.total:
                certain = global_draft_certain(groot, context, kk, limits, min_prob, max(l_score, 0.0), tails)
        a = 0
        while a < len(draft) and n + a < total and draft[a] == tokens[n + a]:
            a += 1
        pos.drafts.append(draft)
        pos.matched.append(a)
        pos.certain.append(certain)
        pos.cap.append(max(kk, 0))
    assert len(pos.drafts) == max(1, n_out)
    return pos, seen


def replay_path(pos: Positions, n_out: int) -> tuple[list[int], list[int], list[int], int | None]:
    """The replay's own steps through the table: (drafted, accepted, final draft, first uncertain step)."""
    drafted: list[int] = []
    accepted: list[int] = []
    draft: list[int] = []
    first: int | None = None
    p = 1
    while p < n_out:
        draft, a = pos.drafts[p], pos.matched[p]
        if first is None and not pos.certain[p]:
            first = len(drafted)
        drafted.append(len(draft))
        accepted.append(a)
        p += a + 1
    return drafted, accepted, draft, first


def final_step_known(pos: Positions, n_out: int, start: int) -> bool:
    """Whether every path a server could take from ``start`` makes its final step at the same, certain
    position (then the tokens it learned past the output's end are the replay's); else they are unknown."""
    seen, todo, finals = {start}, [start], set()
    while todo:
        p = todo.pop()
        rest = n_out - p
        if pos.certain[p]:
            nexts = [p + min(pos.matched[p] + 1, rest)]
        else:
            nexts = [p + min(a + 1, rest) for a in range(0, min(pos.cap[p], rest) + 1)]
        for q in nexts:
            if q >= n_out:
                finals.add(p)
            elif q not in seen:
                seen.add(q)
                todo.append(q)
        if len(finals) > 1:
            return False
    return len(finals) == 1 and all(pos.certain[p] for p in finals)


def server_final(pos: Positions, n_out: int, steps: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    """The server's final step, (output position p, accepted count a), from its own (drafted, accepted)
    per drafting step (vLLM's ``per_step_drafted`` / ``per_step_accepted``: steps that drafted nothing
    are not listed): the one end of every path through the table that agrees with every listed step.
    (0, 0): the final step drafted nothing. None: no path agrees, or the paths that agree end
    differently, or at an uncertain draft whose tail (a token past the output) is then unknown."""
    steps = [(int(d), int(a)) for d, a in steps]
    finals: set[tuple[int, int]] = set()
    seen = {(1, 0)}
    todo = [(1, 0)]
    while todo and len(finals) <= 1:
        p, i = todo.pop()
        rest = n_out - p
        for q, j, end in _server_moves(pos, p, i, rest, steps):
            if q >= n_out:
                if j == len(steps):
                    finals.add(end)
            elif (q, j) not in seen:
                seen.add((q, j))
                todo.append((q, j))
    if len(finals) != 1:
        return None
    p, a = next(iter(finals))
    if p and not pos.certain[p] and a >= n_out - p:
        return None  # it accepted past the output's end from a draft no one knows
    return p, a


def _server_moves(pos: Positions, p: int, i: int, rest: int, steps: list[tuple[int, int]]
                  ) -> list[tuple[int, int, tuple[int, int]]]:
    """The steps a server at output position p, having made ``i`` listed steps, could make that agree
    with ``steps``: (next position, listed steps made, (p, accepted) or (0, 0) for no draft)."""
    if pos.certain[p]:
        lengths = [len(pos.drafts[p])]
    else:
        lengths = list(range(0, pos.cap[p] + 1))
    moves = []
    for n in lengths:
        if n == 0:
            moves.append((p + 1, i, (0, 0)))
            continue
        if i >= len(steps) or steps[i][0] != n:
            continue
        a = steps[i][1]
        if pos.certain[p]:
            m = pos.matched[p]
            if not (a == m if m < rest else rest <= a <= n):
                continue
        elif not 0 <= a <= n:
            continue
        moves.append((p + min(a + 1, rest), i + 1, (p, a)))
    return moves


_INF = math.inf


def path_bounds(pos: Positions, n_out: int, start: int, final_accepted: int | None
                ) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
    """(low, high) of (drafts, draft tokens, accepted tokens) over every path from output position
    ``start`` to the end: a certain position has one step, an uncertain one any draft of up to its cap
    (accepting any prefix of the output's rest). ``final_accepted``: the server's count at its final
    step (pins that step; paths that disagree with it are not the server's). None: no path agrees."""
    lo = [[0.0, 0.0, 0.0] for _ in range(n_out + 1)]
    hi = [[0.0, 0.0, 0.0] for _ in range(n_out + 1)]
    ok = [False] * (n_out + 1)
    ok[n_out] = True
    for p in range(n_out - 1, start - 1, -1):
        rest = n_out - p
        if pos.certain[p]:
            d = pos.drafts[p]
            options = [(len(d), len(d), pos.matched[p])]
        else:
            c = pos.cap[p]
            options = [(a, c, a) for a in range(0, min(c, rest) + 1)]
        best_lo, best_hi, any_ok = [_INF] * 3, [-_INF] * 3, False
        for l_min, l_max, a in options:
            nxt = p + min(a + 1, rest)
            if not ok[nxt]:
                continue
            if nxt == n_out:  # the final step: vLLM counts acceptance past the output's end too
                if a >= rest:  # the output ended inside the accepted draft
                    if final_accepted is not None:
                        if not a <= final_accepted <= l_max:
                            continue
                        acc = (final_accepted, final_accepted)
                    else:
                        acc = (a, l_max)
                elif final_accepted is not None and final_accepted != a:
                    continue
                else:
                    acc = (a, a)
            else:
                acc = (a, a)
            step_lo = (1 if l_min > 0 else 0, l_min, acc[0])
            step_hi = (1 if l_max > 0 else 0, l_max, acc[1])
            for i in range(3):
                best_lo[i] = min(best_lo[i], step_lo[i] + lo[nxt][i])
                best_hi[i] = max(best_hi[i], step_hi[i] + hi[nxt][i])
            any_ok = True
        if any_ok:
            ok[p], lo[p], hi[p] = True, best_lo, best_hi
    if not ok[start]:
        return None
    return (tuple(int(x) for x in lo[start]), tuple(int(x) for x in hi[start]))  # type: ignore[return-value]


@dataclass(frozen=True)
class CountBounds:
    """One request's [low, high] of drafts, draft tokens and accepted tokens (``SuffixDrafter(bounds=True)``).

    Two replays, the extremes of what a server did past each output's end that its counters do not
    pin: in one it accepted nothing there, in the other the whole final draft (and learned it). Either
    way one more token followed (the correction or bonus token), which no log holds.

    * ``sound`` (every open end so far pinned by the server's final-step count, vLLM's
      ``per_step_accepted[-1]``): the two replays coincide and the only unknowns are those bonus
      tokens. The steps up to the first whose draft could depend on one (``UnknownTails``, a sound
      test) are exact; past it the rest of the request is bounded by what its remaining R output
      tokens allow: up to R more drafts, k·R draft tokens and R − 1 + k accepted tokens. The server's
      counts lie inside (``tests/unit/test_suffix_bounds.py``); the test is worst-case, so wide.
    * otherwise the two extremes' counts, narrow but no guarantee: a tail accepted in part, or a bonus
      token, can move a later draft outside them.

    ``exact`` only when low == high."""

    drafts: tuple[int, int]
    draft_tokens: tuple[int, int]
    accepted_tokens: tuple[int, int]

    @property
    def exact(self) -> bool:
        return all(lo == hi for lo, hi in (self.drafts, self.draft_tokens, self.accepted_tokens))

    @property
    def width(self) -> int:
        """Accepted tokens between the bounds (the figure the acceptance interval turns on)."""
        return self.accepted_tokens[1] - self.accepted_tokens[0]

    @classmethod
    def of(cls, a: SuffixTrace, b: SuffixTrace, n_out: int, k: int, sound: bool = True) -> CountBounds:
        (la, ha), (lb, hb) = _interval(a, n_out, k, sound), _interval(b, n_out, k, sound)
        return cls(*[(min(x, y), max(u, v)) for x, y, u, v in zip(la, lb, ha, hb)])

    def as_lists(self) -> dict[str, list[int]]:
        return {"drafts": list(self.drafts), "draft_tokens": list(self.draft_tokens),
                "accepted_tokens": list(self.accepted_tokens)}


def _interval(t: SuffixTrace, n_out: int, k: int, sound: bool) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(low, high) counts of one replay: with ``sound``, exact up to its first uncertain step and
    bounded after it; else its counts."""
    d, acc = t.drafted, t.accepted
    fu = None if not sound else (0 if d.size else None) if not t.checked else t.first_uncertain
    if fu is None:
        c = (int((d > 0).sum()), int(d.sum()), int(acc.sum()))
        return c, c
    c = (int((d[:fu] > 0).sum()), int(d[:fu].sum()), int(acc[:fu].sum()))
    start = 1 + int(acc[:fu].sum()) + fu  # the output position where step fu starts
    if t.positions is not None and t.checked:  # every path a server could take from there (a draft per position)
        pb = path_bounds(t.positions, n_out, start, t.pinned_final)
        if pb is not None:
            (l0, l1, l2), (h0, h1, h2) = pb
            return (c[0] + l0, c[1] + l1, c[2] + l2), (c[0] + h0, c[1] + h1, c[2] + h2)
    rest = n_out - start  # output tokens the steps from fu on emitted
    return c, (c[0] + rest, c[1] + k * rest, c[2] + max(0, rest - 1) + k)
