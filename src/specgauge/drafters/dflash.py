"""DFlash, the block-parallel drafter (kind ``"dflash"``): one forward of a small head fills a block of
k draft positions at once, from the anchor token and the target's hidden states (the head and its
checkpoint: ``heads/dflash.py``). vLLM 0.32 runs it as ``{"method": "dflash", "model": HEAD,
"num_speculative_tokens": K}`` (``v1/spec_decode/dflash.py``); SGLang as ``--speculative-algorithm
DFLASH``. This mirrors vLLM's proposer, which follows z-lab's reference (``dflash/model.py``):

* **context**: the target's hidden states of every verified position — the whole prompt after the
  prefill, then per step the positions the target verified (the last token and the accepted drafts;
  rejected positions never reach the head) — become context keys/values once, kept per request
  (vLLM writes them into the draft's KV cache; the reference keeps a cropped cache);
* **block**: the query is [anchor, mask × k] at positions a..a+k, a = len(history) - 1: the anchor is
  the bonus/correction token the target just emitted (its hidden state does not exist yet), the masks
  are ``mask_token_id``; one non-causal forward; draft i = argmax at mask i (greedy: vLLM's default
  ``draft_sample_method``). Verification is the engine's: greedy rows keep the longest prefix the
  target's argmax agrees with, sampled rows go through the same ``rejection_sample`` with the draft as
  a one-hot proposal; the target's next token (bonus or correction) is the next anchor.

Offline replay (``replay`` / ``runs_at``): one target pass over prompt + logged output gives every
position's hidden states; the block of every step start is then drafted in one batched forward (each
block sees the context before its anchor).

**What is exact and why.** A greedy block is a deterministic function of the token history before the
anchor, the anchor, and the target's hidden states over that history (the replay theorem; the hidden
states are the teacher-forced pass's, since only verified tokens become context). The engine and the
replay compute the same sums in a different order (one block per request vs all step starts batched
and masked), so they agree to float rounding; an argmax near-tie could in principle flip.
**Not a whole-output replay**: the block attends both ways, so a mask's draft depends on how many
masks follow it — the first k drafts of a block of k' > k masks are *not* the block of k. Each k is
replayed on its own (``runs_at(prompt, out, k)``); this drafter offers no ``accept_runs``. No
teacher-forced figure either: a block's drafts never read the head's own earlier drafts, so there is no
chain for teacher forcing to skip. Not modelled: DFlash2 (convolutions, candidate selector), sliding-
window draft layers, probabilistic drafting.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from specgauge.drafters._hidden import HiddenFeed, replay_sequence
from specgauge.drafters.base import ReplayTrace, register_drafter, trace_from_runs

#: step starts drafted per batched forward in replay (bounds the [anchors, k+1, heads, context] scores)
_REPLAY_CHUNK = 128

_passes: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()


@dataclass
class _State:
    ctx: list[tuple[Any, Any]]  # per layer: k, v [max_len, hkv, D]
    n: int = 0  # positions with context keys
    pending: list[Any] = field(default_factory=list)  # target hidden rows for positions n, n+1, ...


@register_drafter("dflash")
class DFlashDrafter(HiddenFeed):
    """A DFlash head drafting greedily (deterministic, stateless)."""

    kind: ClassVar[str] = "dflash"

    _req: dict[str, _State]

    # -- Drafter protocol ------------------------------------------------------------------------
    def begin(self, request_id: str, prompt_ids: Sequence[int]) -> None:
        import torch

        if request_id in self._req:
            raise ValueError(f"request {request_id!r} already begun")
        h = self.head
        shape = (self.max_len, h.num_kv_heads, h.head_dim)
        self._req[request_id] = _State([(torch.zeros(shape, dtype=self._dtype, device=self._device),
                                         torch.zeros(shape, dtype=self._dtype, device=self._device))
                                        for _ in range(len(h.layers))])

    # -- the engine's proposer -------------------------------------------------------------------
    def _propose_one(self, rid: str, hist: Sequence[int], k: int) -> list[int]:
        import torch

        st, hid = self._take_pending(rid, hist)
        c, n = st.n, hid.shape[0]
        if c + n + 1 + k > self.max_len:
            raise ValueError("dflash drafter: sequence longer than max_model_len")
        hid = hid.to(device=self._device, dtype=self._dtype)
        for (ck, cv), (k_new, v_new) in zip(st.ctx, self.head.context(hid, torch.arange(c, c + n, device=self._device)),
                                            strict=True):
            ck[c : c + n], cv[c : c + n] = k_new, v_new
        L = st.n = c + n
        st.pending = []
        dev = self._device
        d = self.head.draft_ids(torch.tensor([int(hist[-1])], device=dev), torch.tensor([L], device=dev), k,
                                [(ck[:L], cv[:L]) for ck, cv in st.ctx], None)  # [1, k]
        return d[0].tolist()  # type: ignore[no-any-return]

    # -- offline replay --------------------------------------------------------------------------
    def _target_pass(self, seq: list[int]) -> Any:
        """The target's hidden states at positions 0..len(seq)-2 (one teacher-forced pass; the last
        pass is kept while the target lives, so the drafters of several k share it)."""
        key = (tuple(seq), self.hidden_layers)
        hit = _passes.get(self.target)
        if hit is not None and hit[0] == key:
            return hit[1]
        hid = self.target_hidden(seq)
        _passes[self.target] = (key, hid)
        return hid

    def block_drafts(self, prompt_ids: Sequence[int], output_ids: Sequence[int], k: int) -> np.ndarray:
        """Drafts [n, k] of a step that starts at each output position j (row j: the block whose anchor is
        out[j - 1], drafting out[j..j+k-1]); row 0 (the prefill emits out[0]) is -1."""
        import torch

        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        seq = replay_sequence(prompt_ids, output_ids, self.target.vocab_size)
        n, P = len(output_ids), len(prompt_ids)
        drafts = np.full((n, k), -1, dtype=np.int64)
        if n < 2:
            return drafts
        hid = self._target_pass(seq)
        T = hid.shape[0]
        dev = self._device
        with torch.inference_mode():
            ctx = self.head.context(hid, torch.arange(T, device=dev))
            anchors = torch.arange(P, P + n - 1, device=dev)  # the step at output position j has its anchor at P + j - 1
            ids = torch.tensor(seq, device=dev)
            padded = torch.cat([ids, torch.full((k,), -1, device=dev)])  # -1: past the logged end
            for s in range(0, len(anchors), _REPLAY_CHUNK):
                a = anchors[s : s + _REPLAY_CHUNK]
                mask = torch.arange(T, device=dev)[None, :] < a[:, None]  # context: positions before the anchor
                known = padded[a[:, None] + 1 + torch.arange(k - 1, device=dev)]  # the tokens after each anchor
                drafts[1 + s : 1 + s + len(a)] = self.head.draft_ids(ids[a], a, k, ctx, mask, known).cpu().numpy()
        return drafts

    def runs_at(self, prompt_ids: Sequence[int], output_ids: Sequence[int], k: int) -> np.ndarray:
        """Per output position j: how many of the block's k drafts a step starting at j accepts (the
        leading drafts the logged output continues with) — exact at this k only (see the module)."""
        out = np.asarray(output_ids, dtype=np.int64)
        n = len(out)
        runs = np.zeros(n, dtype=np.int64)
        if n < 2:
            return runs
        d = self.block_drafts(prompt_ids, output_ids, k)
        j = np.arange(1, n)
        alive = np.ones(n - 1, dtype=bool)
        for s in range(k):
            ok = j + s < n
            hit = np.zeros(n - 1, dtype=bool)
            hit[ok] = d[j[ok], s] == out[j[ok] + s]
            alive &= hit
            runs[1:] += alive
        return runs

    def replay(self, request_id: str, prompt_ids: Sequence[int], output_ids: Sequence[int], k: int) -> ReplayTrace:
        """The engine's decode steps over one logged output at this k (``replay_by_stepping``'s trace,
        from one target pass and one batched block forward)."""
        return trace_from_runs(self.runs_at(prompt_ids, output_ids, k), k)
