"""One step's verification for a batch: which of each request's drafts the target keeps and the token
it adds, from the target's logits over every request's [last token, drafts] rows (flat: request i's
rows are ``first[i] .. first[i] + len(drafts[i])``).

Greedy rows take the argmax rule (a draft token is kept iff it is the target's argmax; then the argmax
at the first position not kept); sampled rows go through :func:`~specgauge.engine.verify.rejection_sample`
with each request's own generator (a seed reproduces a request in any batch); with synthetic
acceptance every row keeps draft position j with its configured conditional rate instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from specgauge.drafters.base import accepted_prefix
from specgauge.engine.sampling import logits_to_probs
from specgauge.engine.step_records import EngineRequest
from specgauge.engine.verify import rejection_sample

#: per request: the tokens it emits this step (accepted drafts + one recovered / bonus token), and how
#: many drafts were accepted
Verified = tuple[list[list[int]], list[int]]


@dataclass
class BatchVerifier:
    #: synthetic acceptance (vLLM's ``rejection_sample_method: synthetic``): P(accept position j | the ones
    #: before it accepted), whatever the target says; None: the target decides
    synthetic: list[float] | None = None

    def verify(
        self,
        reqs: list[EngineRequest],
        drafts: list[list[int]],
        logits: Tensor,  # [N, V] flat: request i's rows are first[i] .. first[i] + len(drafts[i])
        first: list[int],
    ) -> Verified:
        """Greedy rows: argmax; the rest: :func:`rejection_sample` on their rows."""
        if self.synthetic is not None and any(drafts):
            return self.verify_synthetic(reqs, drafts, logits, first)
        toks: list[list[int]] = [[] for _ in reqs]
        n_acc = [0] * len(reqs)
        greedy = [i for i, r in enumerate(reqs) if r.params.greedy]
        if greedy:
            # d_i is accepted iff it is argmax p_i; the extra token is argmax p_{n+1} (verify.py's greedy rule)
            if len(greedy) == len(reqs):
                best = logits.argmax(-1).tolist()
                at = first
            else:
                rows = [first[i] + j for i in greedy for j in range(len(drafts[i]) + 1)]
                best = logits[torch.tensor(rows)].argmax(-1).tolist()
                at = [0] * len(reqs)
                o = 0
                for i in greedy:  # greedy rows packed: [g0's 1 + k0 rows, g1's 1 + k1 rows, ...]
                    at[i], o = o, o + len(drafts[i]) + 1
            for i in greedy:
                n = accepted_prefix(drafts[i], best, at[i])
                toks[i], n_acc[i] = drafts[i][:n] + [best[at[i] + n]], n
        sampled = [i for i, r in enumerate(reqs) if not r.params.greedy]
        if sampled:
            self.sampled([reqs[i] for i in sampled], [drafts[i] for i in sampled], logits,
                         [first[i] for i in sampled], toks, n_acc, sampled)
        return toks, n_acc

    def verify_synthetic(self, reqs: list[EngineRequest], drafts: list[list[int]], logits: Tensor,
                         first: list[int]) -> Verified:
        """Synthetic acceptance: draft position j is kept with its conditional rate while every earlier one
        was (each request's own generator), then the target's token at the first position not kept —
        argmax for a greedy request, a draw from its distribution otherwise (vLLM's synthetic rule)."""
        assert self.synthetic is not None
        toks: list[list[int]] = []
        n_acc: list[int] = []
        for i, (r, d) in enumerate(zip(reqs, drafts, strict=True)):
            u = torch.rand(len(d), generator=r.gen, device="cpu").tolist()
            n = 0
            while n < len(d) and u[n] < self.synthetic[n]:
                n += 1
            row = logits[first[i] + n]
            if r.params.greedy:
                tok = int(row.argmax())
            else:
                p = r.params
                probs = logits_to_probs(row[None].float(), torch.tensor([p.temperature]), torch.tensor([p.top_k]),
                                        torch.tensor([p.top_p]))[0].cpu()
                tok = int(torch.multinomial(probs, 1, generator=r.gen))
            toks.append(d[:n] + [tok])
            n_acc.append(n)
        return toks, n_acc

    def sampled(
        self, reqs: list[EngineRequest], drafts: list[list[int]], logits: Tensor, first: list[int],
        toks: list[list[int]], n_acc: list[int], where: list[int],
    ) -> None:
        """The sampled requests' rows through :func:`rejection_sample`; results written at ``where`` in
        ``toks`` / ``n_acc``."""
        B = len(reqs)
        K = max(len(d) for d in drafts)
        K1 = K + 1
        V = logits.shape[-1]
        # each request's rows, padded to K + 1 by repeating its last row (padding is never read)
        rows = torch.tensor([first[i] + min(j, len(d)) for i, d in enumerate(drafts) for j in range(K1)])
        ps = [r.params for r in reqs]
        rep = lambda xs: torch.tensor(xs).repeat_interleave(K1)  # noqa: E731
        probs = logits_to_probs(
            logits[rows], rep([p.temperature for p in ps]).float(),
            rep([p.top_k for p in ps]).long(), rep([p.top_p for p in ps]).float(),
        ).view(B, K1, V)
        draft_t = torch.zeros(B, K, dtype=torch.long)
        num_draft = torch.tensor([len(d) for d in drafts])
        uniform = torch.zeros(B, K)
        noise = torch.ones(B, K1, V)
        for i, (r, d) in enumerate(zip(reqs, drafts, strict=True)):
            if d:
                draft_t[i, : len(d)] = torch.tensor(d)
            # each request's own generator: a seed reproduces it in any batch
            uniform[i, : len(d)] = torch.rand(len(d), generator=r.gen, device="cpu")
            noise[i, : len(d) + 1] = torch.empty(len(d) + 1, V, device="cpu").exponential_(generator=r.gen)
        greedy = torch.zeros(B, dtype=torch.bool)
        out, n = rejection_sample(draft_t, num_draft, probs, None, greedy, uniform, noise)
        n_list = n.tolist()
        out_rows = out.tolist()
        for i, w in enumerate(where):
            toks[w], n_acc[w] = out_rows[i][: n_list[i] + 1], n_list[i]


__all__ = ["BatchVerifier", "Verified"]
