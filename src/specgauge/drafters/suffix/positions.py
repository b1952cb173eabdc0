"""The suffix replay at every output position, and the paths a server could take through it.

A step that starts at output position p drafts from the cache as it is once the request's own tokens
before p are learned, whatever steps came before: so the draft at p is a function of p alone.
``cache.PythonCache.replay_positions`` computes, for every p, that draft and whether it is certain
(``unknown.global_draft_certain``: the same for every value of the unknown tokens in the cache). The
replay's own steps follow from the table (``replay_path``: start at 1, go to p + accepted + 1), and so
does every path a server could have taken where a draft was uncertain: where its final step was
(``final_step_known``, ``server_final``) here, the least and the most it counted (``bounds.path_bounds``).

Worked example (every draft certain): an output of 8 tokens, ``matched`` = [_, 2, 0, 0, 1, 0, 0, 1]:
the steps start at p = 1 (accepts 2, so emits 3 tokens) -> 4 (accepts 1) -> 6 (accepts 0) -> 7, the
final step, whose draft the output continues with up to its end (a server may have accepted more of
it past the end); the replay's drafted / accepted are ``len(drafts[p])`` / ``matched[p]`` at 1, 4, 6, 7.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Positions:
    """Per output position p (index 0 unused: the prefill's token): the draft there, tokens of it the
    output continues with, and whether the draft is certain; ``cap[p]``: the most tokens it may hold."""

    drafts: list[list[int]]
    matched: list[int]
    certain: list[bool]
    cap: list[int]


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
