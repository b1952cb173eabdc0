"""Hidden-state drafters: an EAGLE-3 head (kind ``"eagle3"``), and the shared machinery the MTP head
(``drafters/mtp.py``) uses. The heads are in ``heads/`` (one module per family); their one chain is
``heads/chain.py``; the target is any :class:`~specgauge.targets.base.Target`.

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
  head reads; :func:`~specgauge.drafters.heads.chain.levels` then drafts every chain at once (all step positions batched,
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
    cache: Any  # heads.chain.ChainCache: level-0 keys of positions 0..n-1
    pending: list[Any] = field(default_factory=list)  # target hidden rows for positions n, n+1, ...

    @property
    def n(self) -> int:
        return int(self.cache.n)


class HiddenStateDrafter(HiddenFeed):
    """A chain head that reads the target's hidden states; greedy, so deterministic."""

    kind: ClassVar[str] = ""

    # -- Drafter protocol ------------------------------------------------------------------------
    def begin(self, request_id: str, prompt_ids: Sequence[int]) -> None:
        from specgauge.drafters.heads.chain import ChainCache

        if request_id in self._req:
            raise ValueError(f"request {request_id!r} already begun")
        self._req[request_id] = _State(ChainCache.empty(self.head, self.max_len, self._dtype, self._device))

    # -- the engine's proposer -------------------------------------------------------------------
    def _propose_one(self, rid: str, hist: Sequence[int], k: int) -> list[int]:
        import torch

        from specgauge.drafters.heads.chain import propose

        if not self.head.online(**self.options):
            raise ValueError(f"{self.kind} drafter: the embedded engine does not run this head with these options "
                             "(vLLM's proposer for it is not the chain); it replays offline only")
        st, hid = self._take_pending(rid, hist)
        c, n = st.n, hid.shape[0]
        if c + n + k > self.max_len:
            raise ValueError(f"{self.kind} drafter: sequence longer than max_model_len")
        nxt = torch.tensor(hist[c + 1 : c + n + 1], device=self._device)  # t[p+1] for p = c..c+n-1
        drafts = propose(self.head, st.cache, nxt, hid.to(device=self._device, dtype=self._dtype), k)
        st.pending = []
        return drafts

    # -- offline replay --------------------------------------------------------------------------
    def _levels(self, prompt_ids: Sequence[int], output_ids: Sequence[int], n_levels: int) -> tuple[np.ndarray, int]:
        """Predicted target ids [n_levels, T] of every draft position p (t[p+2] at level s: chain step
        s+1 of the chain starting at p - s), T = len(prompt) + len(output) - 1, for chains starting at
        len(prompt) - 1 or later (no step starts before) and still alive (``chain.draft_ids``); -1
        elsewhere: a count never reads those."""
        import torch

        seq = replay_sequence(prompt_ids, output_ids, self.target.vocab_size)
        T = len(seq) - 1
        if T < 1:
            return np.zeros((n_levels, 0), dtype=np.int64), T
        with torch.inference_mode():
            a = max(0, len(prompt_ids) - 1)  # the first chain starts at draft position P - 1
            pred = self.head.replay_drafts(self, seq, n_levels, a, **self.options)  # the chain's, or the head's rule
        return pred.cpu().numpy().astype(np.int64), T

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


@register_drafter("peagle")
class PEagleDrafter(HiddenStateDrafter):
    """P-EAGLE: an EAGLE-3 head with ``mask_hidden`` drafting all k tokens in one forward, as vLLM runs
    ``{"method": "eagle3", "model": HEAD, "parallel_drafting": true}`` (``heads/peagle.py``). The same head
    as ``eagle3:HEAD`` drafts the sequential chain (vLLM without the flag)."""

    kind = "peagle"
    head_method = "eagle3"

    def __init__(self, model: Any = None, target: Any = None, **kw: Any) -> None:
        super().__init__(model=model, target=target, **{**kw, "parallel_drafting": True})
