"""Per-request bounds of a suffix replay, and the one owner of the low / high pair (``ExtremePair``).

A live suffix server learns tokens past each logged output's end (``tail.Tail``). Where its counters
pin what it accepted there (vLLM's final-step ``per_step_accepted[-1]``), only the bonus token after
them is unknown; where they do not, the replay runs twice (``SuffixDrafter(bounds=True)``), at the two
extremes: one cache learns nothing past the cut (``Extreme("low")``), the other the whole final draft
(``Extreme("high")``), each with one unknown token after it (``unknown.UnknownTails``). Every request
gets ``base.CountBounds`` of its drafts, draft tokens and accepted tokens, of one of two kinds:

* ``guaranteed`` (while every open end so far was pinned: the two replays coincide, only bonus tokens
  are unknown): the steps up to the first whose draft could depend on an unknown token
  (``unknown.global_draft_certain``, a sound test) are exact; from there on every path a server could
  take through the drafts per position (``path_bounds``), or, without that table, what the request's
  remaining R output tokens allow: up to R more drafts, k·R draft tokens and R − 1 + k accepted
  tokens. The server's counts lie inside (``tests/unit/test_suffix_bounds.py``); worst case, so wide.
  The request's own open end, unpinned, is inside too: one extreme accepted nothing past it, the other
  all of its draft.
* ``extremes`` (once an open end went unpinned): the two replays' counts, narrow but no guarantee: a
  tail accepted in part, or a bonus token, can move a later draft outside them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal, Protocol

import numpy as np

from specgauge.drafters.base import BoundsKind, CountBounds
from specgauge.drafters.suffix.positions import Positions
from specgauge.drafters.suffix.trace import SuffixTrace

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


Counts = tuple[int, int, int]  #: (drafts, draft tokens, accepted tokens)


class _Replayed(Protocol):
    drafted: np.ndarray
    accepted: np.ndarray
    checked: bool
    first_uncertain: int | None
    positions: Positions | None
    pinned_final: int | None


def interval(t: _Replayed, n_out: int, k: int, sound: bool) -> tuple[Counts, Counts]:
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


def count_bounds(a: _Replayed, b: _Replayed, n_out: int, k: int, kind: BoundsKind) -> CountBounds:
    """The bounds over two replays of one request (the low and the high extreme)."""
    sound = kind == "guaranteed"
    (la, ha), (lb, hb) = interval(a, n_out, k, sound), interval(b, n_out, k, sound)
    lo_hi = [(min(x, y), max(u, v)) for x, y, u, v in zip(la, lb, ha, hb, strict=True)]
    return CountBounds(lo_hi[0], lo_hi[1], lo_hi[2], kind)


class Extreme:
    """What one side of the pair assumes a server accepted past a cut its counters do not pin: ``low``
    nothing more than the log shows, ``high`` the whole final draft. ``assumed``: how many cuts it had
    to assume so far; while 0 the pair's bounds are guaranteed."""

    def __init__(self, side: Literal["low", "high"]) -> None:
        self.side = side
        self.assumed = 0

    def accepted(self, logged: int, draft_len: int) -> int:
        """The final step's accepted count this side assumes (``tail.final_tail``'s ``assume``)."""
        self.assumed += 1
        return draft_len if self.side == "high" else logged

    @property
    def sound(self) -> bool:
        return self.assumed == 0


class _Side(Protocol):
    extreme: Extreme | None

    def replay_one(self, request_id: str, prompt_ids: Sequence[int], output_ids: Sequence[int], k: int,
                   final_accepted: int | None, bonus: int | None,
                   server_steps: Sequence[tuple[int, int]] | None) -> SuffixTrace: ...


class ExtremePair:
    """The low and the high replay of one workload (two suffix drafters, each with its ``Extreme``):
    each request goes through both; the low one's figures are returned, with the pair's bounds."""

    def __init__(self, low: _Side, high: _Side) -> None:
        assert low.extreme is not None and high.extreme is not None
        self.low, self.high = low, high
        self._low_extreme = low.extreme

    def replay(self, request_id: str, prompt_ids: Sequence[int], output_ids: Sequence[int], k: int,
               final_accepted: int | None, bonus: int | None,
               server_steps: Sequence[tuple[int, int]] | None) -> SuffixTrace:
        hi = self.high.replay_one(request_id, prompt_ids, output_ids, k, final_accepted, bonus, server_steps)
        kind: BoundsKind = "guaranteed" if self._low_extreme.sound else "extremes"  # before this request's own end
        lo = self.low.replay_one(request_id, prompt_ids, output_ids, k, final_accepted, bonus, server_steps)
        lo.bounds = count_bounds(lo, hi, len(output_ids), k, kind)
        if lo.open_end and final_accepted is None:  # as a trace without bounds says it
            lo.tail = replace(lo.tail, unknown=lo.tail.bound)
        return lo
