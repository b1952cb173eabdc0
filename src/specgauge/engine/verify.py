"""Speculative verification: the one pure function that decides which draft tokens survive.

Terms (as vLLM's ``rejection_sampler.py`` uses them), for one request with drafts d_1..d_k scored by
the target in a single forward pass (target distributions p_1..p_{k+1}; p_i is the target's
distribution for the token that follows the history plus d_1..d_{i-1}):

* **accepted** tokens: the longest prefix d_1..d_n of the drafts that survives. Draft d_i survives
  with probability min(1, p_i(d_i) / q_i(d_i)), where q_i is the drafter's distribution (one-hot at
  d_i for a deterministic drafter, so the test is simply "keep with probability p_i(d_i)").
* **recovered** token: when d_{n+1} is rejected, a replacement drawn from the residual
  norm(max(0, p_{n+1} - q_{n+1})). This is what makes the output distribution exactly p (Leviathan
  et al. 2023, Chen et al. 2023).
* **bonus** token: when all k drafts are accepted, one more token drawn from p_{k+1} for free.

Every step therefore emits ``n + 1`` tokens: n accepted drafts and one recovered-or-bonus token.
The number of *accepted* tokens (what vLLM's counters add up) is n; the extra token is not a draft
token. Greedy rows (temperature 0) take the fast path: d_i is accepted iff it is argmax p_i, and the
extra token is argmax p_{n+1}. A request with no drafts (k = 0) simply samples one token from p_1,
so plain decoding and prefill go through the same function.

The function is pure: all randomness comes in as arguments, drawn by the caller from each request's
own seeded generator, so a seed reproduces a request regardless of what else is in the batch.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rejection_sample(
    draft_tokens: Tensor,  # [B, K] int64; row b's drafts are draft_tokens[b, :num_draft[b]], rest is padding
    num_draft: Tensor,  # [B] int64 in 0..K
    target_probs: Tensor,  # [B, K+1, V] float; p_1..p_{k_b+1} in rows' first k_b+1 positions
    draft_probs: Tensor | None,  # [B, K, V] float q_i, or None when every drafter is deterministic (one-hot q)
    greedy: Tensor,  # [B] bool; temperature-0 rows
    uniform: Tensor,  # [B, K] float in [0, 1); the acceptance draws
    noise: Tensor,  # [B, K+1, V] float > 0; Exp(1) draws: argmax(w / noise) samples from w ∝ weights
) -> tuple[Tensor, Tensor]:  # (output_tokens [B, K+1] int64 with -1 after the n+1 emitted, num_accepted [B])
    B, K = draft_tokens.shape
    pos = torch.arange(K)[None, :]  # [1, K]
    valid = pos < num_draft[:, None]  # [B, K]
    d = draft_tokens.clamp(min=0)[..., None]  # [B, K, 1]
    p_k = target_probs[:, :K]  # [B, K, V]
    p_d = p_k.gather(-1, d)[..., 0]  # [B, K]  p_i(d_i)
    if draft_probs is None:
        q = torch.zeros_like(p_k).scatter_(-1, d, 1.0)  # one-hot q
    else:
        q = draft_probs
    q_d = q.gather(-1, d)[..., 0]  # [B, K]  q_i(d_i)

    # accept d_i with probability min(1, p/q):  u < p/q  (u ~ U[0,1));  greedy: d_i == argmax p_i
    stochastic_ok = (q_d > 0) & (p_d > uniform * q_d)
    greedy_ok = p_k.argmax(-1) == draft_tokens
    ok = torch.where(greedy[:, None], greedy_ok, stochastic_ok) & valid  # [B, K]
    num_accepted = ok.to(torch.int64).cumprod(-1).sum(-1)  # [B]  length of the accepted prefix

    # distribution of the extra token at each position: residual max(0, p - q) where a draft could
    # be rejected (i < k_b), the target's own p at the bonus position (i == k_b) and beyond
    residual = (p_k - q).clamp(min=0)  # [B, K, V]
    empty = residual.sum(-1, keepdim=True) <= 0  # p == q exactly: rejection has probability 0; use p
    residual = torch.where(empty, p_k, residual)
    dist = target_probs.clone()  # [B, K+1, V]
    dist[:, :K] = torch.where(valid[..., None], residual, p_k)
    sampled = (dist / noise).argmax(-1)  # [B, K+1]  Gumbel-style draw, needs no normalisation
    extra_all = torch.where(greedy[:, None], target_probs.argmax(-1), sampled)  # [B, K+1]
    extra = extra_all.gather(1, num_accepted[:, None])  # [B, 1]  recovered or bonus token

    out_pos = torch.arange(K + 1)[None, :]  # [1, K+1]
    padded_drafts = torch.cat([draft_tokens, torch.full((B, 1), -1, dtype=draft_tokens.dtype)], 1)
    out = torch.where(out_pos < num_accepted[:, None], padded_drafts, torch.full_like(padded_drafts, -1))
    out = torch.where(out_pos == num_accepted[:, None], extra, out)
    return out, num_accepted
