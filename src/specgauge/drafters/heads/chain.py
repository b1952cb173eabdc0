"""THE chain: how a chain head (EAGLE-3, MTP) drafts, written once against :class:`ChainHead`, for both
users — the engine's online proposer (:func:`propose`) and the offline all-levels replay (:func:`levels`).
Knows nothing about requests, checkpoints or which family a head is.

A chain head is one or more decoder layers that read, at draft position p, the embedding of token
t[p+1] and a hidden state h[p], and predict t[p+2]:

* level 0 (the proposer's first pass): h[p] is the *target's* hidden state at p, through the head's
  ``combine`` (EAGLE-3: ``fc`` over the auxiliary layers; MTP: the final-norm output as is);
* level s >= 1 (chain step s+1): h[p] is the head's *own* output at p-1 from level s-1, and each layer's
  query attends to its level-0 keys at positions <= p-s (the positions the target verified before the
  chain started) plus its own chain's keys at p-s+1..p (levels 1..s on the diagonal).

That is what vLLM's ``SpecDecodeBaseProposer.propose`` computes for a chain that starts at p-s: the
first pass writes level-0 keys for every verified position, each later step appends one key per layer
and reads back the hidden state it produced, and the next target step overwrites the chain's keys with
level-0 ones. Worked example, a chain starting at p = 5 with k = 3: step 1 is level 0 at row 5 (keys
0..5); step 2 is level 1 at row 6 (level-0 keys 0..5 + its own key at 6); step 3 is level 2 at row 7
(level-0 keys 0..5, level-1's key at 6, its own at 7).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

#: keys one query row set attends: (k [M or N, hkv, D], v [M or N, hkv, Dv], mask [N, M] bool, or None
#: for a diagonal group: one key per query row, k, v [N, hkv, D])
KeyGroup = tuple[Tensor, Tensor, Tensor | None]


class ChainHead(Protocol):
    """What a chain head implements; the chain does the rest. ``state`` is the head's own business
    (what flows from one layer to the next: EAGLE-3's first layer reads [embedding, hidden])."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    scaling: float  # attention's softmax scale (the family attention module's ``scaling``)
    num_attn_layers: int

    def combine(self, target_hidden: Tensor) -> Tensor:  # [N, L * Ht] -> [N, H] level-0 hidden input
        ...

    def enter(self, tokens: Tensor, pos: Tensor, h: Tensor) -> Any:  # ids [N], positions [N], hidden [N, H]
        ...

    def qkv(self, i: int, state: Any, pos: Tensor) -> tuple[Tensor, Tensor, Tensor, Any]:  # q, k, v, carry
        ...

    def finish(self, i: int, attn: Tensor, carry: Any) -> Any:  # attention output [N, h * Dv] -> next state
        ...

    def exit(self, state: Any) -> tuple[Tensor, Tensor]:  # (draft logits [N, Vd] float32, hidden next level reads [N, H])
        ...

    # optional, for the replay's pruned readout (``draft_ids``): ``exit`` split before the lm_head —
    # exit_split(state) -> (what the lm_head reads [N, H], hidden next level reads); logits(x) -> [N, Vd]

    def to_target(self, draft_ids: Tensor) -> Tensor:  # draft-vocabulary ids -> target ids
        ...


def attend(q: Tensor, groups: Sequence[KeyGroup], num_kv_heads: int, scaling: float) -> Tensor:
    """q [N, h, D] against key groups, one softmax over all of them -> [N, h * Dv]."""
    N, H, D = q.shape
    g = H // num_kv_heads
    qf = q.view(N, num_kv_heads, g, D)
    scores, values = [], []
    for k, v, mask in groups:
        if mask is None:  # one key per query row
            s = torch.einsum("nhgd,nhd->nhg", qf, k)[..., None] * scaling  # [N, hkv, g, 1]
        else:
            s = torch.einsum("nhgd,mhd->nhgm", qf, k) * scaling  # [N, hkv, g, M]
            s = s.masked_fill(~mask[:, None, None, :], float("-inf"))
        scores.append(s)
        values.append((v, mask is None))
    w = torch.softmax(torch.cat(scores, -1), -1)
    Dv = values[0][0].shape[-1]
    out = q.new_zeros(N, num_kv_heads, g, Dv)
    o = 0
    for (v, diag), s in zip(values, scores, strict=True):
        m = s.shape[-1]
        ws = w[..., o : o + m]
        out = out + (ws * v[:, :, None, :] if diag else torch.einsum("nhgm,mhd->nhgd", ws, v))
        o += m
    return out.reshape(N, H * Dv)


GroupsFor = Callable[[int, Tensor, Tensor], list[KeyGroup]]  # (layer, its new k, v) -> the groups it attends


Readout = Callable[[Any], tuple[Any, Tensor]]  # the last layer's state -> (what a level yields, hidden the next reads)


def forward(head: ChainHead, tokens: Tensor, pos: Tensor, h: Tensor, groups_for: GroupsFor,
            readout: Readout | None = None) -> tuple[Any, Tensor]:
    """One pass of the head over N rows: every layer's new keys go to ``groups_for``, which says what
    that layer's queries attend -> (draft logits [N, Vd], the hidden state the next level reads [N, H]);
    ``readout`` replaces ``head.exit``."""
    state = head.enter(tokens, pos, h)
    for i in range(head.num_attn_layers):
        q, k, v, carry = head.qkv(i, state, pos)
        state = head.finish(i, attend(q, groups_for(i, k, v), head.num_kv_heads, head.scaling), carry)
    return (readout or head.exit)(state)


# -- the engine's proposer -----------------------------------------------------------------------------
@dataclass
class ChainCache:
    """One request's level-0 keys/values per head layer, positions 0..n-1 filled."""

    k: list[Tensor]  # per layer [max_len, hkv, D]
    v: list[Tensor]  # per layer [max_len, hkv, Dv]
    n: int = 0

    @classmethod
    def empty(cls, head: ChainHead, max_len: int, dtype: torch.dtype, device: Any = "cpu", v_dim: int | None = None) -> ChainCache:
        shape = (max_len, head.num_kv_heads, head.head_dim)
        vshape = (max_len, head.num_kv_heads, v_dim or head.head_dim)
        return cls([torch.zeros(shape, dtype=dtype, device=device) for _ in range(head.num_attn_layers)],
                   [torch.zeros(vshape, dtype=dtype, device=device) for _ in range(head.num_attn_layers)])


def propose(head: ChainHead, cache: ChainCache, next_tokens: Tensor, hidden: Tensor, k: int) -> list[int]:
    """vLLM's proposer for one request: a first pass over the n newly verified positions c..c+n-1
    (``next_tokens`` [n] = t[p+1], the last one the bonus/correction token; ``hidden`` [n, L * Ht] the
    target's rows there), whose last row is draft 1; then k - 1 chain steps, each feeding the previous
    draft and the head's own hidden state -> k target ids."""
    c, n = cache.n, next_tokens.shape[0]
    L = c + n
    if L + k > cache.k[0].shape[0]:
        raise ValueError("sequence longer than max_model_len")
    dev = cache.k[0].device
    pos = torch.arange(c, L, device=dev)
    mask = torch.arange(L, device=dev)[None, :] <= pos[:, None]  # [n, L] causal over all verified positions

    def first(i: int, kk: Tensor, vv: Tensor) -> list[KeyGroup]:
        cache.k[i][c:L], cache.v[i][c:L] = kk, vv
        return [(cache.k[i][:L], cache.v[i][:L], mask)]

    logits, hh = forward(head, next_tokens, pos, head.combine(hidden), first)
    cache.n = L
    tok, hh = head.to_target(logits[-1:].argmax(-1)), hh[-1:]
    drafts = [tok]
    chain: list[list[KeyGroup]] = [[] for _ in range(head.num_attn_layers)]
    full = torch.ones(1, L, dtype=torch.bool, device=dev)
    for s in range(1, k):  # chain step s+1 at position L-1+s: the previous draft and the head's own hidden state

        def step(i: int, kk: Tensor, vv: Tensor) -> list[KeyGroup]:
            chain[i].append((kk, vv, None))
            return [(cache.k[i][:L], cache.v[i][:L], full), *chain[i]]

        logits, hh = forward(head, tok, torch.tensor([L - 1 + s], device=dev), hh, step)
        tok = head.to_target(logits.argmax(-1))
        drafts.append(tok)
    return torch.cat(drafts).tolist()


# -- offline: every chain of a sequence at once ---------------------------------------------------------
#: (level s >= 1, the chain's tokens [N], the chain's hidden input [N, H]) -> the level's (tokens, hidden)
LevelInputs = Callable[[int, Tensor, Tensor], tuple[Tensor, Tensor]]


def levels(head: ChainHead, next_tokens: Tensor, target_hidden: Tensor, n_levels: int, start: int = 0,
           inputs: LevelInputs | None = None,
           readout: Callable[[int, Any], tuple[Any, Tensor]] | None = None) -> list[Any]:
    """Draft logits for levels 0..n_levels-1 over one sequence of T draft positions: ``next_tokens[p]`` =
    t[p+1], ``target_hidden[p]`` = the target's hidden states at p [T, L * Ht]. Level 0 covers all T rows;
    level s >= 1 rows ``start``..T-1 only (row i is position start + i): row p of level s is chain step
    s+1 of the chain that starts at p - s. Fed the true tokens: exact for acceptance, since a chain step
    only counts if every earlier one drafted the true token. Also EAGLE-3's training-time test (start 0).
    ``inputs``: what level s >= 1 reads instead of (the true tokens, the head's own hidden states) — P-EAGLE's
    mask slots, which attend exactly as chain steps do. ``readout(s, state)``: what level s yields instead
    of its logits (``draft_ids``)."""
    T = next_tokens.shape[0]
    dev = next_tokens.device
    pos = torch.arange(T, device=dev)
    causal = pos[None, :] <= pos[:, None]  # [T, T]
    k0: list[Tensor] = []
    v0: list[Tensor] = []

    def level0(i: int, kk: Tensor, vv: Tensor) -> list[KeyGroup]:
        k0.append(kk)
        v0.append(vv)
        return [(kk, vv, causal)]

    def at(s: int) -> Readout | None:
        return None if readout is None else (lambda state: readout(s, state))

    logits, h = forward(head, next_tokens, pos, head.combine(target_hidden), level0, at(0))
    out = [logits]
    a = max(0, min(start, T - 1))
    rows, toks = pos[a:], next_tokens[a:]
    prev = h[a - 1 : T - 1] if a else torch.cat([h[:1] * 0, h[:-1]])  # level 0's output at p-1
    chain: list[list[tuple[Tensor, Tensor]]] = [[] for _ in range(head.num_attn_layers)]  # per layer, level j's k, v
    for s in range(1, n_levels):
        tf_mask = pos[None, :] <= (rows[:, None] - s).clamp(min=0)  # level-0 keys at <= p-s

        def level(i: int, kk: Tensor, vv: Tensor, s: int = s, tf_mask: Tensor = tf_mask) -> list[KeyGroup]:
            chain[i].append((kk, vv))
            groups: list[KeyGroup] = [(k0[i], v0[i], tf_mask)]
            for j, (kj, vj) in enumerate(chain[i], start=1):  # level j's key at position p - (s - j)
                groups.append((_shift(kj, s - j), _shift(vj, s - j), None))
            return groups

        t_s, h_s = inputs(s, toks, prev) if inputs is not None else (toks, prev)  # P-EAGLE: its mask slots
        logits, h = forward(head, t_s, rows, h_s, level, at(s))
        out.append(logits)
        prev = torch.cat([h[:1] * 0, h[:-1]])  # own hidden from this level at p-1 (row a-1: no chain needs it)
    return out


def draft_ids(head: ChainHead, next_tokens: Tensor, target_hidden: Tensor, n_levels: int, start: int = 0) -> Tensor:
    """The replay's drafts: target ids [n_levels, T] of ``levels``' rows (level s, row p: step s+1 of the
    chain that starts at p - s), for chains starting at ``start`` or later, and only where the chain is
    still alive — every earlier step drafted the logged token (the label of row p is t[p+2] =
    ``next_tokens[p+1]``); -1 elsewhere. A dead chain's later drafts are never counted, so its lm_head rows
    are skipped (the lm_head over the draft vocabulary is most of a head's cost). Same values as
    ``levels`` + argmax where computed."""
    T = next_tokens.shape[0]
    dev = next_tokens.device
    a = max(0, min(start, T - 1))
    pred = torch.full((n_levels, T), -1, dtype=torch.long, device=dev)
    label = torch.full((T,), -2, dtype=torch.long, device=dev)
    label[: T - 1] = next_tokens[1:]
    alive = torch.arange(T, device=dev) >= a  # by chain start c
    split = getattr(head, "exit_split", None)

    def readout(s: int, state: Any) -> tuple[None, Tensor]:
        nonlocal alive
        if split is None:
            x, h_next = head.exit(state)
        else:
            x, h_next = split(state)
        p = torch.arange(T, device=dev) if s == 0 else torch.arange(a, T, device=dev)  # this level's rows
        c = p - s
        need = (c >= a) & alive[c.clamp(min=0)]
        if bool(need.any()):
            rows = need.nonzero()[:, 0]
            lg = x[rows] if split is None else head.logits(x[rows])  # type: ignore[attr-defined]
            pred[s, p[rows]] = head.to_target(lg.argmax(-1))
        hit = torch.zeros(T, dtype=torch.bool, device=dev)  # chain c still alive after level s
        cs = torch.arange(max(0, T - s), device=dev)
        hit[cs] = pred[s, cs + s] == label[cs + s]
        alive = alive & hit
        return None, h_next

    levels(head, next_tokens, target_hidden, n_levels, start, readout=readout)
    return pred


def _shift(x: Tensor, by: int) -> Tensor:
    """x[p - by] at row p (rows < by: zeros; they belong to no chain)."""
    return x if by == 0 else torch.cat([torch.zeros_like(x[:by]), x[:-by]])


def default_scaling(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


__all__ = ["ChainCache", "ChainHead", "KeyGroup", "Readout", "attend", "default_scaling", "draft_ids", "forward",
           "levels", "propose"]
