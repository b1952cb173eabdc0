"""A plain online speculative loop — slow, short, obviously right — that every hidden-state head and
every target source is held to. At every step it re-runs the target over the whole history (no cache),
drafts with the head from scratch as vLLM's proposer does (greedy), and accepts by the greedy rule: a
draft token is kept while it equals the target's argmax after everything before it; the target's next
token (bonus or correction) follows. Counts are vLLM's: ``accepted`` is counted before the output is cut
at ``max_tokens`` or an EOS.

Nothing here is shared with the replay's fast paths (``chain.propose`` / ``chain.levels``, batched
target passes): only the head's own layers (``chain.forward``) and the target's one forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from specgauge.drafters.heads import chain


@dataclass
class LoopResult:
    output_ids: list[int]
    steps: list[tuple[int, int]] = field(default_factory=list)  # per decode step: (drafted, accepted)


def target_argmax(target: Any, seq: Sequence[int]) -> list[int]:
    """The target's greedy token after every position of ``seq`` (one forward, no cache): its own logits
    where the source has a transformers model, else lm_head(final_norm) (the same argmax)."""
    with torch.inference_mode():
        model = getattr(target, "model", None)
        if model is not None and hasattr(model, "get_output_embeddings") and hasattr(model, "generate"):
            logits = model(torch.tensor([list(seq)], device=target.device)).logits[0]
        else:
            h = target.run(seq, ["final"]).hidden[:, 0]
            logits = h @ target.lm_head_weight().to(h.dtype).T
    return logits.argmax(-1).tolist()  # type: ignore[no-any-return]


def chain_drafts(head: Any, target: Any, hist: Sequence[int], k: int) -> list[int]:
    """vLLM's proposer from scratch for one history: the target's hidden states at every position but the
    last, the head's first pass over all of them (token t[p+1] with the hidden state at p; the last row
    reads the newest token), its argmax is draft 1; then k - 1 chain steps, each feeding the previous
    draft and the head's own hidden state, attending to the first pass's keys and its own."""
    T = len(hist) - 1
    dev = next(head.parameters()).device
    dt = next(head.parameters()).dtype
    with torch.inference_mode():
        hid = target.run(hist[:-1], head.spec.aux_layer_ids).flat().to(device=dev, dtype=dt)
        pos = torch.arange(T, device=dev)
        first: list[tuple[Tensor, Tensor]] = []

        def level0(i: int, kk: Tensor, vv: Tensor) -> list[chain.KeyGroup]:
            first.append((kk, vv))
            return [(kk, vv, pos[None, :] <= pos[:, None])]

        logits, hh = chain.forward(head, torch.tensor(list(hist[1:]), device=dev), pos, head.combine(hid), level0)
        tok, hh = head.to_target(logits[-1:].argmax(-1)), hh[-1:]
        out = [int(tok)]
        own: list[list[chain.KeyGroup]] = [[] for _ in first]
        everything = torch.ones(1, T, dtype=torch.bool, device=dev)
        for s in range(1, k):

            def step(i: int, kk: Tensor, vv: Tensor) -> list[chain.KeyGroup]:
                own[i].append((kk, vv, None))
                return [(first[i][0], first[i][1], everything), *own[i]]

            logits, hh = chain.forward(head, tok, torch.tensor([T - 1 + s], device=dev), hh, step)
            tok = head.to_target(logits.argmax(-1))
            out.append(int(tok))
    return out


def block_drafts(head: Any, target: Any, hist: Sequence[int], k: int) -> list[int]:
    """A DFlash block from scratch: context = the target's hidden states at every position but the last,
    the anchor = the newest token, k masks after it."""
    T = len(hist) - 1
    dev = next(head.parameters()).device
    dt = next(head.parameters()).dtype
    with torch.inference_mode():
        hid = target.run(hist[:-1], head.spec.aux_layer_ids).flat().to(device=dev, dtype=dt)
        ctx = head.context(hid, torch.arange(T, device=dev))
        logits = head.block(torch.tensor([int(hist[-1])], device=dev), torch.tensor([T], device=dev), k, ctx, None)
    return head.to_target(logits[0].argmax(-1)).tolist()  # type: ignore[no-any-return]


def generate(target: Any, head: Any, prompt: Sequence[int], max_tokens: int, k: int,
             eos_id: int | None = None, draft: Any = None) -> LoopResult:
    """Greedy speculative decoding of ``prompt``: the prefill emits token 0; every decode step drafts k
    tokens, keeps the longest prefix the target agrees with and appends the target's next token; the
    output stops at ``max_tokens`` tokens or after ``eos_id``. ``draft(head, target, history, k)``: the
    proposer (default: DFlash's block or the chain; ``testing/reference_drafts.py`` has the others)."""
    draft = draft or (block_drafts if hasattr(head, "block") else chain_drafts)
    prompt = [int(t) for t in prompt]
    out = [target_argmax(target, prompt)[-1]]
    res = LoopResult(out)
    while len(out) < max_tokens and out[-1] != eos_id:
        hist = prompt + out
        drafts = draft(head, target, hist, k)
        g = target_argmax(target, hist + drafts)  # g[i]: the target's token after position i
        base = len(hist) - 1  # g[base + j] is what the target says in place of draft j
        a = 0
        while a < k and drafts[a] == g[base + a]:
            a += 1
        res.steps.append((k, a))
        for t in [*drafts[:a], g[base + a]]:
            out.append(t)
            if len(out) >= max_tokens or t == eos_id:
                break
    return res


def greedy_outputs(target: Any, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[list[int]]:
    """Greedy continuations of ``max_tokens`` tokens (transformers' ``generate`` with its KV cache, EOS
    held off): training data for a head made in a test, not a reference."""
    outs = []
    with torch.inference_mode():
        for p in prompts:
            ids = torch.tensor([list(p)], device=target.device)
            seq = target.model.generate(ids, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False,
                                        attention_mask=torch.ones_like(ids))
            outs.append(seq[0, len(p):].tolist())
    return outs


def train_briefly(head: Any, target: Any, seqs: Sequence[Sequence[int]], steps: int = 60, lr: float = 3e-3,
                  levels: int = 2, seed: int = 0) -> float:
    """A few steps of EAGLE-3-style training (the chain's training-time test, ``chain.levels``) on the
    target's own sequences, so a random head drafts something the target accepts -> the last loss."""
    import torch.nn.functional as F

    torch.manual_seed(seed)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    data = []
    for s in seqs:
        with torch.no_grad():
            hid = target.run(list(s[:-1]), head.spec.aux_layer_ids).flat().float().clone()
        data.append((torch.tensor(list(s[1:])), hid, torch.tensor(list(s[2:]))))
    loss = torch.zeros(())
    head.train()
    for i in range(steps):
        tokens, hid, labels = data[i % len(data)]
        if head.d2t is not None and bool(head.d2t.any()):
            raise ValueError("train_briefly: heads with a draft vocabulary are not supported here")
        loss = torch.zeros(())
        for s, lg in enumerate(chain.levels(head, tokens, hid, levels)):
            if s < len(labels):
                loss = loss + F.cross_entropy(lg[s : len(labels)], labels[s:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    head.eval()
    return float(loss.detach())


def trained_eagle3_head(target: Any, prompts: Sequence[Sequence[int]], out: Any, tokens: int,
                        aux_layer_ids: Sequence[int] = (0, 1, 2), steps: int = 30, seed: int = 0) -> Any:
    """An EAGLE-3 head for ``target`` trained for a few dozen steps on the target's greedy continuations
    (``tokens`` long) of ``prompts`` — it need not generalise: tests are of exactness, and a head that
    drafts well exercises long accepted runs; saved in float32 to ``out`` (returned)."""
    from specgauge.drafters.heads.make import eagle3_config, new_head, save_head

    seqs = [list(p) + o for p, o in zip(prompts, greedy_outputs(target, prompts, tokens), strict=True)]
    head = new_head(eagle3_config(target, aux_layer_ids=aux_layer_ids, intermediate_size=128), target, seed=seed, std=0.1)
    train_briefly(head, target, seqs, steps=steps, lr=1e-2)
    return save_head(head, out, target.num_layers, dtype=torch.float32)


def write_log(path: Any, rows: Sequence[tuple[Sequence[int], Sequence[int]]], max_tokens: int,
              finish: Sequence[str] | None = None) -> Any:
    """A logged workload (specgauge's JSONL: request + response token ids, greedy) of (prompt, output) rows."""
    import json
    from pathlib import Path

    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        for i, (p, o) in enumerate(rows):
            f.write(json.dumps({"request": {"id": f"r{i}", "prompt": list(p), "max_tokens": max_tokens, "temperature": 0.0},
                                "response": {"prompt_token_ids": list(p), "output_token_ids": list(o),
                                             "finish_reason": finish[i] if finish else "length"}}) + "\n")
    return path


__all__ = ["LoopResult", "block_drafts", "chain_drafts", "generate", "greedy_outputs", "target_argmax", "train_briefly",
           "trained_eagle3_head", "write_log"]
