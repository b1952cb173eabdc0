"""Hidden-state drafters: an EAGLE-3 head (kind ``"eagle3"``), and the shared machinery the MTP head
(``drafters/mtp.py``) uses. The head's layer and its chain are in ``_heads.py``.

Two users, one computation:

* the **embedded engine** hands the drafter the target's hidden states of every position it has
  verified (``observe_hidden``, rows for consecutive positions, from the same forward that verified
  them; ``hidden_layers`` says which); ``propose_batch`` then runs vLLM's proposer per request: a
  first pass over the newly verified positions (token t[p+1] with the target's hidden state at p,
  the last row fed the bonus/correction token), its argmax is draft 1; each further draft feeds the
  previous draft and the head's *own* hidden state, attending to the first-pass keys and its own.
  Rejected positions never reach the head (their target rows are dropped; the chain's keys are
  replaced by first-pass keys next step), as in vLLM.
* **offline replay** (``accept_runs``, the :class:`~specgauge.drafters.base.WholeOutputReplay`
  contract): one teacher-forced target pass over prompt + logged output gives the hidden states the
  head reads; :meth:`Head.levels` then drafts every chain at once (all step positions batched,
  ``kmax`` head forwards in all).

What is exact and why: greedy drafting makes each draft a deterministic function of the token history
and of the target's hidden states over it, which the teacher-forced pass reproduces (the replay
theorem, ``shared/design.md``); a chain step is counted only while every earlier one drafted the
logged token, so feeding the logged tokens in replay equals feeding the drafts. The engine and the
replay compute the same sums in a different order (per request vs batched over positions), so they
agree to float rounding; an argmax near-tie could in principle flip. Not modelled: probabilistic
drafting (vLLM's ``draft_sample_method="probabilistic"``; its default is greedy), tree drafting.

``teacher_forced_matches`` is what training tools print (every draft position fed the *target's*
hidden state): equal at draft 1, usually optimistic past it (not a bound: a head trained on its own
states can do better on them). ``accept_runs_and_teacher_forced`` gives both from one pass, so
``simulate`` prints it beside the replay, per k, labelled optimistic — never instead of it; no
server drafts that way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from specgauge.drafters._hidden import HiddenFeed, replay_sequence
from specgauge.drafters.base import register_drafter, runs_from_matches

_MAX_REPLAY_LEVELS = 32


@dataclass
class _State:
    k: Any  # [max_len, hkv, D] level-0 keys of positions 0..n-1
    v: Any
    n: int = 0
    pending: list[Any] = field(default_factory=list)  # target hidden rows for positions n, n+1, ...


class HiddenStateDrafter(HiddenFeed):
    """A head that reads the target's hidden states; greedy, so deterministic."""

    kind: ClassVar[str] = ""

    def _load_head(self, model_dir: Path, target: Any, dtype: Any, where: str) -> Any:
        from specgauge.drafters._heads import HeadLoadError, load_head

        try:
            head = load_head(model_dir, target, dtype)
        except HeadLoadError as e:
            raise ValueError(f"{e} ({where})") from None
        if head.c.kind != self.kind:
            raise ValueError(f"{model_dir}: a {head.c.kind} head, but method {self.kind!r} was asked for")
        return head

    # -- Drafter protocol ------------------------------------------------------------------------
    def begin(self, request_id: str, prompt_ids: Sequence[int]) -> None:
        import torch

        if request_id in self._req:
            raise ValueError(f"request {request_id!r} already begun")
        c = self.head.c
        shape = (self.max_len, c.num_kv_heads, c.head_dim)
        self._req[request_id] = _State(torch.zeros(shape, dtype=self._dtype), torch.zeros(shape, dtype=self._dtype))

    # -- the engine's proposer -------------------------------------------------------------------
    def _propose_one(self, rid: str, hist: Sequence[int], k: int) -> list[int]:
        import torch

        st, hid = self._take_pending(rid, hist)
        h = self.head
        c, n = st.n, hid.shape[0]
        if c + n + k > self.max_len:
            raise ValueError(f"{self.kind} drafter: sequence longer than max_model_len")
        # first pass: positions c..c+n-1, token t[p+1], the target's hidden state at p
        pos = torch.arange(c, c + n)
        q, kk, vv, res = h.qkv(torch.tensor(hist[c + 1 : c + n + 1]), pos, h.combine(hid))
        st.k[c : c + n], st.v[c : c + n] = kk, vv
        L = c + n
        mask = torch.arange(L)[None, :] <= pos[:, None]
        logits, hh = h.finish(h.attend(q, [(st.k[:L], st.v[:L], mask)]), res)
        st.n, st.pending = L, []
        tok = h.to_target(logits[-1:].argmax(-1))
        hh = hh[-1:]
        drafts = [tok]
        chain: list[tuple[Any, Any, None]] = []
        full = torch.ones(1, L, dtype=torch.bool)
        for s in range(1, k):  # the chain: the previous draft and the head's own hidden state
            q, kk, vv, res = h.qkv(tok, torch.tensor([L - 1 + s]), hh)
            chain.append((kk, vv, None))
            logits, hh = h.finish(h.attend(q, [(st.k[:L], st.v[:L], full), *chain]), res)
            tok = h.to_target(logits.argmax(-1))
            drafts.append(tok)
        return torch.cat(drafts).tolist()

    # -- offline replay --------------------------------------------------------------------------
    def _levels(self, prompt_ids: Sequence[int], output_ids: Sequence[int], n_levels: int) -> tuple[np.ndarray, int]:
        """Predicted target ids [n_levels, T] of every draft position p (t[p+2] at level s: chain step
        s+1 of the chain starting at p - s), T = len(prompt) + len(output) - 1; levels >= 1 only from
        position len(prompt) - 1 on (-1 before: no step starts there)."""
        import torch

        seq = replay_sequence(prompt_ids, output_ids, self.head.c.vocab_size)
        T = len(seq) - 1
        if T < 1:
            return np.zeros((n_levels, 0), dtype=np.int64), T
        with torch.inference_mode():
            cache = self.target.new_cache(1, T)
            _, hid = self.target.forward_flat_hidden(torch.tensor(seq[:-1]), [0], [0], [T], cache, self.hidden_layers,
                                                     logits_at=torch.tensor([T - 1]))
            a = max(0, len(prompt_ids) - 1)  # the first chain starts at draft position P - 1
            lv = self.head.levels(torch.tensor(seq[1:]), hid.to(self._dtype), n_levels, start=a)
            pred = torch.full((n_levels, T), -1, dtype=torch.long)
            pred[0] = self.head.to_target(lv[0].argmax(-1))
            for s, x in enumerate(lv[1:], start=1):
                pred[s, a:] = self.head.to_target(x.argmax(-1))
        return pred.numpy().astype(np.int64), T

    def replay_arrays(
        self, prompt_ids: Sequence[int], output_ids: Sequence[int], kmax: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(accept runs [n] as ``accept_runs``, teacher-forced matches [n] bool) from one pass."""
        if not 1 <= kmax <= _MAX_REPLAY_LEVELS:
            raise ValueError(f"kmax must be in 1..{_MAX_REPLAY_LEVELS}, got {kmax}")
        out = np.asarray(output_ids, dtype=np.int64)
        n, P = len(out), len(prompt_ids)
        runs = np.zeros(n, dtype=np.int64)
        tf = np.zeros(n, dtype=bool)
        if n < 2:
            return runs, tf
        pred, _ = self._levels(prompt_ids, output_ids, kmax)
        j = np.arange(1, n)
        m = P + j - 2  # the draft position whose first-pass output is draft 1 of the step at output position j
        tf[1:] = pred[0, m] == out[j]
        alive = np.ones(n - 1, dtype=bool)
        for s in range(kmax):
            ok = j + s < n
            hit = np.zeros(n - 1, dtype=bool)
            hit[ok] = pred[s, m[ok] + s] == out[j[ok] + s]
            alive &= hit
            runs[1:] += alive
        return runs, tf

    def accept_runs(self, prompt_ids: Sequence[int], output_ids: Sequence[int], kmax: int) -> np.ndarray:
        return self.replay_arrays(prompt_ids, output_ids, kmax)[0]

    def accept_runs_and_teacher_forced(
        self, prompt_ids: Sequence[int], output_ids: Sequence[int], kmax: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(``accept_runs``, the teacher-forced figure's runs) from one pass
        (:class:`~specgauge.drafters.base.TeacherForcedReplay`): the latter counts a chain step as
        accepted while each position's draft, fed the target's hidden state, matches the logged token."""
        runs, tf = self.replay_arrays(prompt_ids, output_ids, kmax)
        return runs, runs_from_matches(tf)

    def teacher_forced_matches(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> np.ndarray:
        """Per output position j: would the head, fed the target's hidden state at every position,
        draft out[j]? (Training tools' per-position accuracy; optimistic past draft 1.)"""
        return self.replay_arrays(prompt_ids, output_ids, 1)[1]


@register_drafter("eagle3")
class Eagle3Drafter(HiddenStateDrafter):
    """EAGLE-3: reads the target's auxiliary layers (``eagle_aux_hidden_state_layer_ids``, else vLLM's
    default (2, L // 2, L - 3) deduplicated) through ``fc``; draft vocabulary mapped by ``d2t``."""

    kind = "eagle3"
