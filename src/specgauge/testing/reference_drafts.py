"""From-scratch proposers for the draft methods whose step is not EAGLE's chain or DFlash's block, for
``testing.reference_loop.generate(..., draft=...)``: each re-runs the target over the whole history and
drafts as vLLM 0.32's proposer does (docs/methods.md), sharing nothing with the replay's batched paths
(``chain.levels``, ``multi_module_levels``, ``assistant_levels``, the drafters' block batching) — only the
head's own modules and ``chain.forward``.

* :func:`multi_module_drafts` — MTP with several layers on vLLM's V2 runner (``MultiModuleMTPSpeculator``):
  module s runs over every position of the history, its inputs shifted once more than module s-1's;
* :func:`assistant_drafts` — Gemma 4's assistant: Q-only over the target's KV of the last verified position,
  the position constant across steps;
* :func:`parallel_drafts` — P-EAGLE: one causal forward over the verified rows and k - 1 mask slots;
* :func:`dspark_drafts` — DSpark: one block, the Markov head reading each draft before the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from specgauge.drafters.heads import chain


def _device(head: Any) -> tuple[torch.device, torch.dtype]:
    p = next(head.parameters())
    return p.device, p.dtype


def _causal(n: int, dev: torch.device) -> Tensor:
    pos = torch.arange(n, device=dev)
    return pos[None, :] <= pos[:, None]


def multi_module_drafts(head: Any, target: Any, hist: Sequence[int], k: int) -> list[int]:
    """Step s+1 is module s mod n over positions 0..T-1 (T = len(hist) - 1): token ids = the history shifted
    left s+1 times with the drafts so far appended, hidden = module s-1's output there (step 1: the
    target's); its last row's argmax is the draft."""
    dev, dt = _device(head)
    T = len(hist) - 1
    with torch.inference_mode():
        h = head.combine(target.run(hist[:-1], head.spec.aux_layer_ids).flat().to(device=dev, dtype=dt))
        pos = torch.arange(T, device=dev)
        mask = _causal(T, dev)
        toks = list(hist[1:])
        out: list[int] = []
        try:
            for s in range(k):
                head.module_index = s % head.n

                def groups(i: int, kk: Tensor, vv: Tensor) -> list[chain.KeyGroup]:
                    return [(kk, vv, mask)]

                logits, h = chain.forward(head, torch.tensor(toks[-T:], device=dev), pos, h, groups)
                d = int(head.to_target(logits[-1:].argmax(-1)))
                out.append(d)
                toks.append(d)
        finally:
            head.module_index = 0
    return out


def assistant_drafts(head: Any, target: Any, hist: Sequence[int], k: int) -> list[int]:
    """The target over hist[:-1] (its final-norm hidden states and the two layers' keys/values); every step
    queries at P = T - 1 over keys 0..P: step 1 reads (the newest token, the target's hidden state at P),
    step s+1 (draft s, step s's projected hidden state)."""
    dev, dt = _device(head)
    T = len(hist) - 1
    with torch.inference_mode():
        tp = target.run(hist[:-1], ["final"], kv_layers=head.kv_layer_ids())
        kv = {i: (k_.to(device=dev, dtype=dt), v_.to(device=dev, dtype=dt)) for i, (k_, v_) in tp.kv.items()}
        h = tp.hidden[-1:, 0].to(device=dev, dtype=dt)
        pos = torch.tensor([T - 1], device=dev)
        tok = torch.tensor([int(hist[-1])], device=dev)
        out: list[int] = []
        for _ in range(k):
            logits, h = head.step(target.embed(tok).to(device=dev, dtype=dt), h, pos, kv, T)
            tok = logits.argmax(-1)
            out.append(int(tok))
    return out


def parallel_drafts(head: Any, target: Any, hist: Sequence[int], k: int) -> list[int]:
    """One causal forward over T + k - 1 rows: rows 0..T-1 as EAGLE's first pass (token t[p+1], the
    target's hidden state at p), rows T..T+k-2 the mask token with ``combine(mask_hidden)``; the drafts
    are the argmax of rows T-1..T+k-2."""
    dev, dt = _device(head)
    T = len(hist) - 1
    with torch.inference_mode():
        h = head.combine(target.run(hist[:-1], head.spec.aux_layer_ids).flat().to(device=dev, dtype=dt))
        toks = torch.tensor(list(hist[1:]) + [head.mask_token_id] * (k - 1), device=dev)
        hm = head.combine(head.mask_hidden[None].to(dt)).expand(k - 1, -1)
        n = T + k - 1
        mask = _causal(n, dev)

        def groups(i: int, kk: Tensor, vv: Tensor) -> list[chain.KeyGroup]:
            return [(kk, vv, mask)]

        logits, _ = chain.forward(head, toks, torch.arange(n, device=dev), torch.cat([h, hm]), groups)
        return head.to_target(logits[T - 1 :].argmax(-1)).tolist()  # type: ignore[no-any-return]


def dspark_drafts(head: Any, target: Any, hist: Sequence[int], k: int) -> list[int]:
    """One DSpark block after the whole history (context = the target's hidden states of every position but
    the last, anchor = the newest token); the Markov head reads each draft before the next (vLLM's
    ``_sample_sequential``)."""
    dev, dt = _device(head)
    T = len(hist) - 1
    with torch.inference_mode():
        hid = target.run(hist[:-1], head.spec.aux_layer_ids).flat().to(device=dev, dtype=dt)
        ctx = head.context(hid, torch.arange(T, device=dev))
        d, _ = head.drafts(torch.tensor([int(hist[-1])], device=dev), torch.tensor([T], device=dev), k, ctx, None)
    return d[0].tolist()  # type: ignore[no-any-return]


__all__ = ["assistant_drafts", "dspark_drafts", "multi_module_drafts", "parallel_drafts"]
